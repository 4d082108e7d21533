//! Requests: start, wait, poll, cancel, finish.

use super::cast::bytes_from_raw;
use super::completion::{Completion, RequestWaker};
use super::dispatcher::{apf_dispatcher, FfiDispatcher};
use super::names::{apf_str, NamePair};
use super::slab::{requests, Entry, Occupied, Owner, OwnerKind, Refused, Retired, Stale, Waiting};
use super::status::{apf_status, fail};
use crate::sync::Arc;
use apf::classification::RequestDigest;
use apf::clock::Instant;
use apf::dispatcher::Outcome;
use apf::level::{RequestGuard, RequestTicket};
use apf::queueset::RejectReason;
use apf::work_estimate::WorkEstimate;
use smallvec::SmallVec;
use std::ffi::c_char;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What became of a request (`apf_decision.outcome`, and the `out_outcome`
/// of `apf_request_wait` and `apf_request_poll`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_outcome {
    /// Execute the request now, then `apf_finish` it.
    APF_OUTCOME_EXECUTE = 0,
    /// The request waits in a queue: wait, poll, or get notified.
    APF_OUTCOME_QUEUED = 1,
    /// The request is rejected (Kubernetes answers 429); see the reason.
    APF_OUTCOME_REJECTED = 2,
}

/// Why a request was rejected (`APF_REJECT_NONE` unless the outcome is
/// `APF_OUTCOME_REJECTED`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_reject_reason {
    /// Not rejected.
    APF_REJECT_NONE = 0,
    /// Its queue was full and its level had no free seat.
    APF_REJECT_QUEUE_FULL = 1,
    /// It waited past the wait limit or its own deadline.
    APF_REJECT_TIME_OUT = 2,
    /// It was cancelled while it waited.
    APF_REJECT_CANCELLED = 3,
    /// Its level does not queue and had no free seat.
    APF_REJECT_CONCURRENCY_LIMIT = 4,
    /// Its level failed: a panic inside the level's critical section left
    /// its state inconsistent, so it rejects every request (a bug; the next
    /// reconfiguration replaces the level). Not one of Kubernetes' reasons.
    APF_REJECT_LEVEL_FAILED = 5,
}

impl From<RejectReason> for apf_reject_reason {
    fn from(r: RejectReason) -> Self {
        match r {
            RejectReason::QueueFull => apf_reject_reason::APF_REJECT_QUEUE_FULL,
            RejectReason::TimeOut => apf_reject_reason::APF_REJECT_TIME_OUT,
            RejectReason::Cancelled => apf_reject_reason::APF_REJECT_CANCELLED,
            RejectReason::ConcurrencyLimit => apf_reject_reason::APF_REJECT_CONCURRENCY_LIMIT,
            RejectReason::LevelFailed => apf_reject_reason::APF_REJECT_LEVEL_FAILED,
        }
    }
}

/// What classification looks at. Strings are `(ptr, len)` pairs, not
/// necessarily NUL-terminated, valid UTF-8; `(NULL, 0)` is the empty string
/// (meaning "none"). libapf does not keep any pointer after the call.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_request_digest {
    /// Authenticated user name (`system:serviceaccount:NS:NAME` for a
    /// service account).
    pub user: *const c_char,
    /// The length of `user` in bytes.
    pub user_len: usize,
    /// Kubernetes verb (`get`, `list`, `create`, ...; for a non-resource
    /// request the lower-case HTTP method).
    pub verb: *const c_char,
    /// The length of `verb` in bytes.
    pub verb_len: usize,
    /// API group, empty for the core group.
    pub api_group: *const c_char,
    /// The length of `api_group` in bytes.
    pub api_group_len: usize,
    /// Resource (`pods`, `configmaps`, ...), empty for a non-resource request.
    pub resource: *const c_char,
    /// The length of `resource` in bytes.
    pub resource_len: usize,
    /// Subresource (`status`, `log`, ...), empty for none.
    pub subresource: *const c_char,
    /// The length of `subresource` in bytes.
    pub subresource_len: usize,
    /// Namespace, empty for cluster-scoped requests. (Named `namespace_`
    /// because `namespace` is a C++ keyword.)
    pub namespace_: *const c_char,
    /// The length of `namespace_` in bytes.
    pub namespace_len: usize,
    /// Object name.
    pub name: *const c_char,
    /// The length of `name` in bytes.
    pub name_len: usize,
    /// URL path (what non-resource rules match).
    pub path: *const c_char,
    /// The length of `path` in bytes.
    pub path_len: usize,
    /// The user's groups: `n_groups` strings (NULL when `n_groups` is 0).
    pub groups: *const apf_str,
    /// How many groups `groups` points to.
    pub n_groups: usize,
    /// A resource request (true) or a non-resource URL (false).
    pub is_resource_request: bool,
}

