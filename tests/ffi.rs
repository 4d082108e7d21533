//! The C ABI, called from Rust exactly as C calls it: NULL pointers,
//! invalid UTF-8, stale handles, the request protocol's misuse, the panic
//! boundary, reconfiguration errors, the manual clock, completion
//! notification, and the header's version.
#![cfg(not(loom))]

use apf::ffi::*;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

#[path = "support/text.rs"]
mod text;
use text::{take_text, text_of};

const SECOND: u64 = 1_000_000_000;

/// One limited level, `tiny`, with a single seat and one queue of two, for
/// user `alice`; the mandatory levels are added by libapf.
const TINY: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tiny, uid: uid-tiny}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-schema, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: tiny}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
"#;

/// Owns a dispatcher for one test.
struct D(*mut apf_dispatcher);

impl Drop for D {
    fn drop(&mut self) {
        // SAFETY: the pointer came from apf_dispatcher_new_* and nothing
        // uses it after the test's last call.
        unsafe { apf_dispatcher_free(self.0) }
    }
}

// SAFETY: the ABI promises a dispatcher may be used from any thread.
unsafe impl Send for D {}
// SAFETY: as above.
unsafe impl Sync for D {}

fn options(manual: bool) -> apf_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: `o` is writable.
    assert_eq!(
        unsafe { apf_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.manual_clock = manual;
    // Two seats: one for tiny, one for catch-all.
    o.server_concurrency_limit = 2;
    o.wait_limit_ns = SECOND;
    o
}

fn tiny(manual: bool) -> D {
    let mut d = null_mut();
    let o = options(manual);
    // SAFETY: text readable for its length; options and out valid.
    let s = unsafe { apf_dispatcher_new_from_config(TINY.as_ptr().cast(), TINY.len(), &o, &mut d) };
    assert_eq!(s, apf_status::APF_OK, "{}", last_error());
    D(d)
}

fn last_error() -> String {
    // SAFETY: `t` is a writable apf_text.
    text_of(|t| unsafe { apf_last_error(t) })
}

#[allow(dead_code)]
fn s(text: &'static str) -> apf_str {
    apf_str {
        ptr: text.as_ptr().cast(),
        len: text.len(),
    }
}

/// A digest for `user` (borrowing static strings).
fn digest(user: &'static str, groups: &[apf_str]) -> apf_request_digest {
    let (verb, path) = ("get", "/api/v1/namespaces/ns/pods/p");
    apf_request_digest {
        user: user.as_ptr().cast(),
        user_len: user.len(),
        verb: verb.as_ptr().cast(),
        verb_len: verb.len(),
        api_group: null(),
        api_group_len: 0,
        resource: "pods".as_ptr().cast(),
        resource_len: 4,
        subresource: null(),
        subresource_len: 0,
        namespace_: "ns".as_ptr().cast(),
        namespace_len: 2,
        name: "p".as_ptr().cast(),
        name_len: 1,
        path: path.as_ptr().cast(),
        path_len: path.len(),
        groups: groups.as_ptr(),
        n_groups: groups.len(),
        is_resource_request: true,
    }
}

/// The groups of an authenticated user (static strings, so the pointers
/// stay valid).
const AUTHENTICATED: &[apf_str] = &[apf_str {
    ptr: c"system:authenticated".as_ptr(),
    len: 20,
}];

fn try_start(
    d: &D,
    user: &'static str,
    estimate: Option<apf_work_estimate>,
) -> Result<apf_decision, apf_status> {
    let dg = digest(user, AUTHENTICATED);
    let mut out = std::mem::MaybeUninit::uninit();
    let est = estimate.as_ref().map_or(null(), |e| e as *const _);
    // SAFETY: all pointers valid for the call.
    let st = unsafe { apf_start_request(d.0, &dg, est, 0, out.as_mut_ptr()) };
    if st == apf_status::APF_OK {
        // SAFETY: written on APF_OK.
        Ok(unsafe { out.assume_init() })
    } else {
        Err(st)
    }
}

fn start(d: &D, user: &'static str) -> apf_decision {
    try_start(d, user, None).unwrap_or_else(|e| panic!("start: {e:?} {}", last_error()))
}

fn finish(d: &D, h: u64) -> apf_status {
    // SAFETY: live dispatcher; any handle value is allowed.
    unsafe { apf_finish(d.0, h, 0) }
}

fn poll(d: &D, h: u64) -> Result<(u32, u32), apf_status> {
    let (mut o, mut r) = (u32::MAX, u32::MAX);
    // SAFETY: live dispatcher, writable outs.
    match unsafe { apf_request_poll(d.0, h, &mut o, &mut r) } {
        apf_status::APF_OK => Ok((o, r)),
        e => Err(e),
    }
}

fn wait(d: &D, h: u64, timeout: u64) -> Result<(u32, u32), apf_status> {
    let (mut o, mut r) = (u32::MAX, u32::MAX);
    // SAFETY: live dispatcher, writable outs.
    match unsafe { apf_request_wait(d.0, h, timeout, &mut o, &mut r) } {
        apf_status::APF_OK => Ok((o, r)),
        e => Err(e),
    }
}

fn cancel(d: &D, h: u64) -> Result<bool, apf_status> {
    let mut c = false;
    // SAFETY: live dispatcher, writable out.
    match unsafe { apf_request_cancel(d.0, h, &mut c) } {
        apf_status::APF_OK => Ok(c),
        e => Err(e),
    }
}

fn advance(d: &D, nanos: u64) {
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_dispatcher_advance_clock(d.0, nanos) },
        apf_status::APF_OK
    );
}

