//! Status codes, their fixed texts, and version queries.

use std::ffi::c_char;
use std::fmt;

/// The result of every libapf function (except `apf_abi_version` and the
/// `_free` functions).
///
/// `APF_OK` is 0; errors lie in the range 7000-7999 so they cannot be
/// confused with `errno` values or booleans. A code, once published, keeps
/// its meaning and is never reused. Functions write their out-parameters only
/// when they return `APF_OK`. On error, `apf_status_text` describes the
/// code; functions whose failures need more words (configuration, option
/// structs, limiter parameters) also hand out an owned `apf_error`.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum apf_status {
    /// Success.
    APF_OK = 0,
    /// An argument is out of range (also: an unknown status code, and a
    /// request handle given with a dispatcher that did not start it).
    APF_ERR_INVALID_PARAMETER = 7000,
    /// A required pointer argument is NULL.
    APF_ERR_NULL_POINTER = 7001,
    /// A string argument is not valid UTF-8.
    APF_ERR_INVALID_UTF8 = 7002,
    /// libapf panicked internally; the call had no effect that matters and
    /// the library stays usable. Please report it.
    APF_ERR_PANIC = 7003,
    /// The request handle is 0, unknown, or stale: its request was already
    /// finished, cancelled or rejected (a second finish lands here), or its
    /// dispatcher or queueset was freed. Also a workqueue item handle that
    /// is 0, already done, or of another queue.
    APF_ERR_INVALID_HANDLE = 7004,
    /// The request is still waiting in a queue: it cannot be finished until
    /// `apf_request_wait` or `apf_request_poll` reported it dispatched
    /// (cancel it instead).
    APF_ERR_REQUEST_QUEUED = 7005,
    /// The request was rejected after waiting (its rejection was already
    /// reported): there is nothing to finish or cancel.
    APF_ERR_REQUEST_REJECTED = 7006,
    /// The request is executing: finish it instead of cancelling it.
    APF_ERR_REQUEST_EXECUTING = 7007,
    /// The configuration text does not parse or does not validate; the
    /// configuration in force (if any) is unchanged.
    APF_ERR_CONFIG = 7008,
    /// The dispatcher (or workqueue) does not run on a manual clock.
    APF_ERR_NOT_MANUAL_CLOCK = 7009,
    /// Retired: no function returns it since text comes out as an owned
    /// `apf_text` (it meant "the caller's buffer is too small"). Kept so the
    /// number is never reused.
    APF_ERR_INSUFFICIENT_SIZE = 7010,
    /// The operating system refused a resource (the completion fd).
    APF_ERR_IO = 7011,
    /// Too many requests in flight for the handle space (over 2^31 at once).
    APF_ERR_TOO_MANY_REQUESTS = 7012,
    /// The call is not allowed from inside a completion callback, of any
    /// dispatcher (it would wait for running callbacks, which can be the
    /// caller itself or wait for the caller).
    APF_ERR_IN_CALLBACK = 7013,
    /// The workqueue is of another kind than the call needs: a slow lane on
    /// a queue without lanes, a priority on a non-priority queue.
    APF_ERR_WORKQUEUE_WRONG_KIND = 7014,
}

impl apf_status {
    /// Every code, for lookups by number.
    pub const ALL: [apf_status; 16] = [
        apf_status::APF_OK,
        apf_status::APF_ERR_INVALID_PARAMETER,
        apf_status::APF_ERR_NULL_POINTER,
        apf_status::APF_ERR_INVALID_UTF8,
        apf_status::APF_ERR_PANIC,
        apf_status::APF_ERR_INVALID_HANDLE,
        apf_status::APF_ERR_REQUEST_QUEUED,
        apf_status::APF_ERR_REQUEST_REJECTED,
        apf_status::APF_ERR_REQUEST_EXECUTING,
        apf_status::APF_ERR_CONFIG,
        apf_status::APF_ERR_NOT_MANUAL_CLOCK,
        apf_status::APF_ERR_INSUFFICIENT_SIZE,
        apf_status::APF_ERR_IO,
        apf_status::APF_ERR_TOO_MANY_REQUESTS,
        apf_status::APF_ERR_IN_CALLBACK,
        apf_status::APF_ERR_WORKQUEUE_WRONG_KIND,
    ];

