//! loom models of the queueset through its own API, one module a protocol:
//! the hot path against the slow path (`paths`), the admission word on the
//! paths that once broke it (`admission`), the protocols particular to a
//! configuration (`configs`) and the sharded event rings and seat budgets
//! (`shards`). The models of one mechanism alone sit in its file
//! (`budget.rs`, `ledger.rs`). Run with `scripts/loom.sh`. Here: what the
//! models set up alike, a small level on the manual clock, requests of a
//! flow, and the check that a level is idle at the end of a model.
#![allow(dead_code)] // not every model uses every helper

mod admission;
mod configs;
mod paths;
mod shards;

use crate::clock::{Clock, ManualClock};
use crate::queueset::{QueueSet, QueueSetConfig, Request};
use crate::work_estimate::WorkEstimate;
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
