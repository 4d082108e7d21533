//! The header and the status codes: the version macros match Cargo.toml,
//! only `apf_` names are exported, every status has its text, and the last
//! error is an owned, per-thread text.

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

#[test]
fn last_error_is_an_owned_text_and_per_thread() {
    let d = tiny().dispatcher();
    assert_eq!(finish(&d, 0), apf_status::APF_ERR_INVALID_HANDLE);
    let message = last_error();
    assert!(message.contains("unknown or stale"), "{message}");
    assert_eq!(last_error(), message, "reading it does not change it");
    // SAFETY: a NULL out is refused without touching the last error.
    assert_eq!(
        unsafe { apf_last_error(null_mut()) },
        apf_status::APF_ERR_NULL_POINTER
    );
    assert_eq!(last_error(), message, "a refused read does not change it");
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "", "another thread has no error");
}
