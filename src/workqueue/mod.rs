//! The client-go workqueue family: a work queue with client-go's dirty and
//! processing rules, pluggable ordering strategies (FIFO, two lanes,
//! priorities), a delaying queue, rate limiters, a rate-limiting queue and
//! controller-runtime's priority queue.
//!
//! # The rules every queue here keeps
//!
//! An item is *dirty* once added and until a worker takes it; it is
//! *processing* from [`Workqueue::get`] until [`Workqueue::done`].
//! - Adding an item that is dirty and not processing changes nothing but its
//!   place in the strategy ([`QueueStrategy::touch`]): it is queued once.
//! - Adding an item that is processing marks it dirty without queueing it;
//!   `done` queues it again. So no item is ever processed by two workers at
//!   once, and no add made during processing is lost.
//! - After shutdown, adds are ignored; `get` still hands out what is queued
//!   and returns `None` once the queue is empty.
//!
//! # Design
//!
//! The item table (every tracked item's phase, its hash-index bucket and
//! per-item metrics) is sharded by hash, each shard its own lock; a second,
//! queue-wide lock guards the strategy, the delay heap and shutdown. A
//! FIFO queue's `get` takes no lock at all (a lock-free list of ready
//! items, and one of parked workers that a pusher hands the item to), and
//! neither do its `add` and `done` when they find the item's entry (a
//! claim of the entry's busy bit, found through an index probed without
//! the lock); an add of a new item takes its shard's lock. Other
//! strategies take the queue's lock, then the item's shard lock (the
//! `core` and `shard` modules' protocols). Every step is short:
//! a hash lookup and an O(1) strategy operation (O(log p) for p
//! distinct priorities, O(log w) for w waiting items), plus the clone of the
//! item `get` returns. A done item's entry is kept until it is added again
//! or its shard sweeps it (at most 64 per shard), so that the common retry,
//! get, done, add back, finds it instead of inserting it again. Growth is
//! amortised: the slab and per-slot arrays grow
//! in small steps, then a chunk at a time, the hash index rehashes (see
//! [`QueueConfig::capacity`], which also sets the number of shards).
//! Nothing waits with a lock held: a worker that finds the queue empty parks
//! on a private slot and the next item that becomes ready is handed straight
//! to it, so a wake-up delivers exactly one item, the woken worker never
//! competes for a lock again, and idle workers cost nothing. Items are stored
//! once, in their shard's slab;
//! the hash index and the strategies hold 4-byte slot numbers (see
//! [`QueueStrategy`]). Delays run on one [`Timer`](crate::clock::Timer) of the
//! queue's [`Clock`], so the manual clock drives them deterministically.
//!
//! Per queued item the queue spends, beyond the item itself, a 4-byte
//! hash-index bucket (4/3 to 8/3 of them per item), a 4-byte hash and a
//! 4-byte state word beside the item in its entry, the strategy's link (12 bytes
//! for two lanes and priorities; for FIFO the ready list's ticket while the
//! item is queued: its slot, a clone of the item and a state word, 24 bytes
//! for a `u64` item) and, with timed metrics, an 8-byte
//! add time; `tests/workqueue_memory.rs` measures it with a counting
//! allocator.
//!
//! # Example
//!
//! ```
//! use apf::clock::Clock;
//! use apf::workqueue::{QueueConfig, DelayingQueue, Lane, TwoLane, Workqueue};
//! use std::time::Duration;
//!
//! let (clock, manual) = Clock::manual();
//! let q = Workqueue::with_config(QueueConfig::with_clock(clock.clone()));
//! q.add("pod/a");
//! q.add("pod/a"); // still queued once
//! let key = q.get().unwrap();
//! q.add("pod/a"); // processing: queued again by `done`
//! q.done(&key).unwrap();
//! assert_eq!(q.len(), 1);
//!
//! let lanes = Workqueue::with_strategy(QueueConfig::with_clock(clock.clone()), TwoLane::default());
//! lanes.add_with("resync", Lane::Slow);
//! lanes.add_with("event", Lane::Fast);
//! assert_eq!(lanes.try_get(), Ok("event"));
//!
//! let delayed = DelayingQueue::with_config(QueueConfig::with_clock(clock));
//! delayed.add_after("retry", Duration::from_secs(5));
//! manual.advance(Duration::from_secs(5));
//! assert_eq!(delayed.try_get(), Ok("retry"));
//! ```
//!
//! # Metrics
//!
//! [`Workqueue::metrics`] returns a [`WorkqueueMetrics`] snapshot whose
//! fields are client-go's workqueue metrics; [`metric_names`] lists their
//! Prometheus names.

