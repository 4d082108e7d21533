//! Seeing into an `apf_dispatcher`: its metrics exposition and Kubernetes'
//! three debug dumps, as text copied into the caller's buffer.
//!
//! Each call makes the text anew from the dispatcher's state at that
//! moment (see [`crate::metrics`]), so two calls can give texts of
//! different lengths: callers that ask for the size first must retry when
//! the copy reports `APF_ERR_INSUFFICIENT_SIZE`.

use super::cast::copy_text_out;
use super::dispatcher::apf_dispatcher;
use super::status::{apf_status, fail};
use crate::metrics::CONTENT_TYPE;
use std::ffi::c_char;

/// [`CONTENT_TYPE`] with a NUL, for C (a test checks they agree).
const CONTENT_TYPE_NUL: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8\0";

/// The exported text functions' common body: make the text only once the
/// pointers are known good, then copy it out.
///
/// # Safety
/// `dispatcher` is NULL or live; `buf` NULL (with `len` 0) or writable for
/// `len` bytes; `out_len` NULL or writable.
unsafe fn text_out(
    what: &str,
    dispatcher: *const apf_dispatcher,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
    make: impl FnOnce(&crate::dispatcher::Dispatcher) -> String,
) -> apf_status {
    let d = try_ref_from_ptr!(dispatcher);
    if out_len.is_null() {
        return fail(apf_status::APF_ERR_NULL_POINTER, "out_len is NULL");
    }
    if buf.is_null() && len != 0 {
        return fail(apf_status::APF_ERR_NULL_POINTER, "buf is NULL");
    }
    let text = make(&d.inner);
    // SAFETY: forwarded contract.
    unsafe { copy_text_out(what, &text, buf, len, out_len) }
}

/// The dispatcher's metrics in the OpenMetrics 1.0 text format, which
/// Prometheus scrapes (serve it with the type `apf_metrics_content_type`
/// gives): Kubernetes' API Priority and Fairness metric names, labels
/// (priority level, flow schema, reason) and histogram buckets, read now.
///
/// Copies the text and a NUL into `buf`; `*out_len` gets its length without
/// the NUL. If `len` is too small: `APF_ERR_INSUFFICIENT_SIZE` with the
/// needed length in `*out_len` (pass `buf` NULL and `len` 0 to ask). The
/// text is made anew on every call and may have grown since the size was
/// asked (a new flow schema seen, a histogram's first observation): on
/// `APF_ERR_INSUFFICIENT_SIZE`, allocate `*out_len + 1` bytes and call
/// again, in a loop.
///
/// Cost: each priority level's lock (which admission takes too) is held
/// briefly while its figures are copied, never while the text is formatted.
///
/// # Safety
/// `dispatcher` must be NULL or live; `buf` NULL (with `len` 0) or writable
/// for `len` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_metrics_text(
    dispatcher: *const apf_dispatcher,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe { text_out("metrics text", dispatcher, buf, len, out_len, |d| d.metrics_text()) }
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
/// Buffer rules as `apf_dispatcher_metrics_text` (size query with `buf`
/// NULL and `len` 0; retry on `APF_ERR_INSUFFICIENT_SIZE`).
///
/// # Safety
/// `dispatcher` must be NULL or live; `buf` NULL (with `len` 0) or writable
/// for `len` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_priority_levels(
    dispatcher: *const apf_dispatcher,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe {
            text_out("priority level dump", dispatcher, buf, len, out_len, |d| {
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
/// Buffer rules as `apf_dispatcher_metrics_text`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `buf` NULL (with `len` 0) or writable
/// for `len` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_queues(
    dispatcher: *const apf_dispatcher,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe { text_out("queue dump", dispatcher, buf, len, out_len, |d| d.dump_queues()) }
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
/// Buffer rules as `apf_dispatcher_metrics_text`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `buf` NULL (with `len` 0) or writable
/// for `len` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_dump_requests(
    dispatcher: *const apf_dispatcher,
    include_details: bool,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: forwarded contract.
        unsafe {
            text_out("request dump", dispatcher, buf, len, out_len, |d| {
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
