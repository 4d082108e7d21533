//! The workqueue C ABI (`apf_wq_*`), called from Rust exactly as C calls
//! it: client-go's rules (dirty and processing sets, shutdown, drain),
//! delays and every rate limiter on the manual clock, two lanes,
//! priorities, metrics text, item handles (stale, double done, foreign),
//! NULLs, bad parameters, the panic boundary, and many threads.
#![cfg(not(loom))]

use apf::ffi::*;

#[path = "support/text.rs"]
mod text;
use std::collections::HashSet;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use text::text_of;

#[allow(improper_ctypes)]
extern "C" {
    // Testing aids exported by libapf but kept out of apf.h.
    fn apf_wq_test_panic(queue: *mut apf_workqueue) -> apf_status;
    fn apf_wq_test_parked(queue: *mut apf_workqueue, out: *mut usize) -> apf_status;
}

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;

fn last_error() -> String {
    // SAFETY: `t` is a writable apf_text.
    text_of(|t| unsafe { apf_last_error(t) })
}

/// A plain add's options, from `apf_wq_add_opts_default`.
fn plain() -> apf_wq_add_opts {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    ok(unsafe { apf_wq_add_opts_default(o.as_mut_ptr()) });
    // SAFETY: written on APF_OK.
    unsafe { o.assume_init() }
}

#[track_caller]
fn ok(s: apf_status) {
    assert_eq!(s, apf_status::APF_OK, "{}", last_error());
}

/// Owns a queue for one test.
struct Q(*mut apf_workqueue);

// SAFETY: the ABI promises a queue may be used from any thread.
unsafe impl Send for Q {}
// SAFETY: as above.
unsafe impl Sync for Q {}

impl Drop for Q {
    fn drop(&mut self) {
        // SAFETY: from apf_wq_new; no call follows (threads are joined).
        unsafe { apf_wq_free(self.0) }
    }
}

/// An item as a test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    handle: u64,
    key: Vec<u8>,
    lane: u32,
    priority: i32,
}

fn options(kind: apf_wq_kind, manual: bool) -> apf_wq_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    ok(unsafe { apf_wq_options_default(o.as_mut_ptr()) });
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.kind = kind as u32;
    o.manual_clock = manual;
    o
}

impl Q {
    fn with(o: &apf_wq_options) -> Q {
        let mut q = null_mut();
        // SAFETY: options readable, out writable.
        ok(unsafe { apf_wq_new(o, &mut q) });
        assert!(!q.is_null());
        Q(q)
    }

    fn new(kind: apf_wq_kind) -> Q {
        Q::with(&options(kind, true))
    }

    fn with_limiter(kind: apf_wq_kind, limiter: Limiter) -> Q {
        let mut o = options(kind, true);
        o.limiter = limiter.0;
        Q::with(&o)
        // `limiter` is freed here: the queue keeps its own copy.
    }

