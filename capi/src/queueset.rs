//! `apf_queueset`: one priority level's fair queuing, driven directly by a
//! caller that classifies requests itself and brings each request's flow
//! hash and work estimate (Kubernetes' `fairqueuing.QueueSet`, behind
//! `k8s.io/apiserver`'s own controller: see `bindings/go/k8sfq`).
//!
//! A queueset is a limited [`Level`] without a dispatcher around it: its
//! requests live in the process's one request slab beside the dispatchers'
//! (`capi/src/slab.rs`), and are waited for, polled, cancelled, released
//! and finished by the same calls (`apf_request_wait`, `apf_finish`, ...,
//! with NULL as the dispatcher); it announces its decisions through a
//! completion queue and fd of its own (`capi/src/completion.rs`).

use super::cast::{free_box, to_boxed_mut_ptr, Castable};
use super::completion::Completion;
use super::request::{
    apf_outcome, apf_reject_reason, apf_work_estimate, close_requests, enqueue, to_estimate,
    too_many,
};
use super::sized::{read_growable, Growable};
use super::slab::{requests, Entry, Owner, OwnerKind};
use super::status::{apf_status, fail};
use super::text::{apf_text, text_out};
use crate::error::apf_error;
use crate::sync::Arc;
use apf::classification::RequestDigest;
use apf::clock::{Clock, Instant, ManualClock};
use apf::level::{Leases, Level, Outcome, WaitingNote};
use apf::queueset::vtime::to_seat_seconds;
use apf::queueset::{QueueSet, QueueSetConfig, RejectReason};
use std::ffi::{c_char, c_int};
use std::time::Duration;

/// One priority level's queues and seats, without classification: the
/// caller gives each request's flow hash and work estimate.
///
/// Thread safety: every function may be called on one queueset from any
/// number of threads at once, except `apf_queueset_free`, which must be the
/// last call. Request handles may be used from any thread.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_queueset {
    _private: [u8; 0],
}

/// A queueset's configuration. Always start from
/// `apf_queueset_config_default`: it fills in Kubernetes' defaults and sets
/// `struct_size`, which lets later versions add fields (see the ABI policy
/// in docs/install.md).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct apf_queueset_config {
    /// `sizeof(apf_queueset_config)` as the caller's header knows it; set by
    /// `apf_queueset_config_default`.
    pub struct_size: usize,
    /// Seats that may be in use at once (Kubernetes' CurrentCL); 0 to 2^30.
    /// With 0, every request queues (or, without queues, is rejected).
    pub concurrency_limit: u32,
    /// Number of queues; 0: no queuing (a request that does not fit is
    /// rejected with `APF_REJECT_CONCURRENCY_LIMIT`).
    pub queues: u32,
    /// Queues dealt to each flow (shuffle sharding); 1 to `queues`.
    pub hand_size: u32,
    /// Requests one queue may hold; at least 1 when queuing.
    pub queue_length_limit: u32,
    /// G, the initial guess of a request's service time, in nanoseconds;
    /// must be positive.
    pub service_time_guess_ns: u64,
    /// The longest a request may wait in a queue, in nanoseconds; 0 for no
    /// limit of the queueset's own (a request's deadline still applies).
    pub wait_limit_ns: u64,
    /// An `apf_fairness`: how the level shares its seats among flows
    /// (default `APF_FAIRNESS_KUBERNETES`). Added after the first version:
    /// a caller's older, smaller struct keeps the default.
    pub fairness: u32,
}

/// How a queuing level shares its seats (`apf_queueset_config.fairness`;
/// in configuration files, the `apf.libapf.io/fairness` annotation of a
/// PriorityLevelConfiguration).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_fairness {
    /// Kubernetes' queueset: queues, not flows, compete fairly.
    APF_FAIRNESS_KUBERNETES = 0,
    /// Flow-fair: each flow gets its max-min fair share of the seats,
    /// whatever its number of concurrent requests (docs/flow-fairness.md).
    APF_FAIRNESS_FLOW = 1,
    /// Flow-fair, with max-min allocation among queues (Kubernetes issue
    /// 95979): R advances at the water level of the queues' demands.
    APF_FAIRNESS_FLOW_MAXMIN = 2,
}