/// Seats a request occupies: `initial_seats` while it executes, then
/// `final_seats` for `additional_latency_nanos` after it finishes (0 for
/// none). Seats of 0 count as 1; seats above a level's limit are capped.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct apf_work_estimate {
    /// Seats occupied while the request executes.
    pub initial_seats: u32,
    /// Seats still occupied after it finished, for the additional latency.
    pub final_seats: u32,
    /// How long `final_seats` stay occupied after the request finished.
    pub additional_latency_nanos: u64,
}

/// The decision on a started request.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_decision {
    /// An `apf_outcome`.
    pub outcome: u32,
    /// An `apf_reject_reason`.
    pub reject_reason: u32,
    /// The request's handle; 0 when rejected. Executing: finish it.
    /// Queued: wait, poll, or cancel it.
    pub request: u64,
    /// The flow schema that matched and the priority level it chose, and
    /// their UIDs (empty when the configuration gave none). Servers send
    /// the UIDs as `X-Kubernetes-PF-FlowSchema-UID` and
    /// `X-Kubernetes-PF-PriorityLevel-UID`. Owned by the dispatcher,
    /// NUL-terminated, valid until `apf_dispatcher_free`.
    pub flow_schema_name: apf_str,
    /// The flow schema's UID.
    pub flow_schema_uid: apf_str,
    /// The priority level's name.
    pub priority_level_name: apf_str,
    /// The priority level's UID.
    pub priority_level_uid: apf_str,
}

/// A string field of the digest, or the status naming the field.
macro_rules! digest_str {
    ($d:ident . $field:ident, $len:ident) => {
        // SAFETY: the digest's strings are readable for their lengths
        // (the caller's contract).
        match unsafe { super::cast::str_from_raw($d.$field, $d.$len) } {
            Ok(s) => Ok(s),
            Err(e) => Err(fail(
                e.status(),
                format_args!("digest.{} {}", stringify!($field), e.describe()),
            )),
        }
    };
}

pub(crate) fn to_estimate(e: Option<&apf_work_estimate>) -> WorkEstimate {
    match e {
        None => WorkEstimate::new(1, 0, Duration::ZERO),
        Some(e) => WorkEstimate::new(
            e.initial_seats,
            e.final_seats,
            Duration::from_nanos(e.additional_latency_nanos),
        ),
    }
}

/// Why a lifecycle call refuses a handle: stale, or the request (live or
/// just retired) is another owner's than the dispatcher the call named.
type Refusal = Refused<Retired, Owner>;

