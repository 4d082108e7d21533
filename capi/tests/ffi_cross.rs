//! The C ABI across dispatchers and against hostile arguments: a request
//! handle of one dispatcher given to another, two dispatchers' completion
//! callbacks replacing each other's on two threads, and a clock advance by
//! `UINT64_MAX`. Each would hang or misbehave silently when broken, so the
//! ones that could hang run under a watchdog thread.
#![cfg(not(loom))]

#[path = "support/ffi.rs"]
mod support;
use apf_capi::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::{mpsc, Barrier};
use std::time::Duration;
use support::*;

/// A dispatcher of the [`Tiny`] configuration: one seat and one queue
/// for alice's requests.
fn new_dispatcher() -> D {
    tiny().dispatcher()
}

/// Starts alice's `get /healthz`.
fn start(d: &D) -> apf_decision {
    support::start(d, &Request::healthz("alice"))
}

/// The outcome of a poll, or its error.
fn poll(d: &D, h: u64) -> Result<u32, apf_status> {
    support::poll(d, h).map(|(outcome, _)| outcome)
}

/// Run `f` on a thread and wait for it at most a minute: a deadlock fails
/// the test instead of hanging the test run. What the stuck thread holds is
/// leaked.
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not return within a minute: deadlock"),
    }
}

#[test]
fn a_request_handle_of_another_dispatcher_is_invalid_even_when_its_slot_is_live() {
    let (a, b) = (new_dispatcher(), new_dispatcher());
    // Same thread, first request of each: the same slot in both slabs.
    let ra = start(&a);
    let rb = start(&b);
    assert_eq!(ra.outcome, EXECUTE);
    assert_eq!(rb.outcome, EXECUTE);
    assert_eq!(ra.request as u32, rb.request as u32, "same slot in both");
    assert_ne!(ra.request, rb.request, "but not the same handle");
    // SAFETY: live dispatchers; any handle value is allowed.
    unsafe {
        assert_eq!(
            apf_finish(b.0, ra.request, 0),
            apf_status::APF_ERR_INVALID_HANDLE
        );
        let mut cancelled = false;
        assert_eq!(
            apf_request_cancel(a.0, rb.request, &mut cancelled),
            apf_status::APF_ERR_INVALID_HANDLE
        );
    }
    // Both requests are still executing where they belong.
    assert_eq!(poll(&a, ra.request), Ok(EXECUTE));
    assert_eq!(poll(&b, rb.request), Ok(EXECUTE));
    assert_eq!(
        poll(&b, ra.request),
        Err(apf_status::APF_ERR_INVALID_HANDLE)
    );
    // SAFETY: live dispatchers, their own handles.
    unsafe {
        assert_eq!(apf_finish(a.0, ra.request, 0), apf_status::APF_OK);
        assert_eq!(apf_finish(b.0, rb.request, 0), apf_status::APF_OK);
    }
}

/// What each dispatcher's callback needs: the other dispatcher, a barrier
/// both callbacks meet at (so both run at once), and where to report.
struct Cross {
    other: *mut apf_dispatcher,
    both_inside: std::sync::Arc<Barrier>,
    status: mpsc::Sender<apf_status>,
}

unsafe extern "C" fn replace_the_others_callback(user: *mut c_void, _request: u64) {
    // SAFETY: `user` is one of the test's leaked, never freed `Cross`es.
    let cross = unsafe { &*(user as *const Cross) };
    cross.both_inside.wait();
    // SAFETY: `other` is live; clearing its callback is always allowed as
    // far as memory goes.
    let st = unsafe { apf_dispatcher_set_completion_callback(cross.other, None, null_mut()) };
    let _ = cross.status.send(st);
}