/// The decision on a request started at a queueset.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct apf_queueset_decision {
    /// An `apf_outcome`.
    pub outcome: u32,
    /// An `apf_reject_reason`.
    pub reject_reason: u32,
    /// The request's handle (0 when rejected), used with `apf_request_wait`,
    /// `apf_request_poll`, `apf_request_cancel`,
    /// `apf_request_release_seats` and `apf_finish`, with NULL as their
    /// dispatcher.
    pub request: u64,
    /// For `APF_OUTCOME_QUEUED`: the request's arrival number, by which
    /// `apf_queueset_dump_json` lists it while it waits; otherwise 0.
    pub waiting_id: u64,
    /// For `APF_OUTCOME_QUEUED`: the length of the queue it joined, itself
    /// included (Kubernetes' queue-length metric observes this); otherwise 0.
    pub queue_length: u32,
    /// For `APF_OUTCOME_QUEUED`: the index of the queue it joined (as in
    /// `apf_queueset_dump_json`); otherwise 0.
    pub queue: u32,
    /// For `APF_OUTCOME_QUEUED`: the level's virtual time R when it joined,
    /// in seat-seconds (Kubernetes' current-R gauge); otherwise 0.
    pub current_r: f64,
}

/// A queueset's gauges and counters at one moment.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct apf_queueset_stats {
    /// Seats that may be in use at once (the configured limit).
    pub concurrency_limit: u32,
    /// Number of queues.
    pub queues: u32,
    /// Requests executing (not counting lingering seats).
    pub executing: u32,
    /// Requests waiting in queues.
    pub waiting: u32,
    /// Seats held by executing requests and by finished ones during their
    /// additional latency.
    pub seats_in_use: u64,
    /// Seats (max of initial and final) of the waiting requests.
    pub seats_waiting: u64,
    /// Requests that started executing, over the queueset's life.
    pub dispatched: u64,
    /// Requests rejected because their queue was full.
    pub rejected_queue_full: u64,
    /// Requests rejected because their wait limit or deadline passed.
    pub rejected_time_out: u64,
    /// Requests cancelled while waiting.
    pub rejected_cancelled: u64,
    /// Requests rejected because no seat was free and nothing may queue.
    pub rejected_concurrency_limit: u64,
}

/// What an `apf_queueset` pointer really points to.
pub(crate) struct FfiQueueSet {
    /// Its requests' owner in the process's request slab; its `Drop`
    /// retires them while the level is intact.
    owner: Owner,
    level: Arc<Level>,
    /// The level's leases, one per shard: a request clones its thread's
    /// (no reference count that every core writes, no allocation).
    leases: Leases<Level>,
    manual: Option<ManualClock>,
    completion: Arc<Completion>,
}

impl Castable for apf_queueset {
    type RustType = FfiQueueSet;
}

impl Drop for FfiQueueSet {
    fn drop(&mut self) {
        close_requests(self.owner, &self.completion);
    }
}

impl FfiQueueSet {
    fn queueset(&self) -> &QueueSet {
        self.level
            .queueset()
            .expect("an apf_queueset's level is always limited")
    }

    fn now(&self) -> Instant {
        self.level.clock().now()
    }

    fn stats(&self) -> apf_queueset_stats {
        let s = self.level.stats().queueset;
        let mut out = apf_queueset_stats {
            concurrency_limit: s.concurrency_limit,
            queues: s.queues.min(u32::MAX as usize) as u32,
            executing: s.requests_executing,
            waiting: s.requests_waiting,
            seats_in_use: s.seats_in_use as u64,
            ..apf_queueset_stats::default()
        };
        for (_, t) in self.level.tag_stats() {
            out.seats_waiting += t.waiting_seats;
            out.dispatched += t.dispatched;
            out.rejected_queue_full += t.rejected[RejectReason::QueueFull as usize];
            out.rejected_time_out += t.rejected[RejectReason::TimeOut as usize];
            out.rejected_cancelled += t.rejected[RejectReason::Cancelled as usize];
            out.rejected_concurrency_limit += t.rejected[RejectReason::ConcurrencyLimit as usize];
        }
        out
    }

