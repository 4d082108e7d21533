//! The last Kubernetes APF metrics of issue 13, value by value on the manual
//! clock: `read_vs_write_current_requests` (the server's requests by phase
//! and kind), `demand_seats` (a level's seat demand over its NominalCL) and
//! the virtual-time gauges `dispatch_r`, `latest_s`, `next_s_bounds` and
//! `next_discounted_s_bounds`.
#![cfg(not(loom))]

use apf::classification::RequestDigest;
use apf::clock::ManualClock;
use apf::dispatcher::{Dispatcher, Outcome};
use apf::level::{RequestGuard, RequestTicket};
use std::time::Duration;

use crate::openmetrics;
use crate::two_levels;
use openmetrics::{parse, Exposition};
// tight and strict get NominalCL 8 each of 18 seats, at most 2 seats a
// request (see `two_levels`); the mandatory exempt level takes
// `system:masters`.
use two_levels::{dispatcher, seats};

const P: &str = "apiserver_flowcontrol_";
const MS: f64 = 1e6;

fn digest(group: &'static str, verb: &'static str) -> RequestDigest<'static> {
    let groups: &'static [&'static str] = match group {
        "tenants" => &["tenants"],
        "masters" => &["system:masters"],
        _ => &["batch"],
    };
    RequestDigest {
        user: "alice",
        groups,
        verb,
        path: "/healthz",
        ..RequestDigest::default()
    }
}

fn execute(d: &Dispatcher, group: &'static str, verb: &'static str, n: u32) -> RequestGuard {
    match d
        .start_request(&digest(group, verb), seats(n), None)
        .outcome
    {
        Outcome::Execute(g) => g,
        other => panic!("expected to execute: {other:?}"),
    }
}

fn queue(d: &Dispatcher, group: &'static str, verb: &'static str, n: u32) -> RequestTicket {
    match d
        .start_request(&digest(group, verb), seats(n), None)
        .outcome
    {
        Outcome::Queued(t) => t,
        other => panic!("expected to queue: {other:?}"),
    }
}

fn advance_ms(manual: &ManualClock, ms: u64) {
    manual.advance(Duration::from_millis(ms));
}

/// `(le=0, le=1, +Inf, sum)` of one read-vs-write series, in nanoseconds.
fn read_vs_write(exp: &Exposition, phase: &str, kind: &str) -> [f64; 4] {
    let name = format!("{P}read_vs_write_current_requests");
    let labels = [("phase", phase), ("request_kind", kind)];
    [
        exp.bucket(&name, &labels, "0"),
        exp.bucket(&name, &labels, "1"),
        exp.bucket(&name, &labels, "+Inf"),
        exp.get(&format!("{name}_sum"), &labels),
    ]
}

#[test]
fn read_vs_write_counts_the_servers_requests_by_phase_and_kind() {
    let (d, manual) = dispatcher();
    let idle = parse(&d.metrics_text());
    assert!(
        !idle
            .families
            .contains_key(&format!("{P}read_vs_write_current_requests")),
        "no series before time passes"
    );

    // t = 0: two reads at tight (hot path), a write at the exempt level.
    let r1 = execute(&d, "tenants", "get", 2);
    let _r2 = execute(&d, "tenants", "list", 2);
    let _m1 = execute(&d, "masters", "create", 1);
    advance_ms(&manual, 100);
    // t = 100 ms: two writes fill tight (8 of 8); a write and a read of a
    // path (verb "get", read-only as in Kubernetes) queue.
    let _m2 = execute(&d, "tenants", "update", 2);
    let _m3 = execute(&d, "tenants", "patch", 2);
    let mut w1 = queue(&d, "tenants", "post", 2);
    let _w2 = queue(&d, "tenants", "get", 1);
    advance_ms(&manual, 50);
    // t = 150 ms: a read ends; the queued write takes its two seats, the
    // queued read still does not fit.
    drop(r1);
    let _w1 = w1.poll().expect("decided").expect("dispatched");
    advance_ms(&manual, 50);

    let exp = parse(&d.metrics_text());
    // Reads executing: 2 for 150 ms, then 1 for 50 ms.
    assert_eq!(
        read_vs_write(&exp, "executing", "readOnly"),
        [0.0, 50.0 * MS, 200.0 * MS, (2.0 * 150.0 + 50.0) * MS]
    );
    // Writes executing: 1 for 100 ms, 3 for 50 ms, 4 for 50 ms.
    assert_eq!(
        read_vs_write(&exp, "executing", "mutating"),
        [
            0.0,
            100.0 * MS,
            200.0 * MS,
            (100.0 + 3.0 * 50.0 + 4.0 * 50.0) * MS
        ]
    );
    // Writes waiting: 1 from 100 to 150 ms.
    assert_eq!(
        read_vs_write(&exp, "waiting", "mutating"),
        [150.0 * MS, 200.0 * MS, 200.0 * MS, 50.0 * MS]
    );
    // Reads waiting: 1 from 100 ms on.
    assert_eq!(
        read_vs_write(&exp, "waiting", "readOnly"),
        [100.0 * MS, 200.0 * MS, 200.0 * MS, 100.0 * MS]
    );
    // The request kind does not split the per-schema tallies.
    assert_eq!(
        exp.get(
            &format!("{P}dispatched_requests_total"),
            &[("priority_level", "tight"), ("flow_schema", "tenants")]
        ),
        5.0
    );
}

