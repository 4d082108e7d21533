#![cfg(not(loom))]
//! Kubernetes' queueset scenarios (k8s.io/apiserver
//! `pkg/util/flowcontrol/fairqueuing/queueset`), translated one by one onto
//! this project's simulation harness and manual clock: the same clients
//! (flow hashes, threads, calls, execution and think times, widths,
//! padding), the same queuing configuration and concurrency limit, the same
//! evaluation window, and the same checks — each client's average executing
//! seats against the max-min fair allocation (or the stated averages)
//! within the stated margin, whether every request must be served, the
//! reason of every rejection, nothing left waiting or executing at the
//! end, and the queueset's seat-demand integral against the one the
//! driver keeps. `docs/kubernetes-scenarios.md` maps every Kubernetes test
//! to its counterpart here or elsewhere.
//!
//! Like Kubernetes' harness, thread `j` of client `i` makes its first call
//! `90·j + 20·i` ns after the start, the next one `exec + think` after its
//! previous call began executing, and a refused thread stops. Requests wait
//! without a deadline (Kubernetes' tests pass no context deadline): the wait
//! limit is a century.
//!
//! The scenarios where libapf still departs from Kubernetes (a request
//! wider than the limit, levels whose limit is 0, the per-request seat cap
//! of non-queuing levels) are in `tests/queueset/k8s_departures.rs`.

use crate::k8s;
use crate::measure;
use crate::sim;

use apf::clock::Clock;
use apf::queueset::vtime::{to_seat_seconds, total_work};
use apf::queueset::{Admission, QueueSet, RejectReason, Request};
use apf::work_estimate::WorkEstimate;
use k8s::*;
use measure::*;
use sim::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

#[test]
fn fair_alloc_is_max_min_as_kubernetes_computes_it() {
    // Kubernetes' TestFairAlloc, on this harness's water filling.
    for (demands, capacity, expected) in [
        (vec![0.0, 0.0], 42.0, vec![0.0, 0.0]),
        (vec![47.0, 0.0], 42.0, vec![42.0, 0.0]),
        (vec![1.0, 47.0], 42.0, vec![1.0, 41.0]),
        (vec![3.0, 7.0, 9.0, 1.0], 14.0, vec![3.0, 5.0, 5.0, 1.0]),
        (vec![1.0, 9.0, 7.0, 3.0], 21.0, vec![1.0, 9.0, 7.0, 3.0]),
    ] {
        assert_eq!(
            fair_alloc(&demands, capacity),
            expected,
            "{demands:?} into {capacity}"
        );
    }
}

#[test]
fn no_restraint_gives_every_client_what_it_asks() {
    // TestNoRestraint: Kubernetes' no-restraint queueset is libapf's exempt
    // level. Without competition (capacity 10) each client gets its demand,
    // which is fair; with competition (capacity 2) it still gets its demand,
    // which is not.
    for (capacity, margin, fair) in [(10, 0.001, true), (2, 0.25, false)] {
        let clients = vec![
            client(1001001001, 5, 15, SEC, SEC as i64),
            client(2002002002, 2, 15, SEC, SEC as i64 / 2),
        ];
        Scenario {
            level: Level::Exempt(600),
            limit: capacity,
            ..Scenario::new(
                format!("NoRestraint/{capacity}"),
                k8s_cfg(0, 1, 1, 1),
                clients,
            )
        }
        .eval(18, fair, margin)
        .run();
    }
}

#[test]
fn baseline_one_flow_uses_the_whole_level() {
    // TestBaseline.
    let clients = vec![client(1001001001, 1, 21, SEC, 0)];
    Scenario::new("Baseline", k8s_cfg(9, 8, 3, 1), clients)
        .eval(20, true, 0.0)
        .run();
}

#[test]
fn exempt_requests_all_run_at_once_whatever_the_limit() {
    // TestExampt: five threads of three-seat requests, half the time busy,
    // hold 7.5 seats on average whatever the limit. libapf's exempt level
    // has no limit of its own; the server limit stands for Kubernetes'.
    for server_limit in [1, 2] {
        let clients = vec![client(1001001001, 5, 20, SEC, SEC as i64).width(3)];
        Scenario {
            level: Level::Exempt(server_limit),
            limit: 1,
            averages: Some(vec![7.5]),
            ..Scenario::new(
                format!("Exempt/{server_limit}"),
                k8s_cfg(0, 1, 1, 1),
                clients,
            )
        }
        .eval(40, true, 1e-8)
        .run();
    }
}

