//! Issue 22: 10,000 concurrently active flows in one level under per-flow
//! order, with the memory docs/flow-fairness.md states ("Memory, stated
//! per active flow"): capacities, not timings. The core is driven directly
//! (enqueue, dispatch, finish), as the slow path does, so that the test
//! stays O(flows × log flows) in a debug build (the queueset's debug
//! invariant checks after every operation are O(waiting requests)).

use super::admission::AdmissionWord;
use super::config::{Fairness, QueueSetConfig};
use super::core::Core;
use super::wait::{SlotState, WaitSlot};
use super::RejectReason;
use crate::clock::Instant;
use crate::sync::Arc;
use crate::work_estimate::WorkEstimate;
use std::time::Duration;

const FLOWS: u64 = 10_000;
const LIMIT: u32 = 100;

/// Bytes per active flow the documentation states: its map entry at the
/// map's load, its ready-index and entry-index keys and its one listed
/// waiting request (B-tree node overhead not counted: ~1.1× the keys).
const BYTES_PER_FLOW: usize = 512;

fn hash(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

fn run(fairness: Fairness) {
    let cfg = QueueSetConfig {
        name: "many-flows".into(),
        concurrency_limit: LIMIT,
        queues: 128,
        hand_size: 8,
        queue_length_limit: 200,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_secs(600),
        fairness,
    };
    let dealer = cfg.validate().expect("valid").expect("queues");
    let mut core = Core::new(cfg, Some(dealer.clone()), Instant::ZERO);
    let word = AdmissionWord::new(LIMIT, 1);
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    let mut slots = Vec::new();
    let mut seq = 0;
    let mut t = 0;
    // LIMIT flows execute, then FLOWS more wait, one request each.
    for i in 0..u64::from(LIMIT) + FLOWS {
        t += 1_000;
        let at = Instant::from_nanos(t);
        core.sync(at);
        let h = hash(i);
        let q = core.flow_queue(&dealer, h);
        seq += 1;
        let slot = Arc::new(WaitSlot::new(seq, q as u32, Some(h), 0));
        core.enqueue(q, h, slot.clone(), one, at, Instant::FAR_FUTURE);
        core.dispatch_as_much_as_possible(at, &word);
        slots.push(slot);
    }
    let active = (u64::from(LIMIT) + FLOWS) as usize;
    let m = core.order.memory();
    assert_eq!(m.flows, active, "every active flow has a state");
    assert_eq!(
        m.ready, FLOWS as usize,
        "every waiting flow is indexed once"
    );
    assert_eq!(m.listed, FLOWS as usize);
    assert_eq!(
        m.list_capacity, FLOWS as usize,
        "one waiting request, room for one"
    );
    assert!(
        m.map_capacity <= 2 * active,
        "map capacity {}",
        m.map_capacity
    );
    assert_eq!(
        m.entry_index, FLOWS as usize,
        "every waiting flow in the entry rule's index"
    );
    let bytes = m.map_capacity * (m.entry_bytes + 1)
        + m.ready * m.ready_bytes
        + m.entry_index * 32
        + m.list_capacity * m.waiter_bytes;
    eprintln!(
        "{fairness:?}: {active} active flows: {m:?}; {} bytes per active flow (+ the B-tree's nodes)",
        bytes / active
    );
    assert!(
        bytes / active <= BYTES_PER_FLOW,
        "{} bytes per flow",
        bytes / active
    );
    if let Some((nodes, keys)) = core.demand_index_memory() {
        // At most `b` nodes per active flow (b = 7 bits at limit 100), and
        // one key per slot.
        let b = 7;
        assert!(nodes <= 1 + b * active, "demand index nodes {nodes}");
        assert!(keys <= 2 * active, "demand index keys {keys}");
        eprintln!("{fairness:?}: demand index {nodes} nodes, room for {keys} keys");
    }
    core.check_invariants();
    // The waiters give up, then the executing requests finish.
    let mut executing = Vec::new();
    for slot in &slots {
        t += 1_000;
        let at = Instant::from_nanos(t);
        core.sync(at);
        match slot.try_take(None) {
            Some(SlotState::Dispatched(held)) => executing.push(held),
            None => assert!(core.remove_waiting(slot, RejectReason::Cancelled, at)),
            Some(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(executing.len(), LIMIT as usize);
    for held in executing {
        t += 1_000;
        let at = Instant::from_nanos(t);
        core.sync(at);
        word.give_back(core.finish(&held, at));
        core.dispatch_as_much_as_possible(at, &word);
    }
    core.check_invariants();
    let m = core.order.memory();
    assert_eq!(
        (m.flows, m.ready, m.entry_index, m.listed),
        (0, 0, 0, 0),
        "no state outlives its flow"
    );
    assert!(
        m.map_capacity <= 128,
        "map capacity {} after the burst",
        m.map_capacity
    );
    assert!(
        m.free_capacity <= 128,
        "free slots {} after the burst",
        m.free_capacity
    );
    if let Some((nodes, keys)) = core.demand_index_memory() {
        assert_eq!(nodes, 1, "only the demand index's root is left");
        assert!(keys <= 128, "room for {keys} keys after the burst");
    }
}

#[test]
fn ten_thousand_active_flows_under_flow() {
    run(Fairness::Flow);
}

#[test]
fn ten_thousand_active_flows_under_flow_maxmin() {
    run(Fairness::FlowMaxMin);
}
