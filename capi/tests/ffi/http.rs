//! The C ABI's shared HTTP pieces, called from Rust as C calls them: the
//! 429 answer and its Retry-After, the observability answers, and the path
//! helper on the shared request-info cases.
use crate::support::*;

use apf::queueset::RejectReason;
use apf_capi::*;
use serde_json::Value;
use std::ptr::{null, null_mut};

/// The built-in configuration on the manual clock.
fn builtin_manual() -> D {
    builtin(&apf_dispatcher_options {
        manual_clock: true,
        ..default_options()
    })
}

fn reject(d: &D, level: &str, schema: &str, reason: u32) -> (apf_status, u64, Option<String>) {
    let mut retry_after = 0;
    let (st, body) = take_text(|out| {
        // SAFETY: live dispatcher, strings valid for their lengths.
        unsafe {
            apf_dispatcher_reject(
                d.0,
                level.as_ptr().cast(),
                level.len(),
                schema.as_ptr().cast(),
                schema.len(),
                reason,
                &mut retry_after,
                out,
            )
        }
    });
    (st, retry_after, body)
}

fn observe(d: &D, path: &str, query: &str) -> (u16, Option<String>, Option<String>) {
    let mut status = 7;
    let mut content_type = empty();
    let mut body = empty();
    // SAFETY: live dispatcher, strings valid for their lengths, writable outs.
    let st = unsafe {
        apf_dispatcher_observe(
            d.0,
            path.as_ptr().cast(),
            path.len(),
            query.as_ptr().cast(),
            query.len(),
            &mut status,
            &mut content_type,
            &mut body,
        )
    };
    assert_eq!(st, apf_status::APF_OK);
    (status, owned(&mut content_type), owned(&mut body))
}

fn empty() -> apf_text {
    apf_text {
        ptr: null(),
        len: 0,
    }
}

/// The text `t` holds (None when zeroed), freed.
fn owned(t: &mut apf_text) -> Option<String> {
    if t.ptr.is_null() {
        return None;
    }
    // SAFETY: libapf wrote `len` bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(t.ptr.cast::<u8>(), t.len) };
    let s = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    // SAFETY: filled by libapf.
    unsafe { apf_text_free(t) };
    Some(s)
}

#[test]
fn reject_gives_the_status_body_and_the_adaptive_retry_after() {
    let d = builtin_manual();
    let queue_full = apf_reject_reason::APF_REJECT_QUEUE_FULL as u32;
    for _ in 0..3 {
        let (st, retry, body) = reject(&d, "workload-low", "service-accounts", queue_full);
        assert_eq!((st, retry), (apf_status::APF_OK, 1));
        assert_eq!(
            body.as_deref(),
            Some(
                apf::rejection::status_body(
                    "workload-low",
                    "service-accounts",
                    RejectReason::QueueFull,
                    1
                )
                .as_str()
            )
        );
    }
    advance(&d, 1_000_000_000);
    let (_, retry, body) = reject(&d, "workload-low", "service-accounts", queue_full);
    assert_eq!(retry, 2, "3 rejections in one second double it");
    let body: Value = serde_json::from_str(&body.expect("a body")).expect("JSON");
    assert_eq!(body["details"]["retryAfterSeconds"], 2);
    assert_eq!(body["code"], 429);
}

#[test]
fn reject_refuses_bad_reasons_strings_and_pointers() {
    let d = builtin_manual();
    for reason in [apf_reject_reason::APF_REJECT_NONE as u32, 6, u32::MAX] {
        let (st, _, body) = reject(&d, "l", "s", reason);
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
        assert_eq!(body, None);
    }
    let (st, _, _) = reject(&d, "\u{0}ok", "s", 1);
    assert_eq!(st, apf_status::APF_OK, "NUL inside is still UTF-8");
    let bad = [0xff_u8];
    let mut retry = 0;
    let (st, _) = take_text(|out| {
        // SAFETY: valid pointers; the level is not UTF-8.
        unsafe { apf_dispatcher_reject(d.0, bad.as_ptr().cast(), 1, null(), 0, 1, &mut retry, out) }
    });
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    let (st, _) = take_text(|out| {
        // SAFETY: NULL dispatcher is checked.
        unsafe { apf_dispatcher_reject(null(), null(), 0, null(), 0, 1, &mut retry, out) }
    });
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
    let (st, _) = take_text(|out| {
        // SAFETY: NULL out_retry_after is checked.
        unsafe { apf_dispatcher_reject(d.0, null(), 0, null(), 0, 1, null_mut(), out) }
    });
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
}