/// Think time, additional latency, final seats, limit, clients, and the
/// expected averages (`None`: the fair allocation of the demands).
type Separation = (i64, u64, u32, u32, usize, Option<Vec<f64>>);

#[test]
fn separations_with_padding_are_exact() {
    // TestSeparations: one thread per client, 1 s calls, every combination
    // of think time, padding (final seats and additional latency), limit
    // and client count; 24 s is a multiple of every period, so the averages
    // are exact.
    let third = 1.0 / 3.0;
    let half = SEC as i64 / 2;
    let cases: [Separation; 24] = [
        (SEC as i64, 0, 1, 1, 1, None),
        (SEC as i64, 0, 1, 2, 1, None),
        (SEC as i64, 0, 2, 2, 1, None),
        (SEC as i64, 0, 1, 1, 2, None),
        (SEC as i64, 0, 1, 2, 2, None),
        (SEC as i64, 0, 2, 2, 2, None),
        (0, SEC, 1, 1, 1, Some(vec![0.5])),
        (0, SEC, 1, 2, 1, None),
        (0, SEC, 2, 2, 1, Some(vec![0.5])),
        (0, SEC, 1, 1, 2, Some(vec![0.25, 0.25])),
        (0, SEC, 1, 2, 2, Some(vec![0.5, 0.5])),
        (0, SEC, 2, 2, 2, Some(vec![0.25, 0.25])),
        (SEC as i64, SEC / 2, 1, 1, 1, None),
        (SEC as i64, SEC / 2, 1, 2, 1, None),
        (SEC as i64, SEC / 2, 2, 2, 1, None),
        (SEC as i64, SEC / 2, 1, 1, 2, Some(vec![third, third])),
        (SEC as i64, SEC / 2, 1, 2, 2, None),
        (SEC as i64, SEC / 2, 2, 2, 2, Some(vec![third, third])),
        (half, SEC, 1, 1, 1, Some(vec![0.5])),
        (half, SEC, 1, 2, 1, None),
        (half, SEC, 2, 2, 1, Some(vec![0.5])),
        (half, SEC, 1, 1, 2, Some(vec![0.25, 0.25])),
        (half, SEC, 1, 2, 2, Some(vec![0.5, 0.5])),
        (half, SEC, 2, 2, 2, Some(vec![0.25, 0.25])),
    ];
    for (think, pad, final_seats, limit, n, averages) in cases {
        let clients: Vec<Client> = [1001001001, 2002002002][..n]
            .iter()
            .map(|&h| client(h, 1, 25, SEC, think).pad(final_seats, pad))
            .collect();
        let name = format!(
            "Separations think={think} finalSeats={final_seats} pad={pad} clients={n} limit={limit}"
        );
        Scenario {
            averages,
            ..Scenario::new(name, k8s_cfg(9, 8, 3, limit), clients)
        }
        .eval(24, true, 0.0)
        .run();
    }
}

#[test]
fn uniform_flows_hand_size_1() {
    // TestUniformFlowsHandSize1.
    let clients = vec![
        client(1001001001, 8, 20, SEC, THINK),
        client(2002002002, 8, 20, SEC, THINK),
    ];
    Scenario::new("UniformFlowsHandSize1", k8s_cfg(9, 8, 1, 4), clients)
        .eval(50, true, 0.01)
        .run();
}

#[test]
fn uniform_flows_hand_size_3() {
    // TestUniformFlowsHandSize3.
    let clients = vec![
        client(400900100100, 8, 30, SEC, THINK),
        client(300900200200, 8, 30, SEC, THINK),
    ];
    Scenario::new("UniformFlowsHandSize3", k8s_cfg(8, 16, 3, 4), clients)
        .eval(60, true, 0.03)
        .run();
}

#[test]
fn different_flows_expect_equal() {
    // TestDifferentFlowsExpectEqual: both ask for more than half.
    let clients = vec![
        client(1001001001, 8, 20, SEC, SEC as i64),
        client(2002002002, 7, 30, SEC, SEC as i64 / 2),
    ];
    Scenario::new("DiffFlowsExpectEqual", k8s_cfg(9, 8, 1, 4), clients)
        .eval(40, true, 0.01)
        .run();
}

