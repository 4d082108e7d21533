//! The client-go queues: [`Workqueue`], [`DelayingQueue`] and
//! [`RateLimitingQueue`], each one the previous plus one capability, as
//! client-go's interfaces embed each other (here through `Deref`).

use super::core::{Mode, Shared};
use super::limiter::RateLimiter;
use super::metrics::WorkqueueMetrics;
use super::strategy::{Fifo, QueueStrategy, TwoLane};
use super::{GetTimeoutError, Item, QueueConfig, TryGetError, WorkqueueError};
use crate::clock::{duration_nanos, Clock};
use crate::sync::Arc;
use std::fmt;
use std::ops::Deref;
use std::time::Duration;

/// client-go's work queue: dirty and processing sets over a
/// [`QueueStrategy`] (FIFO by default). See the [module docs](super) for the
/// rules. Share it between threads behind an `Arc`.
pub struct Workqueue<T: Item, S: QueueStrategy<T> = Fifo> {
    shared: Arc<Shared<T, S>>,
}

/// A work queue with a fast and a slow lane ([`TwoLane`]); add with
/// [`Workqueue::add_with`] and a [`Lane`](super::Lane).
pub type TwoLaneQueue<T> = Workqueue<T, TwoLane>;

impl<T: Item> Workqueue<T, Fifo> {
    /// A FIFO queue on the real clock.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A FIFO queue.
    pub fn with_config(config: QueueConfig) -> Self {
        Self::with_strategy(config, Fifo::default())
    }
}

impl<T: Item> Default for Workqueue<T, Fifo> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Item, S: QueueStrategy<T>> Workqueue<T, S> {
    /// A queue ordered by `strategy`.
    pub fn with_strategy(config: QueueConfig, strategy: S) -> Self {
        Self::build(config, strategy, Mode::Independent)
    }

    pub(crate) fn build(config: QueueConfig, strategy: S, mode: Mode) -> Self {
        Workqueue {
            shared: Shared::new(config, mode, strategy),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared<T, S>> {
        &self.shared
    }

    /// Items tracked at all (queued, processing or waiting).
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        self.shared.tracked()
    }

    /// Run `f` while holding the queue's lock (tests of what does not wait
    /// for it).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn while_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        self.shared.while_locked(f)
    }

    /// Workers parked in `get` (tests, and the C ABI's test aid).
    // For the C API crate's test-only exports (capi/, feature test-hooks).
    #[cfg(all(not(loom), any(test, feature = "test-hooks")))]
    #[doc(hidden)]
    pub fn parked(&self) -> usize {
        self.shared.parked()
    }

    /// Run `f` while holding the lock of `item`'s shard (tests of what does
    /// not wait for it).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn while_shard_locked<R>(&self, item: &T, f: impl FnOnce() -> R) -> R {
        self.shared.while_shard_locked(item, f)
    }

    /// The index of the shard `item` lives in (tests).
    #[cfg(test)]
    pub(crate) fn shard_index(&self, item: &T) -> usize {
        self.shared.shard_index(item)
    }

    /// Mark `item` as needing processing, with the strategy's default hint.
    /// Ignored once the queue is shutting down.
    pub fn add(&self, item: T) {
        self.shared.add(item, S::Hint::default());
    }

    /// Mark `item` as needing processing, with `hint` for the strategy (a
    /// lane, a priority). If the item is already queued, the strategy's
    /// `touch` decides what the hint changes.
    pub fn add_with(&self, item: T, hint: S::Hint) {
        self.shared.add(item, hint);
    }

    /// The next item to process, blocking while none is queued; `None` once
    /// the queue is shutting down and empty. Call [`Workqueue::done`] when
    /// finished with it.
    pub fn get(&self) -> Option<T> {
        self.shared.get().map(|(item, _)| item)
    }

    /// [`Workqueue::get`], with the hint the item was queued under.
    pub fn get_with_hint(&self) -> Option<(T, S::Hint)> {
        self.shared.get()
    }

    /// [`Workqueue::get`], waiting at most `timeout` of real time (whatever
    /// the queue's clock): a parked worker holds no lock, and one that times
    /// out leaves no trace. A zero timeout is [`Workqueue::try_get`] with
    /// `TimedOut` for `Empty`.
    pub fn get_timeout(&self, timeout: Duration) -> Result<T, GetTimeoutError> {
        self.shared.get_timeout(timeout).map(|(item, _)| item)
    }

    /// [`Workqueue::get_timeout`], with the hint the item was queued under.
    pub fn get_with_hint_timeout(
        &self,
        timeout: Duration,
    ) -> Result<(T, S::Hint), GetTimeoutError> {
        self.shared.get_timeout(timeout)
    }

    /// The next item if one is queued now, without blocking.
    pub fn try_get(&self) -> Result<T, TryGetError> {
        self.shared.try_get().map(|(item, _)| item)
    }

    /// [`Workqueue::try_get`], with the hint the item was queued under.
    pub fn try_get_with_hint(&self) -> Result<(T, S::Hint), TryGetError> {
        self.shared.try_get()
    }

    /// Finish processing `item`. If it was added again meanwhile, it is
    /// queued again now. Fails if `item` is not being processed.
    pub fn done(&self, item: &T) -> Result<(), WorkqueueError> {
        self.shared.done(item)
    }

    /// How many items are queued (not counting items being processed, even
    /// if added again, nor items waiting for a delay). For information only:
    /// it may change before the caller looks at it.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ignore further adds; workers get what is queued, then `None`.
    /// Returns at once. May be called more than once, and stops a
    /// [`Workqueue::shut_down_with_drain`] from waiting.
    pub fn shut_down(&self) {
        self.shared.shut_down(false);
    }

    /// [`Workqueue::shut_down`], then wait until no item is being processed.
    /// Workers must call `done` for this to return.
    pub fn shut_down_with_drain(&self) {
        self.shared.shut_down(true);
    }

    /// Whether a shutdown was requested.
    pub fn shutting_down(&self) -> bool {
        self.shared.shutting_down()
    }

    /// A snapshot of the queue's metrics.
    pub fn metrics(&self) -> WorkqueueMetrics {
        self.shared.metrics()
    }

    /// The queue's clock.
    pub fn clock(&self) -> &Clock {
        self.shared.clock()
    }

    /// Look at the strategy (for example a [`TwoLane`]'s lane lengths).
    pub fn inspect_strategy<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        self.shared.with_strategy(f)
    }
}

