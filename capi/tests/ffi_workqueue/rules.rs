//! client-go's rules: dirty and processing sets, keys as bytes, shutdown
//! and drain, blocking gets.

use super::*;
use std::ptr::null;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn dirty_items_are_queued_once_and_processing_items_after_done() {
    for kind in [
        apf_workqueue_kind::APF_WORKQUEUE_FIFO,
        apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE,
        apf_workqueue_kind::APF_WORKQUEUE_PRIORITY,
    ] {
        let q = Q::new(kind);
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2, "{kind:?}: a is queued once");
        let a = q.try_get().unwrap();
        assert_eq!(a.key, b"a");
        q.add("a");
        assert_eq!(q.len(), 1, "{kind:?}: a processing is not queued again yet");
        let b = q.try_get().unwrap();
        assert_eq!(b.key, b"b");
        assert_eq!(q.try_get(), Err(EMPTY), "{kind:?}: a must wait for done");
        assert_eq!(q.processing(), 2);
        q.done(a.handle);
        assert_eq!(q.len(), 1, "{kind:?}: done queued a again");
        let a2 = q.try_get().unwrap();
        assert_eq!(a2.key, b"a");
        assert_ne!(a2.handle, a.handle);
        q.done(a2.handle);
        q.done(b.handle);
        assert_eq!(q.try_get(), Err(EMPTY));
        assert_eq!(q.processing(), 0);
    }
}

#[test]
fn keys_are_bytes_and_stay_valid_until_done() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    let binary = [0u8, 255, 0, 7];
    // SAFETY: live queue; key readable.
    ok(unsafe { apf_workqueue_add(q.0, binary.as_ptr(), binary.len()) });
    // The empty key, as (NULL, 0).
    // SAFETY: (NULL, 0) is the empty key.
    ok(unsafe { apf_workqueue_add(q.0, null(), 0) });
    let item = q.get_raw(0);
    assert_eq!(
        item.result,
        apf_workqueue_get_result::APF_WORKQUEUE_ITEM as u32
    );
    // The queue forgets its own copy once done... but our handle holds one:
    // add, get, done of other items must not disturb it.
    let empty = q.try_get().unwrap();
    assert_eq!(empty.key, b"");
    q.done(empty.handle);
    for i in 0..100 {
        q.add(&format!("filler-{i}"));
        q.take();
    }
    // SAFETY: valid until done of item.item.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(item.key, item.key_len) },
        binary
    );
    q.done(item.item);
}

#[test]
fn shutdown_ignores_adds_and_hands_out_what_is_queued() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    q.add("a");
    q.add("b");
    let a = q.try_get().unwrap();
    assert!(!q.shutting_down());
    q.shut_down();
    q.shut_down();
    assert!(q.shutting_down());
    q.add("c");
    q.add_after("d", 0);
    q.add_rate_limited("e");
    q.add("a"); // processing: ignored too
    assert_eq!(q.len(), 1);
    assert_eq!(q.take(), "b");
    assert_eq!(q.try_get(), Err(SHUT_DOWN));
    assert_eq!(
        q.get(u64::MAX),
        Err(SHUT_DOWN),
        "a blocking get returns at once"
    );
    q.done(a.handle);
    assert_eq!(q.try_get(), Err(SHUT_DOWN), "a was not re-added");
    assert_eq!(
        q.requeues("e"),
        0,
        "the limiter was not asked after shutdown"
    );
}

#[test]
fn shutdown_with_drain_waits_for_processing_items() {
    let q = Arc::new(Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO));
    q.add("a");
    let a = q.try_get().unwrap();
    let drained = Arc::new(AtomicBool::new(false));
    let t = {
        let (q, drained) = (q.clone(), drained.clone());
        std::thread::spawn(move || {
            // SAFETY: live queue (joined before it is freed).
            ok(unsafe { apf_workqueue_shut_down_with_drain(q.0) });
            drained.store(true, Ordering::SeqCst);
        })
    };
    while !q.shutting_down() {
        std::thread::yield_now();
    }
    assert!(!drained.load(Ordering::SeqCst), "a is still processing");
    q.done(a.handle);
    t.join().unwrap();
    assert!(drained.load(Ordering::SeqCst));
}

#[test]
fn shutdown_and_free_wake_blocked_getters() {
    for free in [false, true] {
        let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
        let raw = q.0 as usize;
        let threads: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let q = raw as *mut apf_workqueue;
                    let mut item = std::mem::MaybeUninit::<apf_workqueue_item>::uninit();
                    let timeout = if i % 2 == 0 { u64::MAX } else { 3600 * SECOND };
                    // SAFETY: the queue is live when the call starts; free
                    // may only overlap it while it is blocked.
                    ok(unsafe { apf_workqueue_get(q, timeout, item.as_mut_ptr()) });
                    // SAFETY: written on APF_OK.
                    unsafe { item.assume_init() }.result
                })
            })
            .collect();
        while q.parked() < 4 {
            std::thread::yield_now();
        }
        if free {
            std::mem::drop(q);
        } else {
            q.shut_down();
        }
        for t in threads {
            assert_eq!(t.join().unwrap(), SHUT_DOWN);
        }
    }
}

#[test]
fn get_times_out_on_real_time_and_leaves_no_trace() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    assert_eq!(q.get(MS), Err(TIMED_OUT));
    assert_eq!(q.parked(), 0);
    // After a time-out the next item still goes to a getter.
    q.add("a");
    assert_eq!(q.get(MS).unwrap().key, b"a");
}

#[test]
fn blocked_get_receives_an_item_added_later() {
    let q = Arc::new(Q::new(apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE));
    let t = {
        let q = q.clone();
        std::thread::spawn(move || q.get(u64::MAX).unwrap())
    };
    while q.parked() < 1 {
        std::thread::yield_now();
    }
    assert_eq!(
        q.add_opts(
            "x",
            apf_workqueue_add_options {
                lane: SLOW,
                ..plain()
            }
        ),
        apf_status::APF_OK
    );
    let got = t.join().unwrap();
    assert_eq!((got.key.as_slice(), got.lane), (&b"x"[..], SLOW));
    q.done(got.handle);
}