#[test]
fn seat_seconds_do_not_roll_over() {
    // TestSeatSecondsRollover: quarter-year calls of 500 seats at a limit
    // of 2000, over forty quarters. Kubernetes' R is a 64-bit count of
    // nano-seat-seconds and jumps back by epochs (its test expects 8
    // epoch advances); libapf's is 128-bit and never wraps, so there is no
    // epoch to count: fairness alone is checked.
    const QUARTER: u64 = 91 * 24 * 3600 * SEC;
    let clients = vec![
        client(1001001001, 8, 20, QUARTER, QUARTER as i64).width(500),
        client(2002002002, 7, 30, QUARTER, QUARTER as i64 / 2).width(500),
    ];
    let scenario = Scenario::new("SeatSecondsRollover", k8s_cfg(9, 8, 1, 2000), clients);
    Scenario {
        eval: 40 * QUARTER,
        expect: vec![(true, 0.01)],
        ..scenario
    }
    .run();
}

#[test]
fn different_flows_expect_unequal() {
    // TestDifferentFlowsExpectUnequal: one flow asks for less than half.
    let clients = vec![
        client(1001001001, 4, 20, SEC, THINK),
        client(2002002002, 2, 20, SEC, THINK),
    ];
    Scenario::new("DiffFlowsExpectUnequal", k8s_cfg(9, 6, 1, 3), clients)
        .eval(20, true, 0.01)
        .run();
}

#[test]
fn different_widths() {
    // TestDifferentWidths: one- and two-seat flows.
    let clients = vec![
        client(10010010010010, 13, 10, SEC, THINK),
        client(20020020020020, 7, 10, SEC, THINK).width(2),
    ];
    Scenario::new("DifferentWidths", k8s_cfg(64, 13, 7, 6), clients)
        .eval(20, true, 0.155)
        .run();
}

#[test]
fn windup_is_bounded_between_ten_and_twenty_six_percent() {
    // TestWindup: flow 1 runs one thread in the first half and two in the
    // second; its queue falls behind in virtual time in the first half and
    // catches up in the second. Kubernetes bounds the second-half error
    // from both sides: within 26% ("upper-bound") and not within 10%
    // ("lower-bound").
    for (name, margin, fair) in [("upper-bound", 0.26, true), ("lower-bound", 0.1, false)] {
        let clients = vec![
            client(1001001001, 2, 40, SEC, -1),
            client(2002002002, 2, 40, SEC, -1).split(20 * SEC),
        ];
        let scenario = Scenario::new(format!("Windup/{name}"), k8s_cfg(9, 6, 1, 3), clients);
        Scenario {
            eval: 40 * SEC,
            expect: vec![(true, 0.01), (fair, margin)],
            ..scenario
        }
        .run();
    }
}

#[test]
fn different_flows_without_queuing() {
    // TestDifferentFlowsWithoutQueuing: a level that does not queue rejects
    // what does not fit (reason concurrency-limit), and a rejected thread
    // stops, so neither flow gets its fair share.
    let clients = vec![
        client(1001001001, 6, 10, SEC, 57 * MS as i64),
        client(2002002002, 4, 15, SEC, 750 * MS as i64),
    ];
    Scenario {
        all_served: false,
        reject_reason: Some(RejectReason::ConcurrencyLimit),
        ..Scenario::new("DifferentFlowsWithoutQueuing", k8s_cfg(0, 0, 0, 4), clients)
    }
    .eval(13, false, 0.20)
    .run();
}

// ----- Kubernetes' tests of single mechanisms ---------------------------------------

#[test]
fn a_cancelled_waiting_request_never_executes() {
    // TestContextCancel: at limit 1, a second request waits behind the
    // first; its caller gives up after exactly one second; it never
    // executes, is counted as cancelled, and once the first finishes the
    // level is idle.
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(k8s_cfg(11, 11, 1, 1), clock).expect("valid");
    let start = |flow| {
        qs.start(&Request {
            flow_hash: flow,
            estimate: WorkEstimate::new(1, 0, Duration::ZERO),
            deadline: None,
        })
    };
    let Admission::Execute(first) = start(1) else {
        panic!("the first request must execute");
    };
    let Admission::Queued(mut second) = start(2) else {
        panic!("the second request must wait");
    };
    let before = qs.clock().now();
    manual.advance(Duration::from_secs(1));
    assert!(second.poll().is_none(), "still waiting after 1 s");
    assert_eq!(qs.stats().requests_waiting, 1);
    assert!(second.cancel(), "cancelled while waiting");
    assert_eq!(
        qs.clock().now().saturating_since(before),
        Duration::from_secs(1)
    );
    let st = qs.stats();
    assert_eq!((st.requests_waiting, st.requests_executing), (0, 1));
    assert_eq!(st.rejected[RejectReason::Cancelled as usize], 1);
    first.finish();
    let st = qs.stats();
    assert_eq!(
        (st.seats_in_use, st.requests_executing, st.requests_waiting),
        (0, 0, 0)
    );
    assert_eq!(
        st.dispatched_from_queues, 0,
        "the cancelled request never ran"
    );
}

