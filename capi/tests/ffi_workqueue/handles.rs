//! Misuse: stale, double and foreign handles, NULL pointers, a contained
//! panic, the real clock, and the status text.

use super::*;
use std::ptr::null;

#[test]
fn stale_double_and_foreign_handles_are_errors() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    let other = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    q.add("a");
    other.add("a");
    let a = q.try_get().unwrap();
    let theirs = other.try_get().unwrap();
    assert_eq!(q.done_status(0), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(
        q.done_status(a.handle ^ 1 << 40),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    assert_eq!(q.done_status(u64::MAX), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(
        q.done_status(theirs.handle),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    assert_eq!(q.processing(), 1, "a foreign handle changed nothing");
    q.done(a.handle);
    assert_eq!(q.done_status(a.handle), apf_status::APF_ERR_INVALID_HANDLE);
    // The slot's reuse does not revive the old handle.
    q.add("b");
    let b = q.try_get().unwrap();
    assert_eq!(q.done_status(a.handle), apf_status::APF_ERR_INVALID_HANDLE);
    q.done(b.handle);
    other.done(theirs.handle);
}

#[test]
fn null_pointers_are_errors() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    let nq: *mut apf_workqueue = null_mut();
    let null_status = apf_status::APF_ERR_NULL_POINTER;
    let mut n = 0usize;
    let mut u = 0u32;
    let mut b = false;
    let mut item = std::mem::MaybeUninit::<apf_workqueue_item>::uninit();
    // SAFETY: every call is given NULL where the test says so and valid
    // pointers elsewhere.
    unsafe {
        assert_eq!(apf_workqueue_options_default(null_mut()), null_status);
        assert_eq!(apf_workqueue_new(null(), null_mut(), err()), null_status);
        assert_eq!(apf_workqueue_add(nq, b"a".as_ptr(), 1), null_status);
        assert_eq!(apf_workqueue_add(q.0, null(), 1), null_status);
        assert_eq!(
            apf_workqueue_add_with_options(nq, null(), 0, null()),
            null_status
        );
        assert_eq!(apf_workqueue_add_after(nq, null(), 0, 1), null_status);
        assert_eq!(apf_workqueue_add_rate_limited(nq, null(), 0), null_status);
        assert_eq!(apf_workqueue_add_rate_limited(q.0, null(), 5), null_status);
        assert_eq!(apf_workqueue_get(nq, 0, item.as_mut_ptr()), null_status);
        assert_eq!(apf_workqueue_get(q.0, 0, null_mut()), null_status);
        assert_eq!(apf_workqueue_try_get(nq, item.as_mut_ptr()), null_status);
        assert_eq!(apf_workqueue_try_get(q.0, null_mut()), null_status);
        assert_eq!(apf_workqueue_done(nq, 1), null_status);
        assert_eq!(apf_workqueue_forget(nq, null(), 0), null_status);
        assert_eq!(
            apf_workqueue_num_requeues(nq, null(), 0, &mut u),
            null_status
        );
        assert_eq!(
            apf_workqueue_num_requeues(q.0, null(), 0, null_mut()),
            null_status
        );
        assert_eq!(apf_workqueue_len(nq, &mut n), null_status);
        assert_eq!(apf_workqueue_len(q.0, null_mut()), null_status);
        assert_eq!(apf_workqueue_waiting_len(nq, &mut n), null_status);
        assert_eq!(apf_workqueue_waiting_len(q.0, null_mut()), null_status);
        assert_eq!(apf_workqueue_lane_len(nq, 0, &mut n), null_status);
        assert_eq!(apf_workqueue_processing(nq, &mut n), null_status);
        assert_eq!(apf_workqueue_shut_down(nq), null_status);
        assert_eq!(apf_workqueue_shut_down_with_drain(nq), null_status);
        assert_eq!(apf_workqueue_shutting_down(nq, &mut b), null_status);
        assert_eq!(apf_workqueue_shutting_down(q.0, null_mut()), null_status);
        assert_eq!(apf_workqueue_advance_clock(nq, 1), null_status);
        let mut t = apf_text {
            ptr: null(),
            len: 0,
        };
        assert_eq!(apf_workqueue_metrics_text(nq, &mut t), null_status);
        assert_eq!(apf_workqueue_metrics_text(q.0, null_mut()), null_status);
        assert!(t.ptr.is_null(), "out untouched on error");
        assert_eq!(apf_workqueue_add_options_default(null_mut()), null_status);
        assert_eq!(apf_rate_limiter_new_default(null_mut()), null_status);
        assert_eq!(
            apf_rate_limiter_new_exponential(1, 2, null_mut(), err()),
            null_status
        );
        apf_workqueue_free(null_mut());
    }
    assert!(!q.shutting_down(), "nothing reached the queue");
    assert_eq!(q.len(), 0);
}

#[test]
fn panics_are_contained_and_the_queue_stays_usable() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    q.add("a");
    let a = q.try_get().unwrap();
    // SAFETY: NULL or live.
    assert_eq!(
        unsafe { apf_workqueue_test_panic(null_mut()) },
        apf_status::APF_ERR_PANIC
    );
    // SAFETY: live queue.
    assert_eq!(
        unsafe { apf_workqueue_test_panic(q.0) },
        apf_status::APF_ERR_PANIC
    );
    // The poisoned lock is recovered: handles on that shard still work.
    q.add("b");
    let b = q.try_get().unwrap();
    q.done(a.handle);
    q.done(b.handle);
    assert_eq!(q.try_get(), Err(EMPTY));
}

#[test]
fn the_real_clock_cannot_be_advanced() {
    let q = Q::with(&options(apf_workqueue_kind::APF_WORKQUEUE_FIFO, false));
    // SAFETY: live queue.
    let s = unsafe { apf_workqueue_advance_clock(q.0, 1) };
    assert_eq!(s, apf_status::APF_ERR_NOT_MANUAL_CLOCK);
    // A real-clock delay does happen (a short one).
    q.add_after("a", MS);
    let got = q.get(10 * SECOND).unwrap();
    assert_eq!(got.key, b"a");
    q.done(got.handle);
    // NULL options: the defaults (real clock, FIFO).
    let mut p = null_mut();
    // SAFETY: writable.
    ok(unsafe { apf_workqueue_new(null(), &mut p, err()) });
    let d = Q(p);
    // SAFETY: live queue.
    assert_eq!(
        unsafe { apf_workqueue_advance_clock(d.0, 1) },
        apf_status::APF_ERR_NOT_MANUAL_CLOCK
    );
}

#[test]
fn status_text_knows_the_new_code() {
    let mut text = null();
    let mut len = 0;
    // SAFETY: writable.
    ok(unsafe {
        apf_status_text(
            apf_status::APF_ERR_WORKQUEUE_WRONG_KIND as u32,
            &mut text,
            &mut len,
        )
    });
    assert_eq!(apf_status::APF_ERR_WORKQUEUE_WRONG_KIND as u32, 7014);
    assert!(len > 0);
}
