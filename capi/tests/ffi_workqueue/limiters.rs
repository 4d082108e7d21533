//! Delays and every rate limiter, on the manual clock; bad limiter
//! parameters named.

use super::*;
use std::ptr::null;

#[test]
fn add_after_waits_and_keeps_the_earlier_time() {
    for kind in [
        apf_workqueue_kind::APF_WORKQUEUE_FIFO,
        apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE,
        apf_workqueue_kind::APF_WORKQUEUE_PRIORITY,
    ] {
        let q = Q::new(kind);
        q.add_after("a", 10 * MS);
        q.add_after("a", 5 * MS);
        q.add_after("a", 20 * MS);
        q.add_after("now", 0);
        assert_eq!(q.waiting_len(), 1, "{kind:?}");
        assert_eq!(q.take(), "now");
        q.advance(5 * MS - 1);
        assert_eq!(q.try_get(), Err(EMPTY), "{kind:?}");
        q.advance(1);
        assert_eq!(q.take(), "a", "{kind:?}: the earliest time won");
        q.advance(20 * MS);
        assert_eq!(q.try_get(), Err(EMPTY), "{kind:?}: one wait, one add");
        assert_eq!(q.waiting_len(), 0);
    }
}

#[test]
fn shutdown_ends_waits() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    q.add_after("a", SECOND);
    q.shut_down();
    assert_eq!(q.waiting_len(), 0);
    q.advance(2 * SECOND);
    assert_eq!(q.try_get(), Err(SHUT_DOWN));
}

#[test]
fn exponential_limiter_doubles_until_forget() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_exponential(MS, 8 * MS, out, err()) });
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, l);
    for (n, delay) in [MS, 2 * MS, 4 * MS, 8 * MS, 8 * MS].into_iter().enumerate() {
        q.add_rate_limited("a");
        assert_eq!(q.requeues("a"), n as u32 + 1);
        q.advance(delay - 1);
        assert_eq!(q.try_get(), Err(EMPTY), "retry {n} waits {delay}");
        q.advance(1);
        assert_eq!(q.take(), "a");
    }
    q.forget("a");
    assert_eq!(q.requeues("a"), 0);
    q.add_rate_limited("a");
    q.advance(MS);
    assert_eq!(q.take(), "a", "back to the base delay");
}

#[test]
fn token_bucket_limiter_spends_its_burst_then_waits() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_token_bucket(10.0, 2, out, err()) });
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, l);
    q.add_rate_limited("a");
    q.add_rate_limited("b");
    q.add_rate_limited("c");
    assert_eq!(q.len(), 2, "burst of 2 passes at once");
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(
        q.requeues("a"),
        0,
        "a shared bucket keeps no per-item count"
    );
    q.advance(100 * MS);
    assert_eq!(q.len(), 3, "c after 1/qps");
}

#[test]
fn item_token_bucket_limits_each_key_alone() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_item_token_bucket(1.0, 1, out, err()) });
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, l);
    q.add_rate_limited("a");
    q.add_rate_limited("b");
    assert_eq!(q.len(), 2, "each key has its own bucket");
    assert_eq!(q.take(), "a");
    q.add_rate_limited("a");
    assert_eq!(q.waiting_len(), 1);
    q.advance(SECOND);
    assert_eq!(q.waiting_len(), 0);
}

#[test]
fn fast_slow_limiter_switches_after_the_fast_attempts() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_fast_slow(MS, SECOND, 2, out, err()) });
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, l);
    for delay in [MS, MS, SECOND, SECOND] {
        q.add_rate_limited("a");
        q.advance(delay - 1);
        assert_eq!(q.len(), 0);
        q.advance(1);
        assert_eq!(q.take(), "a");
    }
    assert_eq!(q.requeues("a"), 4);
}

