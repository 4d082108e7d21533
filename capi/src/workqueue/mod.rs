//! `apf_workqueue`: client-go's workqueue family through the C ABI (FIFO,
//! two-lane and priority queues, each delaying and rate-limiting), with
//! byte-string keys and generation-checked item handles.
//!
//! The pointer C holds is a box around an `Arc` of the queue: calls that
//! block (`apf_workqueue_get` with a timeout, `apf_workqueue_shut_down_with_drain`) hold
//! their own reference, so `apf_workqueue_free` can shut the queue down and wake
//! them without waiting for them to leave.

/// Run `$body` with `$q` bound to whichever queue `$kind` holds (the
/// methods all three share).
macro_rules! each {
    ($kind:expr, $q:ident => $body:expr) => {
        match $kind {
            Kind::Fifo($q) => $body,
            Kind::TwoLane($q) => $body,
            Kind::Priority($q) => $body,
        }
    };
}

mod items;
mod limiter;
mod queue;
mod types;

pub use limiter::*;
pub use types::*;

use super::cast::{bytes_from_raw, free_box, to_boxed_mut_ptr};
use super::sized::{read_growable, Growable};
use super::status::{apf_status, fail};
use super::text::{apf_text, text_out};
use crate::error::apf_error;
use crate::sync::Arc;
use apf::workqueue::Lane;
use items::Key;
use queue::{metrics_text, AddRequest, Core, FfiWorkqueue, Kind, Wait};
use std::time::Duration;

/// Early-return on a bad key `(ptr, len)`, else give the key as an `Arc`.
macro_rules! try_key {
    ($ptr:expr, $len:expr) => {{
        // SAFETY: the caller vouches that a non-NULL key is readable for
        // `len` bytes during the call.
        match unsafe { bytes_from_raw($ptr, $len) } {
            Ok(bytes) => Key::from(bytes),
            Err(e) => return fail(e.status(), format_args!("key {}", e.describe())),
        }
    }};
}

/// Early-return on a NULL queue, else borrow it.
macro_rules! try_queue {
    ($q:ident) => {
        &try_ref_from_ptr!($q).core
    };
}

/// Fill `*out` with the default options: a FIFO queue on the real clock,
/// unnamed, with client-go's default controller limiter and the default
/// limiter state bounds.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_options_default(
    out: *mut apf_workqueue_options,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_workqueue_options::defaults());
        apf_status::APF_OK
    }
}

/// Fill `*out` with a plain add's options: no delay, not rate limited, the
/// fast lane, no priority.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_add_options_default(
    out: *mut apf_workqueue_add_options,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_workqueue_add_options::defaults());
        apf_status::APF_OK
    }
}