    fn add(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_wq_add(self.0, key.as_ptr(), key.len()) });
    }

    fn add_opts(&self, key: &str, opts: apf_wq_add_opts) -> apf_status {
        // SAFETY: live queue; key and opts readable.
        unsafe { apf_wq_add_with_opts(self.0, key.as_ptr(), key.len(), &opts) }
    }

    fn add_after(&self, key: &str, delay: u64) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_wq_add_after(self.0, key.as_ptr(), key.len(), delay) });
    }

    fn add_rate_limited(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_wq_add_rate_limited(self.0, key.as_ptr(), key.len()) });
    }

    fn forget(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_wq_forget(self.0, key.as_ptr(), key.len()) });
    }

    fn requeues(&self, key: &str) -> u32 {
        let mut n = 0;
        // SAFETY: live queue; key readable; out writable.
        ok(unsafe { apf_wq_num_requeues(self.0, key.as_ptr(), key.len(), &mut n) });
        n
    }

    fn get_raw(&self, timeout: u64) -> apf_wq_item {
        let mut item = std::mem::MaybeUninit::uninit();
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_get(self.0, timeout, item.as_mut_ptr()) });
        // SAFETY: written on APF_OK.
        unsafe { item.assume_init() }
    }

    /// The next item, or the result code when there is none.
    fn get(&self, timeout: u64) -> Result<Got, u32> {
        let item = self.get_raw(timeout);
        if item.result != apf_wq_get_result::APF_WQ_ITEM as u32 {
            assert_eq!(item.item, 0);
            assert!(item.key.is_null());
            return Err(item.result);
        }
        assert_ne!(item.item, 0);
        assert!(!item.key.is_null());
        // SAFETY: the key is valid until done of the handle.
        let key = unsafe { std::slice::from_raw_parts(item.key, item.key_len) }.to_vec();
        Ok(Got {
            handle: item.item,
            key,
            lane: item.lane,
            priority: item.priority,
        })
    }

    fn try_get(&self) -> Result<Got, u32> {
        self.get(0)
    }

    /// The key of the next item (which must exist), done at once.
    fn take(&self) -> String {
        let got = self.try_get().expect("an item is ready");
        self.done(got.handle);
        String::from_utf8(got.key).unwrap()
    }

    fn done(&self, handle: u64) {
        // SAFETY: live queue.
        ok(unsafe { apf_wq_done(self.0, handle) });
    }

    fn done_status(&self, handle: u64) -> apf_status {
        // SAFETY: live queue.
        unsafe { apf_wq_done(self.0, handle) }
    }

    fn len(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_len(self.0, &mut n) });
        n
    }

    fn waiting_len(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_waiting_len(self.0, &mut n) });
        n
    }

    fn processing(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_processing(self.0, &mut n) });
        n
    }

    fn parked(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_test_parked(self.0, &mut n) });
        n
    }

    fn advance(&self, nanos: u64) {
        // SAFETY: live queue.
        ok(unsafe { apf_wq_advance_clock(self.0, nanos) });
    }

    fn shut_down(&self) {
        // SAFETY: live queue.
        ok(unsafe { apf_wq_shut_down(self.0) });
    }

    fn shutting_down(&self) -> bool {
        let mut b = false;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_shutting_down(self.0, &mut b) });
        b
    }

    fn metrics(&self) -> String {
        // SAFETY: live queue; writable apf_text.
        text_of(|t| unsafe { apf_wq_metrics_text(self.0, t) })
    }
}

/// Owns a limiter description.
struct Limiter(*mut apf_wq_limiter);

impl Drop for Limiter {
    fn drop(&mut self) {
        // SAFETY: from apf_wq_limiter_new_*; not used afterwards.
        unsafe { apf_wq_limiter_free(self.0) }
    }
}

fn limiter(f: impl FnOnce(*mut *mut apf_wq_limiter) -> apf_status) -> Limiter {
    let mut l = null_mut();
    ok(f(&mut l));
    assert!(!l.is_null());
    Limiter(l)
}

const EMPTY: u32 = apf_wq_get_result::APF_WQ_EMPTY as u32;
const SHUT_DOWN: u32 = apf_wq_get_result::APF_WQ_SHUT_DOWN as u32;
const TIMED_OUT: u32 = apf_wq_get_result::APF_WQ_TIMED_OUT as u32;
const FAST: u32 = apf_wq_lane::APF_WQ_LANE_FAST as u32;
const SLOW: u32 = apf_wq_lane::APF_WQ_LANE_SLOW as u32;

// ----- the workqueue rules ----------------------------------------------