fn take(d: &D) -> Option<u64> {
    let (mut h, mut some) = (7u64, true);
    // SAFETY: live dispatcher, writable outs.
    assert_eq!(
        unsafe { apf_dispatcher_take_completion(d.0, &mut h, &mut some) },
        apf_status::APF_OK
    );
    some.then_some(h)
}

fn stats(d: &D) -> String {
    // One call gives the whole text, however it changes meanwhile.
    // SAFETY: live dispatcher, writable apf_text.
    text_of(|t| unsafe { apf_dispatcher_stats_text(d.0, t) })
}

fn level_line(d: &D, level: &str) -> String {
    stats(d)
        .lines()
        .find(|l| l.starts_with(&format!("level {level} ")))
        .unwrap_or_else(|| panic!("no level {level}"))
        .to_owned()
}

fn field(line: &str, key: &str) -> u64 {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no {key} in {line}")
}

fn str_of(s: apf_str) -> String {
    // SAFETY: libapf's strings are NUL-terminated and live with the
    // dispatcher (still alive here).
    let c = unsafe { CStr::from_ptr(s.ptr) };
    assert_eq!(c.to_bytes().len(), s.len, "NUL right after len bytes");
    c.to_str().unwrap().to_owned()
}

const EXECUTE: u32 = apf_outcome::APF_OUTCOME_EXECUTE as u32;
const QUEUED: u32 = apf_outcome::APF_OUTCOME_QUEUED as u32;
const REJECTED: u32 = apf_outcome::APF_OUTCOME_REJECTED as u32;
const NONE: u32 = apf_reject_reason::APF_REJECT_NONE as u32;

// ----- version and header -------------------------------------------------

fn cargo_version() -> (u32, u32, u32) {
    let toml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let line = toml
        .lines()
        .find(|l| l.starts_with("version = "))
        .expect("a package version");
    let v = line.trim_start_matches("version = ").trim_matches('"');
    let parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
    (parts[0], parts[1], parts[2])
}

#[test]
fn header_version_macros_and_abi_version_match_cargo_toml() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/apf.h")).unwrap();
    let define = |name: &str| -> u32 {
        let prefix = format!("#define {name} ");
        header
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{name} missing from apf.h"))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number"))
    };
    let (major, minor, patch) = cargo_version();
    assert_eq!(define("APF_VERSION_MAJOR"), major);
    assert_eq!(define("APF_VERSION_MINOR"), minor);
    assert_eq!(define("APF_VERSION_PATCH"), patch);
    let packed = major << 16 | minor << 8 | patch;
    assert_eq!(apf_abi_version(), packed);
    assert_eq!(ABI_VERSION, packed);
    assert!(
        header.contains("#define APF_VERSION_NUMBER ((APF_VERSION_MAJOR << 16) | (APF_VERSION_MINOR << 8) | APF_VERSION_PATCH)"),
        "the packed macro uses the same layout as apf_abi_version"
    );
}

#[test]
fn header_exports_only_apf_names() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/apf.h")).unwrap();
    for line in header.lines() {
        let l = line.trim_start();
        let name = if let Some(rest) = l.strip_prefix("typedef struct ") {
            rest.split([' ', ';']).next()
        } else if let Some(rest) = l.strip_prefix("enum ") {
            rest.split([' ', ';']).next()
        } else if let Some(rest) = l.strip_prefix("apf_status ") {
            rest.split('(').next()
        } else {
            None
        };
        if let Some(name) = name {
            assert!(name.starts_with("apf_"), "non-apf name in apf.h: {line}");
        }
    }
    assert!(
        !header.contains("apf_test_panic"),
        "the test hook stays out of the header"
    );
}

// ----- NULL pointers, strings, options -------------------------------------