    /// The code for a number; unknown numbers map to
    /// `APF_ERR_INVALID_PARAMETER`.
    pub fn from_u32(code: u32) -> apf_status {
        Self::ALL
            .iter()
            .copied()
            .find(|s| *s as u32 == code)
            .unwrap_or(apf_status::APF_ERR_INVALID_PARAMETER)
    }

    /// A short fixed description.
    pub fn description(self) -> &'static str {
        let text = self.description_with_nul();
        &text[..text.len() - 1]
    }

    fn description_with_nul(self) -> &'static str {
        match self {
            apf_status::APF_OK => "success\0",
            apf_status::APF_ERR_INVALID_PARAMETER => "invalid parameter\0",
            apf_status::APF_ERR_NULL_POINTER => "unexpected NULL pointer\0",
            apf_status::APF_ERR_INVALID_UTF8 => "string is not valid UTF-8\0",
            apf_status::APF_ERR_PANIC => "internal panic in libapf\0",
            apf_status::APF_ERR_INVALID_HANDLE => "unknown or stale request handle\0",
            apf_status::APF_ERR_REQUEST_QUEUED => "request is still queued\0",
            apf_status::APF_ERR_REQUEST_REJECTED => "request was rejected\0",
            apf_status::APF_ERR_REQUEST_EXECUTING => "request is executing\0",
            apf_status::APF_ERR_CONFIG => "invalid configuration\0",
            apf_status::APF_ERR_NOT_MANUAL_CLOCK => "no manual clock (real clock in use)\0",
            apf_status::APF_ERR_INSUFFICIENT_SIZE => {
                "buffer too small (retired: no function returns it)\0"
            }
            apf_status::APF_ERR_IO => "operating system error\0",
            apf_status::APF_ERR_TOO_MANY_REQUESTS => "too many requests in flight\0",
            apf_status::APF_ERR_IN_CALLBACK => "not allowed inside a completion callback\0",
            apf_status::APF_ERR_WORKQUEUE_WRONG_KIND => {
                "operation not available for this kind of workqueue\0"
            }
        }
    }
}

/// Fail with `status`: the one way functions fail. The message goes to
/// the running call's `apf_error` when it takes one (see `error`); other
/// callers get only the code, whose text says it all.
pub(crate) fn fail(status: apf_status, message: impl fmt::Display) -> apf_status {
    super::error::record(format_args!("{message}"));
    status
}

/// The packed ABI version: `MAJOR << 16 | MINOR << 8 | PATCH`, the crate's
/// version (each part below 256).
pub const ABI_VERSION: u32 = pack_version(
    env!("CARGO_PKG_VERSION_MAJOR"),
    env!("CARGO_PKG_VERSION_MINOR"),
    env!("CARGO_PKG_VERSION_PATCH"),
);

const fn parse_u8(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    assert!(v < 256, "version parts must fit a byte");
    v
}

const fn pack_version(major: &str, minor: &str, patch: &str) -> u32 {
    parse_u8(major) << 16 | parse_u8(minor) << 8 | parse_u8(patch)
}

/// The library's version, packed as `MAJOR << 16 | MINOR << 8 | PATCH`.
///
/// Compare it with the header's `APF_VERSION_NUMBER` at start-up: a library
/// with a different MAJOR (or, before 1.0, a different MINOR) is
/// incompatible.
#[no_mangle]
pub extern "C" fn apf_abi_version() -> u32 {
    ffi_panic_boundary! { ABI_VERSION }
}

/// A fixed description of a status code, as a NUL-terminated static string
/// (`*out_text` stays valid forever). Unknown codes give
/// `APF_ERR_INVALID_PARAMETER`.
///
/// # Safety
/// `out_text` and `out_len` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_status_text(
    status: u32,
    out_text: *mut *const c_char,
    out_len: *mut usize,
) -> apf_status {
    ffi_panic_boundary! {
        let out_text = try_out!(out_text);
        let out_len = try_out!(out_len);
        let code = apf_status::from_u32(status);
        if code as u32 != status {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!("unknown status code {status}"),
            );
        }
        let text = code.description_with_nul();
        out_text.write(text.as_ptr().cast());
        out_len.write(text.len() - 1);
        apf_status::APF_OK
    }
}