#[test]
fn dirty_items_are_queued_once_and_processing_items_after_done() {
    for kind in [
        apf_wq_kind::APF_WQ_FIFO,
        apf_wq_kind::APF_WQ_TWO_LANE,
        apf_wq_kind::APF_WQ_PRIORITY,
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
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    let binary = [0u8, 255, 0, 7];
    // SAFETY: live queue; key readable.
    ok(unsafe { apf_wq_add(q.0, binary.as_ptr(), binary.len()) });
    // The empty key, as (NULL, 0).
    // SAFETY: (NULL, 0) is the empty key.
    ok(unsafe { apf_wq_add(q.0, null(), 0) });
    let item = q.get_raw(0);
    assert_eq!(item.result, apf_wq_get_result::APF_WQ_ITEM as u32);
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
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
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
    let q = Arc::new(Q::new(apf_wq_kind::APF_WQ_FIFO));
    q.add("a");
    let a = q.try_get().unwrap();
    let drained = Arc::new(AtomicBool::new(false));
    let t = {
        let (q, drained) = (q.clone(), drained.clone());
        std::thread::spawn(move || {
            // SAFETY: live queue (joined before it is freed).
            ok(unsafe { apf_wq_shut_down_with_drain(q.0) });
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
        let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
        let raw = q.0 as usize;
        let threads: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let q = raw as *mut apf_workqueue;
                    let mut item = std::mem::MaybeUninit::<apf_wq_item>::uninit();
                    let timeout = if i % 2 == 0 { u64::MAX } else { 3600 * SECOND };
                    // SAFETY: the queue is live when the call starts; free
                    // may only overlap it while it is blocked.
                    ok(unsafe { apf_wq_get(q, timeout, item.as_mut_ptr()) });
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
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    assert_eq!(q.get(MS), Err(TIMED_OUT));
    assert_eq!(q.parked(), 0);
    // After a time-out the next item still goes to a getter.
    q.add("a");
    assert_eq!(q.get(MS).unwrap().key, b"a");
}

#[test]
fn blocked_get_receives_an_item_added_later() {
    let q = Arc::new(Q::new(apf_wq_kind::APF_WQ_TWO_LANE));
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
            apf_wq_add_opts {
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

// ----- delays and rate limiting -------------------------------------------

#[test]
fn add_after_waits_and_keeps_the_earlier_time() {
    for kind in [
        apf_wq_kind::APF_WQ_FIFO,
        apf_wq_kind::APF_WQ_TWO_LANE,
        apf_wq_kind::APF_WQ_PRIORITY,
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
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    q.add_after("a", SECOND);
    q.shut_down();
    assert_eq!(q.waiting_len(), 0);
    q.advance(2 * SECOND);
    assert_eq!(q.try_get(), Err(SHUT_DOWN));
}

#[test]
fn exponential_limiter_doubles_until_forget() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_wq_limiter_new_exponential(MS, 8 * MS, out) });
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, l);
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
    let l = limiter(|out| unsafe { apf_wq_limiter_new_token_bucket(10.0, 2, out) });
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, l);
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
    let l = limiter(|out| unsafe { apf_wq_limiter_new_item_token_bucket(1.0, 1, out) });
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, l);
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
    let l = limiter(|out| unsafe { apf_wq_limiter_new_fast_slow(MS, SECOND, 2, out) });
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, l);
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
    let exp = limiter(|out| unsafe { apf_wq_limiter_new_exponential(MS, SECOND, out) });
    // SAFETY: out writable.
    let slow = limiter(|out| unsafe { apf_wq_limiter_new_fast_slow(3 * MS, 3 * MS, 0, out) });
    let parts = [exp.0 as *const apf_wq_limiter, slow.0];
    // SAFETY: parts readable; out writable.
    let max = limiter(|out| unsafe { apf_wq_limiter_new_max_of(parts.as_ptr(), 2, out) });
    drop((exp, slow)); // max_of copied them
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, max);
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
    let d = limiter(|out| unsafe { apf_wq_limiter_new_default(out) });
    for q in [
        Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, d),
        Q::new(apf_wq_kind::APF_WQ_FIFO),
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
    type Make = Box<dyn Fn(*mut *mut apf_wq_limiter) -> apf_status>;
    // SAFETY (every closure): `out` is writable.
    let cases: Vec<(Make, &str)> = vec![
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_token_bucket(0.0, 1, o) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_token_bucket(-1.0, 1, o) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_token_bucket(f64::NAN, 1, o) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_token_bucket(1.0, 0, o) }),
            "burst",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_item_token_bucket(f64::NAN, 1, o) }),
            "qps",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_item_token_bucket(1.0, 0, o) }),
            "burst",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_exponential(2, 1, o) }),
            "base_nanos",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_fast_slow(2, 1, 1, o) }),
            "fast_nanos",
        ),
        (
            Box::new(|o| unsafe { apf_wq_limiter_new_max_of(null(), 0, o) }),
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
    let inf = limiter(|out| unsafe { apf_wq_limiter_new_token_bucket(f64::INFINITY, 0, out) });
    let nulls = [inf.0 as *const apf_wq_limiter, null()];
    // SAFETY: readable for 2 pointers.
    let s = unsafe { apf_wq_limiter_new_max_of(nulls.as_ptr(), 2, &mut l) };
    assert_eq!(s, apf_status::APF_ERR_NULL_POINTER);
    assert!(last_error().contains("limiters[1]"));
    // SAFETY: NULL with a length.
    let s = unsafe { apf_wq_limiter_new_max_of(null(), 3, &mut l) };
    assert_eq!(s, apf_status::APF_ERR_NULL_POINTER);
    // Nesting is bounded.
    let mut nested = inf;
    for depth in 1..=20 {
        let one = [nested.0 as *const apf_wq_limiter];
        // SAFETY: readable; out writable.
        let s = unsafe { apf_wq_limiter_new_max_of(one.as_ptr(), 1, &mut l) };
        if depth <= 15 {
            ok(s);
            nested = Limiter(l);
        } else {
            assert_eq!(s, apf_status::APF_ERR_INVALID_PARAMETER, "depth {depth}");
        }
    }
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, nested);
    q.add_rate_limited("a");
    assert_eq!(q.len(), 1, "no limit at all");
    // SAFETY: NULL is a no-op.
    unsafe { apf_wq_limiter_free(null_mut()) };
}

