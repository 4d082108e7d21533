//! Reading an owned `apf_text` and an owned `apf_error` in the C ABI tests.
#![allow(dead_code)] // not every test binary uses every helper

use apf_capi::{apf_status, apf_text, apf_text_free};

/// Call `f` with a zeroed `apf_text`, return its status and (on `APF_OK`)
/// the text, freeing the buffer (twice: the second free must be a no-op).
pub fn take_text(f: impl FnOnce(*mut apf_text) -> apf_status) -> (apf_status, Option<String>) {
    let mut t = apf_text {
        ptr: std::ptr::null(),
        len: 0,
    };
    let st = f(&mut t);
    if st != apf_status::APF_OK {
        assert!(t.ptr.is_null() && t.len == 0, "out written on error");
        return (st, None);
    }
    assert!(!t.ptr.is_null());
    // SAFETY: libapf wrote `len` bytes and a NUL at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(t.ptr.cast::<u8>(), t.len + 1) };
    assert_eq!(bytes[t.len], 0, "NUL-terminated");
    let text = std::str::from_utf8(&bytes[..t.len]).unwrap().to_owned();
    // SAFETY: filled by libapf; freeing zeroes it, so the second is a no-op.
    unsafe {
        apf_text_free(&mut t);
        assert!(t.ptr.is_null() && t.len == 0);
        apf_text_free(&mut t);
    }
    (st, Some(text))
}

/// The text of a call that must succeed.
pub fn text_of(f: impl FnOnce(*mut apf_text) -> apf_status) -> String {
    match take_text(f) {
        (apf_status::APF_OK, Some(t)) => t,
        (st, _) => panic!("text call failed: {st:?}"),
    }
}

thread_local! {
    /// The error slot [`err`] hands to the calls that take
    /// `apf_error **out_error`, as C would pass `&error`.
    static ERROR: std::cell::Cell<*mut apf_capi::apf_error> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// A fresh `out_error` argument (the error of the previous call through it,
/// if any, is freed first). Read what a failing call put there with
/// [`last_error`].
pub fn err() -> *mut *mut apf_capi::apf_error {
    ERROR.with(|slot| {
        // SAFETY: NULL or an error libapf made and nobody freed.
        unsafe { apf_capi::apf_error_free(slot.replace(std::ptr::null_mut())) };
        slot.as_ptr()
    })
}

/// The message of the error in the [`err`] slot ("" if the last call
/// through it succeeded, so never a stale message), checked against its
/// status text's shape: UTF-8, NUL-terminated, non-empty.
pub fn last_error() -> String {
    ERROR.with(|slot| {
        let e = slot.get();
        if e.is_null() {
            return String::new();
        }
        let mut ptr = std::ptr::null();
        let mut len = 0usize;
        // SAFETY: a live error; the out-parameters are writable.
        let st = unsafe { apf_capi::apf_error_message(e, &mut ptr, &mut len) };
        assert_eq!(st, apf_status::APF_OK);
        // SAFETY: libapf wrote `len` bytes and a NUL at `ptr`, owned by `e`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len + 1) };
        assert_eq!(bytes[len], 0, "NUL-terminated");
        assert!(len > 0, "an error always says something");
        std::str::from_utf8(&bytes[..len]).unwrap().to_owned()
    })
}
