//! The C types of the workqueue ABI: the opaque queue, the kind, lane and
//! get-result codes, the option structs (which carry their size so they
//! can grow) and the item a get fills in.

use super::limiter::apf_rate_limiter;
use crate::sized::Growable;
use std::ffi::c_char;

/// A work queue of byte-string keys (client-go's rules: an item added while
/// queued is queued once; one added while being processed is queued again
/// only after `apf_workqueue_done`, so no key is ever processed by two workers at
/// once; after shutdown, adds are ignored and `apf_workqueue_get` hands out what is
/// queued, then reports `APF_WORKQUEUE_SHUT_DOWN`). Every queue delays
/// (`apf_workqueue_add_after`) and rate-limits (`apf_workqueue_add_rate_limited`).
///
/// Thread safety: every function may be called on one queue from any number
/// of threads at once, and an item handle may be done from any thread, with
/// one exception: `apf_workqueue_free`. It must not overlap any call that is
/// starting or running, except calls blocked inside `apf_workqueue_get` or
/// `apf_workqueue_shut_down_with_drain`, which it wakes (they return
/// `APF_WORKQUEUE_SHUT_DOWN` and `APF_OK`) and which then touch nothing freed; no
/// call may follow it. The simple safe order is `apf_workqueue_shut_down`, join the
/// workers, `apf_workqueue_free`.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_workqueue {
    _private: [u8; 0],
}

/// The kind of queue (`apf_workqueue_options.kind`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_workqueue_kind {
    /// First in, first out (client-go's default).
    APF_WORKQUEUE_FIFO = 0,
    /// A fast and a slow lane, each FIFO; slow items are handed out only
    /// while the fast lane is empty. Adding a queued item with the other
    /// lane moves it to the back of that lane.
    APF_WORKQUEUE_TWO_LANE = 1,
    /// Integer priorities, highest first, FIFO within one priority
    /// (controller-runtime's priority queue): of all adds of an item not yet
    /// handed out, the highest priority and the shortest delay win.
    APF_WORKQUEUE_PRIORITY = 2,
}

/// A lane of a two-lane queue (`apf_workqueue_add_options.lane`, `apf_workqueue_item.lane`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_workqueue_lane {
    /// Served first; the default lane of every add.
    APF_WORKQUEUE_LANE_FAST = 0,
    /// Served only while the fast lane is empty.
    APF_WORKQUEUE_LANE_SLOW = 1,
}

/// What `apf_workqueue_get` found (`apf_workqueue_item.result`). None is an error.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_workqueue_get_result {
    /// An item: process it, then `apf_workqueue_done` its handle.
    APF_WORKQUEUE_ITEM = 0,
    /// Nothing ready now (`apf_workqueue_try_get`, or `apf_workqueue_get` with timeout 0).
    APF_WORKQUEUE_EMPTY = 1,
    /// The queue is shutting down and nothing is ready: stop working.
    APF_WORKQUEUE_SHUT_DOWN = 2,
    /// The timeout of `apf_workqueue_get` passed with nothing ready.
    APF_WORKQUEUE_TIMED_OUT = 3,
}

/// How `apf_workqueue_new` builds a queue. Start from `apf_workqueue_options_default`,
/// which sets `struct_size` (so later versions can add fields).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_workqueue_options {
    /// `sizeof(apf_workqueue_options)` as the caller's header knows it; set by
    /// `apf_workqueue_options_default`.
    pub struct_size: usize,
    /// An `apf_workqueue_kind` (default `APF_WORKQUEUE_FIFO`).
    pub kind: u32,
    /// Run on a manual clock that starts at 0 and moves only through
    /// `apf_workqueue_advance_clock` (delays, rate limits and timed metrics);
    /// otherwise the real monotonic clock. `apf_workqueue_get`'s timeout is real
    /// time either way.
    pub manual_clock: bool,
    /// The queue's name `(name, name_len)`, UTF-8: the `name` label of its
    /// metrics. May be empty (NULL, 0): an unnamed queue exports no metrics,
    /// as in client-go. Copied; need not outlive the call.
    pub name: *const c_char,
    /// The length of `name` in bytes.
    pub name_len: usize,
    /// The rate limiter (copied; free yours whenever you like); NULL for
    /// client-go's default controller limiter (`apf_rate_limiter_new_default`).
    pub limiter: *const apf_rate_limiter,
    /// How many items one generation of a per-item limiter's state holds
    /// before it ages early (memory is bounded by twice this); 0 for the
    /// library's default, 2^20.
    pub limiter_state_capacity: u64,
    /// Per-item limiter state idle this long is forgotten (an item idle for
    /// twice this always is); 0 for the default: twice the limiter's longest
    /// delay, at least a minute.
    pub limiter_idle_expiry_nanos: u64,
    /// Items the queue's index holds before it first grows (growing rehashes
    /// under the queue's lock: say 1000000 if it will hold a million); 0 to
    /// grow as needed. Values above 2^28 count as 2^28.
    pub capacity: u64,
}