#[test]
fn observe_answers_the_four_paths_and_zero_for_others() {
    let d = builtin_manual();
    let (status, content_type, body) = observe(&d, "/metrics", "");
    assert_eq!(status, 200);
    assert_eq!(content_type.as_deref(), Some(apf::metrics::CONTENT_TYPE));
    assert!(body.expect("metrics").ends_with("# EOF\n"));
    let (status, content_type, body) = observe(
        &d,
        "/debug/api_priority_and_fairness/dump_priority_levels",
        "",
    );
    assert_eq!(status, 200);
    assert_eq!(content_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert!(body.expect("a dump").starts_with("PriorityLevelName"));
    let (status, _, body) = observe(
        &d,
        "/debug/api_priority_and_fairness/dump_requests",
        "includeRequestDetails=1",
    );
    assert_eq!(status, 200);
    assert!(body.expect("a dump").contains("UserName"));
    assert_eq!(observe(&d, "/api/v1/pods", ""), (0, None, None));
}

/// `info` as the shared case file writes it, its verb freed.
fn info_json(info: &mut apf_request_info) -> Value {
    let field = |f: apf_str| {
        // SAFETY: points into the path or the name text, both alive here.
        let bytes = unsafe { std::slice::from_raw_parts(f.ptr.cast::<u8>(), f.len) };
        std::str::from_utf8(bytes).expect("UTF-8").to_owned()
    };
    serde_json::json!({
        "verb": owned(&mut info.verb),
        "is_resource_request": info.is_resource_request,
        "api_group": field(info.api_group),
        "resource": field(info.resource),
        "subresource": field(info.subresource),
        "namespace": field(info.namespace_),
        "name": field(info.name),
        "path": field(info.path),
    })
}

#[test]
fn the_path_helper_meets_every_shared_case() {
    let text = include_str!("../../../tests/data/request-info-cases.json");
    let doc: Value = serde_json::from_str(text).expect("JSON");
    let s = |v: &Value, k: &str| v[k].as_str().expect("a string").to_owned();
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 70);
    let mut by_watch_value = 0;
    for case in cases {
        let (method, path, query) = (s(case, "method"), s(case, "path"), s(case, "query"));
        let mut info = std::mem::MaybeUninit::<apf_request_info>::uninit();
        let mut name = apf_text {
            ptr: null(),
            len: 0,
        };
        // SAFETY: strings valid for their lengths; `info`, `name` writable.
        let st = unsafe {
            apf_request_info_parse_query(
                method.as_ptr().cast(),
                method.len(),
                path.as_ptr().cast(),
                path.len(),
                query.as_ptr().cast(),
                query.len(),
                info.as_mut_ptr(),
                &mut name,
            )
        };
        assert_eq!(st, apf_status::APF_OK);
        // SAFETY: written on APF_OK.
        let got = info_json(unsafe { &mut info.assume_init() });
        // SAFETY: filled by the call above; freed once, after its last use.
        unsafe { apf_text_free(&mut name) };
        assert_eq!(&got, &case["want"], "{method} {path} query={query:?}");

        // The older entry point, given the decoded watch value, agrees
        // wherever the query says nothing else.
        let watch = match query.strip_prefix("watch=") {
            _ if query.is_empty() => "",
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric()) => v,
            _ => continue,
        };
        by_watch_value += 1;
        let mut info = std::mem::MaybeUninit::<apf_request_info>::uninit();
        // SAFETY: strings valid for their lengths; `info` writable.
        let st = unsafe {
            apf_request_info_parse(
                method.as_ptr().cast(),
                method.len(),
                path.as_ptr().cast(),
                path.len(),
                watch.as_ptr().cast(),
                watch.len(),
                info.as_mut_ptr(),
            )
        };
        assert_eq!(st, apf_status::APF_OK);
        // SAFETY: written on APF_OK.
        let got = info_json(unsafe { &mut info.assume_init() });
        assert_eq!(&got, &case["want"], "{method} {path} watch={watch:?}");
    }
    assert!(by_watch_value >= 40);
    let mut info = std::mem::MaybeUninit::<apf_request_info>::uninit();
    let bad = [0xc3_u8];
    // SAFETY: the path is not UTF-8: refused before `info` is written.
    let st = unsafe {
        apf_request_info_parse(
            null(),
            0,
            bad.as_ptr().cast(),
            1,
            null(),
            0,
            info.as_mut_ptr(),
        )
    };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    // SAFETY: a NULL out is checked.
    let st = unsafe { apf_request_info_parse(null(), 0, null(), 0, null(), 0, null_mut()) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
    let mut name = apf_text {
        ptr: null(),
        len: 0,
    };
    // SAFETY: a NULL out is checked, and so is a NULL out_name.
    let st = unsafe {
        apf_request_info_parse_query(null(), 0, null(), 0, null(), 0, null_mut(), &mut name)
    };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
    // SAFETY: as above.
    let st = unsafe {
        apf_request_info_parse_query(
            null(),
            0,
            null(),
            0,
            null(),
            0,
            info.as_mut_ptr(),
            null_mut(),
        )
    };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
    // A query is bytes, as Kubernetes takes it: not UTF-8 is no error, and
    // a watch value that is neither 0 nor false is a watch.
    let (path, query) = ("/api/v1/pods", b"watch=\xff");
    // SAFETY: strings valid for their lengths; `info`, `name` writable.
    let st = unsafe {
        apf_request_info_parse_query(
            b"GET".as_ptr().cast(),
            3,
            path.as_ptr().cast(),
            path.len(),
            query.as_ptr().cast(),
            query.len(),
            info.as_mut_ptr(),
            &mut name,
        )
    };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    let got = info_json(unsafe { &mut info.assume_init() });
    assert_eq!(got["verb"], "watch");
    // SAFETY: filled above, freed once.
    unsafe { apf_text_free(&mut name) };
}