#[test]
fn null_pointers_are_errors_not_crashes() {
    let d = tiny(true);
    let dg = digest("alice", AUTHENTICATED);
    let mut dec = std::mem::MaybeUninit::<apf_decision>::uninit();
    let (mut o, mut r, mut b, mut n, mut fd, mut len) = (0u32, 0u32, false, 0u64, 0i32, 0usize);
    let nd: *mut apf_dispatcher = null_mut();
    use apf_status::APF_ERR_NULL_POINTER as NULLP;
    // SAFETY: every call passes a NULL where a pointer is required, which
    // the ABI must detect; the other pointers are valid.
    unsafe {
        assert_eq!(apf_options_default(null_mut()), NULLP);
        assert_eq!(apf_dispatcher_new_builtin(null(), null_mut()), NULLP);
        assert_eq!(
            apf_dispatcher_new_from_config(TINY.as_ptr().cast(), TINY.len(), null(), null_mut()),
            NULLP
        );
        let mut out = null_mut();
        assert_eq!(
            apf_dispatcher_new_from_config(null(), 5, null(), &mut out),
            NULLP
        );
        assert!(out.is_null(), "out written only on success");
        apf_dispatcher_free(null_mut());
        assert_eq!(
            apf_dispatcher_reconfigure(nd, TINY.as_ptr().cast(), TINY.len()),
            NULLP
        );
        assert_eq!(apf_dispatcher_advance_clock(nd, 1), NULLP);
        assert_eq!(apf_dispatcher_now(nd, &mut n), NULLP);
        assert_eq!(apf_dispatcher_now(d.0, null_mut()), NULLP);
        assert_eq!(
            apf_start_request(nd, &dg, null(), 0, dec.as_mut_ptr()),
            NULLP
        );
        assert_eq!(
            apf_start_request(d.0, null(), null(), 0, dec.as_mut_ptr()),
            NULLP
        );
        assert_eq!(apf_start_request(d.0, &dg, null(), 0, null_mut()), NULLP);
        assert_eq!(apf_request_wait(nd, 1, 0, &mut o, &mut r), NULLP);
        assert_eq!(apf_request_wait(d.0, 1, 0, null_mut(), &mut r), NULLP);
        assert_eq!(apf_request_wait(d.0, 1, 0, &mut o, null_mut()), NULLP);
        assert_eq!(apf_request_poll(nd, 1, &mut o, &mut r), NULLP);
        assert_eq!(apf_request_poll(d.0, 1, null_mut(), &mut r), NULLP);
        assert_eq!(apf_request_poll(d.0, 1, &mut o, null_mut()), NULLP);
        assert_eq!(apf_request_cancel(nd, 1, &mut b), NULLP);
        assert_eq!(apf_request_cancel(d.0, 1, null_mut()), NULLP);
        assert_eq!(apf_finish(nd, 1, 0), NULLP);
        assert_eq!(
            apf_dispatcher_set_completion_callback(nd, None, null_mut()),
            NULLP
        );
        assert_eq!(apf_dispatcher_completion_fd(nd, &mut fd), NULLP);
        assert_eq!(apf_dispatcher_completion_fd(d.0, null_mut()), NULLP);
        assert_eq!(apf_dispatcher_take_completion(nd, &mut n, &mut b), NULLP);
        assert_eq!(
            apf_dispatcher_take_completion(d.0, null_mut(), &mut b),
            NULLP
        );
        assert_eq!(
            apf_dispatcher_take_completion(d.0, &mut n, null_mut()),
            NULLP
        );
        let mut text = apf_text {
            ptr: null(),
            len: 0,
        };
        assert_eq!(apf_dispatcher_stats_text(nd, &mut text), NULLP);
        assert_eq!(apf_dispatcher_stats_text(d.0, null_mut()), NULLP);
        assert!(text.ptr.is_null(), "out untouched on error");
        assert_eq!(apf_last_error(null_mut()), NULLP);
        apf_text_free(null_mut());
        apf_text_free(&mut text);
        assert_eq!(apf_status_text(0, null_mut(), &mut len), NULLP);
    }
    assert!(last_error().contains("is NULL"), "{}", last_error());
    // The NULL checks left the dispatcher working.
    let ok = start(&d, "alice");
    assert_eq!(finish(&d, ok.request), apf_status::APF_OK);
}

