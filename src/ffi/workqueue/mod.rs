//! `apf_workqueue`: client-go's workqueue family through the C ABI (FIFO,
//! two-lane and priority queues, each delaying and rate-limiting), with
//! byte-string keys and generation-checked item handles.
//!
//! The pointer C holds is a box around an `Arc` of the queue: calls that
//! block (`apf_wq_get` with a timeout, `apf_wq_shut_down_with_drain`) hold
//! their own reference, so `apf_wq_free` can shut the queue down and wake
//! them without waiting for them to leave.

mod items;
mod limiter;

pub use limiter::*;

use super::cast::{bytes_from_raw, free_box, to_boxed_mut_ptr, Castable};
use super::sized::{read_growable, Growable};
use super::status::{apf_status, fail};
use super::text::{apf_text, text_out};
use crate::clock::{duration_nanos, Clock, ManualClock};
use crate::ffi::slab::Stale;
use crate::metrics::{Exporter, WorkqueueSource};
use crate::sync::Arc;
use crate::workqueue::{
    Config, Fifo, GetTimeoutError, Lane, PriorityQueue, QueueStrategy, RateLimiter,
    RateLimitingQueue, TryGetError, TwoLane, WorkqueueMetrics,
};
use items::{Done, ItemSlab, Key};
use limiter::{Limiter, LimiterSpec, StateBounds};
use std::ffi::c_char;
use std::num::NonZeroUsize;
use std::time::Duration;

/// A work queue of byte-string keys (client-go's rules: an item added while
/// queued is queued once; one added while being processed is queued again
/// only after `apf_wq_done`, so no key is ever processed by two workers at
/// once; after shutdown, adds are ignored and `apf_wq_get` hands out what is
/// queued, then reports `APF_WQ_SHUT_DOWN`). Every queue delays
/// (`apf_wq_add_after`) and rate-limits (`apf_wq_add_rate_limited`).
///
/// Thread safety: every function may be called on one queue from any number
/// of threads at once, and an item handle may be done from any thread, with
/// one exception: `apf_wq_free`. It must not overlap any call that is
/// starting or running, except calls blocked inside `apf_wq_get` or
/// `apf_wq_shut_down_with_drain`, which it wakes (they return
/// `APF_WQ_SHUT_DOWN` and `APF_OK`) and which then touch nothing freed; no
/// call may follow it. The simple safe order is `apf_wq_shut_down`, join the
/// workers, `apf_wq_free`.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_workqueue {
    _private: [u8; 0],
}

/// The kind of queue (`apf_wq_options.kind`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_wq_kind {
    /// First in, first out (client-go's default).
    APF_WQ_FIFO = 0,
    /// A fast and a slow lane, each FIFO; slow items are handed out only
    /// while the fast lane is empty. Adding a queued item with the other
    /// lane moves it to the back of that lane.
    APF_WQ_TWO_LANE = 1,
    /// Integer priorities, highest first, FIFO within one priority
    /// (controller-runtime's priority queue): of all adds of an item not yet
    /// handed out, the highest priority and the shortest delay win.
    APF_WQ_PRIORITY = 2,
}

/// A lane of a two-lane queue (`apf_wq_add_opts.lane`, `apf_wq_item.lane`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_wq_lane {
    /// Served first; the default lane of every add.
    APF_WQ_LANE_FAST = 0,
    /// Served only while the fast lane is empty.
    APF_WQ_LANE_SLOW = 1,
}

/// What `apf_wq_get` found (`apf_wq_item.result`). None is an error.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_wq_get_result {
    /// An item: process it, then `apf_wq_done` its handle.
    APF_WQ_ITEM = 0,
    /// Nothing ready now (`apf_wq_try_get`, or `apf_wq_get` with timeout 0).
    APF_WQ_EMPTY = 1,
    /// The queue is shutting down and nothing is ready: stop working.
    APF_WQ_SHUT_DOWN = 2,
    /// The timeout of `apf_wq_get` passed with nothing ready.
    APF_WQ_TIMED_OUT = 3,
}

