//! Bad arguments are errors, never crashes: NULL pointers, NULL strings
//! with a length, invalid UTF-8, invalid options, and option structs of
//! another size.

use super::*;
use std::ptr::{null, null_mut};

#[test]
fn null_pointers_are_errors_not_crashes() {
    let d = tiny().dispatcher();
    let yaml = tiny().yaml();
    let dg = pod("alice").digest();
    let mut dec = std::mem::MaybeUninit::<apf_decision>::uninit();
    let (mut o, mut r, mut b, mut n, mut fd, mut len) = (0u32, 0u32, false, 0u64, 0i32, 0usize);
    let nd: *mut apf_dispatcher = null_mut();
    use apf_status::APF_ERR_NULL_POINTER as NULLP;
    // SAFETY: every call passes a NULL where a pointer is required, which
    // the ABI must detect; the other pointers are valid.
    unsafe {
        assert_eq!(apf_dispatcher_options_default(null_mut()), NULLP);
        assert_eq!(apf_dispatcher_new_builtin(null(), null_mut(), err()), NULLP);
        assert_eq!(
            apf_dispatcher_new_from_config(
                yaml.as_ptr().cast(),
                yaml.len(),
                null(),
                null_mut(),
                err()
            ),
            NULLP
        );
        let mut out = null_mut();
        assert_eq!(
            apf_dispatcher_new_from_config(null(), 5, null(), &mut out, err()),
            NULLP
        );
        assert!(out.is_null(), "out written only on success");
        apf_dispatcher_free(null_mut());
        assert_eq!(
            apf_dispatcher_reconfigure(nd, yaml.as_ptr().cast(), yaml.len(), err()),
            NULLP
        );
        assert_eq!(apf_dispatcher_advance_clock(nd, 1), NULLP);
        assert_eq!(apf_dispatcher_now(nd, &mut n), NULLP);
        assert_eq!(apf_dispatcher_now(d.0, null_mut()), NULLP);
        assert_eq!(
            apf_start_request(nd, &dg, null(), 0, dec.as_mut_ptr()),
            NULLP
        );
        assert_eq!(
            apf_start_request(d.0, null(), null(), 0, dec.as_mut_ptr()),
            NULLP
        );
        assert_eq!(apf_start_request(d.0, &dg, null(), 0, null_mut()), NULLP);
        assert_eq!(apf_request_wait(d.0, 1, 0, null_mut(), &mut r), NULLP);
        assert_eq!(apf_request_wait(d.0, 1, 0, &mut o, null_mut()), NULLP);
        assert_eq!(apf_request_poll(d.0, 1, null_mut(), &mut r), NULLP);
        assert_eq!(apf_request_poll(d.0, 1, &mut o, null_mut()), NULLP);
        assert_eq!(apf_request_cancel(d.0, 1, null_mut()), NULLP);
        // A NULL dispatcher is no pointer error for a request call: it
        // names none (a queueset's request, or no owner check), and handle
        // 0 is never issued.
        const HANDLE: apf_status = apf_status::APF_ERR_INVALID_HANDLE;
        assert_eq!(apf_request_wait(nd, 0, 0, &mut o, &mut r), HANDLE);
        assert_eq!(apf_request_poll(nd, 0, &mut o, &mut r), HANDLE);
        assert_eq!(apf_request_cancel(nd, 0, &mut b), HANDLE);
        assert_eq!(apf_finish(nd, 0, 0), HANDLE);
        assert_eq!(apf_finish_with_cost(nd, 0, 0, 1.0), HANDLE);
        assert_eq!(apf_request_release_seats(nd, 0, 0), HANDLE);
        assert_eq!(
            apf_dispatcher_set_completion_callback(nd, None, null_mut()),
            NULLP
        );
        assert_eq!(apf_dispatcher_completion_fd(nd, &mut fd), NULLP);
        assert_eq!(apf_dispatcher_completion_fd(d.0, null_mut()), NULLP);
        assert_eq!(apf_dispatcher_take_completion(nd, &mut n, &mut b), NULLP);
        assert_eq!(
            apf_dispatcher_take_completion(d.0, null_mut(), &mut b),
            NULLP
        );
        assert_eq!(
            apf_dispatcher_take_completion(d.0, &mut n, null_mut()),
            NULLP
        );
        let mut text = apf_text {
            ptr: null(),
            len: 0,
        };
        assert_eq!(apf_dispatcher_stats_text(nd, &mut text), NULLP);
        assert_eq!(apf_dispatcher_stats_text(d.0, null_mut()), NULLP);
        assert!(text.ptr.is_null(), "out untouched on error");
        let e = err();
        assert_eq!(apf_dispatcher_new_builtin(null(), null_mut(), e), NULLP);
        assert_eq!(last_error(), "out is NULL");
        apf_text_free(null_mut());
        apf_text_free(&mut text);
        assert_eq!(apf_status_text(0, null_mut(), &mut len), NULLP);
    }
    // The NULL checks left the dispatcher working.
    let ok = start(&d, "alice");
    assert_eq!(finish(&d, ok.request), apf_status::APF_OK);
}

