//! Token buckets: one for all items, or one per item.

use super::state::Tracked;
use super::{default_idle_expiry, RateLimiter};
use crate::clock::Clock;
use crate::sync::{lock, Mutex};
use crate::workqueue::{Item, WorkqueueError};
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// A token bucket state, as golang.org/x/time/rate keeps it: tokens may go
/// negative, which reserves future tokens.
#[derive(Copy, Clone, Debug)]
struct Bucket {
    tokens: f64,
    last: u64,
}

impl Bucket {
    fn full(burst: f64, now: u64) -> Self {
        Bucket {
            tokens: burst,
            last: now,
        }
    }

    /// Take one token; the wait until it exists.
    fn reserve(&mut self, now: u64, qps: f64, burst: f64) -> Duration {
        if qps.is_infinite() {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_sub(self.last) as f64 / 1e9;
        self.tokens = (self.tokens + elapsed * qps).min(burst) - 1.0;
        self.last = self.last.max(now);
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            let seconds = -self.tokens / qps;
            Duration::from_nanos((seconds * 1e9) as u64)
        }
    }
}

fn check_bucket(qps: f64, burst: u32) -> Result<(), WorkqueueError> {
    if qps.is_nan() || qps <= 0.0 {
        return Err(WorkqueueError::InvalidRate);
    }
    if burst == 0 && qps.is_finite() {
        return Err(WorkqueueError::InvalidBurst);
    }
    Ok(())
}

fn refill_time(qps: f64, burst: u32) -> Duration {
    if qps.is_finite() {
        Duration::try_from_secs_f64(f64::from(burst) / qps).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    }
}

/// One token bucket for all items: `qps` tokens a second, at most `burst`
/// stored, one taken per `when`. client-go's `BucketRateLimiter`. Remembers
/// no item: `num_requeues` is always 0.
pub struct TokenBucket {
    clock: Clock,
    qps: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

impl TokenBucket {
    /// A full bucket. `qps` must be positive (infinite: no limit); `burst`
    /// at least 1 for a finite rate.
    pub fn new(clock: &Clock, qps: f64, burst: u32) -> Result<Self, WorkqueueError> {
        check_bucket(qps, burst)?;
        let burst = f64::from(burst);
        Ok(TokenBucket {
            clock: clock.clone(),
            qps,
            burst,
            bucket: Mutex::new(Bucket::full(burst, clock.now().as_nanos())),
        })
    }
}

impl<T> RateLimiter<T> for TokenBucket {
    fn when(&self, _item: &T) -> Duration {
        let now = self.clock.now().as_nanos();
        lock(&self.bucket).reserve(now, self.qps, self.burst)
    }
    fn forget(&self, _item: &T) {}
    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish()
    }
}

/// A token bucket per item. client-go's `ItemBucketRateLimiter`;
/// `num_requeues` is always 0.
pub struct ItemTokenBucket<T> {
    qps: f64,
    burst: f64,
    state: Tracked<T, Bucket>,
}

impl<T: Item> ItemTokenBucket<T> {
    /// Buckets of `qps` and `burst`, checked as [`TokenBucket::new`] does.
    pub fn new(clock: &Clock, qps: f64, burst: u32) -> Result<Self, WorkqueueError> {
        check_bucket(qps, burst)?;
        Ok(ItemTokenBucket {
            qps,
            burst: f64::from(burst),
            state: Tracked::new(clock, default_idle_expiry(refill_time(qps, burst))),
        })
    }

    bounded_state_methods!();
}

impl<T: Item> RateLimiter<T> for ItemTokenBucket<T> {
    fn when(&self, item: &T) -> Duration {
        if self.qps.is_infinite() {
            return Duration::ZERO;
        }
        let (qps, burst) = (self.qps, self.burst);
        self.state.with_entry(
            item,
            |now| Bucket::full(burst, now),
            |bucket, now| bucket.reserve(now, qps, burst),
        )
    }
    fn forget(&self, item: &T) {
        self.state.forget(item);
    }
    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

impl<T> fmt::Debug for ItemTokenBucket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemTokenBucket")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}
