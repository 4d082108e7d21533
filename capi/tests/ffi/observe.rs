//! The metrics and dump functions of the C ABI, called from Rust as C calls
//! them: the exposition parsed back by the strict OpenMetrics parser and
//! checked against a request sequence, each dump's Kubernetes columns, the
//! size-query protocol (including text that grows between the query and
//! the copy), NULL handling, and scrapes racing requests on other threads.
use crate::dumps::{
    table, PRIORITY_LEVEL_COLUMNS, QUEUE_COLUMNS, REQUEST_COLUMNS, REQUEST_DETAIL_COLUMNS,
};
use crate::openmetrics::parse;
use crate::support::{self, *};

use apf::metrics::{BUILTIN_CONFIG_SERIES, CONTENT_TYPE};
use apf_capi::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const TINY_PAIR: [(&str, &str); 2] = [("priority_level", "tiny"), ("flow_schema", "alice-schema")];

fn m(name: &str) -> String {
    format!("apiserver_flowcontrol_{name}")
}

/// The [`Tiny`] configuration, its flow schema telling users apart.
fn tiny_by_user() -> D {
    tiny().by_user().dispatcher()
}

/// Starts a `list deployments` in namespace `team-a` for `user`.
fn start(d: &D, user: &str) -> apf_decision {
    let request = Request {
        api_group: "apps",
        namespace: "team-a",
        path: "/apis/apps/v1/namespaces/team-a/deployments",
        ..Request::resource(user, "list", "deployments")
    };
    support::start(d, &request)
}

/// A text function of the ABI, shaped alike for every text.
type TextFn = unsafe extern "C" fn(*const apf_dispatcher, *mut apf_text) -> apf_status;

unsafe extern "C" fn requests_plain(d: *const apf_dispatcher, out: *mut apf_text) -> apf_status {
    // SAFETY: forwarded.
    unsafe { apf_dispatcher_dump_requests(d, false, out) }
}

unsafe extern "C" fn requests_detailed(d: *const apf_dispatcher, out: *mut apf_text) -> apf_status {
    // SAFETY: forwarded.
    unsafe { apf_dispatcher_dump_requests(d, true, out) }
}

const TEXTS: [(&str, TextFn); 5] = [
    ("metrics", apf_dispatcher_metrics_text),
    ("priority levels", apf_dispatcher_dump_priority_levels),
    ("queues", apf_dispatcher_dump_queues),
    ("requests", requests_plain),
    ("requests with details", requests_detailed),
];

/// The text, in one call: an owned apf_text, checked and freed.
fn text(d: &D, f: TextFn) -> String {
    // SAFETY: live dispatcher, writable apf_text.
    text_of(|t| unsafe { f(d.0, t) })
}

fn metrics(d: &D) -> String {
    text(d, apf_dispatcher_metrics_text)
}

// ----- metrics --------------------------------------------------------------

