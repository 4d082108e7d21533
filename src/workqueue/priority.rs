//! controller-runtime's priority queue, on the shared workqueue core.

use super::core::{Mode, Shared};
use super::limiter::{ItemExponentialFailure, RateLimiter};
use super::metrics::WorkqueueMetrics;
use super::queue::Workqueue;
use super::strategy::Priority;
use super::{GetTimeoutError, Item, QueueConfig, TryGetError, WorkqueueError};
use crate::clock::duration_nanos;
use std::fmt;
use std::time::Duration;

/// Options of [`PriorityQueue::add_with_opts`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AddOpts {
    /// Hand the item out no earlier than this from now.
    pub after: Duration,
    /// Also ask the rate limiter; the shorter of its delay and a non-zero
    /// `after` applies.
    pub rate_limited: bool,
    /// Higher is handed out first.
    pub priority: i32,
}

/// controller-runtime's priority queue, on the shared workqueue core.
///
/// Semantics (controller-runtime's `priorityqueue`, with the fixes it
/// needed):
/// - Items are handed out highest priority first, FIFO within a priority.
/// - Of all adds of an item that is not yet handed out, the highest priority
///   and the shortest delay win; a ready add ends a wait. Raising a queued
///   item's priority puts it at the back of its new priority.
/// - An item waiting for its ready time is never handed out, and never
///   counted in `len` or the depth metric, before that time, whatever its
///   priority; once ready it goes to the back of its priority, ordered by
///   when it became ready.
///
/// Differences from controller-runtime, for consistency with the rest of the
/// family:
/// - An item added while it is processing is queued when `done` is called
///   (client-go's rule), at the back of its priority: it becomes available
///   then, as a waiting item does when its time comes. controller-runtime
///   keeps such an item in place, skips it until `done`, and counts it in
///   `Len`.
/// - After shutdown, `get` still hands out what is queued and then returns
///   `None` (controller-runtime returns "shut down" at once), and
///   `shut_down_with_drain` really drains.
///
/// Items are never handed out by a dispatcher thread: a ready item goes to a
/// parked worker directly, under the same lock that orders priorities, so no
/// race can hand out a lower priority while a higher one is queued.
pub struct PriorityQueue<T: Item> {
    queue: Workqueue<T, Priority>,
    limiter: Box<dyn RateLimiter<T>>,
}

impl<T: Item> PriorityQueue<T> {
    /// A priority queue whose rate limiter is controller-runtime's default:
    /// per-item exponential backoff from 5 ms to 1000 s.
    pub fn with_config(config: QueueConfig) -> Self {
        let limiter = ItemExponentialFailure::new(
            &config.clock,
            Duration::from_millis(5),
            Duration::from_secs(1000),
        );
        Self::with_rate_limiter(config, limiter)
    }

    /// A priority queue with its own rate limiter.
    pub fn with_rate_limiter(config: QueueConfig, limiter: impl RateLimiter<T> + 'static) -> Self {
        let queue = Workqueue::build(config, Priority::default(), Mode::Merged);
        Shared::install_timer(queue.shared());
        PriorityQueue {
            queue,
            limiter: Box::new(limiter),
        }
    }

    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn queue(&self) -> &Workqueue<T, Priority> {
        &self.queue
    }

    /// Workers parked in `get` (the C ABI's test aid).
    // For the C API crate's test-only exports (capi/, feature test-hooks).
    #[cfg(all(not(loom), any(test, feature = "test-hooks")))]
    #[doc(hidden)]
    pub fn parked(&self) -> usize {
        self.queue.parked()
    }

    /// Add at priority 0, now.
    pub fn add(&self, item: T) {
        self.add_with_opts(item, AddOpts::default());
    }

    /// Add at priority 0 after `after`.
    pub fn add_after(&self, item: T, after: Duration) {
        self.add_with_opts(
            item,
            AddOpts {
                after,
                ..AddOpts::default()
            },
        );
    }

    /// Add at priority 0 after the rate limiter's delay.
    pub fn add_rate_limited(&self, item: T) {
        self.add_with_opts(
            item,
            AddOpts {
                rate_limited: true,
                ..AddOpts::default()
            },
        );
    }

    /// Add with options. A delayed add counts in `workqueue_retries_total`.
    pub fn add_with_opts(&self, item: T, opts: AddOpts) {
        if self.queue.shutting_down() {
            return;
        }
        let mut after = opts.after;
        if opts.rate_limited {
            let limited = self.limiter.when(&item);
            if after.is_zero() || limited < after {
                after = limited;
            }
        }
        let delay = duration_nanos(after);
        self.queue
            .shared()
            .add_after(item, delay, opts.priority, delay > 0);
    }

    /// The next item, blocking while none is ready; `None` once shutting
    /// down and empty.
    pub fn get(&self) -> Option<T> {
        self.queue.get()
    }

    /// [`PriorityQueue::get`] with the item's priority.
    pub fn get_with_priority(&self) -> Option<(T, i32)> {
        self.queue.get_with_hint()
    }

    /// [`PriorityQueue::get_with_priority`], waiting at most `timeout` of
    /// real time (see [`Workqueue::get_timeout`]).
    pub fn get_with_priority_timeout(
        &self,
        timeout: Duration,
    ) -> Result<(T, i32), GetTimeoutError> {
        self.queue.get_with_hint_timeout(timeout)
    }

    /// The next ready item, without blocking.
    pub fn try_get_with_priority(&self) -> Result<(T, i32), TryGetError> {
        self.queue.try_get_with_hint()
    }

    /// Finish processing `item`; if it was added again meanwhile, it is
    /// queued again now. Fails if `item` is not being processed.
    pub fn done(&self, item: &T) -> Result<(), WorkqueueError> {
        self.queue.done(item)
    }

    /// How many items are ready (not waiting, not processing).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no item is ready.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// How many ready items each priority holds, highest first.
    pub fn depth_by_priority(&self) -> Vec<(i32, usize)> {
        self.queue.inspect_strategy(Priority::depth_by_priority)
    }

    /// How many items wait for their ready time.
    pub fn waiting_len(&self) -> usize {
        self.queue.shared().waiting_len()
    }

    /// See [`Workqueue::shut_down`].
    pub fn shut_down(&self) {
        self.queue.shut_down();
    }

    /// See [`Workqueue::shut_down_with_drain`].
    pub fn shut_down_with_drain(&self) {
        self.queue.shut_down_with_drain();
    }

    /// Whether a shutdown was requested.
    pub fn shutting_down(&self) -> bool {
        self.queue.shutting_down()
    }

    /// Stop tracking `item` in the rate limiter.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times the rate limiter delayed `item`.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// A snapshot of the queue's metrics.
    pub fn metrics(&self) -> WorkqueueMetrics {
        self.queue.metrics()
    }
}

impl<T: Item> fmt::Debug for PriorityQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}
