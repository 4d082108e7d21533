//! `apf_request_release_seats` (issue 11 part 3), called from Rust exactly
//! as C calls it: a release dispatches a waiter, the finish gives back only
//! what is still held, and every misuse (a second release of all seats,
//! more seats than held, a release after the finish, of a queued request,
//! a NULL dispatcher) is a clear error that changes nothing.
#![cfg(not(loom))]

#[path = "support/ffi.rs"]
mod support;
use apf_capi::*;
use std::ptr::null_mut;
use support::*;

/// A watch of pods by `alice`, who has `tiny`'s one seat to herself.
fn start(d: &D) -> apf_decision {
    support::start(
        d,
        &Request {
            groups: &[],
            ..Request::resource("alice", "watch", "pods")
        },
    )
}

fn release(d: &D, h: u64, seats: u32) -> apf_status {
    // SAFETY: live dispatcher; any handle and count are allowed.
    unsafe { apf_request_release_seats(d.0, h, seats) }
}

#[test]
fn a_release_dispatches_the_waiter_and_misuse_is_a_clear_error() {
    let d = tiny().dispatcher();
    let watch = start(&d);
    assert_eq!(watch.outcome, EXECUTE);
    let other = start(&d);
    assert_eq!(other.outcome, QUEUED, "the only seat is held");
    assert_eq!(
        release(&d, other.request, 0),
        apf_status::APF_ERR_REQUEST_QUEUED
    );
    assert!(last_error().contains("queued"), "{}", last_error());

    assert_eq!(
        release(&d, watch.request, 2),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    let e = last_error();
    assert!(
        e.contains("apf_request_release_seats") && e.contains("holds 1"),
        "{e}"
    );
    assert_eq!(
        outcome(&d, other.request),
        QUEUED,
        "a refused release changes nothing"
    );

    assert_eq!(
        release(&d, watch.request, 0),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    assert_eq!(
        outcome(&d, other.request),
        EXECUTE,
        "dispatched by the release"
    );
    assert_eq!(
        release(&d, watch.request, 0),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert!(
        last_error().contains("already released"),
        "{}",
        last_error()
    );

    assert_eq!(finish(&d, watch.request), apf_status::APF_OK);
    assert_eq!(
        release(&d, watch.request, 1),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    assert!(
        last_error().contains("already finished"),
        "{}",
        last_error()
    );
    // The watch's finish gave back nothing more: the other request still
    // holds the level's only seat, so a third one queues.
    let third = start(&d);
    assert_eq!(third.outcome, QUEUED);
    assert_eq!(finish(&d, other.request), apf_status::APF_OK);
    assert_eq!(outcome(&d, third.request), EXECUTE);
    assert_eq!(finish(&d, third.request), apf_status::APF_OK);
}

#[test]
fn a_null_dispatcher_is_refused() {
    // SAFETY: NULL is allowed and refused.
    let st = unsafe { apf_request_release_seats(null_mut(), 1, 0) };
    assert_eq!(st, apf_status::APF_ERR_NULL_POINTER);
}

#[test]
fn finish_with_cost_refuses_a_bad_cost_and_keeps_the_request() {
    let d = tiny().dispatcher();
    let a = start(&d);
    assert_eq!(a.outcome, EXECUTE);
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        // SAFETY: live dispatcher.
        let st = unsafe { apf_finish_with_cost(d.0, a.request, 0, bad) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
        assert!(last_error().contains("cost"), "{}", last_error());
    }
    let b = start(&d);
    assert_eq!(b.outcome, QUEUED, "a refused finish did not free the seat");
    // SAFETY: live dispatcher.
    let st = unsafe { apf_finish_with_cost(d.0, a.request, 0, 3.5) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert_eq!(outcome(&d, b.request), EXECUTE);
    // SAFETY: live dispatcher.
    let again = unsafe { apf_finish_with_cost(d.0, a.request, 0, 1.0) };
    assert_eq!(again, apf_status::APF_ERR_INVALID_HANDLE, "a second finish");
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}