    /// The dump as JSON: the gauges and counters, every queue, every
    /// waiting request (virtual times in seat-seconds, times in
    /// nanoseconds on the queueset's clock).
    fn dump_json(&self) -> String {
        let d = self.queueset().dump();
        let s = self.stats();
        let queues: Vec<serde_json::Value> = d
            .queues
            .iter()
            .map(|q| {
                serde_json::json!({
                    "index": q.index,
                    "waiting": q.waiting,
                    "executing": q.executing,
                    "seats_in_use": q.seats_in_use,
                    "next_dispatch_r": to_seat_seconds(q.next_dispatch_r),
                    "initial_seats_sum": q.initial_seats_sum,
                    "max_seats_sum": q.max_seats_sum,
                    "total_work_sum": to_seat_seconds(q.total_work_sum),
                })
            })
            .collect();
        let waiting: Vec<serde_json::Value> = d
            .waiting
            .iter()
            .map(|w| {
                serde_json::json!({
                    "queue": w.queue,
                    "position": w.position,
                    "id": w.id,
                    "tag": w.tag,
                    "arrival_ns": w.arrival.as_nanos(),
                    "initial_seats": w.estimate.initial_seats,
                    "final_seats": w.estimate.final_seats,
                    "additional_latency_ns": apf::clock::duration_nanos(w.estimate.additional_latency),
                })
            })
            .collect();
        serde_json::json!({
            "now_ns": self.now().as_nanos(),
            "current_r": to_seat_seconds(d.current_r),
            "concurrency_limit": s.concurrency_limit,
            "executing": s.executing,
            "waiting": s.waiting,
            "seats_in_use": s.seats_in_use,
            "seats_waiting": s.seats_waiting,
            "dispatched": s.dispatched,
            "rejected_queue_full": s.rejected_queue_full,
            "rejected_time_out": s.rejected_time_out,
            "rejected_cancelled": s.rejected_cancelled,
            "rejected_concurrency_limit": s.rejected_concurrency_limit,
            "queues": queues,
            "waiting_requests": waiting,
        })
        .to_string()
    }
}

impl apf_queueset_config {
    fn defaults() -> apf_queueset_config {
        let d = QueueSetConfig::default();
        apf_queueset_config {
            struct_size: std::mem::size_of::<apf_queueset_config>(),
            concurrency_limit: d.concurrency_limit,
            queues: d.queues,
            hand_size: d.hand_size,
            queue_length_limit: d.queue_length_limit,
            service_time_guess_ns: apf::clock::duration_nanos(d.service_time_guess),
            wait_limit_ns: apf::clock::duration_nanos(d.wait_limit),
            fairness: apf_fairness::APF_FAIRNESS_KUBERNETES as u32,
        }
    }
}

impl Growable for apf_queueset_config {
    const NAME: &'static str = "apf_queueset_config";
    /// The first version ended with `wait_limit_ns`.
    const MIN_SIZE: usize = std::mem::offset_of!(apf_queueset_config, fairness);
    fn defaults() -> apf_queueset_config {
        apf_queueset_config::defaults()
    }
}

/// Read the caller's `config` (a growable struct); NULL is an error here,
/// since a queueset has no configuration to fall back on but Kubernetes'
/// defaults, which the caller asks for with `apf_queueset_config_default`.
///
/// # Safety
/// `config` NULL or readable for its `struct_size` bytes.
unsafe fn read_config(
    config: *const apf_queueset_config,
) -> Result<apf_queueset_config, apf_status> {
    if config.is_null() {
        return Err(fail(apf_status::APF_ERR_NULL_POINTER, "config is NULL"));
    }
    // SAFETY: non-NULL and readable for `struct_size` bytes (contract above).
    unsafe { read_growable(config) }
}

fn to_config(name: &str, c: &apf_queueset_config) -> Result<QueueSetConfig, String> {
    let fairness = match c.fairness {
        0 => apf::queueset::Fairness::Kubernetes,
        1 => apf::queueset::Fairness::Flow,
        2 => apf::queueset::Fairness::FlowMaxMin,
        other => {
            return Err(format!(
                "priority level {name:?}: apf_queueset_config.fairness is {other}, not an \
                 apf_fairness (0 APF_FAIRNESS_KUBERNETES, 1 APF_FAIRNESS_FLOW, \
                 2 APF_FAIRNESS_FLOW_MAXMIN)"
            ))
        }
    };
    Ok(QueueSetConfig {
        name: name.to_owned(),
        concurrency_limit: c.concurrency_limit,
        queues: c.queues,
        hand_size: c.hand_size,
        queue_length_limit: c.queue_length_limit,
        service_time_guess: Duration::from_nanos(c.service_time_guess_ns),
        wait_limit: if c.wait_limit_ns == 0 {
            Duration::MAX
        } else {
            Duration::from_nanos(c.wait_limit_ns)
        },
        fairness,
    })
}

/// Fill `*out` with Kubernetes' defaults for a queuing level: 1 seat, 64
/// queues, hand size 8, queue length limit 50, G = 3 ms, a 15 s wait limit.
///
/// # Safety
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_config_default(out: *mut apf_queueset_config) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_queueset_config::defaults());
        apf_status::APF_OK
    }
}