/// How `apf_wq_new` builds a queue. Start from `apf_wq_options_default`,
/// which sets `struct_size` (so later versions can add fields).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_wq_options {
    /// `sizeof(apf_wq_options)` as the caller's header knows it; set by
    /// `apf_wq_options_default`.
    pub struct_size: usize,
    /// An `apf_wq_kind` (default `APF_WQ_FIFO`).
    pub kind: u32,
    /// Run on a manual clock that starts at 0 and moves only through
    /// `apf_wq_advance_clock` (delays, rate limits and timed metrics);
    /// otherwise the real monotonic clock. `apf_wq_get`'s timeout is real
    /// time either way.
    pub manual_clock: bool,
    /// The queue's name `(name, name_len)`, UTF-8: the `name` label of its
    /// metrics. May be empty (NULL, 0): an unnamed queue exports no metrics,
    /// as in client-go. Copied; need not outlive the call.
    pub name: *const c_char,
    /// The length of `name` in bytes.
    pub name_len: usize,
    /// The rate limiter (copied; free yours whenever you like); NULL for
    /// client-go's default controller limiter (`apf_wq_limiter_new_default`).
    pub limiter: *const apf_wq_limiter,
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

/// Options of `apf_wq_add_with_opts`. Start from `apf_wq_add_opts_default`
/// (a plain add), which sets `struct_size`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_wq_add_opts {
    /// `sizeof(apf_wq_add_opts)` as the caller's header knows it; set by
    /// `apf_wq_add_opts_default`.
    pub struct_size: usize,
    /// Add once this many nanoseconds have passed on the queue's clock; 0:
    /// now. An item already waiting keeps the earlier time.
    pub after_nanos: u64,
    /// Also ask the rate limiter: the delay is the limiter's, or
    /// `after_nanos` if that is non-zero and shorter.
    pub rate_limited: bool,
    /// Two-lane queues: an `apf_wq_lane`. Other kinds accept only
    /// `APF_WQ_LANE_FAST` (`APF_ERR_WQ_WRONG_KIND`).
    pub lane: u32,
    /// Priority queues: use `priority` (otherwise priority 0). Other kinds
    /// reject `has_priority` (`APF_ERR_WQ_WRONG_KIND`).
    pub has_priority: bool,
    /// Higher is handed out first.
    pub priority: i32,
}

/// What `apf_wq_get` and `apf_wq_try_get` found.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_wq_item {
    /// An `apf_wq_get_result`; the other fields matter only for
    /// `APF_WQ_ITEM`.
    pub result: u32,
    /// The item's handle for `apf_wq_done` (never 0 for an item; 0
    /// otherwise).
    pub item: u64,
    /// The key `(key, key_len)`, owned by the queue, valid until
    /// `apf_wq_done` of this handle (or `apf_wq_free`). Not NUL-terminated.
    /// NULL only for no item (an empty key has a non-NULL pointer).
    pub key: *const u8,
    /// The length of `key` in bytes.
    pub key_len: usize,
    /// Two-lane queues: the `apf_wq_lane` the item came from; 0 otherwise.
    pub lane: u32,
    /// Priority queues: the item's priority; 0 otherwise.
    pub priority: i32,
}

impl apf_wq_item {
    fn none(result: apf_wq_get_result) -> apf_wq_item {
        apf_wq_item {
            result: result as u32,
            item: 0,
            key: std::ptr::null(),
            key_len: 0,
            lane: 0,
            priority: 0,
        }
    }
}

/// The three queue kinds behind one C type.
enum Kind {
    Fifo(RateLimitingQueue<Key, Fifo>),
    TwoLane(RateLimitingQueue<Key, TwoLane>),
    Priority(PriorityQueue<Key>),
}

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

/// The limiter, shared between the queue and the ABI's own rate-limited
/// adds with an `after`.
struct SharedLimiter(Arc<Limiter>);

impl RateLimiter<Key> for SharedLimiter {
    fn when(&self, item: &Key) -> Duration {
        self.0.when(item)
    }
    fn forget(&self, item: &Key) {
        self.0.forget(item)
    }
    fn num_requeues(&self, item: &Key) -> u32 {
        self.0.num_requeues(item)
    }
}

