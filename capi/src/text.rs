//! Text out of the library: an owned `apf_text` buffer the caller frees.
//!
//! Every function that hands out text made on demand (metrics, dumps,
//! stats, workqueue metrics) fills an `apf_text` with a
//! fresh allocation, so no binding has to ask for a size, allocate and
//! retry when the text grew in between. The one scheme replaces the
//! earlier copy-into-your-buffer calls and their `APF_ERR_INSUFFICIENT_SIZE`
//! retry loops.

use super::status::{apf_status, fail};
use std::ffi::c_char;

/// Text made by libapf and owned by the caller: `len` bytes of UTF-8 at
/// `ptr`, followed by a NUL (so `ptr` is also a C string when the text has
/// no NUL inside). Free it with `apf_text_free`, once.
///
/// Functions write it only on `APF_OK`; an `apf_text` that was never filled
/// should be zero-initialised (`{0}`) so that freeing it is harmless.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct apf_text {
    /// The text and a NUL; NULL for an empty (zeroed or freed) value.
    pub ptr: *const c_char,
    /// The text's length in bytes, without the NUL.
    pub len: usize,
}

impl apf_text {
    /// The zeroed value: no text, harmless to free.
    pub(crate) fn empty() -> apf_text {
        apf_text {
            ptr: std::ptr::null(),
            len: 0,
        }
    }

    /// Hand `text` over to C: one allocation holding the text and a NUL.
    fn from_string(text: String) -> apf_text {
        let mut bytes = text.into_bytes();
        bytes.push(0);
        let bytes = bytes.into_boxed_slice();
        let len = bytes.len() - 1;
        apf_text {
            ptr: Box::into_raw(bytes).cast::<c_char>(),
            len,
        }
    }
}

/// Write `text` to the out-parameter `out` (the common end of every text
/// function): `APF_ERR_NULL_POINTER` if `out` is NULL.
///
/// # Safety
/// `out` is NULL or writable for one `apf_text`.
pub(crate) unsafe fn text_out(out: *mut apf_text, text: impl FnOnce() -> String) -> apf_status {
    if out.is_null() {
        return fail(apf_status::APF_ERR_NULL_POINTER, "out (apf_text) is NULL");
    }
    // Make the text only once the out-parameter is known good.
    let value = apf_text::from_string(text());
    // SAFETY: `out` is non-NULL and writable (contract above); `write`
    // does not read or drop what was there, which may be uninitialised.
    unsafe { out.write(value) };
    apf_status::APF_OK
}

/// Free the text `*text` holds and zero it, so a second free is harmless.
/// NULL, and an `apf_text` whose `ptr` is NULL, are no-ops.
///
/// # Safety
/// `text` must be NULL, or point to an `apf_text` that is zeroed or was
/// filled by a libapf function and not changed since.
#[no_mangle]
pub unsafe extern "C" fn apf_text_free(text: *mut apf_text) {
    ffi_panic_boundary! {
        // SAFETY: NULL or a valid `apf_text` (contract above).
        let Some(text) = (unsafe { text.as_mut() }) else { return };
        if text.ptr.is_null() {
            return;
        }
        let ptr = std::mem::replace(&mut text.ptr, std::ptr::null());
        let len = std::mem::take(&mut text.len);
        let whole = std::ptr::slice_from_raw_parts_mut(ptr.cast_mut().cast::<u8>(), len + 1);
        // SAFETY: `ptr` and `len` are those `apf_text::from_string` made
        // from a boxed slice of `len + 1` bytes (contract above), and
        // zeroing `*text` first means this allocation is freed only once.
        drop(unsafe { Box::from_raw(whole) });
    }
}