#[test]
fn null_string_with_nonzero_length_and_invalid_utf8_are_rejected() {
    let d = tiny(true);
    let mut dec = std::mem::MaybeUninit::<apf_decision>::uninit();
    let bad = b"al\xffce";
    let mut dg = digest("alice", AUTHENTICATED);
    dg.user = bad.as_ptr().cast();
    dg.user_len = bad.len();
    // SAFETY: valid pointers; the user bytes are not UTF-8.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert!(last_error().contains("digest.user"), "{}", last_error());

    let mut dg = digest("alice", AUTHENTICATED);
    dg.path = null();
    dg.path_len = 3;
    // SAFETY: NULL with a length is what is tested.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);

    let bad_groups = [
        apf_str {
            ptr: c"ok".as_ptr(),
            len: 2,
        },
        apf_str {
            ptr: c"\xc3\x28".as_ptr(),
            len: 2,
        },
    ];
    let dg = digest("alice", &bad_groups);
    // SAFETY: valid pointers; the second group is not UTF-8.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert!(
        last_error().contains("digest.groups[1]"),
        "{}",
        last_error()
    );

    let mut dg = digest("alice", AUTHENTICATED);
    dg.groups = null();
    // SAFETY: NULL groups with n_groups 1 is what is tested.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);

    // Strings need no NUL: a longer buffer with the right length works.
    let mut dg = digest("alice", AUTHENTICATED);
    let padded = "aliceXYZ";
    dg.user = padded.as_ptr().cast();
    dg.user_len = 5;
    // SAFETY: valid pointers.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    let dec = unsafe { dec.assume_init() };
    assert_eq!(str_of(dec.flow_schema_name), "alice-schema");
    assert_eq!(finish(&d, dec.request), apf_status::APF_OK);

    let mut out = null_mut();
    let bad_config = b"kind: \xff\n";
    // SAFETY: valid pointers; the text is not UTF-8.
    let st = unsafe {
        apf_dispatcher_new_from_config(
            bad_config.as_ptr().cast(),
            bad_config.len(),
            null(),
            &mut out,
        )
    };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert!(out.is_null());
    // SAFETY: as above, on reconfiguration.
    let st =
        unsafe { apf_dispatcher_reconfigure(d.0, bad_config.as_ptr().cast(), bad_config.len()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
}

#[test]
fn invalid_options_are_refused() {
    for change in [
        |o: &mut apf_options| o.server_concurrency_limit = 0,
        |o: &mut apf_options| o.server_concurrency_limit = u32::MAX,
        |o: &mut apf_options| o.service_time_guess_ns = 0,
        |o: &mut apf_options| o.borrowing_period_ns = 0,
    ] {
        let mut o = options(true);
        change(&mut o);
        let mut out = null_mut();
        // SAFETY: valid pointers.
        let st = unsafe { apf_dispatcher_new_builtin(&o, &mut out) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER, "{o:?}");
        assert!(out.is_null());
    }
    // NULL options are the defaults.
    let mut out = null_mut();
    // SAFETY: valid pointers.
    assert_eq!(
        unsafe { apf_dispatcher_new_builtin(null(), &mut out) },
        apf_status::APF_OK
    );
    let d = D(out);
    let mut n = 0;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_advance_clock(d.0, 1) },
        apf_status::APF_ERR_NOT_MANUAL_CLOCK
    );
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_now(d.0, &mut n) },
        apf_status::APF_OK
    );
    let line = level_line(&d, "global-default");
    assert!(field(&line, "concurrency_limit") > 0, "{line}");
}

