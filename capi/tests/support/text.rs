//! Reading an owned `apf_text` in the C ABI tests.

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