// ----- two lanes -----------------------------------------------------------

#[test]
fn two_lanes_serve_fast_first_and_a_re_add_moves_lanes() {
    let q = Q::new(apf_wq_kind::APF_WQ_TWO_LANE);
    let slow = apf_wq_add_opts {
        lane: SLOW,
        ..plain()
    };
    ok(q.add_opts("s1", slow));
    ok(q.add_opts("s2", slow));
    q.add("f1");
    ok(q.add_opts("f2", plain()));
    let lane_len = |lane: u32| {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_wq_lane_len(q.0, lane, &mut n) });
        n
    };
    assert_eq!((lane_len(FAST), lane_len(SLOW)), (2, 2));
    // s2 moves to the fast lane; f1 moves to the slow lane's back.
    ok(q.add_opts("s2", plain()));
    ok(q.add_opts("f1", slow));
    let order: Vec<(Vec<u8>, u32)> = (0..4)
        .map(|_| {
            let g = q.try_get().unwrap();
            q.done(g.handle);
            (g.key, g.lane)
        })
        .collect();
    let want: Vec<(Vec<u8>, u32)> = [("f2", FAST), ("s2", FAST), ("s1", SLOW), ("f1", SLOW)]
        .iter()
        .map(|(k, l)| (k.as_bytes().to_vec(), *l))
        .collect();
    assert_eq!(order, want);
    // Delayed and rate-limited adds keep their lane.
    ok(q.add_opts(
        "later",
        apf_wq_add_opts {
            lane: SLOW,
            after_nanos: MS,
            ..plain()
        },
    ));
    q.advance(MS);
    let g = q.try_get().unwrap();
    assert_eq!(g.lane, SLOW);
    q.done(g.handle);
    // A lane that does not exist.
    let bad = apf_wq_add_opts { lane: 2, ..plain() };
    assert_eq!(q.add_opts("x", bad), apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(last_error().contains("lane"));
}

#[test]
fn queue_and_add_options_carry_their_size() {
    let bad = apf_status::APF_ERR_INVALID_PARAMETER;
    let mut o = options(apf_wq_kind::APF_WQ_FIFO, true);
    assert_eq!(o.struct_size, std::mem::size_of::<apf_wq_options>());
    o.struct_size = 0;
    let mut p = null_mut();
    // SAFETY: readable; writable.
    assert_eq!(unsafe { apf_wq_new(&o, &mut p) }, bad);
    assert!(p.is_null());
    assert!(
        last_error().contains("apf_wq_options.struct_size is 0"),
        "{}",
        last_error()
    );
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    let unset = apf_wq_add_opts {
        struct_size: 0,
        ..plain()
    };
    assert_eq!(q.add_opts("a", unset), bad);
    assert!(
        last_error().contains("apf_wq_add_opts.struct_size"),
        "{}",
        last_error()
    );
    assert_eq!(q.len(), 0, "nothing added");
    // A newer caller's larger struct: fine while the new field is zero.
    #[repr(C)]
    struct Newer {
        known: apf_wq_add_opts,
        future: u64,
    }
    let mut newer = Newer {
        known: plain(),
        future: 0,
    };
    newer.known.struct_size = std::mem::size_of::<Newer>();
    // SAFETY: live queue; key readable; opts readable for struct_size.
    let add = |n: &Newer| unsafe { apf_wq_add_with_opts(q.0, b"b".as_ptr(), 1, &n.known) };
    ok(add(&newer));
    newer.future = 9;
    assert_eq!(add(&newer), bad);
    assert!(
        last_error().contains("a newer header's field"),
        "{}",
        last_error()
    );
    assert_eq!(q.len(), 1);
}