#[test]
fn default_options_are_kubernetes_defaults() {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    assert_eq!(
        unsafe { apf_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let o = unsafe { o.assume_init() };
    assert_eq!(o.server_concurrency_limit, 600);
    assert_eq!(o.service_time_guess_ns, 3_000_000);
    assert_eq!(o.wait_limit_ns, 15 * SECOND);
    assert_eq!(o.borrowing_period_ns, 10 * SECOND);
    assert!(!o.manual_clock);
    assert_eq!(o.struct_size, std::mem::size_of::<apf_options>());
}

/// A caller compiled against a newer header: `apf_options` with a field
/// this library does not know.
#[repr(C)]
struct NewerOptions {
    known: apf_options,
    future_field: u64,
}

fn new_builtin(options: *const apf_options) -> apf_status {
    let mut d = null_mut();
    // SAFETY: `options` is NULL or readable for its struct_size; `d` writable.
    let st = unsafe { apf_dispatcher_new_builtin(options, &mut d) };
    drop(D(d));
    st
}

#[test]
fn options_carry_their_size_so_the_struct_can_grow() {
    let bad = apf_status::APF_ERR_INVALID_PARAMETER;
    assert_eq!(
        new_builtin(null()),
        apf_status::APF_OK,
        "NULL: the defaults"
    );
    assert_eq!(new_builtin(&options(false)), apf_status::APF_OK);
    // A struct not initialised by apf_options_default (size 0) is refused,
    // naming the struct and the field.
    let unset = apf_options {
        struct_size: 0,
        ..options(false)
    };
    assert_eq!(new_builtin(&unset), bad);
    assert!(
        last_error().contains("apf_options.struct_size is 0"),
        "{}",
        last_error()
    );
    let short = apf_options {
        struct_size: 8,
        ..options(false)
    };
    assert_eq!(new_builtin(&short), bad);
    // A newer caller's larger struct works while its new fields keep their
    // zero default, and is refused when one is set.
    let mut newer = NewerOptions {
        known: options(false),
        future_field: 0,
    };
    newer.known.struct_size = std::mem::size_of::<NewerOptions>();
    assert_eq!(
        new_builtin(&newer.known),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    newer.future_field = 1;
    assert_eq!(new_builtin(&newer.known), bad);
    assert!(
        last_error().contains("a newer header's field"),
        "{}",
        last_error()
    );
    // The size check runs before any other validation of the fields.
    let mut o = options(false);
    o.server_concurrency_limit = 0;
    assert_eq!(new_builtin(&o), bad);
    assert!(
        last_error().contains("server_concurrency_limit"),
        "{}",
        last_error()
    );
}

// ----- status codes and last error -------------------------------------------

#[test]
fn status_text_covers_every_code_and_refuses_unknown_ones() {
    for code in apf_status::ALL {
        let (mut p, mut len) = (null(), 0usize);
        // SAFETY: writable outs.
        assert_eq!(
            unsafe { apf_status_text(code as u32, &mut p, &mut len) },
            apf_status::APF_OK
        );
        // SAFETY: a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(text.len(), len);
        assert_eq!(text, code.description());
        assert!(code == apf_status::APF_OK || (7000..8000).contains(&(code as u32)));
    }
    let (mut p, mut len) = (null(), 99usize);
    // SAFETY: writable outs.
    assert_eq!(
        unsafe { apf_status_text(4242, &mut p, &mut len) },
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert!(p.is_null() && len == 99, "outs untouched on error");
    assert_eq!(
        apf_status::from_u32(4242),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(
        apf_status::from_u32(7004),
        apf_status::APF_ERR_INVALID_HANDLE
    );
}

#[test]
fn last_error_is_an_owned_text_and_per_thread() {
    let d = tiny(true);
    assert_eq!(finish(&d, 0), apf_status::APF_ERR_INVALID_HANDLE);
    let message = last_error();
    assert!(message.contains("unknown or stale"), "{message}");
    assert_eq!(last_error(), message, "reading it does not change it");
    // SAFETY: a NULL out is refused without touching the last error.
    assert_eq!(
        unsafe { apf_last_error(null_mut()) },
        apf_status::APF_ERR_NULL_POINTER
    );
    assert_eq!(last_error(), message, "a refused read does not change it");
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "", "another thread has no error");
}

// ----- the request protocol --------------------------------------------------

#[test]
fn decision_carries_interned_names_and_uids() {
    let d = tiny(true);
    let a = start(&d, "alice");
    assert_eq!((a.outcome, a.reject_reason), (EXECUTE, NONE));
    assert_ne!(a.request, 0);
    assert_eq!(str_of(a.flow_schema_name), "alice-schema");
    assert_eq!(str_of(a.flow_schema_uid), "uid-alice");
    assert_eq!(str_of(a.priority_level_name), "tiny");
    assert_eq!(str_of(a.priority_level_uid), "uid-tiny");
    let b = start(&d, "bob");
    assert_eq!(str_of(b.flow_schema_name), "catch-all");
    assert_eq!(
        str_of(b.flow_schema_uid),
        apf::uid::flow_schema_uid("catch-all"),
        "no metadata.uid: the derived UID"
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
    // The same object gives the same pointers (interned).
    let again = start(&d, "alice");
    assert_eq!(again.flow_schema_name.ptr, a.flow_schema_name.ptr);
    assert_eq!(finish(&d, again.request), apf_status::APF_OK);
}

#[test]
fn stale_unknown_and_foreign_handles_are_detected() {
    let d = tiny(true);
    let other = tiny(true);
    let a = start(&d, "alice");
    for h in [0, 1 << 40, u64::MAX, a.request ^ (1 << 32)] {
        assert_eq!(finish(&d, h), apf_status::APF_ERR_INVALID_HANDLE, "{h:#x}");
        assert_eq!(
            poll(&d, h),
            Err(apf_status::APF_ERR_INVALID_HANDLE),
            "{h:#x}"
        );
        assert_eq!(
            cancel(&d, h),
            Err(apf_status::APF_ERR_INVALID_HANDLE),
            "{h:#x}"
        );
    }
    assert_eq!(
        finish(&other, a.request),
        apf_status::APF_ERR_INVALID_HANDLE,
        "another dispatcher's handle"
    );
    assert_eq!(poll(&d, a.request), Ok((EXECUTE, NONE)));
    assert_eq!(wait(&d, a.request, 0), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(
        finish(&d, a.request),
        apf_status::APF_ERR_INVALID_HANDLE,
        "double finish"
    );
    assert!(
        last_error().contains("already finished"),
        "{}",
        last_error()
    );
    assert_eq!(poll(&d, a.request), Err(apf_status::APF_ERR_INVALID_HANDLE));
    // The slot is reused with a new generation: the old handle stays stale.
    let b = start(&d, "alice");
    assert_eq!(b.request as u32, a.request as u32, "same slot");
    assert_ne!(b.request, a.request, "new generation");
    assert_eq!(finish(&d, a.request), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}

#[test]
fn queued_requests_cannot_be_finished_and_executing_ones_cannot_be_cancelled() {
    let d = tiny(true);
    let a = start(&d, "alice");
    assert_eq!(a.outcome, EXECUTE);
    let q = start(&d, "alice");
    assert_eq!((q.outcome, q.reject_reason), (QUEUED, NONE));
    assert_ne!(q.request, 0);
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_QUEUED);
    assert_eq!(
        cancel(&d, a.request),
        Err(apf_status::APF_ERR_REQUEST_EXECUTING)
    );
    assert_eq!(poll(&d, q.request), Ok((QUEUED, NONE)));
    // Finishing the executing request dispatches the queued one; until the
    // caller learns of it, it still counts as queued.
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_QUEUED);
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
    assert_eq!(field(&line, "dispatched"), 2, "{line}");
}

#[test]
fn manual_clock_times_out_a_queued_request_and_finish_then_reports_rejected() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    assert_eq!(q.outcome, QUEUED);
    advance(&d, SECOND / 2);
    assert_eq!(
        poll(&d, q.request),
        Ok((QUEUED, NONE)),
        "before the wait limit"
    );
    advance(&d, SECOND);
    let timed_out = (REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32);
    assert_eq!(poll(&d, q.request), Ok(timed_out));
    assert_eq!(
        poll(&d, q.request),
        Ok(timed_out),
        "reported again while the handle is remembered"
    );
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_REJECTED);
    assert_eq!(
        cancel(&d, q.request),
        Err(apf_status::APF_ERR_REQUEST_REJECTED)
    );
    let mut now = 0;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_now(d.0, &mut now) },
        apf_status::APF_OK
    );
    assert_eq!(now, SECOND + SECOND / 2);
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "rejected_time-out"), 1, "{line}");
}