/// A queue, its processing items' handles and its clock.
pub(crate) struct Core {
    kind: Kind,
    limiter: Arc<Limiter>,
    items: ItemSlab,
    manual: Option<ManualClock>,
}

/// What an `apf_workqueue` pointer points to.
pub(crate) struct FfiWorkqueue {
    core: Arc<Core>,
}

impl Castable for apf_workqueue {
    type RustType = FfiWorkqueue;
}

/// What a get found, before it is given a handle.
enum Got {
    Item(Key, u32, i32),
    None(apf_wq_get_result),
}

/// How long a get may wait.
#[derive(Clone, Copy)]
enum Wait {
    Never,
    For(Duration),
    Forever,
}

fn from_try<H>(r: Result<(Key, H), TryGetError>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Ok((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        Err(TryGetError::Empty) => Got::None(apf_wq_get_result::APF_WQ_EMPTY),
        Err(TryGetError::ShutDown) => Got::None(apf_wq_get_result::APF_WQ_SHUT_DOWN),
    }
}

fn from_timed<H>(r: Result<(Key, H), GetTimeoutError>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Ok((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        Err(GetTimeoutError::TimedOut) => Got::None(apf_wq_get_result::APF_WQ_TIMED_OUT),
        Err(GetTimeoutError::ShutDown) => Got::None(apf_wq_get_result::APF_WQ_SHUT_DOWN),
    }
}

fn from_blocking<H>(r: Option<(Key, H)>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Some((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        None => Got::None(apf_wq_get_result::APF_WQ_SHUT_DOWN),
    }
}

fn lane_code(lane: Lane) -> u32 {
    match lane {
        Lane::Fast => apf_wq_lane::APF_WQ_LANE_FAST as u32,
        Lane::Slow => apf_wq_lane::APF_WQ_LANE_SLOW as u32,
    }
}

/// What an add asks for, checked against the queue's kind.
struct AddRequest {
    after: u64,
    rate_limited: bool,
    lane: Lane,
    priority: Option<i32>,
}

/// A delayed or rate-limited add on a FIFO or two-lane queue, as
/// client-go's `AddAfter`/`AddRateLimited` (both count a retry), with
/// `after` capping the limiter's delay as the priority queue does.
fn add_client_go<S: QueueStrategy<Key>>(
    q: &RateLimitingQueue<Key, S>,
    limiter: &Limiter,
    key: Key,
    request: &AddRequest,
    hint: S::Hint,
) {
    if !request.rate_limited {
        if request.after == 0 {
            q.add_with(key, hint);
        } else {
            q.add_after_with(key, Duration::from_nanos(request.after), hint);
        }
        return;
    }
    // The limiter counts a failure: not for an add that will be ignored.
    if q.shutting_down() {
        return;
    }
    let mut delay = limiter.when(&key);
    if request.after > 0 && duration_nanos(delay) > request.after {
        delay = Duration::from_nanos(request.after);
    }
    q.add_after_with(key, delay, hint);
}

impl Core {
    fn new(options: &apf_wq_options) -> Result<Core, apf_status> {
        // SAFETY: the `(name, name_len)` pair is readable per apf_wq_new's
        // contract.
        let name = match unsafe { super::cast::str_from_raw(options.name, options.name_len) } {
            Ok(s) => s,
            Err(e) => return Err(fail(e.status(), format_args!("name {}", e.describe()))),
        };
        // SAFETY: NULL or a live description (apf_wq_new's contract).
        let spec = match unsafe { super::cast::try_from(options.limiter) } {
            Some(spec) => LimiterSpec::clone(spec),
            None => LimiterSpec::default_controller(),
        };
        let bounds = StateBounds {
            capacity: NonZeroUsize::new(
                usize::try_from(options.limiter_state_capacity).unwrap_or(usize::MAX),
            ),
            idle_expiry: (options.limiter_idle_expiry_nanos > 0)
                .then(|| Duration::from_nanos(options.limiter_idle_expiry_nanos)),
        };
        let (clock, manual) = if options.manual_clock {
            let (clock, manual) = Clock::manual();
            (clock, Some(manual))
        } else {
            (Clock::real(), None)
        };
        let mut config = Config::with_clock(clock.clone()).named(name);
        // The index pre-sizes to this; cap it so a typo cannot ask for
        // terabytes up front.
        config.capacity = usize::try_from(options.capacity.min(1 << 28)).unwrap_or(1 << 28);
        let limiter = Arc::new(spec.build(&clock, bounds));
        let shared = || SharedLimiter(limiter.clone());
        let kind = match options.kind {
            k if k == apf_wq_kind::APF_WQ_FIFO as u32 => Kind::Fifo(
                RateLimitingQueue::with_strategy(config, Fifo::default(), shared()),
            ),
            k if k == apf_wq_kind::APF_WQ_TWO_LANE as u32 => Kind::TwoLane(
                RateLimitingQueue::with_strategy(config, TwoLane::default(), shared()),
            ),
            k if k == apf_wq_kind::APF_WQ_PRIORITY as u32 => {
                Kind::Priority(PriorityQueue::with_rate_limiter(config, shared()))
            }
            other => {
                return Err(fail(
                    apf_status::APF_ERR_INVALID_PARAMETER,
                    format_args!("kind must be an apf_wq_kind (0, 1 or 2), not {other}"),
                ))
            }
        };
        Ok(Core {
            kind,
            limiter,
            items: ItemSlab::default(),
            manual,
        })
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Fifo(_) => "a FIFO queue",
            Kind::TwoLane(_) => "a two-lane queue",
            Kind::Priority(_) => "a priority queue",
        }
    }

    /// Check an add's options against the queue's kind.
    fn request(&self, opts: &apf_wq_add_opts) -> Result<AddRequest, apf_status> {
        let lane = match opts.lane {
            l if l == apf_wq_lane::APF_WQ_LANE_FAST as u32 => Lane::Fast,
            l if l == apf_wq_lane::APF_WQ_LANE_SLOW as u32 => Lane::Slow,
            other => {
                return Err(fail(
                    apf_status::APF_ERR_INVALID_PARAMETER,
                    format_args!("lane must be an apf_wq_lane (0 or 1), not {other}"),
                ))
            }
        };
        if lane == Lane::Slow && !matches!(self.kind, Kind::TwoLane(_)) {
            return Err(fail(
                apf_status::APF_ERR_WQ_WRONG_KIND,
                format_args!("lane APF_WQ_LANE_SLOW given to {}", self.kind_name()),
            ));
        }
        if opts.has_priority && !matches!(self.kind, Kind::Priority(_)) {
            return Err(fail(
                apf_status::APF_ERR_WQ_WRONG_KIND,
                format_args!("has_priority given to {}", self.kind_name()),
            ));
        }
        Ok(AddRequest {
            after: opts.after_nanos,
            rate_limited: opts.rate_limited,
            lane,
            priority: opts.has_priority.then_some(opts.priority),
        })
    }

    fn add(&self, key: Key, request: &AddRequest) {
        let limiter = &*self.limiter;
        match &self.kind {
            Kind::Fifo(q) => add_client_go(q, limiter, key, request, ()),
            Kind::TwoLane(q) => add_client_go(q, limiter, key, request, request.lane),
            Kind::Priority(q) => q.add_with_opts(
                key,
                crate::workqueue::AddOpts {
                    after: Duration::from_nanos(request.after),
                    rate_limited: request.rate_limited,
                    priority: request.priority.unwrap_or(0),
                },
            ),
        }
    }

    fn add_after(&self, key: Key, delay: u64) {
        let delay = Duration::from_nanos(delay);
        each!(&self.kind, q => q.add_after(key, delay))
    }

    fn add_rate_limited(&self, key: Key) {
        each!(&self.kind, q => q.add_rate_limited(key))
    }

    fn get(&self, wait: Wait) -> Got {
        let fifo = |_: ()| (0, 0);
        let lanes = |l: Lane| (lane_code(l), 0);
        let prio = |p: i32| (0, p);
        match (&self.kind, wait) {
            (Kind::Fifo(q), Wait::Never) => from_try(q.try_get_with_hint(), fifo),
            (Kind::Fifo(q), Wait::For(t)) => from_timed(q.get_with_hint_timeout(t), fifo),
            (Kind::Fifo(q), Wait::Forever) => from_blocking(q.get_with_hint(), fifo),
            (Kind::TwoLane(q), Wait::Never) => from_try(q.try_get_with_hint(), lanes),
            (Kind::TwoLane(q), Wait::For(t)) => from_timed(q.get_with_hint_timeout(t), lanes),
            (Kind::TwoLane(q), Wait::Forever) => from_blocking(q.get_with_hint(), lanes),
            (Kind::Priority(q), Wait::Never) => from_try(q.try_get_with_priority(), prio),
            (Kind::Priority(q), Wait::For(t)) => from_timed(q.get_with_priority_timeout(t), prio),
            (Kind::Priority(q), Wait::Forever) => from_blocking(q.get_with_priority(), prio),
        }
    }

    /// Give a got item a handle, or put it back if none is left.
    fn hand_out(&self, got: Got) -> Result<apf_wq_item, apf_status> {
        let (key, lane, priority) = match got {
            Got::Item(key, lane, priority) => (key, lane, priority),
            Got::None(result) => return Ok(apf_wq_item::none(result)),
        };
        let (ptr, len) = (key.as_ptr(), key.len());
        match self.items.insert(key.clone()) {
            Ok(handle) => Ok(apf_wq_item {
                result: apf_wq_get_result::APF_WQ_ITEM as u32,
                item: handle,
                key: ptr,
                key_len: len,
                lane,
                priority,
            }),
            Err(_) => {
                // Undo the get: done, then add again where it was.
                let _ = each!(&self.kind, q => q.done(&key));
                let request = AddRequest {
                    after: 0,
                    rate_limited: false,
                    lane: if lane == apf_wq_lane::APF_WQ_LANE_SLOW as u32 {
                        Lane::Slow
                    } else {
                        Lane::Fast
                    },
                    priority: Some(priority),
                };
                self.add(key, &request);
                Err(fail(
                    apf_status::APF_ERR_TOO_MANY_REQUESTS,
                    "too many items processing at once (2^32): the item was queued again",
                ))
            }
        }
    }

    fn done(&self, handle: u64) -> apf_status {
        let key = match self.items.remove(handle, Done) {
            Ok(key) => key,
            Err(Stale::Retired(Done)) => {
                return fail(
                    apf_status::APF_ERR_INVALID_HANDLE,
                    format_args!("item handle {handle:#x} is already done"),
                )
            }
            Err(Stale::Unknown) => {
                return fail(
                    apf_status::APF_ERR_INVALID_HANDLE,
                    format_args!(
                        "item handle {handle:#x} is unknown (never issued by this queue, or stale)"
                    ),
                )
            }
        };
        match each!(&self.kind, q => q.done(&key)) {
            Ok(()) => apf_status::APF_OK,
            // A live handle means its key is processing: this is a bug.
            Err(e) => fail(
                apf_status::APF_ERR_INVALID_HANDLE,
                format_args!("done: {e}"),
            ),
        }
    }

    fn metrics(&self) -> WorkqueueMetrics {
        each!(&self.kind, q => q.metrics())
    }
}

/// A snapshot registered with a one-off exporter, so the text is exactly
/// what [`Exporter`] writes for a Rust workqueue.
struct Snapshot(WorkqueueMetrics);

impl WorkqueueSource for Snapshot {
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.0.clone()
    }
}

fn metrics_text(metrics: WorkqueueMetrics) -> String {
    let exporter = Exporter::new();
    if !metrics.name.is_empty() {
        let snapshot = Arc::new(Snapshot(metrics));
        // A fresh exporter has no duplicate; an unnamed queue exports
        // nothing, as in client-go.
        let _ = exporter.register_workqueue(&snapshot);
        return exporter.text();
    }
    exporter.text()
}

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
pub unsafe extern "C" fn apf_wq_options_default(out: *mut apf_wq_options) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_wq_options::defaults());
        apf_status::APF_OK
    }
}

