//! The owned error object: what a failed call says beyond its status code.
//!
//! Two kinds of failure, two channels, and neither is per-thread state a
//! binding must read on the same OS thread (ABI 0.1's per-thread last error,
//! which made the Go binding route every call through a C shim):
//!
//! - Where the code says it all (a NULL pointer, a stale handle, a request
//!   still queued, a string that is not UTF-8), the text is a pure function
//!   of the code: `apf_status_text` (as rustls-ffi does).
//! - Where the caller needs the detail (configuration text that does not
//!   parse, an option struct or a limiter parameter out of range), the
//!   function takes a last parameter `apf_error **out_error` (as wasmtime's
//!   C API does): on failure it stores an owned [`apf_error`] there, which
//!   the caller reads with `apf_error_status` / `apf_error_message` and
//!   frees with `apf_error_free`. NULL means "I do not want it".
//!
//! # How the message reaches the error object
//! The validation helpers fail through [`crate::status::fail`], shared by
//! functions with and without an `out_error`. [`with_error`] runs an
//! exported body with a capture slot open on the calling thread; `fail`
//! writes its message there only while a slot is open (so the hot path,
//! which never opens one, formats no message at all). The slot lives for
//! one exported call on one thread and is closed before the call returns:
//! C never sees it, and nothing carries over from one call to the next.

use super::cast::{free_box, to_boxed_mut_ptr, Castable};
use super::panic::panic_message;
use super::status::apf_status;
use std::cell::RefCell;
use std::ffi::c_char;
use std::fmt;
use std::panic::{catch_unwind, UnwindSafe};

/// The error of a failed call that takes `apf_error **out_error`: its
/// status and a message. Owned by the caller: free it with
/// `apf_error_free`. Immutable, so any thread may read it; freeing it must
/// be its last use.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_error {
    _private: [u8; 0],
}

/// What an `apf_error` pointer really points to.
#[derive(Debug)]
pub(crate) struct FfiError {
    status: apf_status,
    /// The message followed by a NUL (so it is also a C string when the
    /// message holds no NUL).
    message: Box<str>,
}

impl Castable for apf_error {
    type RustType = FfiError;
}

thread_local! {
    /// The open capture slot of the exported call running on this thread
    /// (None outside `with_error`).
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Record `message` for the running call's `out_error`, if it has one.
pub(crate) fn record(message: fmt::Arguments<'_>) {
    use std::fmt::Write;
    // try_with: during thread teardown the slot may be gone; losing the
    // message then is better than aborting.
    let _ = CAPTURE.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            if let Some(text) = slot.as_mut() {
                text.clear();
                let _ = text.write_fmt(message);
            }
        }
    });
}

/// Run an exported body that fails with a status, inside the panic
/// boundary, and on failure store an owned error in `*out_error` (when
/// `out_error` is not NULL). `*out_error` is written only on failure.
///
/// # Safety
/// `out_error` is NULL or writable for one pointer.
pub(crate) unsafe fn with_error(
    out_error: *mut *mut apf_error,
    body: impl FnOnce() -> apf_status + UnwindSafe,
) -> apf_status {
    // Nesting cannot happen today (no exported body calls another), but
    // restoring the outer slot keeps it correct if one ever does.
    let outer = CAPTURE.with(|slot| slot.replace(Some(String::new())));
    let result = catch_unwind(body);
    let message = CAPTURE.with(|slot| slot.replace(outer)).unwrap_or_default();
    let (status, message) = match result {
        Ok(status) => (status, message),
        Err(payload) => (
            apf_status::APF_ERR_PANIC,
            format!("panic inside libapf: {}", panic_message(&*payload)),
        ),
    };
    if status != apf_status::APF_OK && !out_error.is_null() {
        let mut message = if message.is_empty() {
            status.description().to_owned()
        } else {
            message
        };
        message.push('\0');
        let error = to_boxed_mut_ptr::<apf_error>(FfiError {
            status,
            message: message.into_boxed_str(),
        });
        // SAFETY: non-NULL, and writable per this function's contract;
        // `write` does not read the (possibly uninitialised) old value.
        unsafe { out_error.write(error) };
    }
    status
}

/// The body of an exported function that takes `apf_error **out_error`:
/// [`with_error`] in place of `ffi_panic_boundary!`.
macro_rules! ffi_error_boundary {
    ( $out_error:ident, $($body:tt)* ) => {{
        let body = ::std::panic::AssertUnwindSafe(move || -> $crate::status::apf_status { $($body)* });
        // SAFETY: `out_error` is NULL or writable: every exported caller's
        // contract.
        unsafe { $crate::error::with_error($out_error, body) }
    }};
}

/// The status of an error (`APF_ERR_NULL_POINTER` for NULL).
///
/// # Safety
/// `error` must be NULL or an `apf_error` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn apf_error_status(error: *const apf_error) -> apf_status {
    ffi_panic_boundary! {
        // SAFETY: NULL or live (contract above).
        match unsafe { super::cast::try_from(error) } {
            Some(e) => e.status,
            None => apf_status::APF_ERR_NULL_POINTER,
        }
    }
}

/// The message of an error: `*out_text` points to `*out_len` bytes of
/// UTF-8 followed by a NUL, owned by the error and valid until
/// `apf_error_free`.
///
/// # Safety
/// `error` must be NULL or an `apf_error` not yet freed; `out_text` and
/// `out_len` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_error_message(
    error: *const apf_error,
    out_text: *mut *const c_char,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let e = try_ref_from_ptr!(error);
        let out_text = try_out!(out_text);
        let out_len = try_out!(out_len);
        out_text.write(e.message.as_ptr().cast());
        out_len.write(e.message.len() - 1);
        apf_status::APF_OK
    }
}

/// Free an error; NULL is a no-op.
///
/// # Safety
/// `error` must be NULL or an `apf_error` not yet freed, and not used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn apf_error_free(error: *mut apf_error) {
    ffi_panic_boundary! {
        // SAFETY: the caller hands over ownership (contract above).
        unsafe { free_box(error) }
    }
}