#[test]
fn a_full_queue_rejects_at_start_with_handle_zero() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let q1 = start(&d, "alice");
    let q2 = start(&d, "alice");
    assert_eq!((q1.outcome, q2.outcome), (QUEUED, QUEUED));
    let r = start(&d, "alice");
    assert_eq!(r.outcome, REJECTED);
    assert_eq!(
        r.reject_reason,
        apf_reject_reason::APF_REJECT_QUEUE_FULL as u32
    );
    assert_eq!(r.request, 0);
    assert_eq!(
        str_of(r.priority_level_name),
        "tiny",
        "names even when rejected"
    );
    assert_eq!(finish(&d, r.request), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(cancel(&d, q1.request), Ok(true));
    assert_eq!(
        cancel(&d, q1.request),
        Err(apf_status::APF_ERR_INVALID_HANDLE),
        "cancelled handle is retired"
    );
    assert_eq!(cancel(&d, q2.request), Ok(true));
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "rejected_cancelled"), 2, "{line}");
    assert_eq!(field(&line, "rejected_queue-full"), 1, "{line}");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
}

#[test]
fn deadline_before_the_wait_limit_times_out_first() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let dg = digest("alice", AUTHENTICATED);
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: valid pointers.
    let st = unsafe { apf_start_request(d.0, &dg, null(), SECOND / 10, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    let q = unsafe { out.assume_init() };
    assert_eq!(q.outcome, QUEUED);
    advance(&d, SECOND / 10);
    assert_eq!(
        poll(&d, q.request),
        Ok((REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32))
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
}

#[test]
fn finish_honours_the_actual_end_and_additional_latency() {
    let d = tiny(true);
    let est = apf_work_estimate {
        initial_seats: 1,
        final_seats: 1,
        additional_latency_nanos: SECOND / 2,
    };
    let a = try_start(&d, "alice", Some(est)).unwrap();
    assert_eq!(a.outcome, EXECUTE);
    advance(&d, SECOND / 4);
    // The request really ended at 0.1 s; its final seat is held until 0.6 s.
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_finish(d.0, a.request, SECOND / 10) },
        apf_status::APF_OK
    );
    let q = start(&d, "alice");
    assert_eq!(q.outcome, QUEUED, "the final seat is still held");
    advance(&d, SECOND / 4); // 0.5 s
    assert_eq!(poll(&d, q.request), Ok((QUEUED, NONE)));
    advance(&d, SECOND / 10); // 0.6 s
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

// ----- reconfiguration -------------------------------------------------------

#[test]
fn a_bad_reconfiguration_keeps_the_old_config() {
    let d = tiny(true);
    let before = stats(&d);
    for bad in [
        // No objects: it used to apply, dropping every level but the
        // mandatory ones.
        "",
        "# nothing\n---\n",
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
        "this is: [not valid",
        // handSize above queues does not validate.
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: tiny}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 5\n    limitResponse: {type: Queue, queuing: {queues: 2, handSize: 9, queueLengthLimit: 2}}\n",
    ] {
        // SAFETY: text readable for its length.
        let st = unsafe { apf_dispatcher_reconfigure(d.0, bad.as_ptr().cast(), bad.len()) };
        assert_eq!(st, apf_status::APF_ERR_CONFIG, "{bad}");
        assert!(!last_error().is_empty());
    }
    assert!(last_error().contains("handSize"), "{}", last_error());
    assert_eq!(stats(&d), before);
    let a = start(&d, "alice");
    assert_eq!(str_of(a.priority_level_name), "tiny");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
}

