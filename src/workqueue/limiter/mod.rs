//! client-go's rate limiters, with bounded per-item state.

use super::Item;
use crate::clock::Clock;
use std::fmt;
use std::time::Duration;

// Defined before the child modules so that they can use it.
/// Builder methods shared by the per-item limiters.
macro_rules! bounded_state_methods {
    () => {
        /// Forget items idle for longer than `idle_expiry` (see [`RateLimiter`]); an error for zero.
        pub fn with_idle_expiry(mut self, idle_expiry: Duration) -> Result<Self, WorkqueueError> {
            self.state.set_idle_expiry(idle_expiry)?;
            Ok(self)
        }

        /// Keep at most `capacity` items per generation (see [`RateLimiter`]).
        pub fn with_capacity(mut self, capacity: NonZeroUsize) -> Self {
            self.state.set_capacity(capacity);
            self
        }

        /// How many items the limiter remembers now.
        pub fn tracked_items(&self) -> usize {
            self.state.tracked()
        }
    };
}

mod backoff;
mod bucket;
mod state;
#[cfg(all(test, not(loom)))]
mod tests;

pub use backoff::{ItemExponentialFailure, ItemFastSlow};
pub use bucket::{ItemTokenBucket, TokenBucket};

/// Decides how long an item waits before it is added again.
///
/// For [`RateLimitingQueue`](super::RateLimitingQueue) and [`PriorityQueue`](super::PriorityQueue); the implementations here are client-go's.
///
/// # Bounded per-item state
///
/// client-go's per-item limiters remember every item until it is forgotten,
/// so a controller that never calls `Forget` for some items leaks. Here the
/// per-item limiters ([`ItemExponentialFailure`], [`ItemFastSlow`],
/// [`ItemTokenBucket`]) keep their state in two generations:
/// - every *idle expiry* period the older generation is dropped and the
///   current one becomes the older; an item found in the older generation
///   moves back to the current one. So an item used within the last idle
///   expiry is always remembered, and one idle for twice that is always
///   forgotten;
/// - a generation holds at most *capacity* items ([`DEFAULT_STATE_CAPACITY`]
///   by default): a new item arriving at a full generation ages the
///   generations early.
///
/// Memory is thus bounded by twice the capacity, and by the items used in
/// the last two periods. Forgetting an item resets it: its next delay is the
/// first one again. The default idle expiry is twice the longest delay the
/// limiter gives (twice the time a token bucket takes to refill), and at
/// least a minute, so an item that keeps failing is not forgotten between
/// its retries. Both are adjustable per limiter.
pub trait RateLimiter<T>: Send + Sync {
    /// The delay for this (re)try of `item`; counts it as a failure.
    fn when(&self, item: &T) -> Duration;
    /// Stop tracking `item`.
    fn forget(&self, item: &T);
    /// How many failures `item` has had since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// Default number of items one generation of per-item state holds.
pub const DEFAULT_STATE_CAPACITY: usize = 1 << 20;

const MIN_IDLE_EXPIRY: Duration = Duration::from_secs(60);

fn default_idle_expiry(longest: Duration) -> Duration {
    longest.saturating_mul(2).max(MIN_IDLE_EXPIRY)
}

/// Asks every limiter and returns the longest delay. client-go's
/// `MaxOfRateLimiter`.
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOf<T> {
    /// The maximum of `limiters` (zero delay if empty).
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        MaxOf { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or(Duration::ZERO)
    }
    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

impl<T> fmt::Debug for MaxOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

/// Caps another limiter's delay at `max`. client-go's
/// `WithMaxWaitRateLimiter`.
pub struct WithMaxWait<L> {
    limiter: L,
    max: Duration,
}

impl<L> WithMaxWait<L> {
    /// `limiter`, never waiting longer than `max`.
    pub fn new(limiter: L, max: Duration) -> Self {
        WithMaxWait { limiter, max }
    }
}

impl<T, L: RateLimiter<T>> RateLimiter<T> for WithMaxWait<L> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max)
    }
    fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

impl<L> fmt::Debug for WithMaxWait<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithMaxWait")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// client-go's default controller limiter: the larger of a per-item
/// exponential backoff from 5 ms to 1000 s and an overall bucket of 10 qps
/// with a burst of 100.
pub fn default_controller_rate_limiter<T: Item>(clock: &Clock) -> MaxOf<T> {
    let bucket = TokenBucket::new(clock, 10.0, 100).expect("10 qps, burst 100 are valid");
    MaxOf::new(vec![
        Box::new(ItemExponentialFailure::new(
            clock,
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(bucket),
    ])
}
