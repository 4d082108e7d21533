//! The metrics and dump functions of the C ABI, called from Rust as C calls
//! them: the exposition parsed back by the strict OpenMetrics parser and
//! checked against a request sequence, each dump's Kubernetes columns, the
//! size-query protocol (including text that grows between the query and
//! the copy), NULL handling, and scrapes racing requests on other threads.
#![cfg(not(loom))]

#[path = "support/openmetrics.rs"]
mod openmetrics;
use openmetrics::parse;
#[path = "support/dumps.rs"]
mod dumps;

#[path = "support/text.rs"]
mod text;
use dumps::table;
use text::text_of;

use apf::ffi::*;
use apf::metrics::{BUILTIN_CONFIG_SERIES, CONTENT_TYPE};
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const SECOND: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// One limited level `tiny` (one seat, one queue of two) for user `alice`
/// (tests/ffi.rs uses the same); libapf adds `exempt` and `catch-all`.
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
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
"#;

const TINY_PAIR: [(&str, &str); 2] = [("priority_level", "tiny"), ("flow_schema", "alice-schema")];

fn m(name: &str) -> String {
    format!("apiserver_flowcontrol_{name}")
}

/// Owns a dispatcher for one test.
struct D(*mut apf_dispatcher);

impl Drop for D {
    fn drop(&mut self) {
        // SAFETY: made by apf_dispatcher_new_*, not used after the test.
        unsafe { apf_dispatcher_free(self.0) }
    }
}

// SAFETY: the ABI promises a dispatcher may be used from any thread.
unsafe impl Send for D {}
// SAFETY: as above.
unsafe impl Sync for D {}

fn options() -> apf_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: `o` is writable.
    assert_eq!(
        unsafe { apf_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.manual_clock = true;
    // Two seats: one for tiny, one for catch-all.
    o.server_concurrency_limit = 2;
    o.wait_limit_ns = SECOND;
    o
}

fn tiny() -> D {
    let mut d = null_mut();
    let o = options();
    // SAFETY: text readable for its length; options and out valid.
    let st =
        unsafe { apf_dispatcher_new_from_config(TINY.as_ptr().cast(), TINY.len(), &o, &mut d) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    D(d)
}

fn last_error() -> String {
    // SAFETY: `t` is a writable apf_text.
    text_of(|t| unsafe { apf_last_error(t) })
}

const GROUPS: &[apf_str] = &[apf_str {
    ptr: c"system:authenticated".as_ptr(),
    len: 20,
}];

/// Start a `list deployments` in namespace `team-a` for `user`.
fn start(d: &D, user: &'static str) -> apf_decision {
    let (verb, group, resource, ns, path) = (
        "list",
        "apps",
        "deployments",
        "team-a",
        "/apis/apps/v1/namespaces/team-a/deployments",
    );
    let dg = apf_request_digest {
        user: user.as_ptr().cast(),
        user_len: user.len(),
        verb: verb.as_ptr().cast(),
        verb_len: verb.len(),
        api_group: group.as_ptr().cast(),
        api_group_len: group.len(),
        resource: resource.as_ptr().cast(),
        resource_len: resource.len(),
        subresource: null(),
        subresource_len: 0,
        namespace_: ns.as_ptr().cast(),
        namespace_len: ns.len(),
        name: null(),
        name_len: 0,
        path: path.as_ptr().cast(),
        path_len: path.len(),
        groups: GROUPS.as_ptr(),
        n_groups: GROUPS.len(),
        is_resource_request: true,
    };
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: all pointers valid for the call.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    // SAFETY: written on APF_OK.
    unsafe { out.assume_init() }
}

fn finish(d: &D, h: u64) {
    // SAFETY: live dispatcher.
    let st = unsafe { apf_finish(d.0, h, 0) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
}

fn poll(d: &D, h: u64) -> u32 {
    let (mut o, mut r) = (0u32, 0u32);
    // SAFETY: live dispatcher, writable outs.
    let st = unsafe { apf_request_poll(d.0, h, &mut o, &mut r) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    o
}

fn advance(d: &D, nanos: u64) {
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_dispatcher_advance_clock(d.0, nanos) },
        apf_status::APF_OK
    );
}

const EXECUTE: u32 = apf_outcome::APF_OUTCOME_EXECUTE as u32;
const QUEUED: u32 = apf_outcome::APF_OUTCOME_QUEUED as u32;
const REJECTED: u32 = apf_outcome::APF_OUTCOME_REJECTED as u32;

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
    let d = tiny();
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
    finish(&d, first.request);
    assert_eq!(poll(&d, second.request), EXECUTE);
    advance(&d, SECOND);
    assert_eq!(poll(&d, third.request), REJECTED);
    finish(&d, second.request);
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
    let mut d = null_mut();
    let mut o = options();
    o.server_concurrency_limit = 600;
    // SAFETY: options and out valid.
    assert_eq!(
        unsafe { apf_dispatcher_new_builtin(&o, &mut d) },
        apf_status::APF_OK
    );
    let d = D(d);
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
    let d = tiny();
    let running = start(&d, "alice");
    let waiting = start(&d, "alice");
    let (header, rows) = table(&text(&d, apf_dispatcher_dump_priority_levels));
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
            "DispatchedRequests",
            "RejectedRequests",
            "TimedoutRequests",
            "CancelledRequests"
        ]
    );
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
    finish(&d, running.request);
    let (_, rows) = table(&text(&d, apf_dispatcher_dump_priority_levels));
    assert_eq!(
        rows[2][1..],
        ["0", "true", "false", "0", "0", "1", "0", "0", "1"]
    );
}

