//! `Core::check_invariants` catches a stale ready-index key (issue 10).

use super::config::QueueSetConfig;
use super::core::Core;
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