#[test]
fn max_of_and_default_limiters_take_the_longest_delay() {
    // SAFETY: out writable.
    let exp = limiter(|out| unsafe { apf_rate_limiter_new_exponential(MS, SECOND, out, err()) });
    // SAFETY: out writable.
    let slow =
        limiter(|out| unsafe { apf_rate_limiter_new_fast_slow(3 * MS, 3 * MS, 0, out, err()) });
    let parts = [exp.0 as *const apf_rate_limiter, slow.0];
    // SAFETY: parts readable; out writable.
    let max = limiter(|out| unsafe { apf_rate_limiter_new_max_of(parts.as_ptr(), 2, out, err()) });
    drop((exp, slow)); // max_of copied them
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, max);
    for delay in [3 * MS, 3 * MS, 4 * MS, 8 * MS] {
        q.add_rate_limited("a");
        q.advance(delay - 1);
        assert_eq!(q.len(), 0, "waits {delay}");
        q.advance(1);
        assert_eq!(q.take(), "a");
    }
    assert_eq!(q.requeues("a"), 4);

    // The default (also what a NULL limiter gives): 5 ms doubling, and a
    // 10 qps bucket of 100 shared by all keys.
    // SAFETY: out writable.
    let d = limiter(|out| unsafe { apf_rate_limiter_new_default(out) });
    for q in [
        Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, d),
        Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO),
    ] {
        q.add_rate_limited("a");
        q.advance(5 * MS - 1);
        assert_eq!(q.len(), 0);
        q.advance(1);
        assert_eq!(q.take(), "a");
        for i in 0..120 {
            q.add_rate_limited(&format!("k{i}"));
        }
        q.advance(5 * MS);
        assert_eq!(q.len(), 99, "the bucket's burst of 100 (one spent on a)");
        q.advance(2 * SECOND);
        assert_eq!(q.len(), 119, "20 more tokens at 10 qps");
        q.advance(100 * MS);
        assert_eq!(q.len(), 120);
    }
}

#[test]
fn bad_limiter_parameters_are_named() {
    let mut l = null_mut();
    type Make = Box<dyn Fn(*mut *mut apf_rate_limiter) -> apf_status>;
    // SAFETY (every closure): `out` is writable.
    let cases: Vec<(Make, &str)> = vec![
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_token_bucket(0.0, 1, o, err()) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_token_bucket(-1.0, 1, o, err()) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_token_bucket(f64::NAN, 1, o, err()) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_token_bucket(1.0, 0, o, err()) }),
            "burst",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_item_token_bucket(f64::NAN, 1, o, err()) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_item_token_bucket(1.0, 0, o, err()) }),
            "burst",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_exponential(2, 1, o, err()) }),
            "base_nanos",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_fast_slow(2, 1, 1, o, err()) }),
            "fast_nanos",
        ),
        (
            Box::new(|o| unsafe { apf_rate_limiter_new_max_of(null(), 0, o, err()) }),
            "n must",
        ),
    ];
    for (make, name) in cases {
        assert_eq!(
            make(&mut l),
            apf_status::APF_ERR_INVALID_PARAMETER,
            "{name}"
        );
        assert!(last_error().contains(name), "{name}: {}", last_error());
        assert!(l.is_null(), "out is written only on success");
    }
    // An infinite rate is no limit, and a burst of 0 is then fine.
    // SAFETY: out writable.
    let inf =
        limiter(|out| unsafe { apf_rate_limiter_new_token_bucket(f64::INFINITY, 0, out, err()) });
    let nulls = [inf.0 as *const apf_rate_limiter, null()];
    // SAFETY: readable for 2 pointers.
    let s = unsafe { apf_rate_limiter_new_max_of(nulls.as_ptr(), 2, &mut l, err()) };
    assert_eq!(s, apf_status::APF_ERR_NULL_POINTER);
    assert!(last_error().contains("limiters[1]"));
    // SAFETY: NULL with a length.
    let s = unsafe { apf_rate_limiter_new_max_of(null(), 3, &mut l, err()) };
    assert_eq!(s, apf_status::APF_ERR_NULL_POINTER);
    // Nesting is bounded.
    let mut nested = inf;
    for depth in 1..=20 {
        let one = [nested.0 as *const apf_rate_limiter];
        // SAFETY: readable; out writable.
        let s = unsafe { apf_rate_limiter_new_max_of(one.as_ptr(), 1, &mut l, err()) };
        if depth <= 15 {
            ok(s);
            nested = Limiter(l);
        } else {
            assert_eq!(s, apf_status::APF_ERR_INVALID_PARAMETER, "depth {depth}");
        }
    }
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, nested);
    q.add_rate_limited("a");
    assert_eq!(q.len(), 1, "no limit at all");
    // SAFETY: NULL is a no-op.
    unsafe { apf_rate_limiter_free(null_mut()) };
}