#[test]
fn dump_queues_has_kubernetes_columns_and_one_row_per_queue() {
    let d = tiny();
    let _running = start(&d, "alice");
    let _waiting = start(&d, "alice");
    let (header, rows) = table(&text(&d, apf_dispatcher_dump_queues));
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "Index",
            "PendingRequests",
            "ExecutingRequests",
            "SeatsInUse",
            "NextDispatchR",
            "InitialSeatsSum",
            "MaxSeatsSum",
            "TotalWorkSum"
        ]
    );
    let tiny: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "tiny").collect();
    assert_eq!(tiny.len(), 1, "{rows:?}");
    assert_eq!(tiny[0][1..5], ["0", "1", "1", "1"]);
    assert!(tiny[0][5].ends_with("ss"));
}

#[test]
fn dump_requests_lists_the_waiting_with_and_without_details() {
    let d = tiny();
    let _running = start(&d, "alice");
    advance(&d, 1500 * MS);
    let _waiting = start(&d, "alice");
    let columns = [
        "PriorityLevelName",
        "FlowSchemaName",
        "QueueIndex",
        "RequestIndexInQueue",
        "FlowDistingsher",
        "ArriveTime",
        "InitialSeats",
        "FinalSeats",
        "AdditionalLatency",
        "StartTime",
    ];
    let (header, rows) = table(&text(&d, requests_plain));
    assert_eq!(header, columns);
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
    assert_eq!(header[..10], columns);
    assert_eq!(
        header[10..],
        [
            "UserName",
            "Verb",
            "APIPath",
            "Namespace",
            "Name",
            "APIVersion",
            "Resource",
            "SubResource"
        ]
    );
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
    let d = tiny();
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
    let d = tiny();
    let before = metrics(&d);
    // A first execution adds its histograms' series: the next call simply
    // returns the longer text.
    let h = start(&d, "alice").request;
    finish(&d, h);
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
    let d = tiny();
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
            assert!(
                last_error().contains("dispatcher"),
                "{what}: {}",
                last_error()
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
    let d = tiny();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..300 {
                    let dec = start(&d, "alice");
                    match dec.outcome {
                        EXECUTE => finish(&d, dec.request),
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
