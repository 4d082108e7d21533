//! Every conversion between a C pointer and a Rust value happens here.
//!
//! # The contract
//! - An opaque C type (`apf_dispatcher`) is a zero-sized marker; a pointer
//!   to it is really a `Box<RustType>` made by [`to_boxed_mut_ptr`] and
//!   released only by [`free_box`] (through the type's `_free` function).
//!   [`Castable`] ties each marker to its one Rust type, so a pointer can
//!   never be cast to anything else.
//! - Borrowed pointers ([`try_from`]) must come from [`to_boxed_mut_ptr`] and
//!   not be freed for the borrow's lifetime: the borrow never outlives the
//!   exported call that made it. libapf cannot detect a pointer that is
//!   dangling or of the wrong type; that is the caller's side of the
//!   contract, stated on each function.
//! - NULL is always detected: the macros below return
//!   `APF_ERR_NULL_POINTER` (with the argument's name in the `apf_error`
//!   of the functions that take one).
//! - Out-parameters are viewed as `&mut MaybeUninit<T>` ([`out_param`]): the
//!   old content is never read or dropped, and callers write them only on
//!   success.
//! - Strings in are `(ptr, len)` pairs, not necessarily NUL-terminated;
//!   `(NULL, 0)` is the empty string. They are checked for UTF-8
//!   ([`str_from_raw`]).

use super::status::apf_status;
use std::ffi::c_char;
use std::mem::MaybeUninit;

/// A C-visible opaque type and the Rust type behind its pointers.
pub(crate) trait Castable {
    type RustType;
}

/// Move `value` to the heap and hand C a pointer to it.
pub(crate) fn to_boxed_mut_ptr<C: Castable>(value: C::RustType) -> *mut C {
    Box::into_raw(Box::new(value)).cast()
}

/// Borrow the Rust value behind `ptr`, or None if it is NULL.
///
/// # Safety
/// `ptr` is NULL or came from [`to_boxed_mut_ptr`] for the same `C` and has
/// not been freed; it stays alive for `'a`.
pub(crate) unsafe fn try_from<'a, C: Castable>(ptr: *const C) -> Option<&'a C::RustType> {
    // SAFETY: per this function's contract, a non-NULL `ptr` points to a
    // live, properly aligned `C::RustType` made by `to_boxed_mut_ptr`.
    unsafe { ptr.cast::<C::RustType>().as_ref() }
}

/// Drop the Rust value behind `ptr`; NULL is a no-op.
///
/// # Safety
/// `ptr` is NULL or came from [`to_boxed_mut_ptr`] for the same `C`, has not
/// been freed, and is not used by anyone afterwards.
pub(crate) unsafe fn free_box<C: Castable>(ptr: *mut C) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: per this function's contract, `ptr` is the unique owner of a
    // `Box<C::RustType>` created by `to_boxed_mut_ptr`.
    drop(unsafe { Box::from_raw(ptr.cast::<C::RustType>()) });
}

/// View a non-NULL out-parameter as uninitialised storage.
///
/// # Safety
/// `ptr` is non-NULL, aligned, and valid for writes of a `T` for `'a`.
pub(crate) unsafe fn out_param<'a, T>(ptr: *mut T) -> &'a mut MaybeUninit<T> {
    debug_assert!(!ptr.is_null());
    // SAFETY: `MaybeUninit<T>` has `T`'s layout; the caller vouches for
    // validity and alignment.
    unsafe { &mut *ptr.cast::<MaybeUninit<T>>() }
}

/// Why a `(ptr, len)` pair is not a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrError {
    Null,
    TooLong,
    Utf8,
}

impl StrError {
    pub(crate) fn status(self) -> apf_status {
        match self {
            StrError::Null => apf_status::APF_ERR_NULL_POINTER,
            StrError::TooLong => apf_status::APF_ERR_INVALID_PARAMETER,
            StrError::Utf8 => apf_status::APF_ERR_INVALID_UTF8,
        }
    }
    pub(crate) fn describe(self) -> &'static str {
        match self {
            StrError::Null => "is NULL with a non-zero length",
            StrError::TooLong => "is longer than isize::MAX",
            StrError::Utf8 => "is not valid UTF-8",
        }
    }
}

/// The bytes of a `(ptr, len)` pair; `(NULL, 0)` is empty.
///
/// # Safety
/// A non-NULL `ptr` is readable for `len` bytes for `'a`.
pub(crate) unsafe fn bytes_from_raw<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], StrError> {
    if ptr.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(StrError::Null)
        };
    }
    if len.saturating_mul(size_of::<T>()) > isize::MAX as usize {
        return Err(StrError::TooLong);
    }
    // SAFETY: non-NULL, the length fits `isize`, and the caller vouches the
    // memory is readable for `len` elements during `'a`; the alignment of a
    // C pointer to `T` is the caller's side of the contract too.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The UTF-8 string of a `(ptr, len)` pair; `(NULL, 0)` is empty.
///
/// # Safety
/// As [`bytes_from_raw`].
pub(crate) unsafe fn str_from_raw<'a>(ptr: *const c_char, len: usize) -> Result<&'a str, StrError> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { bytes_from_raw(ptr.cast::<u8>(), len) }?;
    // Request strings are almost always ASCII, and the word-at-a-time ASCII
    // check costs a fraction of full validation on short strings (it was
    // a quarter of apf_start_request's instructions).
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|_| StrError::Utf8)
}

/// Early-return `APF_ERR_NULL_POINTER` if an out-parameter is NULL, else
/// give `&mut MaybeUninit<T>` to write on success.
macro_rules! try_out {
    ($ptr:ident) => {{
        if $ptr.is_null() {
            return $crate::status::fail(
                $crate::status::apf_status::APF_ERR_NULL_POINTER,
                concat!(stringify!($ptr), " is NULL"),
            );
        }
        // SAFETY: non-NULL checked just above; alignment and writability
        // are the caller's side of every exported function's contract.
        unsafe { $crate::cast::out_param($ptr) }
    }};
}

/// Early-return `APF_ERR_NULL_POINTER` if a handle pointer is NULL, else
/// borrow the Rust value behind it.
macro_rules! try_ref_from_ptr {
    ($ptr:ident) => {{
        // SAFETY: a non-NULL handle pointer came from this library's `_new`
        // function and is not yet freed: the caller's side of the contract.
        match unsafe { $crate::cast::try_from($ptr) } {
            Some(r) => r,
            None => {
                return $crate::status::fail(
                    $crate::status::apf_status::APF_ERR_NULL_POINTER,
                    concat!(stringify!($ptr), " is NULL"),
                )
            }
        }
    }};
}

/// Early-return on a bad `(ptr, len)` string, else give the `&str`.
macro_rules! try_str {
    ($ptr:expr, $len:expr, $what:expr) => {{
        // SAFETY: the caller vouches that a non-NULL pointer is readable for
        // `len` bytes during the call.
        match unsafe { $crate::cast::str_from_raw($ptr, $len) } {
            Ok(s) => s,
            Err(e) => {
                return $crate::status::fail(e.status(), format_args!("{} {}", $what, e.describe()))
            }
        }
    }};
}
