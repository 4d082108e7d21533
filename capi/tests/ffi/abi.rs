//! The header and the status codes: the version macros match Cargo.toml,
//! only `apf_` names are exported, every status has its text, and an
//! error is an owned object, written only on failure, readable anywhere.

use super::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

fn cargo_version() -> (u32, u32, u32) {
    let toml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let line = toml
        .lines()
        .find(|l| l.starts_with("version = "))
        .expect("a package version");
    let v = line.trim_start_matches("version = ").trim_matches('"');
    let parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
    (parts[0], parts[1], parts[2])
}

#[test]
fn header_version_macros_and_abi_version_match_cargo_toml() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/apf.h")).unwrap();
    let define = |name: &str| -> u32 {
        let prefix = format!("#define {name} ");
        header
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{name} missing from apf.h"))
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number"))
    };
    let (major, minor, patch) = cargo_version();
    assert_eq!(define("APF_VERSION_MAJOR"), major);
    assert_eq!(define("APF_VERSION_MINOR"), minor);
    assert_eq!(define("APF_VERSION_PATCH"), patch);
    let packed = major << 16 | minor << 8 | patch;
    assert_eq!(apf_abi_version(), packed);
    assert_eq!(ABI_VERSION, packed);
    assert!(
        header.contains("#define APF_VERSION_NUMBER ((APF_VERSION_MAJOR << 16) | (APF_VERSION_MINOR << 8) | APF_VERSION_PATCH)"),
        "the packed macro uses the same layout as apf_abi_version"
    );
}

#[test]
fn header_exports_only_apf_names() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/apf.h")).unwrap();
    for line in header.lines() {
        let l = line.trim_start();
        let name = if let Some(rest) = l.strip_prefix("typedef struct ") {
            rest.split([' ', ';']).next()
        } else if let Some(rest) = l.strip_prefix("enum ") {
            rest.split([' ', ';']).next()
        } else if let Some(rest) = l.strip_prefix("apf_status ") {
            rest.split('(').next()
        } else {
            None
        };
        if let Some(name) = name {
            assert!(name.starts_with("apf_"), "non-apf name in apf.h: {line}");
        }
    }
    assert!(
        !header.contains("apf_test_panic"),
        "the test hook stays out of the header"
    );
}

// ----- status codes and last error -------------------------------------------

#[test]
fn status_text_covers_every_code_and_refuses_unknown_ones() {
    for code in apf_status::ALL {
        let (mut p, mut len) = (null(), 0usize);
        // SAFETY: writable outs.
        assert_eq!(
            unsafe { apf_status_text(code as u32, &mut p, &mut len) },
            apf_status::APF_OK
        );
        // SAFETY: a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(text.len(), len);
        assert_eq!(text, code.description());
        assert!(code == apf_status::APF_OK || (7000..8000).contains(&(code as u32)));
    }
    let (mut p, mut len) = (null(), 99usize);
    // SAFETY: writable outs.
    assert_eq!(
        unsafe { apf_status_text(4242, &mut p, &mut len) },
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert!(p.is_null() && len == 99, "outs untouched on error");
    assert_eq!(
        apf_status::from_u32(4242),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(
        apf_status::from_u32(7004),
        apf_status::APF_ERR_INVALID_HANDLE
    );
}

/// The message of a live error, checked for shape.
fn message_of(e: *const apf_error) -> String {
    let mut ptr = null();
    let mut len = 0usize;
    // SAFETY: `e` is live; the outs are writable.
    assert_eq!(
        unsafe { apf_error_message(e, &mut ptr, &mut len) },
        apf_status::APF_OK
    );
    // SAFETY: `len` bytes and a NUL, owned by `e`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len + 1) };
    assert_eq!(bytes[len], 0, "NUL-terminated");
    std::str::from_utf8(&bytes[..len]).unwrap().to_owned()
}

#[test]
fn an_error_is_an_owned_object_written_only_on_failure() {
    let bad = "kind: PriorityLevelConfiguration\nspec: [unclosed";
    let mut d = null_mut();
    let mut e: *mut apf_error = null_mut();
    // SAFETY: the text is readable, the outs writable.
    let st = unsafe {
        apf_dispatcher_new_from_config(bad.as_ptr().cast(), bad.len(), null(), &mut d, &mut e)
    };
    assert_eq!(st, apf_status::APF_ERR_CONFIG);
    assert!(d.is_null(), "out untouched on error");
    assert!(!e.is_null(), "out_error written on error");
    // SAFETY: `e` is live.
    assert_eq!(unsafe { apf_error_status(e) }, apf_status::APF_ERR_CONFIG);
    let message = message_of(e);
    assert!(!message.is_empty());
    assert_ne!(
        message,
        apf_status::APF_ERR_CONFIG.description(),
        "it says more than the code"
    );
    assert_eq!(message_of(e), message, "reading it does not change it");
    // Not per-thread state: any thread reads the same error.
    let addr = e as usize;
    let other = std::thread::spawn(move || message_of(addr as *const apf_error))
        .join()
        .unwrap();
    assert_eq!(other, message);
    // A later failure through another slot leaves this one alone.
    let mut e2: *mut apf_error = null_mut();
    // SAFETY: as above.
    let st2 = unsafe { apf_dispatcher_new_from_config(null(), 3, null(), &mut d, &mut e2) };
    assert_eq!(st2, apf_status::APF_ERR_NULL_POINTER);
    assert_eq!(message_of(e), message);
    assert!(message_of(e2).contains("text"), "{}", message_of(e2));
    // SAFETY: the errors are live; freeing NULL is a no-op.
    unsafe {
        apf_error_free(e);
        apf_error_free(e2);
        apf_error_free(null_mut());
    }

    // NULL out_error: the status alone.
    // SAFETY: as above.
    let st = unsafe {
        apf_dispatcher_new_from_config(bad.as_ptr().cast(), bad.len(), null(), &mut d, null_mut())
    };
    assert_eq!(st, apf_status::APF_ERR_CONFIG);

    // Success leaves *out_error as it was.
    let sentinel = std::ptr::NonNull::<apf_error>::dangling().as_ptr();
    let mut e = sentinel;
    // SAFETY: as above.
    let st = unsafe { apf_dispatcher_new_builtin(null(), &mut d, &mut e) };
    assert_eq!(st, apf_status::APF_OK);
    assert_eq!(e, sentinel, "out_error untouched on success");
    // SAFETY: made just above.
    unsafe { apf_dispatcher_free(d) };

    // NULL arguments of the error functions themselves.
    let mut ptr = null();
    let mut len = 0usize;
    // SAFETY: NULL pointers are detected.
    unsafe {
        assert_eq!(apf_error_status(null()), apf_status::APF_ERR_NULL_POINTER);
        assert_eq!(
            apf_error_message(null(), &mut ptr, &mut len),
            apf_status::APF_ERR_NULL_POINTER
        );
    }
}

#[test]
fn a_panic_in_a_call_with_out_error_is_an_error_with_its_message() {
    let mut e: *mut apf_error = null_mut();
    // SAFETY: the out is writable.
    let st = unsafe { apf_test_panic(null(), &mut e) };
    assert_eq!(st, apf_status::APF_ERR_PANIC);
    assert!(
        message_of(e).contains("deliberate panic"),
        "{}",
        message_of(e)
    );
    // SAFETY: live.
    unsafe { apf_error_free(e) };
}