/// Make a queueset named `(name, name_len)` (UTF-8; for errors and dumps)
/// from `config`, on a manual clock that starts at 0 and moves only through
/// `apf_queueset_advance_clock` if `manual_clock`, else on the real
/// monotonic clock (0 at creation). `APF_ERR_CONFIG` names the bad field.
/// Free it with `apf_queueset_free`.
///
/// # Safety
/// `name` readable for `name_len` bytes (or NULL with 0); `config` NULL or
/// readable for its `struct_size` bytes; `out` NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_new(
    name: *const c_char,
    name_len: usize,
    config: *const apf_queueset_config,
    manual_clock: bool,
    out: *mut *mut apf_queueset,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let name = try_str!(name, name_len, "name");
        // SAFETY: NULL or readable for its `struct_size`, per the contract.
        let config = match unsafe { read_config(config) } {
            Ok(c) => c,
            Err(status) => return status,
        };
        let out = try_out!(out);
        let (clock, manual) = if manual_clock {
            let (clock, manual) = Clock::manual();
            (clock, Some(manual))
        } else {
            (Clock::real(), None)
        };
        let config = match to_config(name, &config) {
            Ok(c) => c,
            Err(e) => return fail(apf_status::APF_ERR_CONFIG, e),
        };
        let qs = match QueueSet::new(config, clock.clone()) {
            Ok(qs) => qs,
            Err(e) => return fail(apf_status::APF_ERR_CONFIG, e),
        };
        let level = Arc::new(Level::limited(name.to_owned(), None, qs, clock));
        out.write(to_boxed_mut_ptr(FfiQueueSet {
            owner: Owner::new(OwnerKind::QueueSet),
            leases: Leases::new(&level),
            level,
            manual,
            completion: Arc::new(Completion::default()),
        }));
        apf_status::APF_OK
    }
}

/// Free a queueset: executing requests are finished, waiting ones
/// cancelled (no notification). NULL is a no-op.
///
/// # Safety
/// `qs` NULL or a queueset not yet freed, with no other call on it running
/// or following.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_free(qs: *mut apf_queueset) {
    ffi_panic_boundary! {
        // SAFETY: the caller hands over ownership (contract above).
        unsafe { free_box(qs) }
    }
}

/// Switch to `config`; on error (`APF_ERR_CONFIG`) the old one stays. Queues
/// and waiting requests are kept; a larger concurrency limit dispatches at
/// once. Queues beyond a smaller `queues` drain before they go.
///
/// # Safety
/// `qs` NULL or live; `config` NULL or readable for its `struct_size`
/// bytes.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_reconfigure(
    qs: *mut apf_queueset,
    config: *const apf_queueset_config,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let q = try_ref_from_ptr!(qs);
        // SAFETY: NULL or readable for its `struct_size`, per the contract.
        let config = match unsafe { read_config(config) } {
            Ok(c) => c,
            Err(status) => return status,
        };
        let config = match to_config(&q.level.name, &config) {
            Ok(c) => c,
            Err(e) => return fail(apf_status::APF_ERR_CONFIG, e),
        };
        match q.queueset().reconfigure(config) {
            Ok(()) => apf_status::APF_OK,
            Err(e) => fail(apf_status::APF_ERR_CONFIG, e),
        }
    }
}

/// Decide on a request of flow `flow_hash` (shuffle sharding deals its
/// queues from it). `estimate` NULL means one seat, no additional latency.
/// `deadline_nanos`: the latest time on the queueset's clock
/// (`apf_queueset_now`) at which it may still start, 0 for none. `tag`: the
/// caller's number for the request's kind (e.g. its flow schema), shown by
/// dumps. On `APF_OK`, `*out`: `APF_OUTCOME_EXECUTE` (run it, then
/// `apf_finish(NULL, request, ...)`), `APF_OUTCOME_QUEUED` (wait, poll,
/// take its completion, or cancel it, with NULL as the dispatcher) or
/// `APF_OUTCOME_REJECTED`. The handle is unique in the process; a
/// dispatcher passed with it is refused (`APF_ERR_INVALID_PARAMETER`).
///
/// # Safety
/// `qs` NULL or live; `estimate` NULL or readable; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_start(
    qs: *mut apf_queueset,
    flow_hash: u64,
    estimate: *const apf_work_estimate,
    deadline_nanos: u64,
    tag: u32,
    out: *mut apf_queueset_decision,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        // SAFETY: NULL or readable, per the contract.
        let estimate = to_estimate(unsafe { estimate.as_ref() });
        let out = try_out!(out);
        let deadline = (deadline_nanos != 0).then(|| Instant::from_nanos(deadline_nanos));
        let outcome = Level::admit_with_leases(&q.leases, tag, flow_hash, estimate, deadline, || {
            WaitingNote::new("", &RequestDigest::default())
        });
        let (outcome, reason, request, waiting) = match outcome {
            Outcome::Execute(guard) => match requests().insert_owned(q.owner, Entry::executing(guard)) {
                Ok(h) => (apf_outcome::APF_OUTCOME_EXECUTE, apf_reject_reason::APF_REJECT_NONE, h, None),
                Err(entry) => return too_many(entry),
            },
            Outcome::Queued(ticket) => {
                let waiting = ticket.waiting_id().zip(ticket.joined());
                match enqueue(q.owner, &q.completion, ticket) {
                    Ok((o, r, h)) => {
                        let waiting = waiting.filter(|_| o == apf_outcome::APF_OUTCOME_QUEUED);
                        (o, r, h, waiting)
                    }
                    Err(status) => return status,
                }
            }
            Outcome::Rejected(reason) => {
                (apf_outcome::APF_OUTCOME_REJECTED, reason.into(), 0, None)
            }
        };
        let (waiting_id, queue_length, queue, current_r) =
            waiting.map_or((0, 0, 0, 0.0), |(id, j)| {
                (id, j.queue_length, j.queue, to_seat_seconds(j.current_r))
            });
        out.write(apf_queueset_decision {
            outcome: outcome as u32,
            reject_reason: reason as u32,
            request,
            waiting_id,
            queue_length,
            queue,
            current_r,
        });
        apf_status::APF_OK
    }
}

