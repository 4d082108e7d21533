//! `apf_dispatcher`: creation, configuration, the clock, notification
//! set-up and statistics.

use super::adaptive::{adaptive_from_c, apf_adaptive_options};
use super::cast::{free_box, to_boxed_mut_ptr, Castable};
use super::completion::{apf_completion_callback, Completion};
use super::names::Names;
use super::sized::{read_growable, Growable};
use super::slab::{Owner, OwnerKind};
use super::status::{apf_status, fail};
use super::text::{apf_text, text_out};
use crate::error::apf_error;
use crate::sync::Arc;
use apf::clock::{Clock, Instant, ManualClock};
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::queueset::{RejectReason, MAX_CONCURRENCY_LIMIT};
use std::ffi::{c_char, c_int, c_void};
use std::fmt::Write;
use std::time::Duration;

/// A dispatcher: classifies requests by flow schema and decides on them at
/// their priority level (execute, queue, or reject), with fair queuing and
/// borrowing between levels.
///
/// Thread safety: every function may be called on one dispatcher from any
/// number of threads at once, except `apf_dispatcher_free`, which must be
/// the last call (no other call on the dispatcher or its requests may run or
/// follow). Request handles may be used from any thread.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_dispatcher {
    _private: [u8; 0],
}

/// Server-wide settings, with `apf_dispatcher_options_default`'s values filled in
/// unless you change them. Always start from `apf_dispatcher_options_default`: it sets
/// `struct_size`, which lets later versions add fields (see the ABI policy
/// in docs/install.md).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct apf_dispatcher_options {
    /// `sizeof(apf_dispatcher_options)` as the caller's header knows it; set by
    /// `apf_dispatcher_options_default`.
    pub struct_size: usize,
    /// Seats shared by all priority levels (Kubernetes: max-requests-inflight
    /// + max-mutating-requests-inflight; default 600). 1 to 2^30.
    pub server_concurrency_limit: u32,
    /// G, fair queuing's initial guess of a request's service time, in
    /// nanoseconds (default 3 ms). Must be positive.
    pub service_time_guess_ns: u64,
    /// The longest a request waits in a queue, in nanoseconds (default 15 s).
    pub wait_limit_ns: u64,
    /// How often borrowing recomputes the levels' limits, in nanoseconds
    /// (default 10 s). At least 100 ms (100000000).
    pub borrowing_period_ns: u64,
    /// Run on a manual clock that starts at 0 and moves only through
    /// `apf_dispatcher_advance_clock` (for tests and simulations). Otherwise
    /// the real monotonic clock, whose 0 is the dispatcher's creation.
    pub manual_clock: bool,
    /// The adaptive server concurrency limit (docs/adaptive-limit.md):
    /// NULL (the default) keeps the fixed `server_concurrency_limit`; a
    /// struct filled by `apf_adaptive_options_default` and then tuned turns
    /// it on, the total then following the backend's measured latency
    /// (`server_concurrency_limit` still sizes the levels' per-request seat
    /// caps). Read only during `apf_dispatcher_new_*`.
    pub adaptive: *const apf_adaptive_options,
}

impl apf_dispatcher_options {
    fn defaults() -> apf_dispatcher_options {
        let d = DispatcherOptions::default();
        apf_dispatcher_options {
            struct_size: std::mem::size_of::<apf_dispatcher_options>(),
            server_concurrency_limit: d.server_concurrency_limit,
            service_time_guess_ns: apf::clock::duration_nanos(d.service_time_guess),
            wait_limit_ns: apf::clock::duration_nanos(d.wait_limit),
            borrowing_period_ns: apf::clock::duration_nanos(d.borrowing_period),
            manual_clock: false,
            adaptive: std::ptr::null(),
        }
    }

    /// # Safety
    /// `self.adaptive` is NULL or readable for the `struct_size` it states.
    unsafe fn to_rust(self) -> Result<DispatcherOptions, apf_status> {
        let invalid = |e: String| fail(apf_status::APF_ERR_INVALID_PARAMETER, e);
        let options = self.to_rust_fixed().map_err(invalid)?;
        // SAFETY: forwarded contract.
        let adaptive = unsafe { adaptive_from_c(self.adaptive) }?;
        Ok(DispatcherOptions {
            adaptive,
            ..options
        })
    }