/// Create a queue. `options` may be NULL for `apf_workqueue_options_default`'s.
/// Errors: `APF_ERR_INVALID_PARAMETER` (unknown kind), `APF_ERR_INVALID_UTF8`
/// (name). On success `*out` owns the queue; free it with `apf_workqueue_free`.
/// Nothing `options` points to is kept after the call.
///
/// # Safety
/// `options` must be NULL or readable, its `name` readable for `name_len`
/// bytes (or NULL with 0), its `limiter` NULL or live; `out` NULL or
/// writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_new(
    options: *const apf_workqueue_options,
    out: *mut *mut apf_workqueue,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let out = try_out!(out);
        // SAFETY: a non-NULL `options` is readable (contract above).
        let options = match unsafe { read_growable(options) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        match Core::new(&options) {
            Ok(core) => {
                out.write(to_boxed_mut_ptr(FfiWorkqueue { core: Arc::new(core) }));
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Shut the queue down and free it. Workers blocked in `apf_workqueue_get` (and
/// a caller blocked in `apf_workqueue_shut_down_with_drain`) wake and return
/// (`APF_WORKQUEUE_SHUT_DOWN`; `APF_OK`) without touching freed memory; every item
/// handle and key pointer of the queue becomes invalid, including those of
/// items still processing (do not `apf_workqueue_done` them). NULL is a no-op.
///
/// # Safety
/// `queue` must be NULL or a queue not yet freed. No call on it may be
/// starting or running, except calls blocked in `apf_workqueue_get` or
/// `apf_workqueue_shut_down_with_drain`; none may follow.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_free(queue: *mut apf_workqueue) {
    ffi_panic_boundary! {
        // SAFETY: NULL or live (contract above).
        if let Some(q) = unsafe { super::cast::try_from(queue) } {
            each!(&q.core.kind, q => q.shut_down());
        }
        // SAFETY: the caller hands over ownership (contract above). Blocked
        // callers hold their own reference to the queue's core.
        unsafe { free_box(queue) }
    }
}

/// Add `(key, key_len)` (an arbitrary byte string, copied; (NULL, 0) is the
/// empty key) to be processed: queued once however often it is added before
/// a worker takes it; if it is processing, queued again when it is done.
/// Ignored after shutdown. Two-lane queues: the fast lane. Priority queues:
/// priority 0, and a ready add ends a wait.
///
/// # Safety
/// `queue` must be NULL or live; `key` readable for `key_len` bytes (or NULL
/// with 0).
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_add(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let key = try_key!(key, key_len);
        core.add(key, &AddRequest { after: 0, rate_limited: false, lane: Lane::Fast, priority: None });
        apf_status::APF_OK
    }
}

/// Add with options (see `apf_workqueue_add_options`; `opts` NULL is a plain add):
/// a delay, rate limiting, a lane (two-lane queues: adding a queued item
/// with the other lane moves it to the back of that lane; the latest add
/// decides), a priority (priority queues: a duplicate keeps the highest
/// priority and the shortest delay). `APF_ERR_WORKQUEUE_WRONG_KIND` for a slow
/// lane on a queue without lanes or a priority on a non-priority queue;
/// `APF_ERR_INVALID_PARAMETER` for an unknown lane.
///
/// # Safety
/// As `apf_workqueue_add`; `opts` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_add_with_options(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
    opts: *const apf_workqueue_add_options,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let key = try_key!(key, key_len);
        // SAFETY: NULL or readable (contract above).
        let opts = match unsafe { read_growable(opts) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        match core.request(&opts) {
            Ok(request) => {
                core.add(key, &request);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Add once `delay_nanos` have passed on the queue's clock (client-go's
/// `AddAfter`): an item already waiting keeps the earlier time; 0 adds now.
/// FIFO and two-lane queues count every call in `workqueue_retries_total`
/// (as client-go); priority queues count delayed ones.
///
/// # Safety
/// As `apf_workqueue_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_add_after(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
    delay_nanos: u64,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let key = try_key!(key, key_len);
        core.add_after(key, delay_nanos);
        apf_status::APF_OK
    }
}

/// Add after the delay the queue's rate limiter gives this key (client-go's
/// `AddRateLimited`); the limiter counts it as a failure of the key (see
/// `apf_workqueue_num_requeues`, `apf_workqueue_forget`).
///
/// # Safety
/// As `apf_workqueue_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_add_rate_limited(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let key = try_key!(key, key_len);
        core.add_rate_limited(key);
        apf_status::APF_OK
    }
}

/// Take the next item, waiting up to `timeout_nanos` of real time (whatever
/// the queue's clock) while none is ready: `UINT64_MAX` waits forever, 0
/// does not wait (`APF_WORKQUEUE_EMPTY` when nothing is ready). On `APF_OK`,
/// `out->result` says what happened: `APF_WORKQUEUE_ITEM` (process it, then
/// `apf_workqueue_done(queue, out->item)`; the key stays valid until then),
/// `APF_WORKQUEUE_SHUT_DOWN` (nothing ready and the queue is shutting down: stop),
/// `APF_WORKQUEUE_TIMED_OUT`. A waiting caller holds no lock: any number of threads
/// may wait at once, and each ready item wakes exactly one of them.
/// `apf_workqueue_shut_down` and `apf_workqueue_free` wake them all.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_get(
    queue: *mut apf_workqueue,
    timeout_nanos: u64,
    out: *mut apf_workqueue_item,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        // The waiting call's own reference: apf_workqueue_free may drop the box's.
        let core = Arc::clone(try_queue!(queue));
        let wait = match timeout_nanos {
            0 => Wait::Never,
            u64::MAX => Wait::Forever,
            t => Wait::For(Duration::from_nanos(t)),
        };
        match core.hand_out(core.get(wait)) {
            Ok(item) => {
                out.write(item);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// `apf_workqueue_get` without waiting: `out->result` is `APF_WORKQUEUE_ITEM`,
/// `APF_WORKQUEUE_EMPTY` or `APF_WORKQUEUE_SHUT_DOWN`.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_try_get(
    queue: *mut apf_workqueue,
    out: *mut apf_workqueue_item,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        let core = try_queue!(queue);
        match core.hand_out(core.get(Wait::Never)) {
            Ok(item) => {
                out.write(item);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Finish processing the item `item` (a handle from `apf_workqueue_get`): if its
/// key was added again meanwhile, it is queued again now. The handle and its
/// key pointer become invalid. May be called from any thread.
/// `APF_ERR_INVALID_HANDLE` for 0, a handle already done, or one this queue
/// never issued; the queue is unchanged then.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_done(queue: *mut apf_workqueue, item: u64) -> apf_status {
    ffi_panic_boundary! {
        try_queue!(queue).done(item)
    }
}

/// Stop tracking the key's failures in the rate limiter (after a success,
/// or on giving up): its next rate-limited add waits the first delay
/// again. The item must still be done.
///
/// # Safety
/// As `apf_workqueue_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_forget(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let key = try_key!(key, key_len);
        core.limiter.forget(&key);
        apf_status::APF_OK
    }
}

/// How many rate-limited adds of the key the limiter has counted since it
/// was last forgotten (0 for limiters that keep no per-item state).
///
/// # Safety
/// As `apf_workqueue_add`; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_num_requeues(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
    out: *mut u32,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        let key = try_key!(key, key_len);
        out.write(core.limiter.num_requeues(&key));
        apf_status::APF_OK
    }
}

