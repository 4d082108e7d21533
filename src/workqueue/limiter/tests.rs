//! The limiters on the manual clock.

use super::backoff::exponential;
use super::*;
use crate::workqueue::WorkqueueError;
use std::num::NonZeroUsize;

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
    let l =
        ItemFastSlow::new(&clock, ms(1), ms(2), 1).with_capacity(NonZeroUsize::new(100).unwrap());
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