#[test]
fn null_string_with_nonzero_length_and_invalid_utf8_are_rejected() {
    let d = tiny().dispatcher();
    let mut dec = std::mem::MaybeUninit::<apf_decision>::uninit();
    let bad = b"al\xffce";
    let mut dg = pod("alice").digest();
    dg.user = bad.as_ptr().cast();
    dg.user_len = bad.len();
    // SAFETY: valid pointers; the user bytes are not UTF-8.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);

    let mut dg = pod("alice").digest();
    dg.path = null();
    dg.path_len = 3;
    // SAFETY: NULL with a length is what is tested.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);

    let bad_groups = [
        apf_str {
            ptr: c"ok".as_ptr(),
            len: 2,
        },
        apf_str {
            ptr: c"\xc3\x28".as_ptr(),
            len: 2,
        },
    ];
    let dg = Request {
        groups: &bad_groups,
        ..pod("alice")
    }
    .digest();
    // SAFETY: valid pointers; the second group is not UTF-8.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);

    let mut dg = pod("alice").digest();
    dg.groups = null();
    // SAFETY: NULL groups with n_groups 1 is what is tested.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);

    // Strings need no NUL: a longer buffer with the right length works.
    let mut dg = pod("alice").digest();
    let padded = "aliceXYZ";
    dg.user = padded.as_ptr().cast();
    dg.user_len = 5;
    // SAFETY: valid pointers.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, dec.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    let dec = unsafe { dec.assume_init() };
    assert_eq!(str_of(dec.flow_schema_name), "alice-schema");
    assert_eq!(finish(&d, dec.request), apf_status::APF_OK);

    let mut out = null_mut();
    let bad_config = b"kind: \xff\n";
    // SAFETY: valid pointers; the text is not UTF-8.
    let st = unsafe {
        apf_dispatcher_new_from_config(
            bad_config.as_ptr().cast(),
            bad_config.len(),
            null(),
            &mut out,
            err(),
        )
    };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
    assert!(out.is_null());
    // SAFETY: as above, on reconfiguration.
    let st = unsafe {
        apf_dispatcher_reconfigure(d.0, bad_config.as_ptr().cast(), bad_config.len(), err())
    };
    assert_eq!(st, apf_status::APF_ERR_INVALID_UTF8);
}

#[test]
fn invalid_options_are_refused() {
    for change in [
        |o: &mut apf_dispatcher_options| o.server_concurrency_limit = 0,
        |o: &mut apf_dispatcher_options| o.server_concurrency_limit = u32::MAX,
        |o: &mut apf_dispatcher_options| o.service_time_guess_ns = 0,
        |o: &mut apf_dispatcher_options| o.borrowing_period_ns = 0,
    ] {
        let mut o = tiny_options(true);
        change(&mut o);
        let mut out = null_mut();
        // SAFETY: valid pointers.
        let st = unsafe { apf_dispatcher_new_builtin(&o, &mut out, err()) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER, "{o:?}");
        assert!(out.is_null());
    }
    // NULL options are the defaults.
    let mut out = null_mut();
    // SAFETY: valid pointers.
    assert_eq!(
        unsafe { apf_dispatcher_new_builtin(null(), &mut out, err()) },
        apf_status::APF_OK
    );
    let d = D(out);
    let mut n = 0;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_advance_clock(d.0, 1) },
        apf_status::APF_ERR_NOT_MANUAL_CLOCK
    );
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_now(d.0, &mut n) },
        apf_status::APF_OK
    );
    let line = level_line(&d, "global-default");
    assert!(field(&line, "concurrency_limit") > 0, "{line}");
}

#[test]
fn default_options_are_kubernetes_defaults() {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    assert_eq!(
        unsafe { apf_dispatcher_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let o = unsafe { o.assume_init() };
    assert_eq!(o.server_concurrency_limit, 600);
    assert_eq!(o.service_time_guess_ns, 3_000_000);
    assert_eq!(o.wait_limit_ns, 15 * SECOND);
    assert_eq!(o.borrowing_period_ns, 10 * SECOND);
    assert!(!o.manual_clock);
    assert_eq!(o.struct_size, std::mem::size_of::<apf_dispatcher_options>());
}

/// A caller compiled against a newer header: `apf_dispatcher_options` with a field
/// this library does not know.
#[repr(C)]
struct NewerOptions {
    known: apf_dispatcher_options,
    future_field: u64,
}

fn new_builtin(options: *const apf_dispatcher_options) -> apf_status {
    let mut d = null_mut();
    // SAFETY: `options` is NULL or readable for its struct_size; `d` writable.
    let st = unsafe { apf_dispatcher_new_builtin(options, &mut d, err()) };
    drop(D(d));
    st
}

#[test]
fn options_carry_their_size_so_the_struct_can_grow() {
    let bad = apf_status::APF_ERR_INVALID_PARAMETER;
    assert_eq!(
        new_builtin(null()),
        apf_status::APF_OK,
        "NULL: the defaults"
    );
    assert_eq!(new_builtin(&tiny_options(false)), apf_status::APF_OK);
    // A struct not initialised by apf_dispatcher_options_default (size 0) is refused,
    // naming the struct and the field.
    let unset = apf_dispatcher_options {
        struct_size: 0,
        ..tiny_options(false)
    };
    assert_eq!(new_builtin(&unset), bad);
    assert!(
        last_error().contains("apf_dispatcher_options.struct_size is 0"),
        "{}",
        last_error()
    );
    let short = apf_dispatcher_options {
        struct_size: 8,
        ..tiny_options(false)
    };
    assert_eq!(new_builtin(&short), bad);
    // A newer caller's larger struct works while its new fields keep their
    // zero default, and is refused when one is set.
    let mut newer = NewerOptions {
        known: tiny_options(false),
        future_field: 0,
    };
    newer.known.struct_size = std::mem::size_of::<NewerOptions>();
    assert_eq!(
        new_builtin(&newer.known),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    newer.future_field = 1;
    assert_eq!(new_builtin(&newer.known), bad);
    assert!(
        last_error().contains("a newer header's field"),
        "{}",
        last_error()
    );
    // The size check runs before any other validation of the fields.
    let mut o = tiny_options(false);
    o.server_concurrency_limit = 0;
    assert_eq!(new_builtin(&o), bad);
    assert!(
        last_error().contains("server_concurrency_limit"),
        "{}",
        last_error()
    );
}