#[test]
fn the_exposition_parses_and_its_counters_follow_the_requests() {
    let d = tiny_by_user();
    let exp = parse(&metrics(&d));
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TINY_PAIR), 0.0);
    assert_eq!(
        exp.get(&m("nominal_limit_seats"), &[("priority_level", "tiny")]),
        1.0
    );

    // One executes, two queue, the fourth finds the queue full.
    let first = start(&d, "alice");
    assert_eq!(first.outcome, EXECUTE);
    let second = start(&d, "alice");
    let third = start(&d, "alice");
    assert_eq!((second.outcome, third.outcome), (QUEUED, QUEUED));
    assert_eq!(start(&d, "alice").outcome, REJECTED);
    let exp = parse(&metrics(&d));
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TINY_PAIR), 1.0);
    assert_eq!(exp.get(&m("current_executing_requests"), &TINY_PAIR), 1.0);
    assert_eq!(exp.get(&m("current_inqueue_requests"), &TINY_PAIR), 2.0);
    let full = [TINY_PAIR[0], TINY_PAIR[1], ("reason", "queue-full")];
    assert_eq!(exp.get(&m("rejected_requests_total"), &full), 1.0);

    // 10 ms later the first ends and the second starts; the third times
    // out at the 1 s wait limit.
    advance(&d, 10 * MS);
    finish_ok(&d, first.request);
    assert_eq!(outcome(&d, second.request), EXECUTE);
    advance(&d, SECOND);
    assert_eq!(outcome(&d, third.request), REJECTED);
    finish_ok(&d, second.request);
    let exp = parse(&metrics(&d));
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TINY_PAIR), 2.0);
    assert_eq!(exp.get(&m("current_executing_requests"), &TINY_PAIR), 0.0);
    assert_eq!(exp.get(&m("current_inqueue_requests"), &TINY_PAIR), 0.0);
    let timed_out = [TINY_PAIR[0], TINY_PAIR[1], ("reason", "time-out")];
    assert_eq!(exp.get(&m("rejected_requests_total"), &timed_out), 1.0);
    let waits = |suffix: &str| {
        exp.get(
            &m(&format!("request_wait_duration_seconds{suffix}")),
            &[TINY_PAIR[0], TINY_PAIR[1], ("execute", "true")],
        )
    };
    assert_eq!(
        waits("_count"),
        2.0,
        "the first did not wait, the second did"
    );
    assert!((waits("_sum") - 0.010).abs() < 1e-9, "{}", waits("_sum"));
    let executions = exp.get(
        &m("request_execution_seconds_count"),
        &[TINY_PAIR[0], TINY_PAIR[1], ("type", "regular")],
    );
    assert_eq!(executions, 2.0);
}

#[test]
fn the_builtin_config_exposes_the_documented_series_count() {
    let o = apf_dispatcher_options {
        server_concurrency_limit: 600,
        ..tiny_options(true)
    };
    let d = builtin(&o);
    assert_eq!(parse(&metrics(&d)).series(), BUILTIN_CONFIG_SERIES);
}

#[test]
fn the_content_type_is_the_exporters_and_static() {
    let (mut text, mut len) = (null(), 0usize);
    // SAFETY: writable outs.
    let st = unsafe { apf_metrics_content_type(&mut text, &mut len) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: a static NUL-terminated string.
    let c = unsafe { CStr::from_ptr(text) };
    assert_eq!(c.to_bytes().len(), len);
    assert_eq!(c.to_str().unwrap(), CONTENT_TYPE);
    // SAFETY: NULL outs are checked.
    unsafe {
        assert_eq!(
            apf_metrics_content_type(null_mut(), &mut len),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_metrics_content_type(&mut text, null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
    }
}

// ----- dumps ------------------------------------------------------------------

#[test]
fn dump_priority_levels_has_kubernetes_columns_and_counts() {
    let d = tiny_by_user();
    let running = start(&d, "alice");
    let waiting = start(&d, "alice");
    let (header, rows) = table(&text(&d, apf_dispatcher_dump_priority_levels));
    assert_eq!(header, PRIORITY_LEVEL_COLUMNS);
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["catch-all", "exempt", "tiny"]);
    assert_eq!(
        rows[2][1..],
        ["1", "false", "false", "1", "1", "1", "0", "0", "0"]
    );
    let mut cancelled = false;
    // SAFETY: live dispatcher, writable out.
    let st = unsafe { apf_request_cancel(d.0, waiting.request, &mut cancelled) };
    assert_eq!((st, cancelled), (apf_status::APF_OK, true));
    finish_ok(&d, running.request);
    let (_, rows) = table(&text(&d, apf_dispatcher_dump_priority_levels));
    assert_eq!(
        rows[2][1..],
        ["0", "true", "false", "0", "0", "1", "0", "0", "1"]
    );
}

#[test]
fn dump_queues_has_kubernetes_columns_and_one_row_per_queue() {
    let d = tiny_by_user();
    let _running = start(&d, "alice");
    let _waiting = start(&d, "alice");
    let (header, rows) = table(&text(&d, apf_dispatcher_dump_queues));
    assert_eq!(header, QUEUE_COLUMNS);
    let tiny: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "tiny").collect();
    assert_eq!(tiny.len(), 1, "{rows:?}");
    assert_eq!(tiny[0][1..5], ["0", "1", "1", "1"]);
    assert!(tiny[0][5].ends_with("ss"));
}

#[test]
fn dump_requests_lists_the_waiting_with_and_without_details() {
    let d = tiny_by_user();
    let _running = start(&d, "alice");
    advance(&d, 1500 * MS);
    let _waiting = start(&d, "alice");
    let (header, rows) = table(&text(&d, requests_plain));
    assert_eq!(header, REQUEST_COLUMNS);
    // With one queue the level does not tell flows apart: no distinguisher.
    assert_eq!(
        rows,
        [[
            "tiny",
            "alice-schema",
            "0",
            "0",
            "",
            "1.500000000s",
            "1",
            "0",
            "0s",
            "-"
        ]]
    );
    let (header, rows) = table(&text(&d, requests_detailed));
    assert_eq!(header[..10], REQUEST_COLUMNS);
    assert_eq!(header[10..], REQUEST_DETAIL_COLUMNS);
    assert_eq!(
        rows[0][10..],
        [
            "alice",
            "list",
            "/apis/apps/v1/namespaces/team-a/deployments",
            "team-a",
            "",
            "apps",
            "deployments",
            ""
        ]
    );
}

// ----- owned texts and NULLs ----------------------------------------------------

#[test]
fn every_text_comes_whole_in_one_call() {
    let d = tiny_by_user();
    let _running = start(&d, "alice");
    let _waiting = start(&d, "alice");
    for (what, f) in TEXTS {
        let first = text(&d, f);
        assert!(!first.is_empty(), "{what}");
        assert_eq!(text(&d, f), first, "{what}: the same text again");
    }
}

#[test]
fn the_metrics_grow_without_any_retry() {
    let d = tiny_by_user();
    let before = metrics(&d);
    // A first execution adds its histograms' series: the next call simply
    // returns the longer text.
    let h = start(&d, "alice").request;
    finish_ok(&d, h);
    let after = metrics(&d);
    assert!(
        after.len() > before.len(),
        "grew from {} to {}",
        before.len(),
        after.len()
    );
    let exp = parse(&after);
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TINY_PAIR), 1.0);
}