    fn to_rust_fixed(self) -> Result<DispatcherOptions, String> {
        if self.server_concurrency_limit == 0
            || self.server_concurrency_limit > MAX_CONCURRENCY_LIMIT
        {
            return Err(format!(
                "server_concurrency_limit must be between 1 and {MAX_CONCURRENCY_LIMIT}, not {}",
                self.server_concurrency_limit
            ));
        }
        if self.service_time_guess_ns == 0 {
            return Err("service_time_guess_ns must be positive".into());
        }
        let min = apf::clock::duration_nanos(apf::borrowing::MIN_ADJUSTMENT_PERIOD);
        if self.borrowing_period_ns < min {
            return Err(format!(
                "borrowing_period_ns must be at least {min} (100 ms), not {}",
                self.borrowing_period_ns
            ));
        }
        Ok(DispatcherOptions {
            server_concurrency_limit: self.server_concurrency_limit,
            service_time_guess: Duration::from_nanos(self.service_time_guess_ns),
            wait_limit: Duration::from_nanos(self.wait_limit_ns),
            borrowing_period: Duration::from_nanos(self.borrowing_period_ns),
            adaptive: None,
        })
    }
}

impl Growable for apf_dispatcher_options {
    const NAME: &'static str = "apf_dispatcher_options";
    /// ABI 0.2's struct, `adaptive` included, is the first version.
    const MIN_SIZE: usize = std::mem::size_of::<apf_dispatcher_options>();
    fn defaults() -> apf_dispatcher_options {
        apf_dispatcher_options::defaults()
    }
}

/// What an `apf_dispatcher` pointer really points to.
pub(crate) struct FfiDispatcher {
    /// Its requests' owner in the process's request slab; its `Drop`
    /// finishes or cancels them while the dispatcher is intact.
    pub(crate) owner: Owner,
    pub(crate) inner: Dispatcher,
    manual: Option<ManualClock>,
    pub(crate) names: Names,
    pub(crate) completion: Arc<Completion>,
}

impl Castable for apf_dispatcher {
    type RustType = FfiDispatcher;
}

impl Drop for FfiDispatcher {
    fn drop(&mut self) {
        super::request::close_requests(self.owner, &self.completion);
    }
}

impl FfiDispatcher {
    fn new(config: &Config, options: &apf_dispatcher_options) -> Result<FfiDispatcher, apf_status> {
        // SAFETY: the exported callers' contract: `options.adaptive` is
        // NULL or readable.
        let rust_options = unsafe { options.to_rust() }?;
        let (clock, manual) = if options.manual_clock {
            let (clock, manual) = Clock::manual();
            (clock, Some(manual))
        } else {
            (Clock::real(), None)
        };
        let inner = Dispatcher::new(config, rust_options, clock)
            .map_err(|e| fail(apf_status::APF_ERR_CONFIG, e))?;
        Ok(FfiDispatcher {
            owner: Owner::new(OwnerKind::Dispatcher),
            names: Names::new(&inner),
            inner,
            manual,
            completion: Arc::new(Completion::default()),
        })
    }

    pub(crate) fn now(&self) -> Instant {
        self.inner.clock().now()
    }

    fn stats_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "now_ns {} requests_live {} completions_pending {}",
            self.now().as_nanos(),
            super::request::live_requests(self.owner),
            self.completion.pending()
        );
        for level in self.inner.levels() {
            let s = level.stats();
            let q = &s.queueset;
            let tallies = level.tag_stats();
            let dispatched: u64 = tallies.iter().map(|(_, t)| t.dispatched).sum();
            let rejected = |reason: RejectReason| -> u64 {
                tallies
                    .iter()
                    .map(|(_, t)| t.rejected[reason as usize])
                    .sum()
            };
            let _ = write!(
                out,
                "level {} exempt {} concurrency_limit {} seats_in_use {} executing {} waiting {} dispatched {}",
                level.name,
                s.exempt,
                q.concurrency_limit,
                level.seats_in_use(),
                q.requests_executing,
                q.requests_waiting,
                dispatched,
            );
            for reason in RejectReason::ALL {
                let _ = write!(out, " rejected_{} {}", reason.as_str(), rejected(reason));
            }
            out.push('\n');
        }
        out
    }
}

/// Parse configuration text (YAML or JSON) given as `(ptr, len)`.
fn parse_config(text: *const c_char, len: usize) -> Result<Config, apf_status> {
    // SAFETY: the exported callers' contract: `text` is readable for `len`
    // bytes during the call (or NULL with len 0).
    let bytes = unsafe { super::cast::bytes_from_raw(text.cast::<u8>(), len) }
        .map_err(|e| fail(e.status(), format_args!("text {}", e.describe())))?;
    if std::str::from_utf8(bytes).is_err() {
        return Err(fail(
            apf_status::APF_ERR_INVALID_UTF8,
            "configuration text is not valid UTF-8",
        ));
    }
    Config::from_slice(bytes).map_err(|e| fail(apf_status::APF_ERR_CONFIG, e))
}

/// Fill `*out` with the default options: 600 seats, G = 3 ms, a 15 s wait
/// limit, a 10 s borrowing period, the real clock.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_options_default(
    out: *mut apf_dispatcher_options,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_dispatcher_options::defaults());
        apf_status::APF_OK
    }
}

