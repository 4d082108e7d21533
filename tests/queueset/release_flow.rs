#![cfg(not(loom))]
//! Releasing seats early under the flow fairness policy (issues 11 parts 1
//! and 3 together): a request the hot path admitted (its queue chosen at
//! replay, found in the flow table) releases into its flow's queue, the
//! released seats go back to the level at once and are never held for the
//! flow, and the anticipation of its finish holds only the seats it still
//! holds. All on the manual clock.

use apf::clock::{Clock, ManualClock};
use apf::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

const G: Duration = Duration::from_millis(3);

fn flow_level(limit: u32) -> (QueueSet, ManualClock) {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "release-flow".into(),
        concurrency_limit: limit,
        queues: 16,
        hand_size: 2,
        queue_length_limit: 8,
        service_time_guess: G,
        wait_limit: Duration::from_secs(60),
        fairness: Fairness::Flow,
    };
    (QueueSet::new(cfg, clock).expect("valid config"), manual)
}

fn req(flow: u64, seats: u32) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(seats, 0, Duration::ZERO),
        deadline: None,
    }
}

fn execute(qs: &QueueSet, flow: u64, seats: u32) -> Guard<'_> {
    match qs.start(&req(flow, seats)) {
        Admission::Execute(g) => g,
        other => panic!("expected to execute, got {other:?}"),
    }
}

fn queued(qs: &QueueSet, flow: u64, seats: u32) -> Ticket<'_> {
    match qs.start(&req(flow, seats)) {
        Admission::Queued(t) => t,
        other => panic!("expected to wait, got {other:?}"),
    }
}

/// Seats in use per queue that has any, from the dump.
fn queue_seats(qs: &QueueSet) -> Vec<(u32, u32)> {
    qs.dump()
        .queues
        .iter()
        .filter(|q| q.seats_in_use > 0)
        .map(|q| (q.index, q.seats_in_use))
        .collect()
}

#[test]
fn a_hot_path_flow_request_releases_into_its_flows_queue() {
    let (qs, _manual) = flow_level(4);
    let mut a = execute(&qs, 1, 4);
    assert_eq!(
        a.queue(),
        None,
        "admitted lock-free: queue chosen at replay"
    );
    let mut waiter = queued(&qs, 2, 2);
    // Before the fix the release charged queue FLOW_QUEUE (a placeholder,
    // not a queue) instead of the one the flow table holds for flow 1.
    a.release_seats(3).expect("holds 4");
    let b = waiter.poll().expect("dispatched by the release").unwrap();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.held_seats), (3, 0));
    let mut per_queue = queue_seats(&qs);
    per_queue.sort_by_key(|&(_, seats)| seats);
    assert_eq!(
        per_queue.iter().map(|&(_, s)| s).collect::<Vec<_>>(),
        [1, 2],
        "a's queue keeps 1, b's holds 2: {per_queue:?}"
    );
    a.finish();
    b.finish();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.requests_executing), (0, 0));
    assert!(queue_seats(&qs).is_empty());
}

#[test]
fn anticipation_holds_only_the_seats_still_held() {
    let (qs, manual) = flow_level(4);
    let mut a = execute(&qs, 1, 2);
    let b = execute(&qs, 2, 2);
    let mut c = queued(&qs, 3, 3);
    a.release_seats(1).expect("holds 2");
    let stats = qs.stats();
    assert_eq!(
        (stats.seats_in_use, stats.held_seats),
        (3, 0),
        "a released seat is given back, never held for its flow"
    );
    assert!(c.poll().is_none(), "c needs 3 seats, 1 is free");
    // a ends while c waits and a's queue is below its share: its flow
    // keeps the one seat a still held, not the two it was admitted with.
    a.finish();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.held_seats), (3, 1));
    assert!(c.poll().is_none());
    // The hold ends after G: c still needs 3 with 2 free.
    manual.advance(G);
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.held_seats), (2, 0));
    // b's flow holds b's seats in turn, then c runs.
    b.finish();
    assert_eq!(qs.stats().held_seats, 2);
    manual.advance(G);
    let c = c.poll().expect("dispatched after b's hold").unwrap();
    assert_eq!(qs.stats().seats_in_use, 3);
    c.finish();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.held_seats), (0, 0));
}

#[test]
fn a_flow_request_that_released_everything_leaves_nothing_held() {
    let (qs, manual) = flow_level(4);
    let mut a = execute(&qs, 1, 2);
    let b = execute(&qs, 2, 2);
    let mut c = queued(&qs, 3, 3);
    a.release_all_seats().expect("holds 2");
    assert!(c.poll().is_none(), "c needs 3 seats, 2 are free");
    a.finish();
    let stats = qs.stats();
    assert_eq!(
        (
            stats.seats_in_use,
            stats.held_seats,
            stats.requests_executing
        ),
        (2, 0, 1)
    );
    b.finish();
    assert_eq!(qs.stats().held_seats, 2, "b's flow holds b's seats");
    manual.advance(G);
    let c = c.poll().expect("dispatched after b's hold").unwrap();
    c.finish();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.held_seats), (0, 0));
    assert!(queue_seats(&qs).is_empty());
}

#[test]
fn a_flows_next_request_claims_a_real_hold_not_an_empty_one() {
    let (qs, manual) = flow_level(4);
    let mut a1 = execute(&qs, 1, 1);
    let a2 = execute(&qs, 1, 1);
    let _b = execute(&qs, 2, 2);
    let _c = queued(&qs, 3, 3);
    a1.release_all_seats().expect("holds 1");
    // a1 holds nothing at its finish: nothing is held for flow 1 (before
    // the fix an empty hold was, and flow 1's next request claimed it
    // instead of a2's seat).
    a1.finish();
    assert_eq!(qs.stats().held_seats, 0);
    manual.advance(G / 3);
    a2.finish();
    assert_eq!(qs.stats().held_seats, 1, "a2's seat, held for flow 1");
    let _a3 = qs.start(&req(1, 1));
    assert_eq!(qs.stats().held_seats, 0, "flow 1's next request claimed it");
}