#[test]
fn two_dispatchers_callbacks_replacing_each_others_do_not_deadlock() {
    let (a, b) = (new_dispatcher(), new_dispatcher());
    let both_inside = std::sync::Arc::new(Barrier::new(2));
    let (tx, statuses) = mpsc::channel();
    // Leaked: a deadlocked callback may still use them after the test.
    let cross_a: &'static Cross = Box::leak(Box::new(Cross {
        other: b.0,
        both_inside: both_inside.clone(),
        status: tx.clone(),
    }));
    let cross_b: &'static Cross = Box::leak(Box::new(Cross {
        other: a.0,
        both_inside,
        status: tx,
    }));
    for (d, cross) in [(&a, cross_a), (&b, cross_b)] {
        let user = cross as *const Cross as *mut c_void;
        // SAFETY: the callback may be called with `user` from any thread;
        // `cross` is never freed.
        let st = unsafe {
            apf_dispatcher_set_completion_callback(d.0, Some(replace_the_others_callback), user)
        };
        assert_eq!(st, apf_status::APF_OK);
    }
    // In each dispatcher one request executes and one waits: finishing the
    // first dispatches the second, whose callback runs on the finishing
    // thread.
    let mut finishing = Vec::new();
    for d in [&a, &b] {
        let running = start(d);
        assert_eq!(start(d).outcome, QUEUED);
        finishing.push((d.0 as usize, running.request));
    }
    let both = within_a_minute("two callbacks replacing each other's callback", move || {
        let threads: Vec<_> = finishing
            .into_iter()
            .map(|(d, h)| {
                std::thread::spawn(move || {
                    // SAFETY: the dispatcher outlives this call (the test
                    // waits for it, or leaks everything on deadlock).
                    unsafe { apf_finish(d as *mut apf_dispatcher, h, 0) }
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(both, vec![apf_status::APF_OK, apf_status::APF_OK]);
    let seen: Vec<apf_status> = statuses.try_iter().collect();
    assert_eq!(
        seen,
        vec![
            apf_status::APF_ERR_IN_CALLBACK,
            apf_status::APF_ERR_IN_CALLBACK
        ],
        "refused inside a callback instead of waiting"
    );
    // Outside callbacks, the same call works.
    for d in [&a, &b] {
        // SAFETY: live dispatcher; clearing the callback.
        let st = unsafe { apf_dispatcher_set_completion_callback(d.0, None, null_mut()) };
        assert_eq!(st, apf_status::APF_OK);
    }
    drop((a, b));
}

#[test]
fn advancing_the_clock_by_uint64_max_returns_and_keeps_serving() {
    let d = new_dispatcher();
    let ptr = d.0 as usize;
    // Unfixed, this ran one borrowing adjustment per 10 s period: 1.8e9 of
    // them, hours of CPU.
    let st = within_a_minute("apf_dispatcher_advance_clock(UINT64_MAX)", move || {
        // SAFETY: the dispatcher outlives the call (or is leaked).
        unsafe { apf_dispatcher_advance_clock(ptr as *mut apf_dispatcher, u64::MAX) }
    });
    assert_eq!(st, apf_status::APF_OK);
    let r = start(&d);
    assert_eq!(r.outcome, EXECUTE);
    // SAFETY: live dispatcher, its own handle.
    assert_eq!(unsafe { apf_finish(d.0, r.request, 0) }, apf_status::APF_OK);
}

#[test]
fn a_borrowing_period_below_the_minimum_is_refused_by_field_name() {
    for period in [1, 99_999_999] {
        let o = apf_dispatcher_options {
            borrowing_period_ns: period,
            ..default_options()
        };
        let mut d = null_mut();
        // SAFETY: options readable, out writable.
        let st = unsafe { apf_dispatcher_new_builtin(&o, &mut d, err()) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
        assert!(d.is_null());
        assert!(
            last_error().contains("borrowing_period_ns must be at least 100000000"),
            "{}",
            last_error()
        );
    }
}

#[test]
fn a_flow_schema_naming_a_missing_level_loads_and_is_named_in_the_notices() {
    let text = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: orphan}
spec:
  priorityLevelConfiguration: {name: no-such-level}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: Group, group: {name: "system:authenticated"}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;
    // SAFETY: `d` is live; `t` a writable apf_text.
    let notices =
        |d: *mut apf_dispatcher| text_of(|t| unsafe { apf_dispatcher_config_notices(d, t) });
    let mut d = null_mut();
    // SAFETY: text readable for its length; NULL options; out writable.
    let st = unsafe {
        apf_dispatcher_new_from_config(text.as_ptr().cast(), text.len(), null(), &mut d, err())
    };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    let d = D(d);
    let n = notices(d.0);
    assert!(
        n.lines()
            .any(|l| l.contains("orphan") && l.contains("no-such-level")),
        "{n}"
    );
    // The same through a reconfiguration of another dispatcher.
    let other = new_dispatcher();
    assert!(!notices(other.0).contains("orphan"));
    // SAFETY: live dispatcher; text readable for its length.
    let st =
        unsafe { apf_dispatcher_reconfigure(other.0, text.as_ptr().cast(), text.len(), err()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert!(
        notices(other.0).contains("FlowSchema \"orphan\""),
        "{}",
        notices(other.0)
    );
}