#[test]
fn a_good_reconfiguration_switches_and_keeps_old_names_valid() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let old_name = a.priority_level_name;
    let json = r#"{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"PriorityLevelConfiguration","metadata":{"name":"other"},"spec":{"type":"Limited","limited":{"limitResponse":{"type":"Reject"}}}}"#;
    // SAFETY: text readable for its length.
    let st = unsafe { apf_dispatcher_reconfigure(d.0, json.as_ptr().cast(), json.len()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert!(stats(&d).contains("level other "));
    assert!(!stats(&d).contains("level tiny "));
    assert_eq!(str_of(old_name), "tiny", "names stay valid until free");
    // The request of the removed level still finishes.
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let b = start(&d, "alice");
    assert_eq!(str_of(b.flow_schema_name), "catch-all");
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}

// ----- panics ---------------------------------------------------------------

#[test]
fn a_panic_inside_is_contained_and_the_library_stays_usable() {
    let d = tiny(true);
    let a = start(&d, "alice");
    // SAFETY: NULL is allowed.
    assert_eq!(unsafe { apf_test_panic(null()) }, apf_status::APF_ERR_PANIC);
    assert!(
        last_error().contains("deliberate panic"),
        "{}",
        last_error()
    );
    // A panic while holding the lock this thread's requests live under
    // poisons it; the dispatcher must go on working.
    // SAFETY: live dispatcher.
    assert_eq!(unsafe { apf_test_panic(d.0) }, apf_status::APF_ERR_PANIC);
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    for _ in 0..3 {
        let b = start(&d, "alice");
        assert_eq!(b.outcome, EXECUTE);
        assert_eq!(finish(&d, b.request), apf_status::APF_OK);
    }
}

// ----- completion notification -------------------------------------------

fn fd_readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn completion_fd_is_readable_exactly_while_decisions_wait_to_be_taken() {
    let d = tiny(true);
    let mut fd = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd) },
        apf_status::APF_OK
    );
    assert!(fd >= 0);
    assert!(!fd_readable(fd));
    let a = start(&d, "alice");
    let q1 = start(&d, "alice");
    let q2 = start(&d, "alice");
    assert!(!fd_readable(fd), "nothing decided yet");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert!(fd_readable(fd));
    assert_eq!(take(&d), Some(q1.request));
    assert!(!fd_readable(fd), "queue emptied");
    assert_eq!(take(&d), None);
    assert_eq!(poll(&d, q1.request), Ok((EXECUTE, NONE)));
    // q2 times out while q1 executes.
    advance(&d, 2 * SECOND);
    assert!(fd_readable(fd));
    let mut fd2 = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd2) },
        apf_status::APF_OK
    );
    assert_eq!(fd, fd2, "one fd per dispatcher");
    assert_eq!(take(&d), Some(q2.request));
    assert_eq!(
        poll(&d, q2.request),
        Ok((REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32))
    );
    // A cancellation is not announced.
    let q3 = start(&d, "alice");
    assert_eq!(cancel(&d, q3.request), Ok(true));
    assert!(!fd_readable(fd));
    assert_eq!(take(&d), None);
    assert_eq!(finish(&d, q1.request), apf_status::APF_OK);
}

#[test]
fn the_completion_queue_stays_off_until_asked_for() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(take(&d), None, "not collected before the first take");
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    let q2 = start(&d, "alice");
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    assert_eq!(take(&d), Some(q2.request), "collected after the first take");
    assert_eq!(wait(&d, q2.request, u64::MAX), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q2.request), apf_status::APF_OK);
}

struct Calls {
    dispatcher: *mut apf_dispatcher,
    seen: Mutex<Vec<u64>>,
    reentrant_status: Mutex<Vec<apf_status>>,
}

unsafe extern "C" fn record(user: *mut c_void, request: u64) {
    // SAFETY: `user` is the `Calls` the test registered, alive until the
    // callback is cleared.
    let calls = unsafe { &*(user as *const Calls) };
    calls.seen.lock().unwrap().push(request);
    // Calling back into libapf from the callback must work (no lock is
    // held): stats take the level's lock, a start takes it too.
    // SAFETY: live dispatcher; writable apf_text.
    let (st, _) = take_text(|t| unsafe { apf_dispatcher_stats_text(calls.dispatcher, t) });
    calls.reentrant_status.lock().unwrap().push(st);
    // SAFETY: live dispatcher; changing the callback inside it is refused.
    let st = unsafe { apf_dispatcher_set_completion_callback(calls.dispatcher, None, null_mut()) };
    calls.reentrant_status.lock().unwrap().push(st);
    // SAFETY: freeing the dispatcher from its own callback is ignored (the
    // dispatcher is in use below this frame); the test goes on using it.
    unsafe { apf_dispatcher_free(calls.dispatcher) };
    let ignored = last_error().contains("own completion callback");
    let st = if ignored {
        apf_status::APF_ERR_IN_CALLBACK
    } else {
        apf_status::APF_OK
    };
    calls.reentrant_status.lock().unwrap().push(st);
}

