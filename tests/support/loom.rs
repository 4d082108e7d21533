//! What the loom models (tests/loom_*.rs) set up alike: a small level on
//! the manual clock, requests of a flow, and the check that a level is
//! idle at the end of a model. Included with `#[path]`.
#![allow(dead_code)] // not every model file uses every helper

use apf::clock::{Clock, ManualClock};
use apf::queueset::{QueueSet, QueueSetConfig, Request};
use apf::work_estimate::WorkEstimate;
use loom::sync::Arc;
use std::time::Duration;

/// A level named "loom" of `limit` seats and `queues` queues (hand size 1,
/// or 0 for a level that does not queue), at most 4 requests a queue;
/// Kubernetes' defaults otherwise (struct update changes the rest).
pub fn config(limit: u32, queues: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "loom".into(),
        concurrency_limit: limit,
        queues,
        hand_size: queues.min(1),
        queue_length_limit: 4,
        ..QueueSetConfig::default()
    }
}

/// A level of `cfg` on a manual clock, which the model may move.
pub fn level(cfg: QueueSetConfig) -> (Arc<QueueSet>, ManualClock) {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg, clock).expect("valid config");
    (Arc::new(qs), manual)
}

/// A request of `flow` for `seats` seats and no additional latency.
pub fn request(flow: u64, seats: u32) -> Request {
    lingering(flow, seats, Duration::ZERO)
}

/// A request of `flow` whose `seats` seats stay held for `latency` after
/// it finishes.
pub fn lingering(flow: u64, seats: u32, latency: Duration) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(seats, 0, latency),
        deadline: None,
    }
}

/// Every seat is back and nothing executes or waits. Reading the stats
/// replays the event rings and, in debug builds (loom runs with debug
/// assertions), runs the core's invariant checks.
pub fn assert_idle(qs: &QueueSet) {
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "every seat given back");
    assert_eq!(stats.requests_executing, 0, "every finish replayed");
    assert_eq!(stats.requests_waiting, 0);
}