#[test]
fn options_of_another_kind_are_refused() {
    let slow = apf_wq_add_opts {
        lane: SLOW,
        ..plain()
    };
    let prio = apf_wq_add_opts {
        has_priority: true,
        priority: 3,
        ..plain()
    };
    let fifo = Q::new(apf_wq_kind::APF_WQ_FIFO);
    assert_eq!(fifo.add_opts("a", slow), apf_status::APF_ERR_WQ_WRONG_KIND);
    assert_eq!(fifo.add_opts("a", prio), apf_status::APF_ERR_WQ_WRONG_KIND);
    assert_eq!(fifo.len(), 0, "nothing added");
    let lanes = Q::new(apf_wq_kind::APF_WQ_TWO_LANE);
    assert_eq!(lanes.add_opts("a", prio), apf_status::APF_ERR_WQ_WRONG_KIND);
    let pq = Q::new(apf_wq_kind::APF_WQ_PRIORITY);
    assert_eq!(pq.add_opts("a", slow), apf_status::APF_ERR_WQ_WRONG_KIND);
    let mut n = 0;
    // SAFETY: live queue; out writable.
    let s = unsafe { apf_wq_lane_len(pq.0, FAST, &mut n) };
    assert_eq!(s, apf_status::APF_ERR_WQ_WRONG_KIND);
    let mut o = options(apf_wq_kind::APF_WQ_FIFO, true);
    o.kind = 3;
    let mut q = null_mut();
    // SAFETY: readable; writable.
    let s = unsafe { apf_wq_new(&o, &mut q) };
    assert_eq!(s, apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(q.is_null());
}

// ----- priorities ----------------------------------------------------------

fn prio(priority: i32, after_nanos: u64) -> apf_wq_add_opts {
    apf_wq_add_opts {
        has_priority: true,
        priority,
        after_nanos,
        ..plain()
    }
}

#[test]
fn priority_queue_orders_by_priority_then_fifo() {
    let q = Q::new(apf_wq_kind::APF_WQ_PRIORITY);
    ok(q.add_opts("low1", prio(-1, 0)));
    ok(q.add_opts("mid1", prio(0, 0)));
    ok(q.add_opts("high1", prio(5, 0)));
    ok(q.add_opts("mid2", prio(0, 0)));
    ok(q.add_opts("high2", prio(5, 0)));
    q.add("mid3");
    let order: Vec<(String, i32)> = (0..6)
        .map(|_| {
            let g = q.try_get().unwrap();
            q.done(g.handle);
            (String::from_utf8(g.key).unwrap(), g.priority)
        })
        .collect();
    let want = [
        ("high1", 5),
        ("high2", 5),
        ("mid1", 0),
        ("mid2", 0),
        ("mid3", 0),
        ("low1", -1),
    ]
    .map(|(k, p)| (k.to_string(), p));
    assert_eq!(order, want);
}

#[test]
fn priority_duplicates_keep_highest_priority_and_shortest_delay() {
    let q = Q::new(apf_wq_kind::APF_WQ_PRIORITY);
    ok(q.add_opts("a", prio(1, 10 * MS)));
    ok(q.add_opts("a", prio(7, 30 * MS)));
    ok(q.add_opts("a", prio(3, 5 * MS)));
    ok(q.add_opts("b", prio(2, 0)));
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.len(), 1, "a waiting item is not counted as ready");
    let b = q.try_get().unwrap();
    assert_eq!(
        q.try_get(),
        Err(EMPTY),
        "a is not ready whatever its priority"
    );
    q.done(b.handle);
    q.advance(5 * MS);
    let a = q.try_get().unwrap();
    assert_eq!((a.key.as_slice(), a.priority), (&b"a"[..], 7));
    q.done(a.handle);
    // A ready add ends a wait; raising a queued item's priority moves it.
    ok(q.add_opts("c", prio(0, SECOND)));
    ok(q.add_opts("d", prio(1, 0)));
    ok(q.add_opts("c", prio(0, 0)));
    assert_eq!(q.waiting_len(), 0);
    ok(q.add_opts("c", prio(2, 0)));
    assert_eq!(q.take(), "c");
    assert_eq!(q.take(), "d");
}

