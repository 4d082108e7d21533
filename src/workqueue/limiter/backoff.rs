//! Per-item backoff: exponential, and fast-then-slow.

use super::state::Tracked;
use super::{default_idle_expiry, RateLimiter};
use crate::clock::{duration_nanos, Clock};
use crate::workqueue::{Item, WorkqueueError};
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// `base * 2^failures`, capped at `max`, never overflowing.
pub(super) fn exponential(base: Duration, max: Duration, failures: u32) -> Duration {
    let base = duration_nanos(base);
    if base == 0 {
        return Duration::ZERO;
    }
    let delay = 1u64
        .checked_shl(failures)
        .and_then(|factor| base.checked_mul(factor))
        .map(Duration::from_nanos);
    match delay {
        Some(d) if d <= max => d,
        _ => max,
    }
}

/// Per-item exponential backoff: the n-th failure of an item waits
/// `base * 2^(n-1)`, at most `max`. client-go's
/// `ItemExponentialFailureRateLimiter`.
pub struct ItemExponentialFailure<T> {
    base: Duration,
    max: Duration,
    pub(super) state: Tracked<T, u32>,
}

impl<T: Item> ItemExponentialFailure<T> {
    /// Backoff from `base` up to `max`.
    pub fn new(clock: &Clock, base: Duration, max: Duration) -> Self {
        ItemExponentialFailure {
            base,
            max,
            state: Tracked::new(clock, default_idle_expiry(max)),
        }
    }

    bounded_state_methods!();
}

impl<T: Item> RateLimiter<T> for ItemExponentialFailure<T> {
    fn when(&self, item: &T) -> Duration {
        let failures = self.state.with_entry(
            item,
            |_| 0u32,
            |n, _| {
                let before = *n;
                *n = n.saturating_add(1);
                before
            },
        );
        exponential(self.base, self.max, failures)
    }
    fn forget(&self, item: &T) {
        self.state.forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.state.read(item, |n| n.copied().unwrap_or(0))
    }
}

impl<T> fmt::Debug for ItemExponentialFailure<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailure")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// `fast` for an item's first `max_fast_attempts` failures, `slow` after.
/// client-go's `ItemFastSlowRateLimiter`.
pub struct ItemFastSlow<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    state: Tracked<T, u32>,
}

impl<T: Item> ItemFastSlow<T> {
    /// Delays an item's first `max_fast_attempts` retries by `fast`, later
    /// ones by `slow`, until the item is forgotten.
    pub fn new(clock: &Clock, fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        ItemFastSlow {
            fast,
            slow,
            max_fast_attempts,
            state: Tracked::new(clock, default_idle_expiry(fast.max(slow))),
        }
    }

    bounded_state_methods!();
}

impl<T: Item> RateLimiter<T> for ItemFastSlow<T> {
    fn when(&self, item: &T) -> Duration {
        let failures = self.state.with_entry(
            item,
            |_| 0u32,
            |n, _| {
                *n = n.saturating_add(1);
                *n
            },
        );
        if failures <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }
    fn forget(&self, item: &T) {
        self.state.forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.state.read(item, |n| n.copied().unwrap_or(0))
    }
}

impl<T> fmt::Debug for ItemFastSlow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemFastSlow")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .finish_non_exhaustive()
    }
}