/// Fill `*out` with a plain add's options: no delay, not rate limited, the
/// fast lane, no priority.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_add_opts_default(out: *mut apf_wq_add_opts) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_wq_add_opts::defaults());
        apf_status::APF_OK
    }
}

impl Growable for apf_wq_options {
    const NAME: &'static str = "apf_wq_options";
    const MIN_SIZE: usize = std::mem::size_of::<apf_wq_options>();
    fn defaults() -> apf_wq_options {
        apf_wq_options {
            struct_size: std::mem::size_of::<apf_wq_options>(),
            kind: apf_wq_kind::APF_WQ_FIFO as u32,
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

impl Growable for apf_wq_add_opts {
    const NAME: &'static str = "apf_wq_add_opts";
    const MIN_SIZE: usize = std::mem::size_of::<apf_wq_add_opts>();
    fn defaults() -> apf_wq_add_opts {
        apf_wq_add_opts {
            struct_size: std::mem::size_of::<apf_wq_add_opts>(),
            after_nanos: 0,
            rate_limited: false,
            lane: apf_wq_lane::APF_WQ_LANE_FAST as u32,
            has_priority: false,
            priority: 0,
        }
    }
}

/// Create a queue. `options` may be NULL for `apf_wq_options_default`'s.
/// Errors: `APF_ERR_INVALID_PARAMETER` (unknown kind), `APF_ERR_INVALID_UTF8`
/// (name). On success `*out` owns the queue; free it with `apf_wq_free`.
/// Nothing `options` points to is kept after the call.
///
/// # Safety
/// `options` must be NULL or readable, its `name` readable for `name_len`
/// bytes (or NULL with 0), its `limiter` NULL or live; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_new(
    options: *const apf_wq_options,
    out: *mut *mut apf_workqueue,
) -> apf_status {
    ffi_panic_boundary! {
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

/// Shut the queue down and free it. Workers blocked in `apf_wq_get` (and
/// a caller blocked in `apf_wq_shut_down_with_drain`) wake and return
/// (`APF_WQ_SHUT_DOWN`; `APF_OK`) without touching freed memory; every item
/// handle and key pointer of the queue becomes invalid, including those of
/// items still processing (do not `apf_wq_done` them). NULL is a no-op.
///
/// # Safety
/// `queue` must be NULL or a queue not yet freed. No call on it may be
/// starting or running, except calls blocked in `apf_wq_get` or
/// `apf_wq_shut_down_with_drain`; none may follow.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_free(queue: *mut apf_workqueue) {
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
pub unsafe extern "C" fn apf_wq_add(
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

/// Add with options (see `apf_wq_add_opts`; `opts` NULL is a plain add):
/// a delay, rate limiting, a lane (two-lane queues: adding a queued item
/// with the other lane moves it to the back of that lane; the latest add
/// decides), a priority (priority queues: a duplicate keeps the highest
/// priority and the shortest delay). `APF_ERR_WQ_WRONG_KIND` for a slow
/// lane on a queue without lanes or a priority on a non-priority queue;
/// `APF_ERR_INVALID_PARAMETER` for an unknown lane.
///
/// # Safety
/// As `apf_wq_add`; `opts` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_add_with_opts(
    queue: *mut apf_workqueue,
    key: *const u8,
    key_len: usize,
    opts: *const apf_wq_add_opts,
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
/// As `apf_wq_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_add_after(
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
/// `apf_wq_num_requeues`, `apf_wq_forget`).
///
/// # Safety
/// As `apf_wq_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_add_rate_limited(
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
/// does not wait (`APF_WQ_EMPTY` when nothing is ready). On `APF_OK`,
/// `out->result` says what happened: `APF_WQ_ITEM` (process it, then
/// `apf_wq_done(queue, out->item)`; the key stays valid until then),
/// `APF_WQ_SHUT_DOWN` (nothing ready and the queue is shutting down: stop),
/// `APF_WQ_TIMED_OUT`. A waiting caller holds no lock: any number of threads
/// may wait at once, and each ready item wakes exactly one of them.
/// `apf_wq_shut_down` and `apf_wq_free` wake them all.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_get(
    queue: *mut apf_workqueue,
    timeout_nanos: u64,
    out: *mut apf_wq_item,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        // The waiting call's own reference: apf_wq_free may drop the box's.
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

/// `apf_wq_get` without waiting: `out->result` is `APF_WQ_ITEM`,
/// `APF_WQ_EMPTY` or `APF_WQ_SHUT_DOWN`.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_try_get(
    queue: *mut apf_workqueue,
    out: *mut apf_wq_item,
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

/// Finish processing the item `item` (a handle from `apf_wq_get`): if its
/// key was added again meanwhile, it is queued again now. The handle and its
/// key pointer become invalid. May be called from any thread.
/// `APF_ERR_INVALID_HANDLE` for 0, a handle already done, or one this queue
/// never issued; the queue is unchanged then.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_done(queue: *mut apf_workqueue, item: u64) -> apf_status {
    ffi_panic_boundary! {
        try_queue!(queue).done(item)
    }
}

/// Stop tracking the key's failures in the rate limiter (after a success,
/// or on giving up): its next rate-limited add waits the first delay
/// again. The item must still be done.
///
/// # Safety
/// As `apf_wq_add`.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_forget(
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
/// As `apf_wq_add`; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_num_requeues(
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
pub unsafe extern "C" fn apf_wq_len(queue: *mut apf_workqueue, out: *mut usize) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        out.write(each!(&core.kind, q => q.len()));
        apf_status::APF_OK
    }
}

/// How many items wait for a delay (`apf_wq_add_after`, rate limiting).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_waiting_len(
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
/// (`APF_ERR_WQ_WRONG_KIND` for other kinds).
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_lane_len(
    queue: *mut apf_workqueue,
    lane: u32,
    out: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let core = try_queue!(queue);
        let out = try_out!(out);
        let request = match core.request(&apf_wq_add_opts { lane, ..Growable::defaults() }) {
            Ok(r) => r,
            Err(status) => return status,
        };
        match &core.kind {
            Kind::TwoLane(q) => {
                out.write(q.inspect_strategy(|s| s.lane_len(request.lane)));
                apf_status::APF_OK
            }
            _ => fail(
                apf_status::APF_ERR_WQ_WRONG_KIND,
                format_args!("apf_wq_lane_len on {}", core.kind_name()),
            ),
        }
    }
}

/// Shut the queue down: further adds are ignored, waiting delays end (their
/// items are dropped), workers get what is ready and then
/// `APF_WQ_SHUT_DOWN`; blocked workers wake. Returns at once; may be called
/// more than once, and ends a `apf_wq_shut_down_with_drain`'s wait.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_shut_down(queue: *mut apf_workqueue) -> apf_status {
    ffi_panic_boundary! {
        each!(&try_queue!(queue).kind, q => q.shut_down());
        apf_status::APF_OK
    }
}