fn refusal_error(handle: u64, refused: Refusal, action: &str) -> apf_status {
    let stale = match refused {
        Refused::Foreign(owner) => {
            let whose = match owner.kind() {
                OwnerKind::Dispatcher => "another dispatcher",
                OwnerKind::QueueSet => "a queueset (pass NULL as the dispatcher)",
            };
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!(
                    "{action}: request {handle:#x} was started at {whose}, not at this dispatcher"
                ),
            );
        }
        Refused::Stale(stale) => stale,
    };
    match stale {
        Stale::Retired(Retired::Rejected(_)) => fail(
            apf_status::APF_ERR_REQUEST_REJECTED,
            format_args!("{action}: request {handle:#x} was rejected"),
        ),
        Stale::Retired(Retired::Finished) => fail(
            apf_status::APF_ERR_INVALID_HANDLE,
            format_args!("{action}: request {handle:#x} was already finished"),
        ),
        Stale::Retired(Retired::Cancelled) => fail(
            apf_status::APF_ERR_INVALID_HANDLE,
            format_args!("{action}: request {handle:#x} was cancelled"),
        ),
        Stale::Retired(Retired::OwnerFreed) => fail(
            apf_status::APF_ERR_INVALID_HANDLE,
            format_args!("{action}: request {handle:#x}: its dispatcher or queueset was freed"),
        ),
        Stale::Unknown => fail(
            apf_status::APF_ERR_INVALID_HANDLE,
            format_args!("{action}: unknown or stale request handle {handle:#x}"),
        ),
    }
}

/// The owner a lifecycle call names: the dispatcher's, or none (NULL: a
/// request started at a queueset, or no check).
///
/// # Safety
/// `dispatcher` NULL or live.
unsafe fn named_owner(dispatcher: *const apf_dispatcher) -> Option<Owner> {
    // SAFETY: NULL or live (contract above).
    unsafe { super::cast::try_from(dispatcher) }.map(|d| d.owner)
}

/// Poll a ticket once with `waker`.
fn poll_ticket(
    ticket: &mut RequestTicket,
    waker: &Waker,
) -> Option<Result<RequestGuard, RejectReason>> {
    match Pin::new(ticket).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

/// Classify a request and decide on it.
///
/// `estimate` may be NULL for one seat and no additional latency.
/// `deadline_nanos` is the latest time, on the dispatcher's clock
/// (`apf_dispatcher_now`), at which the request may still start; 0 for
/// none (the wait limit applies either way).
///
/// On `APF_OK`, `*out` holds the decision:
/// - `APF_OUTCOME_EXECUTE`: run the request, then call
///   `apf_finish(request)` exactly once;
/// - `APF_OUTCOME_QUEUED`: wait (`apf_request_wait`), poll, or get notified
///   (callback or completion fd); or `apf_request_cancel` it;
/// - `APF_OUTCOME_REJECTED`: answer 429; `request` is 0.
///
/// # Safety
/// `dispatcher` NULL or live; `digest` NULL or readable, its strings
/// readable for their lengths; `estimate` NULL or readable; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn apf_start_request(
    dispatcher: *mut apf_dispatcher,
    digest: *const apf_request_digest,
    estimate: *const apf_work_estimate,
    deadline_nanos: u64,
    out: *mut apf_decision,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out = try_out!(out);
        // SAFETY: forwarded from this function's contract.
        let started = match unsafe { start(d, digest, estimate, deadline_nanos) } {
            Ok(started) => started,
            Err(status) => return status,
        };
        out.write(apf_decision {
            outcome: started.outcome as u32,
            reject_reason: started.reason as u32,
            request: started.request,
            flow_schema_name: started.schema.name,
            flow_schema_uid: started.schema.uid,
            priority_level_name: started.level.name,
            priority_level_uid: started.level.uid,
        });
        apf_status::APF_OK
    }
}

/// A started request, before it is written into one of the decision structs.
pub(crate) struct Started {
    pub(crate) outcome: apf_outcome,
    pub(crate) reason: apf_reject_reason,
    pub(crate) request: u64,
    pub(crate) schema: NamePair,
    pub(crate) level: NamePair,
}

