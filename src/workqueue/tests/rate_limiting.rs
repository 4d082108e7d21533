//! The rate-limiting queue with its limiters plugged in.

use super::*;

#[test]
fn adds_are_delayed_by_the_limiter_until_forgotten() {
    let (config, clock) = manual();
    let limiter = ItemExponentialFailure::new(&config.clock, ms(1), Duration::from_secs(1));
    let q = RateLimitingQueue::with_config(config, limiter);
    let expect_ready_after = |item: &'static str, d: Duration| {
        clock.advance(d - Duration::from_nanos(1));
        assert_eq!(q.len(), 0, "{item} not ready before {d:?}");
        clock.advance(Duration::from_nanos(1));
        assert_eq!(drain(&q), vec![item]);
    };
    q.add_rate_limited("one");
    expect_ready_after("one", ms(1));
    q.add_rate_limited("one");
    expect_ready_after("one", ms(2));
    assert_eq!(q.num_requeues(&"one"), 2);
    q.add_rate_limited("two");
    expect_ready_after("two", ms(1));
    q.forget(&"one");
    assert_eq!(q.num_requeues(&"one"), 0);
    q.add_rate_limited("one");
    expect_ready_after("one", ms(1));
    assert_eq!(q.metrics().retries, 4);
}

#[test]
fn no_limiter_state_grows_after_shutdown() {
    let (config, _clock) = manual();
    let limiter = ItemExponentialFailure::new(&config.clock, ms(1), Duration::from_secs(1));
    let q = RateLimitingQueue::with_config(config, limiter);
    q.shut_down();
    q.add_rate_limited(1u8);
    assert_eq!(q.num_requeues(&1), 0);
    assert_eq!(q.waiting_len(), 0);
}

#[test]
fn the_default_controller_limiter_plugs_in() {
    let (config, clock) = manual();
    let limiter = default_controller_rate_limiter(&config.clock);
    let q = RateLimitingQueue::with_config(config, limiter);
    for i in 0..3u32 {
        q.add_rate_limited(i);
    }
    clock.advance(ms(5));
    assert_eq!(drain(&q), vec![0, 1, 2]);
}
