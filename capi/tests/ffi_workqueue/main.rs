//! The workqueue C ABI (`apf_workqueue_*`), called from Rust exactly as C calls
//! it: client-go's rules (dirty and processing sets, shutdown, drain),
//! delays and every rate limiter on the manual clock, two lanes,
//! priorities, metrics text, item handles (stale, double done, foreign),
//! NULLs, bad parameters, the panic boundary, and many threads. One module
//! a concept; the queue wrapper they all use is here.
#![cfg(not(loom))]

#[path = "../support/ffi.rs"]
mod support;
use apf_capi::*;
use std::ptr::null_mut;
use support::{err, last_error, text_of, MS, SECOND};

mod handles;
mod kinds;
mod limiters;
mod metrics;
mod rules;
mod threads;

#[allow(improper_ctypes)]
extern "C" {
    // Testing aids exported by libapf but kept out of apf.h.
    fn apf_workqueue_test_panic(queue: *mut apf_workqueue) -> apf_status;
    fn apf_workqueue_test_parked(queue: *mut apf_workqueue, out: *mut usize) -> apf_status;
}

/// A plain add's options, from `apf_workqueue_add_options_default`.
fn plain() -> apf_workqueue_add_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    ok(unsafe { apf_workqueue_add_options_default(o.as_mut_ptr()) });
    // SAFETY: written on APF_OK.
    unsafe { o.assume_init() }
}

/// A priority add's options: `priority`, after `after_nanos`.
fn prio(priority: i32, after_nanos: u64) -> apf_workqueue_add_options {
    apf_workqueue_add_options {
        has_priority: true,
        priority,
        after_nanos,
        ..plain()
    }
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
        // SAFETY: from apf_workqueue_new; no call follows (threads are joined).
        unsafe { apf_workqueue_free(self.0) }
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

fn options(kind: apf_workqueue_kind, manual: bool) -> apf_workqueue_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    ok(unsafe { apf_workqueue_options_default(o.as_mut_ptr()) });
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.kind = kind as u32;
    o.manual_clock = manual;
    o
}

impl Q {
    fn with(o: &apf_workqueue_options) -> Q {
        let mut q = null_mut();
        // SAFETY: options readable, out writable.
        ok(unsafe { apf_workqueue_new(o, &mut q, err()) });
        assert!(!q.is_null());
        Q(q)
    }

    fn new(kind: apf_workqueue_kind) -> Q {
        Q::with(&options(kind, true))
    }

    fn with_limiter(kind: apf_workqueue_kind, limiter: Limiter) -> Q {
        let mut o = options(kind, true);
        o.limiter = limiter.0;
        Q::with(&o)
        // `limiter` is freed here: the queue keeps its own copy.
    }

    fn add(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_workqueue_add(self.0, key.as_ptr(), key.len()) });
    }

    fn add_opts(&self, key: &str, opts: apf_workqueue_add_options) -> apf_status {
        // SAFETY: live queue; key and opts readable.
        unsafe { apf_workqueue_add_with_options(self.0, key.as_ptr(), key.len(), &opts) }
    }

    fn add_after(&self, key: &str, delay: u64) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_workqueue_add_after(self.0, key.as_ptr(), key.len(), delay) });
    }

    fn add_rate_limited(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_workqueue_add_rate_limited(self.0, key.as_ptr(), key.len()) });
    }

    fn forget(&self, key: &str) {
        // SAFETY: live queue; key readable.
        ok(unsafe { apf_workqueue_forget(self.0, key.as_ptr(), key.len()) });
    }

    fn requeues(&self, key: &str) -> u32 {
        let mut n = 0;
        // SAFETY: live queue; key readable; out writable.
        ok(unsafe { apf_workqueue_num_requeues(self.0, key.as_ptr(), key.len(), &mut n) });
        n
    }

    fn get_raw(&self, timeout: u64) -> apf_workqueue_item {
        let mut item = std::mem::MaybeUninit::uninit();
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_get(self.0, timeout, item.as_mut_ptr()) });
        // SAFETY: written on APF_OK.
        unsafe { item.assume_init() }
    }

    /// The next item, or the result code when there is none.
    fn get(&self, timeout: u64) -> Result<Got, u32> {
        let item = self.get_raw(timeout);
        if item.result != apf_workqueue_get_result::APF_WORKQUEUE_ITEM as u32 {
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
        ok(unsafe { apf_workqueue_done(self.0, handle) });
    }

    fn done_status(&self, handle: u64) -> apf_status {
        // SAFETY: live queue.
        unsafe { apf_workqueue_done(self.0, handle) }
    }

    fn len(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_len(self.0, &mut n) });
        n
    }

    fn waiting_len(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_waiting_len(self.0, &mut n) });
        n
    }

    fn processing(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_processing(self.0, &mut n) });
        n
    }

    fn parked(&self) -> usize {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_test_parked(self.0, &mut n) });
        n
    }

    fn advance(&self, nanos: u64) {
        // SAFETY: live queue.
        ok(unsafe { apf_workqueue_advance_clock(self.0, nanos) });
    }

    fn shut_down(&self) {
        // SAFETY: live queue.
        ok(unsafe { apf_workqueue_shut_down(self.0) });
    }

    fn shutting_down(&self) -> bool {
        let mut b = false;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_shutting_down(self.0, &mut b) });
        b
    }

    fn metrics(&self) -> String {
        // SAFETY: live queue; writable apf_text.
        text_of(|t| unsafe { apf_workqueue_metrics_text(self.0, t) })
    }
}

/// Owns a limiter description.
struct Limiter(*mut apf_rate_limiter);

impl Drop for Limiter {
    fn drop(&mut self) {
        // SAFETY: from apf_rate_limiter_new_*; not used afterwards.
        unsafe { apf_rate_limiter_free(self.0) }
    }
}

fn limiter(f: impl FnOnce(*mut *mut apf_rate_limiter) -> apf_status) -> Limiter {
    let mut l = null_mut();
    ok(f(&mut l));
    assert!(!l.is_null());
    Limiter(l)
}

const EMPTY: u32 = apf_workqueue_get_result::APF_WORKQUEUE_EMPTY as u32;
const SHUT_DOWN: u32 = apf_workqueue_get_result::APF_WORKQUEUE_SHUT_DOWN as u32;
const TIMED_OUT: u32 = apf_workqueue_get_result::APF_WORKQUEUE_TIMED_OUT as u32;
const FAST: u32 = apf_workqueue_lane::APF_WORKQUEUE_LANE_FAST as u32;
const SLOW: u32 = apf_workqueue_lane::APF_WORKQUEUE_LANE_SLOW as u32;