#[test]
fn the_callback_runs_outside_libapf_locks_and_may_call_back_in() {
    let d = tiny(true);
    let calls = Box::new(Calls {
        dispatcher: d.0,
        seen: Mutex::new(Vec::new()),
        reentrant_status: Mutex::new(Vec::new()),
    });
    let user = &*calls as *const Calls as *mut c_void;
    // SAFETY: `record` may be called with `user` from any thread while the
    // callback is set; `calls` outlives it.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, Some(record), user) },
        apf_status::APF_OK
    );
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    // The dispatch happens inside this finish, on this thread: a callback
    // run under the level's lock would deadlock here, so run it on a thread
    // and fail instead of hanging.
    let (tx, rx) = mpsc::channel();
    let (dp, h) = (d.0 as usize, a.request);
    std::thread::spawn(move || {
        // SAFETY: the dispatcher outlives this thread's one call (the test
        // waits for it below).
        let st = unsafe { apf_finish(dp as *mut apf_dispatcher, h, 0) };
        let _ = tx.send(st);
    });
    let Ok(st) = rx.recv_timeout(Duration::from_secs(60)) else {
        // The finishing thread is stuck inside the callback: freeing the
        // dispatcher would wait for it forever, so leak it and fail.
        std::mem::forget(d);
        std::mem::forget(calls);
        panic!("apf_finish deadlocked: the callback ran under a libapf lock");
    };
    assert_eq!(st, apf_status::APF_OK);
    assert_eq!(*calls.seen.lock().unwrap(), vec![q.request]);
    assert_eq!(
        *calls.reentrant_status.lock().unwrap(),
        vec![
            apf_status::APF_OK,
            apf_status::APF_ERR_IN_CALLBACK,
            apf_status::APF_ERR_IN_CALLBACK,
        ]
    );
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    // Timeouts from the manual clock's advance are announced too.
    let q2 = start(&d, "alice");
    advance(&d, 2 * SECOND);
    assert_eq!(*calls.seen.lock().unwrap(), vec![q.request, q2.request]);
    // SAFETY: clearing the callback; afterwards it is not called.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, None, null_mut()) },
        apf_status::APF_OK
    );
    let q3 = start(&d, "alice");
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    assert_eq!(calls.seen.lock().unwrap().len(), 2);
    assert_eq!(poll(&d, q3.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q3.request), apf_status::APF_OK);
}

// ----- blocking wait ---------------------------------------------------------

#[test]
fn wait_times_out_in_real_time_and_leaves_the_request_queued() {
    let d = tiny(true);
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    let t0 = std::time::Instant::now();
    // The timeout is the caller's real time (the dispatcher's manual clock
    // stands still), so this test does block for 20 ms.
    assert_eq!(wait(&d, q.request, 20_000_000), Ok((QUEUED, NONE)));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!(
        wait(&d, q.request, 0),
        Ok((QUEUED, NONE)),
        "0 does not block"
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(wait(&d, q.request, 0), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

#[test]
fn a_blocked_wait_ends_when_another_thread_decides_or_cancels() {
    let d = std::sync::Arc::new(tiny(true));
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    let waiter = {
        let d = d.clone();
        std::thread::spawn(move || wait(&d, q.request, u64::MAX))
    };
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(waiter.join().unwrap(), Ok((EXECUTE, NONE)));
    let q2 = start(&d, "alice");
    let waiter = {
        let d = d.clone();
        std::thread::spawn(move || wait(&d, q2.request, u64::MAX))
    };
    // Whether the waiter blocks before or after the cancel, it ends.
    assert_eq!(cancel(&d, q2.request), Ok(true));
    assert_eq!(
        waiter.join().unwrap(),
        Err(apf_status::APF_ERR_INVALID_HANDLE)
    );
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

// ----- concurrency and teardown ------------------------------------------------

#[test]
fn many_threads_start_wait_and_finish_without_losing_a_seat() {
    let d = std::sync::Arc::new(tiny(true));
    let executed = std::sync::Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (d, executed) = (d.clone(), executed.clone());
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let dec = start(&d, "alice");
                    let outcome = match dec.outcome {
                        QUEUED => wait(&d, dec.request, u64::MAX).unwrap().0,
                        o => o,
                    };
                    if outcome == EXECUTE {
                        executed.fetch_add(1, Ordering::Relaxed);
                        assert_eq!(finish(&d, dec.request), apf_status::APF_OK);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(executed.load(Ordering::Relaxed) > 0);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
    assert_eq!(field(&line, "waiting"), 0, "{line}");
    assert_eq!(
        field(&line, "dispatched"),
        executed.load(Ordering::Relaxed) as u64,
        "{line}"
    );
    assert!(
        stats(&d).starts_with("now_ns 0 requests_live 0 "),
        "{}",
        stats(&d)
    );
}

static AFTER_FREE: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_after_free(_user: *mut c_void, _request: u64) {
    AFTER_FREE.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn free_with_live_requests_finishes_and_cancels_them_silently() {
    let d = tiny(true);
    // SAFETY: a plain function, callable from any thread.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, Some(count_after_free), null_mut()) },
        apf_status::APF_OK
    );
    let mut fd = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd) },
        apf_status::APF_OK
    );
    let _executing = start(&d, "alice");
    let _queued = start(&d, "alice");
    let _queued2 = start(&d, "alice");
    drop(d);
    assert_eq!(
        AFTER_FREE.load(Ordering::SeqCst),
        0,
        "no callback during free"
    );
}
