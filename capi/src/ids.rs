//! Decisions with small integer ids for the flow schema and priority level
//! (`apf_start_request_ids`), and their names on demand by id
//! (`apf_dispatcher_name`).
//!
//! `apf_decision` hands out four `apf_str`s per request. A binding that
//! turns them into its own strings pays a name look-up (or a copy) per
//! request, and in Go a struct holding C pointers also makes every cgo call
//! that writes it pay a pointer check. `apf_decision_ids` holds no pointer:
//! the binding keeps a table of names indexed by id and asks for a name
//! only the first time it sees an id (see `names` for what an id is).

use super::dispatcher::apf_dispatcher;
use super::names::apf_str;
use super::request::{apf_request_digest, apf_work_estimate, start};
use super::status::{apf_status, fail};
use std::mem::size_of;

/// The decision on a started request, with ids instead of names
/// (`apf_start_request_ids`). Set `struct_size` to
/// `sizeof(apf_decision_ids)` before the call: it lets later versions add
/// fields at the end (this library writes the fields it knows and zeroes
/// the rest of a larger struct).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct apf_decision_ids {
    /// `sizeof(apf_decision_ids)` as the caller's header knows it; set by
    /// the caller.
    pub struct_size: usize,
    /// An `apf_outcome`.
    pub outcome: u32,
    /// An `apf_reject_reason`.
    pub reject_reason: u32,
    /// The request's handle, as in `apf_decision`.
    pub request: u64,
    /// The id of the flow schema's name and UID (`apf_dispatcher_name`).
    /// Never 0 unless the dispatcher has given out 2^20 - 1 distinct ids
    /// (name, UID pairs over its life), which no real configuration does.
    pub flow_schema_id: u32,
    /// The id of the priority level's name and UID.
    pub priority_level_id: u32,
}

/// The first published size of `apf_decision_ids`.
const DECISION_IDS_MIN_SIZE: usize = size_of::<apf_decision_ids>();

/// Classify a request and decide on it, as `apf_start_request`, giving
/// the flow schema and priority level as ids: numbers that stay the same
/// for the same (name, UID) pair for the dispatcher's life, across
/// reconfigurations, and are never reused, so a binding may cache
/// `apf_dispatcher_name`'s answer for an id forever.
///
/// `out->struct_size` must be at least the size of the first version of
/// `apf_decision_ids` (`APF_ERR_INVALID_PARAMETER` otherwise, with nothing
/// started). Errors are those of `apf_start_request`; `*out` is written
/// only on `APF_OK`.
///
/// # Safety
/// `dispatcher` NULL or live; `digest` NULL or readable, its strings
/// readable for their lengths; `estimate` NULL or readable; `out` NULL or
/// readable and writable for `out->struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn apf_start_request_ids(
    dispatcher: *mut apf_dispatcher,
    digest: *const apf_request_digest,
    estimate: *const apf_work_estimate,
    deadline_nanos: u64,
    out: *mut apf_decision_ids,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        if out.is_null() {
            return fail(apf_status::APF_ERR_NULL_POINTER, "out is NULL");
        }
        // SAFETY: non-NULL, and readable for its leading `size_t` (contract).
        let size = unsafe { out.cast::<usize>().read() };
        if size < DECISION_IDS_MIN_SIZE {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!(
                    "apf_start_request_ids: out->struct_size is {size}, less than \
                     sizeof(apf_decision_ids) ({DECISION_IDS_MIN_SIZE}): set it before the call"
                ),
            );
        }
        // SAFETY: forwarded from this function's contract.
        let started = match unsafe { start(d, digest, estimate, deadline_nanos) } {
            Ok(started) => started,
            Err(status) => return status,
        };
        let known = size_of::<apf_decision_ids>();
        // SAFETY: `out` is writable for `size` bytes, of which the first
        // `known` are an `apf_decision_ids` (size >= known, checked above,
        // as long as no field was added since; the tail is plain bytes).
        unsafe {
            out.write(apf_decision_ids {
                struct_size: size,
                outcome: started.outcome as u32,
                reject_reason: started.reason as u32,
                request: started.request,
                flow_schema_id: started.schema.id,
                priority_level_id: started.level.id,
            });
            if size > known {
                out.cast::<u8>().add(known).write_bytes(0, size - known);
            }
        }
        apf_status::APF_OK
    }
}

/// The name and UID (empty when the configuration gave none) behind an id
/// of `apf_decision_ids`. Both are owned by the dispatcher, NUL-terminated
/// and valid until `apf_dispatcher_free`, like `apf_decision`'s. An id this
/// dispatcher did not give out (0, another dispatcher's, made up) is
/// `APF_ERR_INVALID_PARAMETER`.
///
/// # Safety
/// `dispatcher` NULL or live; `out_name`, `out_uid` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_name(
    dispatcher: *mut apf_dispatcher,
    id: u32,
    out_name: *mut apf_str,
    out_uid: *mut apf_str,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out_name = try_out!(out_name);
        let out_uid = try_out!(out_uid);
        match d.names.by_id(id) {
            Some((name, uid)) => {
                out_name.write(name);
                out_uid.write(uid);
                apf_status::APF_OK
            }
            None => fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!(
                    "apf_dispatcher_name: id {id:#x} is not a flow schema or priority level \
                     id of this dispatcher"
                ),
            ),
        }
    }
}