impl<T: Item, S: QueueStrategy<T>> Drop for Workqueue<T, S> {
    fn drop(&mut self) {
        self.shared.release_timer();
    }
}

impl<T: Item, S: QueueStrategy<T>> fmt::Debug for Workqueue<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workqueue")
            .field("name", &self.shared.name())
            .field("len", &self.len())
            .field("shutting_down", &self.shutting_down())
            .finish()
    }
}

/// client-go's delaying queue: a [`Workqueue`] that can add an item later.
///
/// Waiting items sit in a min-heap of ready times, driven by one timer of the
/// queue's clock (no thread of its own). A delayed add of an item that is
/// already waiting keeps the earlier ready time. Waiting is independent of
/// the dirty set: an item may be queued (or processing) and waiting at once,
/// and the end of the wait is one more add. Shutdown ends every wait.
pub struct DelayingQueue<T: Item, S: QueueStrategy<T> = Fifo> {
    queue: Workqueue<T, S>,
}

impl<T: Item> DelayingQueue<T, Fifo> {
    /// A FIFO delaying queue.
    pub fn with_config(config: QueueConfig) -> Self {
        Self::with_strategy(config, Fifo::default())
    }
}

impl<T: Item, S: QueueStrategy<T>> DelayingQueue<T, S> {
    /// A delaying queue ordered by `strategy`.
    pub fn with_strategy(config: QueueConfig, strategy: S) -> Self {
        let queue = Workqueue::with_strategy(config, strategy);
        Shared::install_timer(queue.shared());
        DelayingQueue { queue }
    }

    /// Add `item` once `delay` has passed; at once for a zero delay.
    pub fn add_after(&self, item: T, delay: Duration) {
        self.add_after_with(item, delay, S::Hint::default());
    }

    /// [`DelayingQueue::add_after`] with a hint for the strategy. If the item
    /// is already waiting, the hints merge as [`QueueStrategy::merge`] says.
    pub fn add_after_with(&self, item: T, delay: Duration, hint: S::Hint) {
        self.queue
            .shared()
            .add_after(item, duration_nanos(delay), hint, true);
    }

    /// How many items wait for their ready time.
    pub fn waiting_len(&self) -> usize {
        self.queue.shared().waiting_len()
    }
}

impl<T: Item, S: QueueStrategy<T>> Deref for DelayingQueue<T, S> {
    type Target = Workqueue<T, S>;

    fn deref(&self) -> &Workqueue<T, S> {
        &self.queue
    }
}

impl<T: Item, S: QueueStrategy<T>> fmt::Debug for DelayingQueue<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .field("waiting", &self.waiting_len())
            .finish()
    }
}

/// client-go's rate-limiting queue: a [`DelayingQueue`] whose
/// [`RateLimitingQueue::add_rate_limited`] delays each add by what the rate
/// limiter says.
pub struct RateLimitingQueue<T: Item, S: QueueStrategy<T> = Fifo> {
    queue: DelayingQueue<T, S>,
    limiter: Box<dyn RateLimiter<T>>,
}

impl<T: Item> RateLimitingQueue<T, Fifo> {
    /// A FIFO rate-limiting queue.
    pub fn with_config(config: QueueConfig, limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_strategy(config, Fifo::default(), limiter)
    }
}

impl<T: Item, S: QueueStrategy<T>> RateLimitingQueue<T, S> {
    /// A rate-limiting queue ordered by `strategy`.
    pub fn with_strategy(
        config: QueueConfig,
        strategy: S,
        limiter: impl RateLimiter<T> + 'static,
    ) -> Self {
        RateLimitingQueue {
            queue: DelayingQueue::with_strategy(config, strategy),
            limiter: Box::new(limiter),
        }
    }

    /// Add `item` after the delay the rate limiter gives it.
    pub fn add_rate_limited(&self, item: T) {
        self.add_rate_limited_with(item, S::Hint::default());
    }

    /// [`RateLimitingQueue::add_rate_limited`] with a hint for the strategy.
    pub fn add_rate_limited_with(&self, item: T, hint: S::Hint) {
        if self.queue.shutting_down() {
            return;
        }
        let delay = self.limiter.when(&item);
        self.queue.add_after_with(item, delay, hint);
    }

    /// Stop tracking `item`'s failures (after a success, or on giving up).
    /// `done` must still be called.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times the limiter has delayed `item` since it was last
    /// forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

impl<T: Item, S: QueueStrategy<T>> Deref for RateLimitingQueue<T, S> {
    type Target = DelayingQueue<T, S>;

    fn deref(&self) -> &DelayingQueue<T, S> {
        &self.queue
    }
}

impl<T: Item, S: QueueStrategy<T>> fmt::Debug for RateLimitingQueue<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}
