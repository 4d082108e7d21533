//! client-go's rate limiters, with bounded per-item state.

use super::{Item, WorkqueueError};
use crate::clock::{duration_nanos, Clock, Instant};
use crate::sync::{lock, Mutex};
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

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

/// Per-item state in two generations (see [`RateLimiter`]).
struct ItemStates<T, V> {
    current: HashMap<T, V, ahash::RandomState>,
    older: HashMap<T, V, ahash::RandomState>,
    aged_at: u64,
    period: u64,
    capacity: usize,
}

impl<T: Item, V> ItemStates<T, V> {
    fn new(now: Instant, idle_expiry: Duration) -> Self {
        ItemStates {
            current: HashMap::default(),
            older: HashMap::default(),
            aged_at: now.as_nanos(),
            period: duration_nanos(idle_expiry).max(1),
            capacity: DEFAULT_STATE_CAPACITY,
        }
    }

    fn age(&mut self, now: u64) {
        self.older = std::mem::take(&mut self.current);
        self.aged_at = now;
    }

    fn maintain(&mut self, now: u64) {
        let idle = now.saturating_sub(self.aged_at);
        if idle >= self.period.saturating_mul(2) {
            self.current = HashMap::default();
            self.older = HashMap::default();
            self.aged_at = now;
        } else if idle >= self.period {
            self.age(now);
        }
    }

    fn entry(&mut self, item: &T, now: u64, init: impl FnOnce() -> V) -> &mut V {
        self.maintain(now);
        if !self.current.contains_key(item) {
            let value = self.older.remove(item).unwrap_or_else(init);
            if self.current.len() >= self.capacity {
                self.age(now);
            }
            self.current.insert(item.clone(), value);
        }
        self.current
            .get_mut(item)
            .expect("present: inserted just above")
    }

    fn get(&mut self, item: &T, now: u64) -> Option<&V> {
        self.maintain(now);
        self.current.get(item).or_else(|| self.older.get(item))
    }

    fn remove(&mut self, item: &T) {
        self.current.remove(item);
        self.older.remove(item);
    }

    fn len(&self) -> usize {
        self.current.len() + self.older.len()
    }
}

/// The shared part of the per-item limiters: a clock and bounded state.
struct Tracked<T, V> {
    clock: Clock,
    states: Mutex<ItemStates<T, V>>,
}

impl<T: Item, V> Tracked<T, V> {
    fn new(clock: &Clock, idle_expiry: Duration) -> Self {
        Tracked {
            clock: clock.clone(),
            states: Mutex::new(ItemStates::new(clock.now(), idle_expiry)),
        }
    }

    fn set_idle_expiry(&mut self, idle_expiry: Duration) -> Result<(), WorkqueueError> {
        if idle_expiry.is_zero() {
            return Err(WorkqueueError::InvalidExpiry);
        }
        lock(&self.states).period = duration_nanos(idle_expiry);
        Ok(())
    }

    fn set_capacity(&mut self, capacity: NonZeroUsize) {
        lock(&self.states).capacity = capacity.get();
    }

    fn with_entry<R>(
        &self,
        item: &T,
        init: impl FnOnce(u64) -> V,
        f: impl FnOnce(&mut V, u64) -> R,
    ) -> R {
        let now = self.clock.now().as_nanos();
        let mut states = lock(&self.states);
        let v = states.entry(item, now, || init(now));
        f(v, now)
    }

    fn read<R>(&self, item: &T, f: impl FnOnce(Option<&V>) -> R) -> R {
        let now = self.clock.now().as_nanos();
        let mut states = lock(&self.states);
        f(states.get(item, now))
    }

    fn forget(&self, item: &T) {
        lock(&self.states).remove(item);
    }

    fn tracked(&self) -> usize {
        lock(&self.states).len()
    }
}

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