/// Classify and decide on a request: the body shared by `apf_start_request`
/// and `apf_start_request_ids` (which check their own `out` first).
///
/// # Safety
/// `digest` NULL or readable, its strings readable for their lengths;
/// `estimate` NULL or readable.
pub(crate) unsafe fn start(
    d: &FfiDispatcher,
    digest: *const apf_request_digest,
    estimate: *const apf_work_estimate,
    deadline_nanos: u64,
) -> Result<Started, apf_status> {
    // SAFETY: NULL or readable, per the contract.
    let Some(digest) = (unsafe { digest.as_ref() }) else {
        return Err(fail(apf_status::APF_ERR_NULL_POINTER, "digest is NULL"));
    };
    // SAFETY: NULL or readable, per the contract.
    let estimate = to_estimate(unsafe { estimate.as_ref() });
    // SAFETY: `groups` is readable for `n_groups` elements (contract).
    let raw_groups = match unsafe { bytes_from_raw(digest.groups, digest.n_groups) } {
        Ok(g) => g,
        Err(e) => {
            return Err(fail(
                e.status(),
                format_args!("digest.groups {}", e.describe()),
            ))
        }
    };
    let mut groups: SmallVec<[&str; 8]> = SmallVec::with_capacity(raw_groups.len());
    for (i, g) in raw_groups.iter().enumerate() {
        // SAFETY: each group string is readable for its length (contract).
        match unsafe { super::cast::str_from_raw(g.ptr, g.len) } {
            Ok(s) => groups.push(s),
            Err(e) => {
                return Err(fail(
                    e.status(),
                    format_args!("digest.groups[{i}] {}", e.describe()),
                ))
            }
        }
    }
    let user = digest_str!(digest.user, user_len)?;
    let verb = digest_str!(digest.verb, verb_len)?;
    let api_group = digest_str!(digest.api_group, api_group_len)?;
    let resource = digest_str!(digest.resource, resource_len)?;
    let subresource = digest_str!(digest.subresource, subresource_len)?;
    let namespace = digest_str!(digest.namespace_, namespace_len)?;
    let name = digest_str!(digest.name, name_len)?;
    let path = digest_str!(digest.path, path_len)?;
    let rust_digest = RequestDigest {
        user,
        groups: &groups,
        verb,
        is_resource_request: digest.is_resource_request,
        api_group,
        resource,
        subresource,
        namespace,
        name,
        path,
    };
    let deadline = (deadline_nanos != 0).then(|| Instant::from_nanos(deadline_nanos));
    let decision = d.inner.start_request(&rust_digest, estimate, deadline);
    let (schema, level) = d
        .names
        .of(decision.flow_schema.arc(), decision.priority_level.arc());
    let (outcome, reason, request) = match decision.outcome {
        Outcome::Execute(guard) => {
            match requests().insert_owned(d.owner, Entry::executing(guard)) {
                Ok(handle) => (
                    apf_outcome::APF_OUTCOME_EXECUTE,
                    apf_reject_reason::APF_REJECT_NONE,
                    handle,
                ),
                Err(entry) => return Err(too_many(entry)),
            }
        }
        Outcome::Queued(ticket) => enqueue(d.owner, &d.completion, ticket)?,
        Outcome::Rejected(reason) => (apf_outcome::APF_OUTCOME_REJECTED, reason.into(), 0),
    };
    Ok(Started {
        outcome,
        reason,
        request,
        schema,
        level,
    })
}

pub(crate) fn too_many(entry: Entry) -> apf_status {
    // Dropping the entry finishes (or cancels) the request at once.
    drop(entry);
    fail(
        apf_status::APF_ERR_TOO_MANY_REQUESTS,
        "no request handle left: too many requests in flight",
    )
}