#[test]
fn a_panic_while_executing_still_finishes_the_request() {
    // TestTotalRequestsExecutingWithPanic: a level without queues, limit 1;
    // the request's work panics; the request no longer counts as executing.
    let (clock, _manual) = Clock::manual();
    let qs = QueueSet::new(k8s_cfg(0, 0, 0, 1), clock).expect("valid");
    assert_eq!(qs.stats().requests_executing, 0);
    let Admission::Execute(guard) = qs.start(&Request {
        flow_hash: 1,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    }) else {
        panic!("the request must execute");
    };
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _guard = guard;
        assert_eq!(qs.stats().requests_executing, 1);
        panic!("the server's handler panicked");
    }));
    let message = caught.expect_err("the work panicked");
    assert_eq!(
        message.downcast_ref::<&str>(),
        Some(&"the server's handler panicked")
    );
    let st = qs.stats();
    assert_eq!((st.requests_executing, st.seats_in_use), (0, 0));
}

#[test]
fn a_request_holds_its_wider_phase_and_is_charged_both_phases() {
    // TestRequestSeats: a request holds max(initial, final) seats.
    for (initial, final_seats) in [(3, 3), (1, 3), (3, 1)] {
        let e = WorkEstimate::new(initial, final_seats, Duration::ZERO);
        assert_eq!(e.max_seats(), 3, "{initial} then {final_seats} seats");
    }
    // TestRequestWork: 3 seats for G = 2 s, then 50 seats for 70 s of
    // additional latency: 3 · 2 + 50 · 70 = 3506 seat-seconds.
    let work = total_work(3, 50, Duration::from_secs(70), Duration::from_secs(2));
    assert_eq!(to_seat_seconds(work), 3506.0);
}

#[test]
fn the_head_with_the_least_virtual_finish_goes_only_when_it_fits() {
    // TestFindDispatchQueueLocked's wide cases, through the public API:
    // limit 50; queue B's 25-seat head has the least virtual finish, queue
    // A's 10-seat head a later one. With 24 seats free nothing is
    // dispatched (A's head would fit, but it is not next); once 25 are
    // free, B's head goes; A's head waits for its own seats.
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(k8s_cfg(4, 10, 1, 50), clock).expect("valid");
    let flows = disjoint_flows(4, 1, 3);
    let (fa, fb, fc) = (flows[0], flows[1], flows[2]);
    let start = |flow, estimate| {
        qs.start(&Request {
            flow_hash: flow,
            estimate,
            deadline: None,
        })
    };
    let exec = |flow, estimate| match start(flow, estimate) {
        Admission::Execute(g) => g,
        other => panic!("expected to execute: {other:?}"),
    };
    let seats = |n| WorkEstimate::new(n, 0, Duration::ZERO);
    // A's first request is charged a final seat for 1 s, which puts A's
    // queue about 1 s of virtual time ahead; its seat lingers for that 1 s.
    let a0 = exec(fa, WorkEstimate::new(1, 1, Duration::from_secs(1)));
    let c1 = exec(fc, seats(25));
    let c2 = exec(fc, seats(24));
    assert_eq!(qs.stats().seats_in_use, 50);
    let Admission::Queued(mut a1) = start(fa, seats(10)) else {
        panic!("the level is full: A's request waits");
    };
    let Admission::Queued(mut b1) = start(fb, seats(25)) else {
        panic!("the level is full: B's request waits");
    };
    manual.advance(Duration::from_millis(5));
    drop(a0); // executed 5 ms; its final seat lingers until 1.005 s
    drop(c2);
    assert_eq!(qs.stats().seats_in_use, 26, "24 seats free");
    assert!(b1.poll().is_none(), "B's head needs 25");
    assert!(a1.poll().is_none(), "A's head fits but is not next");
    manual.advance(Duration::from_secs(1));
    let b = b1
        .poll()
        .expect("25 seats free: B's head goes")
        .expect("not refused");
    assert!(a1.poll().is_none(), "50 seats in use again");
    drop(c1);
    let a = a1
        .poll()
        .expect("A's head goes once 10 are free")
        .expect("not refused");
    assert_eq!(qs.stats().seats_in_use, 35);
    drop((a, b));
}