/// Create a dispatcher with Kubernetes' built-in configuration (the
/// mandatory and suggested flow schemas and priority levels).
///
/// `options` may be NULL for the defaults. On success `*out` owns the new
/// dispatcher; free it with `apf_dispatcher_free`.
///
/// # Safety
/// `options` must be NULL or readable, and its `adaptive` NULL or readable
/// for the `struct_size` it states; `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_new_builtin(
    options: *const apf_dispatcher_options,
    out: *mut *mut apf_dispatcher,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let out = try_out!(out);
        // SAFETY: a non-NULL `options` is readable (contract above).
        let options = match unsafe { read_growable(options) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        match FfiDispatcher::new(&Config::builtin(), &options) {
            Ok(d) => {
                out.write(to_boxed_mut_ptr(d));
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Create a dispatcher from configuration text: FlowSchema and
/// PriorityLevelConfiguration objects in YAML (several documents, or a
/// `List`) or JSON, as `kubectl` reads them. The mandatory objects
/// (`exempt`, `catch-all`) are added if missing.
///
/// `(text, len)` need not be NUL-terminated. `options` may be NULL for the
/// defaults. Errors: `APF_ERR_INVALID_UTF8`, `APF_ERR_CONFIG` (the last
/// error lists every problem found), `APF_ERR_INVALID_PARAMETER` (options).
///
/// # Safety
/// `text` must be readable for `len` bytes (or NULL with `len` 0);
/// `options` NULL or readable (its `adaptive` NULL or readable for the
/// `struct_size` it states); `out` NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_new_from_config(
    text: *const c_char,
    len: usize,
    options: *const apf_dispatcher_options,
    out: *mut *mut apf_dispatcher,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let out = try_out!(out);
        // SAFETY: a non-NULL `options` is readable (contract above).
        let options = match unsafe { read_growable(options) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        let config = match parse_config(text, len) {
            Ok(c) => c,
            Err(status) => return status,
        };
        match FfiDispatcher::new(&config, &options) {
            Ok(d) => {
                out.write(to_boxed_mut_ptr(d));
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Free a dispatcher. Requests still executing are finished now, requests
/// still waiting are cancelled (without notification); every handle and
/// every name string the dispatcher gave out becomes invalid. Waits for
/// completion callbacks running on other threads to return. NULL is a
/// no-op. Called from inside one of this dispatcher's own completion
/// callbacks it does nothing (the dispatcher is in use below the callback)
/// (it cannot say so: it returns nothing); free it after the callback
/// returned.
///
/// # Safety
/// `dispatcher` must be NULL or a dispatcher not yet freed, with no other
/// call on it running or following.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_free(dispatcher: *mut apf_dispatcher) {
    ffi_panic_boundary! {
        // SAFETY: NULL or live (contract above).
        if let Some(d) = unsafe { super::cast::try_from(dispatcher) } {
            if d.completion.in_own_callback() {
                fail(
                    apf_status::APF_ERR_IN_CALLBACK,
                    "apf_dispatcher_free called from the dispatcher's own completion callback: ignored",
                );
                return;
            }
        }
        // SAFETY: the caller hands over ownership (contract above).
        unsafe { free_box(dispatcher) }
    }
}

/// Switch to a new configuration (YAML or JSON, as for
/// `apf_dispatcher_new_from_config`). On any error the configuration in
/// force stays unchanged. Levels that keep their name keep their queues and
/// waiting requests; requests in removed levels complete normally.
///
/// # Safety
/// `dispatcher` must be NULL or live; `text` readable for `len` bytes (or
/// NULL with `len` 0).
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_reconfigure(
    dispatcher: *mut apf_dispatcher,
    text: *const c_char,
    len: usize,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let d = try_ref_from_ptr!(dispatcher);
        let config = match parse_config(text, len) {
            Ok(c) => c,
            Err(status) => return status,
        };
        if let Err(e) = d.inner.reconfigure(&config) {
            return fail(apf_status::APF_ERR_CONFIG, e);
        }
        d.names.rebuild(&d.inner);
        apf_status::APF_OK
    }
}

/// Move a manual clock forward by `nanos`, firing what falls due on the way
/// (queue wait limits and deadlines, borrowing adjustments), each at its own
/// time. Borrowing periods that pass with nothing else falling due in
/// between are coalesced into one adjustment at the last one's end, so any
/// `nanos` (even `UINT64_MAX`) costs work in proportion to what happens, not
/// to the time passed. Completion notifications for requests decided on the
/// way happen before this returns. `APF_ERR_NOT_MANUAL_CLOCK` for a real
/// clock.
///
/// # Safety
/// `dispatcher` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_advance_clock(
    dispatcher: *mut apf_dispatcher,
    nanos: u64,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        match &d.manual {
            Some(manual) => {
                manual.advance(Duration::from_nanos(nanos));
                apf_status::APF_OK
            }
            None => fail(
                apf_status::APF_ERR_NOT_MANUAL_CLOCK,
                "apf_dispatcher_advance_clock: the dispatcher runs on the real clock",
            ),
        }
    }
}

/// The dispatcher's current time in nanoseconds since its clock's epoch
/// (its creation for the real clock, 0 for a manual clock). Deadlines and
/// end times passed to libapf are on this scale.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out_nanos` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_now(
    dispatcher: *const apf_dispatcher,
    out_nanos: *mut u64,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out = try_out!(out_nanos);
        out.write(d.now().as_nanos());
        apf_status::APF_OK
    }
}