/// Store a queued request and register its waker. If the decision came in
/// before the waker was registered, report it as the start's outcome.
/// Shared by dispatchers and bare queuesets (`super::queueset`).
pub(crate) fn enqueue(
    owner: Owner,
    completion: &Arc<Completion>,
    ticket: RequestTicket,
) -> Result<(apf_outcome, apf_reject_reason, u64), apf_status> {
    let waker = RequestWaker::new(completion.clone());
    let entry = Entry::Waiting(Box::new(Waiting {
        ticket,
        waker: waker.clone(),
    }));
    let handle = requests().insert_owned(owner, entry).map_err(too_many)?;
    waker.set_handle(handle);
    let std_waker = Waker::from(waker);
    let early = live(handle, Some(owner), |mut occ| {
        let Entry::Waiting(w) = occ.entry() else {
            unreachable!("just inserted as waiting");
        };
        match poll_ticket(&mut w.ticket, &std_waker) {
            None => None,
            Some(Ok(guard)) => {
                *occ.entry() = Entry::executing(guard);
                Some(Ok(()))
            }
            Some(Err(reason)) => Some(Err((reason, occ.retire(Retired::Rejected(reason))))),
        }
    });
    Ok(match early {
        Ok(None) => (
            apf_outcome::APF_OUTCOME_QUEUED,
            apf_reject_reason::APF_REJECT_NONE,
            handle,
        ),
        Ok(Some(Ok(()))) => (
            apf_outcome::APF_OUTCOME_EXECUTE,
            apf_reject_reason::APF_REJECT_NONE,
            handle,
        ),
        Ok(Some(Err((reason, entry)))) => {
            drop(entry);
            (apf_outcome::APF_OUTCOME_REJECTED, reason.into(), 0)
        }
        // Another thread guessed the fresh handle and cancelled it.
        Err(_) => (
            apf_outcome::APF_OUTCOME_REJECTED,
            apf_reject_reason::APF_REJECT_CANCELLED,
            0,
        ),
    })
}

/// The current state of a request, taking the decision if there is one.
pub(crate) fn poll_request(
    owner: Option<Owner>,
    handle: u64,
    action: &str,
) -> Result<(apf_outcome, apf_reject_reason), apf_status> {
    let result = live(handle, owner, |mut occ| match occ.entry() {
        Entry::Executing(_) => (
            apf_outcome::APF_OUTCOME_EXECUTE,
            apf_reject_reason::APF_REJECT_NONE,
            None,
        ),
        Entry::Waiting(w) => match w.ticket.poll() {
            None => (
                apf_outcome::APF_OUTCOME_QUEUED,
                apf_reject_reason::APF_REJECT_NONE,
                None,
            ),
            Some(Ok(guard)) => {
                *occ.entry() = Entry::executing(guard);
                (
                    apf_outcome::APF_OUTCOME_EXECUTE,
                    apf_reject_reason::APF_REJECT_NONE,
                    None,
                )
            }
            Some(Err(reason)) => (
                apf_outcome::APF_OUTCOME_REJECTED,
                reason.into(),
                Some(occ.retire(Retired::Rejected(reason))),
            ),
        },
    });
    match result {
        Ok((outcome, reason, retired)) => {
            drop(retired);
            Ok((outcome, reason))
        }
        // A rejection already reported is reported again, as long as the
        // handle's slot has not been reused.
        Err(Refused::Stale(Stale::Retired(Retired::Rejected(reason)))) => {
            Ok((apf_outcome::APF_OUTCOME_REJECTED, reason.into()))
        }
        Err(refused) => Err(refusal_error(handle, refused, action)),
    }
}

