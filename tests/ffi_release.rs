//! `apf_request_release_seats` (issue 11 part 3), called from Rust exactly
//! as C calls it: a release dispatches a waiter, the finish gives back only
//! what is still held, and every misuse (a second release of all seats,
//! more seats than held, a release after the finish, of a queued request,
//! a NULL dispatcher) is a clear error that changes nothing.
#![cfg(not(loom))]

use apf::ffi::*;
use std::ptr::{null, null_mut};

#[path = "support/text.rs"]
mod text;
use text::text_of;

const SECOND: u64 = 1_000_000_000;
const EXECUTE: u32 = apf_outcome::APF_OUTCOME_EXECUTE as u32;
const QUEUED: u32 = apf_outcome::APF_OUTCOME_QUEUED as u32;

/// One limited level with a single seat and one queue, for user `alice`.
const TINY: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tiny, uid: uid-tiny}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-schema, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: tiny}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
"#;

struct D(*mut apf_dispatcher);

impl Drop for D {
    fn drop(&mut self) {
        // SAFETY: from apf_dispatcher_new_from_config, unused after the test.
        unsafe { apf_dispatcher_free(self.0) }
    }
}

fn tiny() -> D {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: `o` is writable.
    assert_eq!(
        unsafe { apf_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut o = unsafe { o.assume_init() };
    o.manual_clock = true;
    o.server_concurrency_limit = 2; // one seat for tiny, one for catch-all
    o.wait_limit_ns = SECOND;
    let mut d = null_mut();
    // SAFETY: text readable for its length; options and out valid.
    let s = unsafe { apf_dispatcher_new_from_config(TINY.as_ptr().cast(), TINY.len(), &o, &mut d) };
    assert_eq!(s, apf_status::APF_OK, "{}", last_error());
    D(d)
}

fn last_error() -> String {
    // SAFETY: `t` is a writable apf_text.
    text_of(|t| unsafe { apf_last_error(t) })
}

fn start(d: &D) -> apf_decision {
    let (user, verb, resource) = ("alice", "watch", "pods");
    let dg = apf_request_digest {
        user: user.as_ptr().cast(),
        user_len: user.len(),
        verb: verb.as_ptr().cast(),
        verb_len: verb.len(),
        api_group: null(),
        api_group_len: 0,
        resource: resource.as_ptr().cast(),
        resource_len: resource.len(),
        subresource: null(),
        subresource_len: 0,
        namespace_: null(),
        namespace_len: 0,
        name: null(),
        name_len: 0,
        path: null(),
        path_len: 0,
        groups: null(),
        n_groups: 0,
        is_resource_request: true,
    };
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: all pointers valid for the call.
    let st = unsafe { apf_start_request(d.0, &dg, null(), 0, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    // SAFETY: written on APF_OK.
    unsafe { out.assume_init() }
}

fn poll(d: &D, h: u64) -> u32 {
    let (mut o, mut r) = (u32::MAX, u32::MAX);
    // SAFETY: live dispatcher, writable outs.
    assert_eq!(
        unsafe { apf_request_poll(d.0, h, &mut o, &mut r) },
        apf_status::APF_OK
    );
    o
}

fn release(d: &D, h: u64, seats: u32) -> apf_status {
    // SAFETY: live dispatcher; any handle and count are allowed.
    unsafe { apf_request_release_seats(d.0, h, seats) }
}

fn finish(d: &D, h: u64) -> apf_status {
    // SAFETY: live dispatcher; any handle is allowed.
    unsafe { apf_finish(d.0, h, 0) }
}

#[test]
fn a_release_dispatches_the_waiter_and_misuse_is_a_clear_error() {
    let d = tiny();
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
        poll(&d, other.request),
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
        poll(&d, other.request),
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
    assert_eq!(poll(&d, third.request), EXECUTE);
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
    let d = tiny();
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
    assert_eq!(poll(&d, b.request), EXECUTE);
    // SAFETY: live dispatcher.
    let again = unsafe { apf_finish_with_cost(d.0, a.request, 0, 1.0) };
    assert_eq!(again, apf_status::APF_ERR_INVALID_HANDLE, "a second finish");
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}