#[test]
fn priority_rate_limited_adds_use_the_limiter_capped_by_after() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_wq_limiter_new_fast_slow(SECOND, SECOND, 1, out) });
    let q = Q::with_limiter(apf_wq_kind::APF_WQ_PRIORITY, l);
    let opts = apf_wq_add_opts {
        rate_limited: true,
        has_priority: true,
        priority: 4,
        ..plain()
    };
    ok(q.add_opts("a", opts));
    assert_eq!(q.requeues("a"), 1);
    q.advance(SECOND - 1);
    assert_eq!(q.len(), 0);
    q.advance(1);
    let a = q.try_get().unwrap();
    assert_eq!(a.priority, 4);
    q.done(a.handle);
    // A shorter `after` caps the limiter's delay.
    ok(q.add_opts(
        "a",
        apf_wq_add_opts {
            after_nanos: MS,
            ..opts
        },
    ));
    q.advance(MS);
    assert_eq!(q.take(), "a");
    // The same capping for a FIFO queue.
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_wq_limiter_new_fast_slow(SECOND, SECOND, 1, out) });
    let f = Q::with_limiter(apf_wq_kind::APF_WQ_FIFO, l);
    let capped = apf_wq_add_opts {
        rate_limited: true,
        after_nanos: MS,
        ..plain()
    };
    ok(f.add_opts("a", capped));
    f.advance(MS);
    assert_eq!(f.take(), "a");
    assert_eq!(f.requeues("a"), 1);
}

// ----- metrics -------------------------------------------------------------