/// Block until a queued request is decided or `timeout_nanos` of real time
/// pass (`UINT64_MAX`: no limit; 0: do not block, as `apf_request_poll`).
///
/// `dispatcher` is the dispatcher the request was started at, or NULL for a
/// request started at a queueset (or to skip the check); a dispatcher that
/// did not start it gets `APF_ERR_INVALID_PARAMETER`. The same holds for
/// every call on a request handle.
///
/// `*out_outcome` is then `APF_OUTCOME_EXECUTE` (run it, then finish it),
/// `APF_OUTCOME_REJECTED` with the reason in `*out_reason`, or
/// `APF_OUTCOME_QUEUED` if the timeout passed first (the request still
/// waits). For a request already executing: `APF_OUTCOME_EXECUTE` at once.
/// If another thread cancels the request meanwhile, the wait ends with
/// `APF_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `dispatcher` NULL or live; `out_outcome`, `out_reason` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_request_wait(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    timeout_nanos: u64,
    out_outcome: *mut u32,
    out_reason: *mut u32,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        let out_outcome = try_out!(out_outcome);
        let out_reason = try_out!(out_reason);
        match wait_request(owner, request, timeout_nanos, "apf_request_wait") {
            Ok((outcome, reason)) => {
                out_outcome.write(outcome as u32);
                out_reason.write(reason as u32);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Without blocking: the state of a request. `APF_OUTCOME_QUEUED` while it
/// waits; `APF_OUTCOME_EXECUTE` once dispatched (run it, then finish it);
/// `APF_OUTCOME_REJECTED` with the reason if it was rejected while waiting
/// (the handle is then retired). `dispatcher`: the one the request was
/// started at, or NULL (see `apf_request_wait`).
///
/// Every call reports the state anew, to any thread: if two threads poll or
/// wait on one handle, both learn `APF_OUTCOME_EXECUTE`; let one of them
/// own running and finishing the request (a second finish fails with
/// `APF_ERR_INVALID_HANDLE`).
///
/// # Safety
/// `dispatcher` NULL or live; `out_outcome`, `out_reason` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_request_poll(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    out_outcome: *mut u32,
    out_reason: *mut u32,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        let out_outcome = try_out!(out_outcome);
        let out_reason = try_out!(out_reason);
        match poll_request(owner, request, "apf_request_poll") {
            Ok((outcome, reason)) => {
                out_outcome.write(outcome as u32);
                out_reason.write(reason as u32);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Give up on a queued request (the client went away, or its context was
/// cancelled). On `APF_OK` the handle is retired either way:
/// `*out_cancelled` is true if it was still waiting, false if it had just
/// been decided (a dispatch you were not told about is finished at once).
/// No completion notification follows a cancellation. `dispatcher`: the
/// one the request was started at, or NULL (see `apf_request_wait`).
/// Errors: `APF_ERR_REQUEST_EXECUTING` (finish it instead),
/// `APF_ERR_REQUEST_REJECTED`, `APF_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `dispatcher` NULL or live; `out_cancelled` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_request_cancel(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    out_cancelled: *mut bool,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        let out = try_out!(out_cancelled);
        match cancel_request(owner, request, "apf_request_cancel") {
            Ok(cancelled) => {
                out.write(cancelled);
                apf_status::APF_OK
            }
            Err(status) => status,
        }
    }
}

/// Finish an executing request, with `end_nanos` the actual end of its
/// execution on its dispatcher's (or queueset's) clock (0: now), so the
/// additional latency of its work estimate counts from then. The handle is
/// retired. `dispatcher`: the one the request was started at, or NULL for
/// a request started at a queueset (or to skip the check); another
/// dispatcher gets `APF_ERR_INVALID_PARAMETER`. Errors:
/// `APF_ERR_REQUEST_QUEUED` (not dispatched yet, or its dispatch not yet
/// reported by wait/poll: cancel it instead), `APF_ERR_REQUEST_REJECTED`,
/// `APF_ERR_INVALID_HANDLE` (unknown, already finished, or its dispatcher
/// or queueset was freed).
///
/// # Safety
/// `dispatcher` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_finish(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    end_nanos: u64,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        finish_request(owner, request, end_nanos, "apf_finish", None)
    }
}

/// `apf_finish`, reporting what the request really cost, in seats (for
/// example its CPU time over its execution time, or the objects it
/// processed over the objects one seat is worth). If its flow schema has
/// the annotation `apf.libapf.io/cost: learned`, later requests of the same
/// flow schema, verb and resource get their seats from these reports (a
/// bounded table, see docs/cost.md); otherwise (and for a queueset's
/// request) the cost is ignored. Errors: those of `apf_finish`, and
/// `APF_ERR_INVALID_PARAMETER` when `cost` is not a finite number of 0 or
/// more (the request is then not finished).
///
/// # Safety
/// `dispatcher` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_finish_with_cost(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    end_nanos: u64,
    cost: f64,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        let action = "apf_finish_with_cost";
        if !cost.is_finite() || cost < 0.0 {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!(
                    "{action}: request {request:#x}: cost: {cost} is not a finite number of seats, 0 or more"
                ),
            );
        }
        finish_request(owner, request, end_nanos, action, Some(cost))
    }
}