mod chunk;
mod core;
mod heap;
mod index;
mod limiter;
mod metrics;
mod parking;
mod priority;
mod queue;
mod shard;
mod slots;
mod strategy;
mod table;
mod waiter;

#[cfg(all(not(loom), any(test, feature = "testing")))]
#[doc(hidden)]
pub mod differential;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, shuttle))]
mod shuttle_tests;
// Not under shuttle either: these tests join real threads
// (`JoinHandle::is_finished`), which shuttle's handles lack.
#[cfg(all(test, not(loom), not(shuttle)))]
mod tests;

pub use limiter::{
    default_controller_rate_limiter, ItemExponentialFailure, ItemFastSlow, ItemTokenBucket, MaxOf,
    RateLimiter, TokenBucket, WithMaxWait, DEFAULT_STATE_CAPACITY,
};
pub use metrics::{metric_names, WorkqueueHistogram, WorkqueueMetrics, DURATION_BUCKETS_SECONDS};
pub use priority::{AddOpts, PriorityQueue};
pub use queue::{DelayingQueue, RateLimitingQueue, TwoLaneQueue, Workqueue};
pub use strategy::{Fifo, Lane, Priority, QueueStrategy, Slot, TwoLane};

use crate::clock::Clock;
use std::fmt;
use std::hash::Hash;

/// What a queue can hold: a cheap-to-clone key. `get` hands out a clone, so
/// prefer integers, `Arc<str>` or small structs over `String`.
pub trait Item: Clone + Eq + Hash + Send + Sync + 'static {}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> Item for T {}

/// How a queue is built.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// The queue's name: the `name` label of its metrics.
    pub name: String,
    /// The clock for delays and timed metrics. Queues that share a clock
    /// share its timer thread (the real clock runs one while a timer is
    /// armed).
    pub clock: Clock,
    /// Whether to record the timed metrics (queue latency, work duration,
    /// unfinished work). They cost a clock read on add, get and done; the
    /// counters (depth, adds, retries) are kept either way.
    pub timed_metrics: bool,
    /// How many items the hash index holds before it first grows. Growing
    /// rehashes a shard's items under its lock, so a queue that will hold a
    /// million items avoids a latency spike by saying so here. It also sets
    /// the number of shards: one per 1,024 items, 4 to 1,024.
    pub capacity: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig::with_clock(Clock::real())
    }
}

impl QueueConfig {
    /// An unnamed queue on `clock`, with timed metrics.
    pub fn with_clock(clock: Clock) -> Self {
        QueueConfig {
            name: String::new(),
            clock,
            timed_metrics: true,
            capacity: 0,
        }
    }

    /// The same configuration under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// Errors of the workqueue family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkqueueError {
    /// `done` was called for an item that is not being processed.
    NotProcessing,
    /// A rate was NaN, zero or negative.
    InvalidRate,
    /// A token bucket's burst was zero for a finite rate.
    InvalidBurst,
    /// An idle expiry of zero, which would forget every item at once.
    InvalidExpiry,
}

impl fmt::Display for WorkqueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkqueueError::NotProcessing => "item is not being processed",
            WorkqueueError::InvalidRate => "rate must be a positive number of events per second",
            WorkqueueError::InvalidBurst => "burst must be at least 1 for a finite rate",
            WorkqueueError::InvalidExpiry => "idle expiry must be longer than zero",
        })
    }
}

impl std::error::Error for WorkqueueError {}

/// Why [`Workqueue::try_get`] returned no item.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TryGetError {
    /// Nothing is queued now.
    Empty,
    /// Nothing is queued and the queue is shutting down: nothing ever will be.
    ShutDown,
}

impl fmt::Display for TryGetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryGetError::Empty => "queue is empty",
            TryGetError::ShutDown => "queue is shut down",
        })
    }
}

impl std::error::Error for TryGetError {}

/// Why [`Workqueue::get_timeout`] returned no item.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GetTimeoutError {
    /// Nothing became ready before the timeout.
    TimedOut,
    /// Nothing is queued and the queue is shutting down.
    ShutDown,
}

impl fmt::Display for GetTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GetTimeoutError::TimedOut => "timed out waiting for an item",
            GetTimeoutError::ShutDown => "queue is shut down",
        })
    }
}

impl std::error::Error for GetTimeoutError {}