#[test]
fn metrics_text_has_client_go_names() {
    let mut o = options(apf_wq_kind::APF_WQ_FIFO, true);
    let name = "controller-x";
    o.name = name.as_ptr().cast();
    o.name_len = name.len();
    let q = Q::with(&o);
    q.add("a");
    q.add("b");
    let a = q.try_get().unwrap();
    q.advance(2 * SECOND);
    q.add_after("c", MS);
    let text = q.metrics();
    for series in [
        "workqueue_depth{name=\"controller-x\"} 1",
        "workqueue_adds_total{name=\"controller-x\"} 2",
        "workqueue_retries_total{name=\"controller-x\"} 1",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_unfinished_work_seconds{name=\"controller-x\"} 2",
        "workqueue_longest_running_processor_seconds{name=\"controller-x\"} 2",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        !text.contains("workqueue_work_duration_seconds"),
        "no observation yet"
    );
    q.done(a.handle);
    let text = q.metrics();
    assert!(
        text.contains(
            "workqueue_work_duration_seconds_bucket{le=\"10.0\",name=\"controller-x\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("workqueue_unfinished_work_seconds{name=\"controller-x\"} 0"));
    // Unnamed: no series, as in client-go.
    let unnamed = Q::new(apf_wq_kind::APF_WQ_FIFO);
    unnamed.add("a");
    assert!(!unnamed.metrics().contains("workqueue_"));
    // Invalid UTF-8 in a name.
    let bad = [0xffu8, 0xfe];
    o.name = bad.as_ptr().cast();
    o.name_len = bad.len();
    let mut p = null_mut();
    // SAFETY: readable; writable.
    assert_eq!(
        unsafe { apf_wq_new(&o, &mut p) },
        apf_status::APF_ERR_INVALID_UTF8
    );
}

// ----- handles, NULLs, panics, clocks --------------------------------------

#[test]
fn stale_double_and_foreign_handles_are_errors() {
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    let other = Q::new(apf_wq_kind::APF_WQ_FIFO);
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
    assert!(last_error().contains("already done"), "{}", last_error());
    // The slot's reuse does not revive the old handle.
    q.add("b");
    let b = q.try_get().unwrap();
    assert_eq!(q.done_status(a.handle), apf_status::APF_ERR_INVALID_HANDLE);
    q.done(b.handle);
    other.done(theirs.handle);
}

#[test]
fn null_pointers_are_errors() {
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    let nq: *mut apf_workqueue = null_mut();
    let null_status = apf_status::APF_ERR_NULL_POINTER;
    let mut n = 0usize;
    let mut u = 0u32;
    let mut b = false;
    let mut item = std::mem::MaybeUninit::<apf_wq_item>::uninit();
    // SAFETY: every call is given NULL where the test says so and valid
    // pointers elsewhere.
    unsafe {
        assert_eq!(apf_wq_options_default(null_mut()), null_status);
        assert_eq!(apf_wq_new(null(), null_mut()), null_status);
        assert_eq!(apf_wq_add(nq, b"a".as_ptr(), 1), null_status);
        assert_eq!(apf_wq_add(q.0, null(), 1), null_status);
        assert!(last_error().contains("key"));
        assert_eq!(apf_wq_add_with_opts(nq, null(), 0, null()), null_status);
        assert_eq!(apf_wq_add_after(nq, null(), 0, 1), null_status);
        assert_eq!(apf_wq_add_rate_limited(nq, null(), 0), null_status);
        assert_eq!(apf_wq_add_rate_limited(q.0, null(), 5), null_status);
        assert_eq!(apf_wq_get(nq, 0, item.as_mut_ptr()), null_status);
        assert_eq!(apf_wq_get(q.0, 0, null_mut()), null_status);
        assert_eq!(apf_wq_try_get(nq, item.as_mut_ptr()), null_status);
        assert_eq!(apf_wq_try_get(q.0, null_mut()), null_status);
        assert_eq!(apf_wq_done(nq, 1), null_status);
        assert_eq!(apf_wq_forget(nq, null(), 0), null_status);
        assert_eq!(apf_wq_num_requeues(nq, null(), 0, &mut u), null_status);
        assert_eq!(apf_wq_num_requeues(q.0, null(), 0, null_mut()), null_status);
        assert_eq!(apf_wq_len(nq, &mut n), null_status);
        assert_eq!(apf_wq_len(q.0, null_mut()), null_status);
        assert_eq!(apf_wq_waiting_len(nq, &mut n), null_status);
        assert_eq!(apf_wq_waiting_len(q.0, null_mut()), null_status);
        assert_eq!(apf_wq_lane_len(nq, 0, &mut n), null_status);
        assert_eq!(apf_wq_processing(nq, &mut n), null_status);
        assert_eq!(apf_wq_shut_down(nq), null_status);
        assert_eq!(apf_wq_shut_down_with_drain(nq), null_status);
        assert_eq!(apf_wq_shutting_down(nq, &mut b), null_status);
        assert_eq!(apf_wq_shutting_down(q.0, null_mut()), null_status);
        assert_eq!(apf_wq_advance_clock(nq, 1), null_status);
        let mut t = apf_text {
            ptr: null(),
            len: 0,
        };
        assert_eq!(apf_wq_metrics_text(nq, &mut t), null_status);
        assert_eq!(apf_wq_metrics_text(q.0, null_mut()), null_status);
        assert!(t.ptr.is_null(), "out untouched on error");
        assert_eq!(apf_wq_add_opts_default(null_mut()), null_status);
        assert_eq!(apf_wq_limiter_new_default(null_mut()), null_status);
        assert_eq!(
            apf_wq_limiter_new_exponential(1, 2, null_mut()),
            null_status
        );
        apf_wq_free(null_mut());
    }
    assert!(!q.shutting_down(), "nothing reached the queue");
    assert_eq!(q.len(), 0);
}

#[test]
fn panics_are_contained_and_the_queue_stays_usable() {
    let q = Q::new(apf_wq_kind::APF_WQ_FIFO);
    q.add("a");
    let a = q.try_get().unwrap();
    // SAFETY: NULL or live.
    assert_eq!(
        unsafe { apf_wq_test_panic(null_mut()) },
        apf_status::APF_ERR_PANIC
    );
    assert!(last_error().contains("panic"));
    // SAFETY: live queue.
    assert_eq!(unsafe { apf_wq_test_panic(q.0) }, apf_status::APF_ERR_PANIC);
    // The poisoned lock is recovered: handles on that shard still work.
    q.add("b");
    let b = q.try_get().unwrap();
    q.done(a.handle);
    q.done(b.handle);
    assert_eq!(q.try_get(), Err(EMPTY));
}

#[test]
fn the_real_clock_cannot_be_advanced() {
    let q = Q::with(&options(apf_wq_kind::APF_WQ_FIFO, false));
    // SAFETY: live queue.
    let s = unsafe { apf_wq_advance_clock(q.0, 1) };
    assert_eq!(s, apf_status::APF_ERR_NOT_MANUAL_CLOCK);
    // A real-clock delay does happen (a short one).
    q.add_after("a", MS);
    let got = q.get(10 * SECOND).unwrap();
    assert_eq!(got.key, b"a");
    q.done(got.handle);
    // NULL options: the defaults (real clock, FIFO).
    let mut p = null_mut();
    // SAFETY: writable.
    ok(unsafe { apf_wq_new(null(), &mut p) });
    let d = Q(p);
    // SAFETY: live queue.
    assert_eq!(
        unsafe { apf_wq_advance_clock(d.0, 1) },
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
            apf_status::APF_ERR_WQ_WRONG_KIND as u32,
            &mut text,
            &mut len,
        )
    });
    assert_eq!(apf_status::APF_ERR_WQ_WRONG_KIND as u32, 7014);
    assert!(len > 0);
}

// ----- many threads --------------------------------------------------------