/// Give back `seats` of an executing request's seats now while it keeps
/// executing (a watch after its initial burst, a LIST past its expensive
/// phase); 0 gives back every seat it still holds. Waiting requests that
/// now fit are dispatched (their completions may be notified from this
/// call), and the request's `apf_finish` later gives back only what it
/// still holds. `dispatcher`: the one the request was started at, or NULL
/// (see `apf_request_wait`). Errors (nothing changes):
/// `APF_ERR_INVALID_PARAMETER` when the request already released every
/// seat (a second release of all) or holds fewer than `seats`, or
/// `dispatcher` did not start it; `APF_ERR_REQUEST_QUEUED` (not
/// dispatched, or its dispatch not yet reported);
/// `APF_ERR_REQUEST_REJECTED`; `APF_ERR_INVALID_HANDLE` (unknown, or
/// already finished: a release after the finish).
///
/// # Safety
/// `dispatcher` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn apf_request_release_seats(
    dispatcher: *mut apf_dispatcher,
    request: u64,
    seats: u32,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live, per the contract.
        let owner = unsafe { named_owner(dispatcher) };
        release_request_seats(owner, request, seats, "apf_request_release_seats")
    }
}

/// Release an executing request's seats (see `apf_request_release_seats`).
/// The release is checked and counted under the request slab's lock, and
/// the seats given back after it is dropped: giving them back can dispatch
/// waiters and run completion callbacks, which may call back into libapf.
/// A finish of the request meanwhile waits for the release to end (see
/// [`SharedRequest`](apf::level::SharedRequest)): it is done here if it
/// came.
fn release_request_seats(
    owner: Option<Owner>,
    request: u64,
    seats: u32,
    action: &str,
) -> apf_status {
    let begun = live(request, owner, |mut occ| match occ.entry() {
        Entry::Executing(shared) => {
            let seats = if seats == 0 {
                u32::try_from(shared.seats()).unwrap_or(u32::MAX).max(1)
            } else {
                seats
            };
            Some(shared.begin_release(seats))
        }
        Entry::Waiting(_) => None,
    });
    match begun {
        Ok(Some(Ok(pending))) => {
            pending.complete();
            // The slot stays this request's until the release ends: no
            // finish retires it while a release is in flight (so no owner
            // check is needed again).
            let last = requests().with_owned(request, |_| true, |mut occ| {
                let Entry::Executing(shared) = occ.entry() else {
                    unreachable!("a request releasing seats stays executing");
                };
                shared
                    .end_release()
                    .then(|| occ.retire(Retired::Finished))
            });
            if let Ok(Some(Entry::Executing(shared))) = last {
                shared.finish();
            }
            apf_status::APF_OK
        }
        Ok(Some(Err(e))) => fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            format_args!("{action}: request {request:#x}: {e}"),
        ),
        Ok(None) => fail(
            apf_status::APF_ERR_REQUEST_QUEUED,
            format_args!(
                "{action}: request {request:#x} is queued; wait for it or poll it before releasing seats"
            ),
        ),
        Err(refused) => refusal_error(request, refused, action),
    }
}

/// Block until a queued request is decided or `timeout_nanos` pass (see
/// `apf_request_wait`), then report its state.
fn wait_request(
    owner: Option<Owner>,
    request: u64,
    timeout_nanos: u64,
    action: &str,
) -> Result<(apf_outcome, apf_reject_reason), apf_status> {
    let waker = live(request, owner, |mut occ| match occ.entry() {
        Entry::Waiting(w) => Some(w.waker.clone()),
        Entry::Executing(_) => None,
    });
    if let Ok(Some(waker)) = waker {
        let timeout = (timeout_nanos != u64::MAX).then(|| Duration::from_nanos(timeout_nanos));
        waker.wait_decided(timeout);
    }
    poll_request(owner, request, action)
}