/// A file descriptor readable while decided requests wait in the
/// queueset's completion queue (see `apf_dispatcher_completion_fd`).
///
/// # Safety
/// `qs` NULL or live; `out_fd` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_completion_fd(
    qs: *mut apf_queueset,
    out_fd: *mut c_int,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        let out = try_out!(out_fd);
        match q.completion.fd() {
            Ok(fd) => {
                out.write(fd);
                apf_status::APF_OK
            }
            Err(e) => fail(apf_status::APF_ERR_IO, format_args!("completion fd: {e}")),
        }
    }
}

/// Take the oldest decided request from the completion queue (see
/// `apf_dispatcher_take_completion`); then poll it.
///
/// # Safety
/// `qs` NULL or live; `out_request`, `out_some` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_take_completion(
    qs: *mut apf_queueset,
    out_request: *mut u64,
    out_some: *mut bool,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        let out_request = try_out!(out_request);
        let out_some = try_out!(out_some);
        let taken = q.completion.take();
        out_request.write(taken.unwrap_or(0));
        out_some.write(taken.is_some());
        apf_status::APF_OK
    }
}

/// Move a manual clock forward by `nanos`, firing wait limits, deadlines and
/// ends of additional latency on the way. `APF_ERR_NOT_MANUAL_CLOCK` for a
/// real clock.
///
/// # Safety
/// `qs` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_advance_clock(
    qs: *mut apf_queueset,
    nanos: u64,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        match &q.manual {
            Some(manual) => {
                manual.advance(Duration::from_nanos(nanos));
                apf_status::APF_OK
            }
            None => fail(
                apf_status::APF_ERR_NOT_MANUAL_CLOCK,
                "apf_queueset_advance_clock: the queueset runs on the real clock",
            ),
        }
    }
}

/// The queueset's clock, in nanoseconds since its epoch.
///
/// # Safety
/// `qs` NULL or live; `out_nanos` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_now(
    qs: *const apf_queueset,
    out_nanos: *mut u64,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        let out = try_out!(out_nanos);
        out.write(q.now().as_nanos());
        apf_status::APF_OK
    }
}

/// Whether no request executes, waits, or holds seats (lingering
/// additional latency included).
///
/// # Safety
/// `qs` NULL or live; `out_idle` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_is_idle(
    qs: *const apf_queueset,
    out_idle: *mut bool,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        let out = try_out!(out_idle);
        out.write(q.level.is_idle());
        apf_status::APF_OK
    }
}

/// The queueset's gauges and counters.
///
/// # Safety
/// `qs` NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_read_stats(
    qs: *const apf_queueset,
    out: *mut apf_queueset_stats,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        let out = try_out!(out);
        out.write(q.stats());
        apf_status::APF_OK
    }
}

/// The queueset's state as JSON (gauges, counters, queues, waiting
/// requests). On `APF_OK`, `*out` owns the text: free it with
/// `apf_text_free`.
///
/// # Safety
/// `qs` NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_queueset_dump_json(
    qs: *const apf_queueset,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let q = try_ref_from_ptr!(qs);
        // SAFETY: `out` per the contract.
        unsafe { text_out(out, || q.dump_json()) }
    }
}