#[test]
fn demand_seats_is_demand_over_nominal_weighted_by_time() {
    let (d, manual) = dispatcher();
    // t = 0: 8 seats in use and 2 waiting at tight (NominalCL 8): 1.25.
    let a: Vec<RequestGuard> = (0..4).map(|_| execute(&d, "tenants", "get", 2)).collect();
    let mut b = queue(&d, "tenants", "get", 2);
    advance_ms(&manual, 1000);
    // t = 1 s: the four end, b runs: 2 of 8, 0.25.
    drop(a);
    let _b = b.poll().expect("decided").expect("dispatched");
    advance_ms(&manual, 500);

    let exp = parse(&d.metrics_text());
    let name = format!("{P}demand_seats");
    let tight = [("priority_level", "tight")];
    assert_eq!(exp.get(&format!("{name}_count"), &tight), 1500.0 * MS);
    assert_eq!(exp.bucket(&name, &tight, "0.2"), 0.0);
    assert_eq!(exp.bucket(&name, &tight, "0.4"), 500.0 * MS);
    assert_eq!(exp.bucket(&name, &tight, "1.2"), 500.0 * MS);
    assert_eq!(exp.bucket(&name, &tight, "1.4"), 1500.0 * MS);
    assert_eq!(
        exp.get(&format!("{name}_sum"), &tight),
        1.25 * 1000.0 * MS + 0.25 * 500.0 * MS
    );
    let strict = [("priority_level", "strict")];
    assert_eq!(exp.bucket(&name, &strict, "0.2"), 1500.0 * MS, "idle");
    assert_eq!(exp.get(&format!("{name}_sum"), &strict), 0.0);
}

