//! `Core::check_invariants` catches a stale ready-index key (issue 10) and
//! seats left on a queue by a release that reached the level after its
//! request's finish (issue 22).

use super::config::QueueSetConfig;
use super::core::{Core, FLOW_QUEUE};
use super::held::Held;
use super::shards::ANY_SHARD;
use super::wait::WaitSlot;
use crate::clock::Instant;
use crate::sync::Arc;
use crate::work_estimate::WorkEstimate;
use std::time::Duration;

fn core_with_waiter() -> Core {
    let cfg = QueueSetConfig {
        name: "invariants".into(),
        concurrency_limit: 1,
        queues: 2,
        hand_size: 1,
        ..QueueSetConfig::default()
    };
    let dealer = cfg.validate().expect("valid config");
    let mut core = Core::new(cfg, dealer, Instant::ZERO);
    let estimate = WorkEstimate::new(1, 0, Duration::ZERO);
    core.enqueue(
        0,
        7,
        Arc::new(WaitSlot::new(1, 0, None, 0)),
        estimate,
        Instant::ZERO,
        Instant::FAR_FUTURE,
    );
    core
}

#[test]
fn consistent_index_passes() {
    core_with_waiter().check_invariants();
}

/// A queue whose next-dispatch R moved without a re-key (what a late
/// replay did, issue 10's defect 2) must be caught, although the index
/// still holds one entry per non-empty queue.
#[test]
#[should_panic(expected = "ready-index key")]
fn stale_ready_key_is_caught() {
    let mut core = core_with_waiter();
    core.queues[0].next_dispatch_r += 1;
    core.check_invariants();
}

// ----- issue 22: the queues' seats against the level's -------------------

const FLOW: u64 = 7;

/// A flow-policy level of 4 seats and 2 queues in which a request of
/// [`FLOW`] holding 2 seats was admitted on the hot path at 0 (its queue
/// chosen when its shard's ledger was folded).
fn flow_core_with_request() -> (Core, WorkEstimate) {
    let cfg = QueueSetConfig {
        name: "invariants".into(),
        concurrency_limit: 4,
        queues: 2,
        hand_size: 1,
        fairness: super::Fairness::Flow,
        ..QueueSetConfig::default()
    };
    let dealer = cfg.validate().expect("valid config");
    let mut core = Core::new(cfg, dealer, Instant::ZERO);
    let estimate = WorkEstimate::new(2, 0, Duration::ZERO);
    let entry = super::core::Entry {
        queue: FLOW_QUEUE,
        flow_hash: FLOW,
        tag: 0,
        estimate,
        start: Instant::ZERO,
    };
    let mut folded = vec![(Instant::ZERO, 0, 0, entry)];
    core.merge_ledgers(Instant::ZERO, &mut folded, &mut Default::default());
    core.check_invariants();
    (core, estimate)
}

/// [`FLOW`]'s request as its execution holds it (admitted lock-free).
fn flow_held(estimate: WorkEstimate) -> Held {
    Held::new(
        ANY_SHARD,
        None,
        FLOW_QUEUE,
        Some(FLOW),
        0,
        estimate,
        Instant::ZERO,
    )
}

/// The same after it released one seat.
fn released_one(estimate: WorkEstimate) -> Held {
    let mut held = flow_held(estimate);
    held.released = 1;
    held
}

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// A release of one seat, then the finish of the rest: every seat leaves
/// its queue.
#[test]
fn release_then_finish_passes() {
    let (mut core, estimate) = flow_core_with_request();
    core.release_early(&flow_held(estimate), 1, at(1));
    core.check_invariants();
    core.finish(&released_one(estimate), at(2));
    core.check_invariants();
    assert!(core.queues.iter().all(|q| q.seats_in_use == 0));
}

/// The state issue 22's race left: the finish (of the seat still held)
/// accounted first and took the flow out of the flow table, then the
/// release found no queue and lowered only the level's seats (as the
/// unfixed `release_early` did). The queue keeps a seat the level no
/// longer counts: caught.
#[test]
#[should_panic(expected = "within the level's")]
fn a_release_after_the_finish_is_caught() {
    let (mut core, estimate) = flow_core_with_request();
    finish_then_release_lost(&mut core, estimate);
    core.check_invariants();
}

/// The same, while a request of no queue holds a seat (the level stopped
/// queuing and started again): the level's count covers the phantom seat,
/// but the queue holds it with no request executing there: caught.
#[test]
#[should_panic(expected = "no executing request are lingering seats")]
fn a_phantom_seat_is_caught_beside_unqueued_seats() {
    let (mut core, estimate) = flow_core_with_request();
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    core.start_at_once(super::core::NO_QUEUE, 0, one, Instant::ZERO);
    core.check_invariants();
    finish_then_release_lost(&mut core, estimate);
    core.check_invariants();
}

/// The finish of the seat still held, then the release of the other seat
/// as the unfixed code applied it once the flow had left the table.
fn finish_then_release_lost(core: &mut Core, estimate: WorkEstimate) {
    core.finish(&released_one(estimate), at(2));
    core.seats.in_use -= 1;
    core.tallies.get(0).release(1);
}

/// The release itself, reaching the core after the finish, now reports
/// the missing flow (debug builds).
#[test]
#[should_panic(expected = "in the flow table")]
fn a_release_of_a_flow_gone_from_the_table_is_reported() {
    let (mut core, estimate) = flow_core_with_request();
    core.finish(&released_one(estimate), at(2));
    core.release_early(&flow_held(estimate), 1, at(3));
}

/// A hot start that read the flow policy and slipped past a switch to
/// Kubernetes' policy is folded by a later merge, under Kubernetes'
/// policy: it still enters its flow's state, which its finish leaves (the
/// shuttle history `mixed_paths_keep_invariants_under_flow` found the
/// finish with no state: "ended without a state", debug builds).
#[test]
fn a_flow_request_folded_after_a_switch_to_kubernetes_finishes_cleanly() {
    let cfg = QueueSetConfig {
        name: "invariants".into(),
        concurrency_limit: 4,
        queues: 2,
        hand_size: 1,
        fairness: super::Fairness::Kubernetes,
        ..QueueSetConfig::default()
    };
    let dealer = cfg.validate().expect("valid config");
    let mut core = Core::new(cfg, dealer, Instant::ZERO);
    let estimate = WorkEstimate::new(2, 0, Duration::ZERO);
    let entry = super::core::Entry {
        queue: FLOW_QUEUE,
        flow_hash: FLOW,
        tag: 0,
        estimate,
        start: Instant::ZERO,
    };
    let mut folded = vec![(Instant::ZERO, 0, 0, entry)];
    core.merge_ledgers(at(1), &mut folded, &mut Default::default());
    core.check_invariants();
    core.finish(&flow_held(estimate), at(2));
    core.check_invariants();
    assert!(core.queues.iter().all(|q| q.seats_in_use == 0));
    assert_eq!(core.seats.in_use, 0);
}
