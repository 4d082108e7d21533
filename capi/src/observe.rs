//! Seeing into an `apf_dispatcher`: its metrics exposition and Kubernetes'
//! three debug dumps, as owned `apf_text` values.
//!
//! Each call makes the text anew from the dispatcher's state at that
//! moment (see [`apf::metrics`]) and hands it over whole, so there is no
//! size to ask first and no retry.

use super::dispatcher::apf_dispatcher;
use super::status::apf_status;
use super::text::apf_text;
use apf::metrics::CONTENT_TYPE;
use std::ffi::c_char;

/// [`CONTENT_TYPE`] with a NUL, for C (a test checks they agree).
const CONTENT_TYPE_NUL: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8\0";

/// The exported text functions' common body: check the dispatcher, then
/// make the text and hand it over.
///
/// # Safety
/// `dispatcher` is NULL or live; `out` NULL or writable.
unsafe fn text_out(
    dispatcher: *const apf_dispatcher,
    out: *mut apf_text,
    make: impl FnOnce(&apf::dispatcher::Dispatcher) -> String,
) -> apf_status {
    let d = try_ref_from_ptr!(dispatcher);
    // SAFETY: forwarded contract.
    unsafe { super::text::text_out(out, || make(&d.inner)) }
}

/// The dispatcher's metrics in the OpenMetrics 1.0 text format, which
/// Prometheus scrapes (serve it with the type `apf_metrics_content_type`
/// gives): Kubernetes' API Priority and Fairness metric names, labels
/// (priority level, flow schema, reason) and histogram buckets, read now.
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// Cost: each priority level's lock (which admission takes too) is held
/// briefly while its figures are copied, never while the text is formatted.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_metrics_text(
    dispatcher: *const apf_dispatcher,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe { text_out(dispatcher, out, |d| d.metrics_text()) }
    }
}

/// The HTTP `Content-Type` of `apf_dispatcher_metrics_text`'s text, as a
/// NUL-terminated static string (`*out_text` stays valid forever; `*out_len`
/// is its length without the NUL).
///
/// # Safety
/// `out_text` and `out_len` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_metrics_content_type(
    out_text: *mut *const c_char,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let out_text = try_out!(out_text);
        let out_len = try_out!(out_len);
        out_text.write(CONTENT_TYPE_NUL.as_ptr().cast());
        out_len.write(CONTENT_TYPE.len());
        apf_status::APF_OK
    }
}

/// The table of Kubernetes' `/debug/api_priority_and_fairness/
/// dump_priority_levels`: a header line (`PriorityLevelName, ActiveQueues,
/// IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests,
/// DispatchedRequests, RejectedRequests, TimedoutRequests,
/// CancelledRequests`), then one line per priority level sorted by name
/// (levels a reconfiguration removed show while requests remain in them,
/// with `IsQuiescing` true). Cells are separated by commas and aligned with
/// spaces, as Kubernetes prints them.
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_priority_levels(
    dispatcher: *const apf_dispatcher,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe {
            text_out(dispatcher, out, |d| {
                d.dump_priority_levels()
            })
        }
    }
}

/// The table of Kubernetes' `/debug/api_priority_and_fairness/dump_queues`:
/// a header line (`PriorityLevelName, Index, PendingRequests,
/// ExecutingRequests, SeatsInUse, NextDispatchR, InitialSeatsSum,
/// MaxSeatsSum, TotalWorkSum`), then one line per queue of every level that
/// queues. Virtual times and work are in seat-seconds (`0.00300000ss`).
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_queues(
    dispatcher: *const apf_dispatcher,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe { text_out(dispatcher, out, |d| d.dump_queues()) }
    }
}

/// The table of Kubernetes' `/debug/api_priority_and_fairness/
/// dump_requests`: a header line (`PriorityLevelName, FlowSchemaName,
/// QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime,
/// InitialSeats, FinalSeats, AdditionalLatency, StartTime`), then one line
/// per request waiting in a queue, queue by queue, head first. With
/// `include_details` (Kubernetes' `?includeRequestDetails=1`) each line
/// also has `UserName, Verb, APIPath, Namespace, Name, APIVersion,
/// Resource, SubResource` (`APIVersion` shows the API group).
///
/// Unlike Kubernetes, `ArriveTime` is in seconds on the dispatcher's clock
/// (as `apf_dispatcher_now`), and executing requests are not listed.
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_requests(
    dispatcher: *const apf_dispatcher,
    include_details: bool,
    out: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe {
            text_out(dispatcher, out, |d| {
                d.dump_requests(include_details)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_content_type_is_the_exporters() {
        assert_eq!(CONTENT_TYPE_NUL.strip_suffix('\0'), Some(CONTENT_TYPE));
    }
}