#[test]
fn many_producers_and_consumers_lose_nothing_and_never_share_a_key() {
    for kind in [
        apf_wq_kind::APF_WQ_FIFO,
        apf_wq_kind::APF_WQ_TWO_LANE,
        apf_wq_kind::APF_WQ_PRIORITY,
    ] {
        const PRODUCERS: usize = 4;
        const CONSUMERS: usize = 6;
        const ADDS: usize = 3000;
        const KEYS: usize = 50;
        let q = Arc::new(Q::new(kind));
        let in_flight = Arc::new(Mutex::new(HashSet::<Vec<u8>>::new()));
        let processed = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|c| {
                let (q, in_flight, processed) = (q.clone(), in_flight.clone(), processed.clone());
                std::thread::spawn(move || {
                    let mut seen = HashSet::new();
                    loop {
                        // Alternate blocking forms: forever, timed, try.
                        let got = match c % 3 {
                            0 => q.get(u64::MAX),
                            1 => q.get(MS),
                            _ => q.try_get(),
                        };
                        let g = match got {
                            Ok(g) => g,
                            Err(SHUT_DOWN) => return seen,
                            Err(_) => {
                                std::thread::yield_now();
                                continue;
                            }
                        };
                        assert!(
                            in_flight.lock().unwrap().insert(g.key.clone()),
                            "{kind:?}: key processed by two workers at once"
                        );
                        seen.insert(g.key.clone());
                        processed.fetch_add(1, Ordering::Relaxed);
                        in_flight.lock().unwrap().remove(&g.key);
                        q.done(g.handle);
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..ADDS {
                        let key = format!("k{}", (i * PRODUCERS + p) % KEYS);
                        match (kind, i % 3) {
                            (apf_wq_kind::APF_WQ_TWO_LANE, 1) => ok(q.add_opts(
                                &key,
                                apf_wq_add_opts {
                                    lane: SLOW,
                                    ..plain()
                                },
                            )),
                            (apf_wq_kind::APF_WQ_PRIORITY, 1) => {
                                ok(q.add_opts(&key, prio((i % 5) as i32, 0)))
                            }
                            _ => q.add(&key),
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        // Every key was added after the last time any worker took it, so
        // each must be processed at least once more: drain, then check.
        // SAFETY: live queue; workers still run and will call done.
        ok(unsafe { apf_wq_shut_down_with_drain(q.0) });
        let mut all = HashSet::new();
        for c in consumers {
            all.extend(c.join().unwrap());
        }
        assert_eq!(all.len(), KEYS, "{kind:?}: every key was processed");
        assert!(processed.load(Ordering::Relaxed) >= KEYS);
        assert_eq!(q.processing(), 0);
        assert_eq!(q.len(), 0, "{kind:?}: nothing left behind");
    }
}

#[test]
fn an_add_during_processing_is_processed_after_done_under_contention() {
    // The last add of each key happens while some worker may process it:
    // after the drain, the number of times each key was processed after
    // its last add must be at least one.
    let q = Arc::new(Q::new(apf_wq_kind::APF_WQ_FIFO));
    let last_add = Arc::new(Mutex::new(std::collections::HashMap::<Vec<u8>, u64>::new()));
    let stamp = Arc::new(AtomicUsize::new(0));
    let seen_after = Arc::new(Mutex::new(HashSet::<Vec<u8>>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, last_add, stamp, seen_after) = (
                q.clone(),
                last_add.clone(),
                stamp.clone(),
                seen_after.clone(),
            );
            std::thread::spawn(move || loop {
                let g = match q.get(u64::MAX) {
                    Ok(g) => g,
                    Err(_) => return,
                };
                let now = stamp.fetch_add(1, Ordering::SeqCst) as u64;
                if last_add
                    .lock()
                    .unwrap()
                    .get(&g.key)
                    .is_some_and(|&t| t < now)
                {
                    seen_after.lock().unwrap().insert(g.key.clone());
                }
                q.done(g.handle);
            })
        })
        .collect();
    for i in 0..2000 {
        let key = format!("k{}", i % 10);
        // Record the stamp before the add: a get after the add sees a
        // larger stamp.
        let t = stamp.fetch_add(1, Ordering::SeqCst) as u64;
        last_add.lock().unwrap().insert(key.clone().into_bytes(), t);
        q.add(&key);
    }
    // SAFETY: live queue.
    ok(unsafe { apf_wq_shut_down_with_drain(q.0) });
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        seen_after.lock().unwrap().len(),
        10,
        "no key's last add was lost"
    );
}