/// `base * 2^failures`, capped at `max`, never overflowing.
fn exponential(base: Duration, max: Duration, failures: u32) -> Duration {
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
    state: Tracked<T, u32>,
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_doubles_per_failure_and_forget_resets() {
        let (clock, _m) = Clock::manual();
        let l = ItemExponentialFailure::new(&clock, ms(1), Duration::from_secs(1));
        for want in [1, 2, 4, 8, 16] {
            assert_eq!(l.when(&"one"), ms(want));
        }
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(l.when(&"two"), ms(1));
        assert_eq!(l.when(&"two"), ms(2));
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), ms(1));
    }

    #[test]
    fn exponential_never_overflows() {
        let (clock, _m) = Clock::manual();
        let l = ItemExponentialFailure::new(&clock, ms(1), Duration::from_secs(1000));
        for _ in 0..5 {
            l.when(&"one");
        }
        assert_eq!(l.when(&"one"), ms(32));
        for _ in 0..1000 {
            l.when(&"overflow");
        }
        assert_eq!(l.when(&"overflow"), Duration::from_secs(1000));
        let l = ItemExponentialFailure::new(&clock, Duration::from_secs(60), Duration::MAX);
        for _ in 0..2 {
            l.when(&"two");
        }
        assert_eq!(l.when(&"two"), Duration::from_secs(240));
        for _ in 0..200 {
            l.when(&"big");
        }
        assert_eq!(l.when(&"big"), Duration::MAX);
        for failures in [62, 63, 64, 65, u32::MAX] {
            assert_eq!(exponential(ms(1), ms(7), failures), ms(7));
            assert_eq!(exponential(Duration::ZERO, ms(7), failures), Duration::ZERO);
        }
        assert_eq!(
            exponential(Duration::from_nanos(1), Duration::MAX, 63),
            Duration::from_nanos(1 << 63)
        );
    }

    #[test]
    fn failure_counts_saturate() {
        let (clock, _m) = Clock::manual();
        let l = ItemExponentialFailure::new(&clock, ms(1), ms(10));
        l.state.with_entry(&"x", |_| 0, |n, _| *n = u32::MAX - 1);
        assert_eq!(l.when(&"x"), ms(10));
        assert_eq!(l.when(&"x"), ms(10));
        assert_eq!(l.num_requeues(&"x"), u32::MAX);
    }

    #[test]
    fn fast_slow_switches_after_the_fast_attempts() {
        let (clock, _m) = Clock::manual();
        let l = ItemFastSlow::new(&clock, ms(5), Duration::from_secs(10), 3);
        let got: Vec<Duration> = (0..5).map(|_| l.when(&"one")).collect();
        let s10 = Duration::from_secs(10);
        assert_eq!(got, vec![ms(5), ms(5), ms(5), s10, s10]);
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(l.when(&"two"), ms(5));
        assert_eq!(l.when(&"two"), ms(5));
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), ms(5));
    }

    #[test]
    fn max_of_takes_the_longest_delay_and_most_requeues() {
        let (clock, _m) = Clock::manual();
        let l: MaxOf<&str> = MaxOf::new(vec![
            Box::new(ItemFastSlow::new(&clock, ms(5), Duration::from_secs(3), 3)),
            Box::new(ItemExponentialFailure::new(
                &clock,
                ms(1),
                Duration::from_secs(1),
            )),
        ]);
        let got: Vec<Duration> = (0..5).map(|_| l.when(&"one")).collect();
        let s3 = Duration::from_secs(3);
        assert_eq!(got, vec![ms(5), ms(5), ms(5), s3, s3]);
        assert_eq!(l.num_requeues(&"one"), 5);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(l.when(&"one"), ms(5));
        assert_eq!(MaxOf::<u8>::new(vec![]).when(&1), Duration::ZERO);
    }

    #[test]
    fn with_max_wait_caps_the_delay() {
        let (clock, _m) = Clock::manual();
        let l = WithMaxWait::new(
            ItemExponentialFailure::new(&clock, ms(100), Duration::from_secs(1000)),
            ms(500),
        );
        let got: Vec<Duration> = (0..4).map(|_| l.when(&1u8)).collect();
        assert_eq!(got, vec![ms(100), ms(200), ms(400), ms(500)]);
        assert_eq!(l.num_requeues(&1u8), 4);
    }

    #[test]
    fn token_bucket_bursts_then_spaces_by_qps_and_refills() {
        let (clock, manual) = Clock::manual();
        let l = TokenBucket::new(&clock, 10.0, 3).unwrap();
        let when = |l: &TokenBucket| RateLimiter::<u8>::when(l, &0);
        for _ in 0..3 {
            assert_eq!(when(&l), Duration::ZERO);
        }
        assert_eq!(when(&l), ms(100));
        assert_eq!(when(&l), ms(200));
        manual.advance(ms(200));
        assert_eq!(when(&l), ms(100), "two tokens refilled, both reserved");
        manual.advance(Duration::from_secs(10));
        for _ in 0..3 {
            assert_eq!(when(&l), Duration::ZERO, "refilled to the burst only");
        }
        assert_eq!(when(&l), ms(100));
        assert_eq!(RateLimiter::<u8>::num_requeues(&l, &0), 0);
    }

    #[test]
    fn token_bucket_rejects_bad_parameters() {
        let (clock, _m) = Clock::manual();
        assert_eq!(
            TokenBucket::new(&clock, 0.0, 1).err(),
            Some(WorkqueueError::InvalidRate)
        );
        assert_eq!(
            TokenBucket::new(&clock, -1.0, 1).err(),
            Some(WorkqueueError::InvalidRate)
        );
        assert_eq!(
            TokenBucket::new(&clock, f64::NAN, 1).err(),
            Some(WorkqueueError::InvalidRate)
        );
        assert_eq!(
            TokenBucket::new(&clock, 1.0, 0).err(),
            Some(WorkqueueError::InvalidBurst)
        );
        let unlimited = TokenBucket::new(&clock, f64::INFINITY, 0).unwrap();
        for _ in 0..1000 {
            assert_eq!(RateLimiter::<u8>::when(&unlimited, &0), Duration::ZERO);
        }
        assert!(ItemTokenBucket::<u8>::new(&clock, 0.0, 1).is_err());
        assert_eq!(
            ItemExponentialFailure::<u8>::new(&clock, ms(1), ms(2))
                .with_idle_expiry(Duration::ZERO)
                .err(),
            Some(WorkqueueError::InvalidExpiry)
        );
    }

    #[test]
    fn item_token_bucket_is_per_item() {
        let (clock, manual) = Clock::manual();
        let l = ItemTokenBucket::new(&clock, 2.0, 1).unwrap();
        assert_eq!(l.when(&"a"), Duration::ZERO);
        assert_eq!(l.when(&"a"), ms(500));
        assert_eq!(l.when(&"b"), Duration::ZERO);
        manual.advance(ms(1000));
        assert_eq!(l.when(&"a"), Duration::ZERO);
        l.forget(&"a");
        assert_eq!(l.when(&"a"), Duration::ZERO, "a forgotten bucket is full");
        assert_eq!(l.num_requeues(&"a"), 0);
    }

    #[test]
    fn default_controller_limiter_is_max_of_backoff_and_bucket() {
        let (clock, _m) = Clock::manual();
        let l = default_controller_rate_limiter::<u32>(&clock);
        // The bucket lets 100 through; each item's own backoff starts at 5 ms.
        for i in 0..100 {
            assert_eq!(l.when(&i), ms(5));
        }
        // The 101st token is 100 ms away at 10 qps.
        assert_eq!(l.when(&1000), ms(100));
        assert_eq!(l.when(&0), ms(200), "bucket (200 ms) beats backoff (10 ms)");
        assert_eq!(l.num_requeues(&0), 2);
    }

    #[test]
    fn idle_items_are_forgotten_and_active_ones_kept() {
        let (clock, manual) = Clock::manual();
        let l = ItemExponentialFailure::new(&clock, ms(1), Duration::from_secs(1))
            .with_idle_expiry(Duration::from_secs(10))
            .unwrap();
        l.when(&"busy");
        l.when(&"idle");
        for _ in 0..5 {
            manual.advance(Duration::from_secs(9));
            l.when(&"busy");
        }
        assert_eq!(
            l.num_requeues(&"busy"),
            6,
            "used every 9 s: never forgotten"
        );
        assert_eq!(l.num_requeues(&"idle"), 0, "idle 45 s: forgotten");
        assert_eq!(l.tracked_items(), 1);
        manual.advance(Duration::from_secs(20));
        assert_eq!(l.num_requeues(&"busy"), 0);
        assert_eq!(
            l.tracked_items(),
            0,
            "everything idle for two periods is dropped"
        );
    }

    #[test]
    fn capacity_bounds_the_state_of_items_never_forgotten() {
        let (clock, _m) = Clock::manual();
        let l = ItemFastSlow::new(&clock, ms(1), ms(2), 1)
            .with_capacity(NonZeroUsize::new(100).unwrap());
        for i in 0..10_000u32 {
            l.when(&i);
            assert!(l.tracked_items() <= 200);
        }
        assert_eq!(l.num_requeues(&9_999), 1, "the newest items are remembered");
    }

    #[test]
    fn defaults_keep_items_between_their_longest_retries() {
        let (clock, manual) = Clock::manual();
        let l = ItemExponentialFailure::new(&clock, ms(5), Duration::from_secs(1000));
        for _ in 0..30 {
            let d = l.when(&"x");
            manual.advance(d);
        }
        assert_eq!(l.num_requeues(&"x"), 30);
        assert_eq!(l.when(&"x"), Duration::from_secs(1000));
    }
}