#[test]
fn null_pointers_are_errors_not_crashes() {
    let d = tiny_by_user();
    for (what, f) in TEXTS {
        let mut t = apf_text {
            ptr: null(),
            len: 7,
        };
        // SAFETY: every NULL is checked; non-NULL pointers are valid.
        unsafe {
            assert_eq!(
                f(null(), &mut t),
                apf_status::APF_ERR_NULL_POINTER,
                "{what}: NULL dispatcher"
            );
            assert_eq!(
                f(d.0, null_mut()),
                apf_status::APF_ERR_NULL_POINTER,
                "{what}: NULL out"
            );
        }
        assert!(
            t.ptr.is_null() && t.len == 7,
            "{what}: out untouched on errors"
        );
    }
}

// ----- threads ------------------------------------------------------------------

#[test]
fn scrapes_race_requests_on_other_threads() {
    let d = tiny_by_user();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..300 {
                    let dec = start(&d, "alice");
                    match dec.outcome {
                        EXECUTE => finish_ok(&d, dec.request),
                        QUEUED => {
                            // Retires it whether still waiting or just
                            // dispatched (then finished at once).
                            let mut cancelled = false;
                            // SAFETY: live dispatcher, writable out.
                            let st =
                                unsafe { apf_request_cancel(d.0, dec.request, &mut cancelled) };
                            assert_eq!(st, apf_status::APF_OK, "{}", last_error());
                        }
                        _ => {}
                    }
                }
            });
        }
        s.spawn(|| {
            for _ in 0..50 {
                let exp = parse(&metrics(&d));
                assert!(exp.get(&m("current_executing_requests"), &TINY_PAIR) <= 1.0);
                let (_, rows) = table(&text(&d, apf_dispatcher_dump_priority_levels));
                assert_eq!(rows.len(), 3);
                let _ = table(&text(&d, requests_detailed));
            }
        });
    });
    let exp = parse(&metrics(&d));
    assert_eq!(exp.get(&m("current_executing_requests"), &TINY_PAIR), 0.0);
    assert_eq!(exp.get(&m("current_inqueue_requests"), &TINY_PAIR), 0.0);
}