/// Options of `apf_workqueue_add_with_options`. Start from `apf_workqueue_add_options_default`
/// (a plain add), which sets `struct_size`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_workqueue_add_options {
    /// `sizeof(apf_workqueue_add_options)` as the caller's header knows it; set by
    /// `apf_workqueue_add_options_default`.
    pub struct_size: usize,
    /// Add once this many nanoseconds have passed on the queue's clock; 0:
    /// now. An item already waiting keeps the earlier time.
    pub after_nanos: u64,
    /// Also ask the rate limiter: the delay is the limiter's, or
    /// `after_nanos` if that is non-zero and shorter.
    pub rate_limited: bool,
    /// Two-lane queues: an `apf_workqueue_lane`. Other kinds accept only
    /// `APF_WORKQUEUE_LANE_FAST` (`APF_ERR_WORKQUEUE_WRONG_KIND`).
    pub lane: u32,
    /// Priority queues: use `priority` (otherwise priority 0). Other kinds
    /// reject `has_priority` (`APF_ERR_WORKQUEUE_WRONG_KIND`).
    pub has_priority: bool,
    /// Higher is handed out first.
    pub priority: i32,
}

/// What `apf_workqueue_get` and `apf_workqueue_try_get` found.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_workqueue_item {
    /// An `apf_workqueue_get_result`; the other fields matter only for
    /// `APF_WORKQUEUE_ITEM`.
    pub result: u32,
    /// The item's handle for `apf_workqueue_done` (never 0 for an item; 0
    /// otherwise).
    pub item: u64,
    /// The key `(key, key_len)`, owned by the queue, valid until
    /// `apf_workqueue_done` of this handle (or `apf_workqueue_free`). Not NUL-terminated.
    /// NULL only for no item (an empty key has a non-NULL pointer).
    pub key: *const u8,
    /// The length of `key` in bytes.
    pub key_len: usize,
    /// Two-lane queues: the `apf_workqueue_lane` the item came from; 0 otherwise.
    pub lane: u32,
    /// Priority queues: the item's priority; 0 otherwise.
    pub priority: i32,
}

impl apf_workqueue_item {
    pub(super) fn none(result: apf_workqueue_get_result) -> apf_workqueue_item {
        apf_workqueue_item {
            result: result as u32,
            item: 0,
            key: std::ptr::null(),
            key_len: 0,
            lane: 0,
            priority: 0,
        }
    }
}

impl Growable for apf_workqueue_options {
    const NAME: &'static str = "apf_workqueue_options";
    const MIN_SIZE: usize = std::mem::size_of::<apf_workqueue_options>();
    fn defaults() -> apf_workqueue_options {
        apf_workqueue_options {
            struct_size: std::mem::size_of::<apf_workqueue_options>(),
            kind: apf_workqueue_kind::APF_WORKQUEUE_FIFO as u32,
            manual_clock: false,
            name: std::ptr::null(),
            name_len: 0,
            limiter: std::ptr::null(),
            limiter_state_capacity: 0,
            limiter_idle_expiry_nanos: 0,
            capacity: 0,
        }
    }
}

impl Growable for apf_workqueue_add_options {
    const NAME: &'static str = "apf_workqueue_add_options";
    const MIN_SIZE: usize = std::mem::size_of::<apf_workqueue_add_options>();
    fn defaults() -> apf_workqueue_add_options {
        apf_workqueue_add_options {
            struct_size: std::mem::size_of::<apf_workqueue_add_options>(),
            after_nanos: 0,
            rate_limited: false,
            lane: apf_workqueue_lane::APF_WORKQUEUE_LANE_FAST as u32,
            has_priority: false,
            priority: 0,
        }
    }
}