/// How many items are ready to be handed out (client-go's `Len`: not
/// counting items processing, even if added again, nor items waiting for a
/// delay). For information: it may change before you look at it.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_len(
    queue: *mut apf_workqueue,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(each!(&core.kind, q => q.len()));
        apf_status::APF_OK
    }
}

/// How many items wait for a delay (`apf_workqueue_add_after`, rate limiting).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_waiting_len(
    queue: *mut apf_workqueue,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(each!(&core.kind, q => q.waiting_len()));
        apf_status::APF_OK
    }
}

/// How many items a lane of a two-lane queue holds ready
/// (`APF_ERR_WORKQUEUE_WRONG_KIND` for other kinds).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_lane_len(
    queue: *mut apf_workqueue,
    lane: u32,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        let request = match core.request(&apf_workqueue_add_options { lane, ..Growable::defaults() }) {
            Ok(r) => r,
            Err(status) => return status,
        };
        match &core.kind {
            Kind::TwoLane(q) => {
                out.write(q.inspect_strategy(|s| s.lane_len(request.lane)));
                apf_status::APF_OK
            }
            _ => fail(
                apf_status::APF_ERR_WORKQUEUE_WRONG_KIND,
                format_args!("apf_workqueue_lane_len on {}", core.kind_name()),
            ),
        }
    }
}

/// Shut the queue down: further adds are ignored, waiting delays end (their
/// items are dropped), workers get what is ready and then
/// `APF_WORKQUEUE_SHUT_DOWN`; blocked workers wake. Returns at once; may be called
/// more than once, and ends a `apf_workqueue_shut_down_with_drain`'s wait.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_shut_down(queue: *mut apf_workqueue) -> apf_status {
    ffi_panic_boundary! {
        each!(&try_queue!(queue).kind, q => q.shut_down());
        apf_status::APF_OK
    }
}

/// `apf_workqueue_shut_down`, then wait until no item is processing: every handle
/// handed out must be done (by other threads: calling this from the only
/// thread holding items never returns). `apf_workqueue_shut_down` or
/// `apf_workqueue_free` from another thread ends the wait early.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_shut_down_with_drain(
    queue: *mut apf_workqueue,
) -> apf_status {
    ffi_panic_boundary! {
        // The waiting call's own reference: apf_workqueue_free may drop the box's.
        let core = Arc::clone(try_queue!(queue));
        each!(&core.kind, q => q.shut_down_with_drain());
        apf_status::APF_OK
    }
}

/// Whether a shutdown was requested.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_shutting_down(
    queue: *mut apf_workqueue,
    out: *mut bool,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(each!(&core.kind, q => q.shutting_down()));
        apf_status::APF_OK
    }
}

/// Move the queue's manual clock forward by `nanos`: delayed and
/// rate-limited items whose time comes are added, each at its own time,
/// before this returns. `APF_ERR_NOT_MANUAL_CLOCK` for a real clock.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_advance_clock(
    queue: *mut apf_workqueue,
    nanos: u64,
) -> apf_status {
    ffi_panic_boundary! {
        match &try_queue!(queue).manual {
            Some(manual) => {
                manual.advance(Duration::from_nanos(nanos));
                apf_status::APF_OK
            }
            None => fail(
                apf_status::APF_ERR_NOT_MANUAL_CLOCK,
                "apf_workqueue_advance_clock: the queue runs on the real clock",
            ),
        }
    }
}

/// The queue's metrics with client-go's names (`workqueue_depth`,
/// `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
/// `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds`,
/// `workqueue_longest_running_processor_seconds`, `workqueue_retries_total`,
/// label `name`) in the OpenMetrics text format, ending with `# EOF`. An
/// unnamed queue exports no series, as in client-go.
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_metrics_text(
    queue: *mut apf_workqueue,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        // SAFETY: `out` per the contract.
        unsafe { text_out(out, || metrics_text(core.metrics())) }
    }
}

/// How many item handles are live (items processing through this queue).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_workqueue_processing(
    queue: *mut apf_workqueue,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(core.items.live());
        apf_status::APF_OK
    }
}

// The test-only exports (apf_workqueue_test_panic, apf_workqueue_test_parked) live apart,
// built only with the `test-hooks` feature, so the installed library does
// not carry them.
#[cfg(feature = "test-hooks")]
mod test_hooks;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use test_hooks::*;