/// Cancel a queued request (see `apf_request_cancel`): true if it was
/// still waiting.
fn cancel_request(owner: Option<Owner>, request: u64, action: &str) -> Result<bool, apf_status> {
    let taken = live(request, owner, |mut occ| match occ.entry() {
        Entry::Executing(_) => None,
        Entry::Waiting(_) => Some(occ.retire(Retired::Cancelled)),
    });
    match taken {
        Ok(Some(Entry::Waiting(w))) => {
            w.waker.silence();
            Ok(w.ticket.cancel())
        }
        Ok(_) => Err(fail(
            apf_status::APF_ERR_REQUEST_EXECUTING,
            format_args!("{action}: request {request:#x} is executing; finish it"),
        )),
        Err(refused) => Err(refusal_error(request, refused, action)),
    }
}

/// Finish an executing request (see `apf_finish`), reporting `cost`
/// (checked by the caller: finite, 0 or more) when given. `end_nanos` 0
/// means now on the request's level's clock (its dispatcher's or
/// queueset's), read under the slab's lock when the finish is asked.
fn finish_request(
    owner: Option<Owner>,
    request: u64,
    end_nanos: u64,
    action: &str,
    cost: Option<f64>,
) -> apf_status {
    // A finish that meets a release in flight is left to that release
    // (see `SharedRequest`): the level must see the release first.
    let taken = live(request, owner, |mut occ| match occ.entry() {
        Entry::Executing(shared) => {
            let end = if end_nanos == 0 {
                shared.now()
            } else {
                Instant::from_nanos(end_nanos)
            };
            Some(
                shared
                    .ask_finish(end, cost)
                    .then(|| occ.retire(Retired::Finished)),
            )
        }
        Entry::Waiting(_) => None,
    });
    match taken {
        Ok(Some(Some(Entry::Executing(shared)))) => {
            shared.finish();
            apf_status::APF_OK
        }
        Ok(Some(None)) => apf_status::APF_OK,
        Ok(Some(Some(Entry::Waiting(_)))) => unreachable!("retired only when executing"),
        Ok(None) => fail(
            apf_status::APF_ERR_REQUEST_QUEUED,
            format_args!(
                "{action}: request {request:#x} is queued; wait for it, poll it, or cancel it"
            ),
        ),
        Err(refused) => refusal_error(request, refused, action),
    }
}

/// A live request under its shard's lock.
type Live<'a> = Occupied<'a, Entry, Retired, Owner>;

/// Run `f` on the live request `handle` names, under its shard's lock, if
/// `owner` (when given) started it; a request whose finish was asked for
/// (and waits for a release to end) reads as already finished. A handle
/// just retired is refused to another owner too (see
/// [`Slab::with_owned`](super::slab::Slab::with_owned)).
#[inline]
fn live<X>(handle: u64, owner: Option<Owner>, f: impl FnOnce(Live<'_>) -> X) -> Result<X, Refusal> {
    requests()
        .with_owned(
            handle,
            |actual| owner.is_none_or(|asked| asked == actual),
            |mut occ| match occ.entry() {
                Entry::Executing(shared) if shared.finishing() => {
                    Err(Refused::Stale(Stale::Retired(Retired::Finished)))
                }
                _ => Ok(f(occ)),
            },
        )
        .and_then(|x| x)
}

/// Retire every live request of a dispatcher or queueset being freed (see
/// [`RequestSlab`](super::slab::RequestSlab)'s invariants): executing ones
/// are finished, waiting ones cancelled without a completion notification.
pub(crate) fn close_requests(owner: Owner, completion: &Completion) {
    completion.close();
    for entry in requests().drain_where(|o, _| o == owner, Retired::OwnerFreed) {
        if let Entry::Waiting(w) = &entry {
            w.waker.silence();
        }
        drop(entry);
    }
}

/// Live requests started at `owner`.
pub(crate) fn live_requests(owner: Owner) -> usize {
    requests().count_where(|o, _| o == owner)
}