/// Set (or, with `callback` NULL, clear) the completion callback: called
/// with `user` and the handle each time a queued request is decided
/// (dispatched or rejected), but not when you cancel it yourself.
///
/// The callback runs on whatever thread decided the request: one finishing
/// another request, one advancing the manual clock, or libapf's timer
/// thread. It runs with no libapf lock held and may call any libapf
/// function, except this one, on any dispatcher (`APF_ERR_IN_CALLBACK`:
/// it would wait for running callbacks, and two dispatchers' callbacks
/// replacing each other's on two threads would wait for each other for
/// ever), and `apf_dispatcher_free` of the same dispatcher (ignored); it
/// should be quick. `callback` and `user` must be usable from any thread.
/// When this function returns `APF_OK`, no call of the previous callback is
/// still running.
///
/// # Safety
/// `dispatcher` must be NULL or live; `callback` NULL or a function that is
/// safe to call with `user` from any thread until replaced or the
/// dispatcher is freed.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_set_completion_callback(
    dispatcher: *mut apf_dispatcher,
    callback: apf_completion_callback,
    user: *mut c_void,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        match d.completion.set_callback(callback, user) {
            Ok(()) => apf_status::APF_OK,
            Err(status) => fail(
                status,
                "apf_dispatcher_set_completion_callback called from inside a completion callback (of this or another dispatcher): refused",
            ),
        }
    }
}

/// A file descriptor that is readable while decided requests wait in the
/// completion queue: poll it for reading (poll, epoll, select, kqueue), then
/// call `apf_dispatcher_take_completion` until it reports none. Do not read
/// from, write to, or close the fd: libapf owns it (it closes with the
/// dispatcher). The first call switches the completion queue on.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out_fd` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_completion_fd(
    dispatcher: *mut apf_dispatcher,
    out_fd: *mut c_int,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out = try_out!(out_fd);
        match d.completion.fd() {
            Ok(fd) => {
                out.write(fd);
                apf_status::APF_OK
            }
            Err(e) => fail(apf_status::APF_ERR_IO, format_args!("completion fd: {e}")),
        }
    }
}

/// Take the oldest handle from the completion queue: `*out_some` is false
/// (and `*out_request` 0) when it is empty. Then call `apf_request_poll` on
/// the handle to learn the decision; the request may have been cancelled or
/// finished by another thread meanwhile (`APF_ERR_INVALID_HANDLE`). The
/// first call switches the completion queue on.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out_request` and `out_some` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_take_completion(
    dispatcher: *mut apf_dispatcher,
    out_request: *mut u64,
    out_some: *mut bool,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out_request = try_out!(out_request);
        let out_some = try_out!(out_some);
        let taken = d.completion.take();
        out_request.write(taken.unwrap_or(0));
        out_some.write(taken.is_some());
        apf_status::APF_OK
    }
}

/// Per-level statistics as text, one line per level (`level NAME exempt B
/// concurrency_limit N seats_in_use N executing N waiting N dispatched N
/// rejected_REASON N ...`) after a first line of dispatcher-wide figures.
/// The format is for people and may change; metrics proper will follow.
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_stats_text(
    dispatcher: *mut apf_dispatcher,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        // SAFETY: `out` per the contract.
        unsafe { text_out(out, || d.stats_text()) }
    }
}

/// The notices of the configuration in force, one a line, each naming its
/// object (`FlowSchema "NAME": ...`): mandatory objects that were added, and
/// flow schemas naming a priority level that does not exist. Such a schema
/// is accepted, as Kubernetes accepts it, but matches no request (it is
/// "dangling"); read this after `apf_dispatcher_new_from_config` or
/// `apf_dispatcher_reconfigure` to warn about it. Empty when there is
/// nothing to note. On `APF_OK`, `*out` owns the text: free it with
/// `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_config_notices(
    dispatcher: *mut apf_dispatcher,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let notices = || {
            d.inner
                .config_notices()
                .iter()
                .map(|n| format!("{n}\n"))
                .collect()
        };
        // SAFETY: `out` per the contract.
        unsafe { text_out(out, notices) }
    }
}