/// `apf_wq_shut_down`, then wait until no item is processing: every handle
/// handed out must be done (by other threads: calling this from the only
/// thread holding items never returns). `apf_wq_shut_down` or
/// `apf_wq_free` from another thread ends the wait early.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_wq_shut_down_with_drain(queue: *mut apf_workqueue) -> apf_status {
    ffi_panic_boundary! {
        // The waiting call's own reference: apf_wq_free may drop the box's.
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
pub unsafe extern "C" fn apf_wq_shutting_down(
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
pub unsafe extern "C" fn apf_wq_advance_clock(queue: *mut apf_workqueue, nanos: u64) -> apf_status {
    ffi_panic_boundary! {
        match &try_queue!(queue).manual {
            Some(manual) => {
                manual.advance(Duration::from_nanos(nanos));
                apf_status::APF_OK
            }
            None => fail(
                apf_status::APF_ERR_NOT_MANUAL_CLOCK,
                "apf_wq_advance_clock: the queue runs on the real clock",
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
pub unsafe extern "C" fn apf_wq_metrics_text(
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
pub unsafe extern "C" fn apf_wq_processing(
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

// The test-only exports (apf_wq_test_panic, apf_wq_test_parked) live apart,
// built only with the `test-hooks` feature, so the installed library does
// not carry them.
#[cfg(feature = "test-hooks")]
mod test_hooks;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use test_hooks::*;