#[test]
fn virtual_time_gauges_follow_dispatches_from_queues() {
    let (d, manual) = dispatcher();
    let gauge = |exp: &Exposition, n: &str, bound: Option<&str>| {
        let mut labels = vec![("priority_level", "tight")];
        labels.extend(bound.map(|b| ("bound", b)));
        exp.get(&format!("{P}{n}"), &labels)
    };
    let idle = parse(&d.metrics_text());
    for n in [
        "dispatch_r",
        "latest_s",
        "next_s_bounds",
        "next_discounted_s_bounds",
    ] {
        assert!(
            !idle.families.contains_key(&format!("{P}{n}")),
            "{n}: no series before the first dispatch"
        );
    }

    // t = 0: four two-seat requests take all 8 seats on the hot path, one
    // after the other in the one queue (each one's work is 2 seats x G =
    // 3 ms, 0.006 seat-seconds: S = 0, 0.006, 0.012, 0.018); b queues
    // behind them with S = 0.024.
    let mut a: Vec<RequestGuard> = (0..4).map(|_| execute(&d, "tenants", "get", 2)).collect();
    let mut b = queue(&d, "tenants", "get", 2);
    let exp = parse(&d.metrics_text());
    assert_eq!(gauge(&exp, "dispatch_r", None), 0.0);
    assert_eq!(gauge(&exp, "latest_s", None), 0.018);
    assert_eq!(gauge(&exp, "next_s_bounds", Some("min")), 0.024);
    assert_eq!(gauge(&exp, "next_s_bounds", Some("max")), 0.024);
    // Less the queue's work in progress: 8 seats x 3 ms.
    assert_eq!(gauge(&exp, "next_discounted_s_bounds", Some("min")), 0.0);
    assert_eq!(gauge(&exp, "next_discounted_s_bounds", Some("max")), 0.0);
    assert!(
        !exp.has(&format!("{P}dispatch_r"), &[("priority_level", "strict")]),
        "a level that does not queue has none"
    );

    // t = 1 s: R advanced at 8 seats for the one active queue (8
    // seat-seconds). One request ends after 1 s instead of G: as in
    // Kubernetes its queue is charged the difference, 2 x (1 s - 3 ms) =
    // 1.994, so b is dispatched with S = 0.024 + 1.994 = 2.018, while its
    // queue still has 6 seats in use (discounted: 2.018 - 6 x 0.003 = 2).
    // With nothing waiting, the bounds are b's.
    advance_ms(&manual, 1000);
    drop(a.remove(0));
    let _b = b.poll().expect("decided").expect("dispatched");
    let exp = parse(&d.metrics_text());
    assert_eq!(gauge(&exp, "current_r", None), 8.0);
    assert_eq!(gauge(&exp, "dispatch_r", None), 8.0);
    assert_eq!(gauge(&exp, "latest_s", None), 2.018);
    assert_eq!(gauge(&exp, "next_s_bounds", Some("min")), 2.018);
    assert_eq!(gauge(&exp, "next_s_bounds", Some("max")), 2.018);
    assert_eq!(gauge(&exp, "next_discounted_s_bounds", Some("min")), 2.0);
    assert_eq!(gauge(&exp, "next_discounted_s_bounds", Some("max")), 2.0);
}

/// The new metrics' own labels cannot be constant labels too (a series
/// would carry the label twice).
#[test]
fn the_new_labels_are_refused_as_constant_labels() {
    let (d, _manual) = dispatcher();
    for label in ["request_kind", "bound"] {
        let options = apf::metrics::ExpositionOptions {
            prefix: None,
            const_labels: vec![(label.to_owned(), "x".to_owned())],
        };
        let err = d
            .metrics_text_with(&options)
            .expect_err("a label the metrics use");
        assert!(err.contains(&format!("\"{label}\"")), "{err}");
    }
}

/// A level that replays its ring late (here at the scrape, after another
/// level reported later changes) still counts its requests' whole time in
/// the mean: `_sum` is exact whatever the order the levels replay in.
#[test]
fn read_vs_write_sums_are_exact_when_a_level_replays_late() {
    let (d, manual) = dispatcher();
    // t = 0: a read at strict, admitted lock-free: only a ring record.
    let _s = execute(&d, "batch", "get", 2);
    advance_ms(&manual, 100);
    // t = 100 ms: four reads fill tight on the hot path; a fifth queues
    // (tight's slow path reports all five at 100 ms).
    let _t: Vec<RequestGuard> = (0..4).map(|_| execute(&d, "tenants", "get", 2)).collect();
    let _w = queue(&d, "tenants", "get", 2);
    advance_ms(&manual, 50);
    // The scrape replays strict's start at 0 after tight's changes at 100.
    let exp = parse(&d.metrics_text());
    let name = format!("{P}read_vs_write_current_requests");
    let reads = [("phase", "executing"), ("request_kind", "readOnly")];
    assert_eq!(exp.get(&format!("{name}_count"), &reads), 150.0 * MS);
    assert_eq!(
        exp.get(&format!("{name}_sum"), &reads),
        (150.0 + 4.0 * 50.0) * MS,
        "strict's read for 150 ms, tight's four for 50 ms"
    );
    let waiting = [("phase", "waiting"), ("request_kind", "readOnly")];
    assert_eq!(exp.get(&format!("{name}_sum"), &waiting), 50.0 * MS);
}
