//! The C ABI across dispatchers and queuesets and against hostile
//! arguments: a request handle of one dispatcher or queueset given to
//! another dispatcher, NULL as the dispatcher of a lifecycle call, handles
//! unique across objects and refused once their owner is freed, two
//! dispatchers' completion
//! callbacks replacing each other's on two threads, and a clock advance by
//! `UINT64_MAX`. Each would hang or misbehave silently when broken, so the
//! ones that could hang run under a watchdog thread.
use crate::support::{self, *};
use apf_capi::*;
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::{mpsc, Barrier};
use std::time::Duration;

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
fn a_request_handle_of_another_dispatcher_is_refused_and_changes_nothing() {
    let (a, b) = (new_dispatcher(), new_dispatcher());
    let ra = start(&a);
    let rb = start(&b);
    assert_eq!(ra.outcome, EXECUTE);
    assert_eq!(rb.outcome, EXECUTE);
    assert_ne!(ra.request, rb.request, "one slab: unique handles");
    const NOT_OWNER: apf_status = apf_status::APF_ERR_INVALID_PARAMETER;
    // SAFETY: live dispatchers; any handle value is allowed.
    unsafe {
        assert_eq!(apf_finish(b.0, ra.request, 0), NOT_OWNER);
        assert_eq!(apf_finish_with_cost(b.0, ra.request, 0, 1.0), NOT_OWNER);
        assert_eq!(apf_request_release_seats(b.0, ra.request, 0), NOT_OWNER);
        let mut cancelled = false;
        assert_eq!(
            apf_request_cancel(a.0, rb.request, &mut cancelled),
            NOT_OWNER
        );
    }
    // Both requests are still executing where they belong.
    assert_eq!(poll(&a, ra.request), Ok(EXECUTE));
    assert_eq!(poll(&b, rb.request), Ok(EXECUTE));
    assert_eq!(poll(&b, ra.request), Err(NOT_OWNER));
    // SAFETY: live dispatchers, their own handles.
    unsafe {
        assert_eq!(apf_finish(a.0, ra.request, 0), apf_status::APF_OK);
        assert_eq!(apf_finish(b.0, rb.request, 0), apf_status::APF_OK);
        // Just retired: still refused to the other dispatcher, and told as
        // finished to its own.
        assert_eq!(apf_finish(b.0, ra.request, 0), NOT_OWNER);
        assert_eq!(
            apf_finish(a.0, ra.request, 0),
            apf_status::APF_ERR_INVALID_HANDLE
        );
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

// ----- one request lifecycle for dispatchers and queuesets ------------------

/// Owns a queueset (one seat, one queue) for one test.
struct Qs(*mut apf_queueset);

impl Drop for Qs {
    fn drop(&mut self) {
        // SAFETY: made by apf_queueset_new (or NULL), freed once.
        unsafe { apf_queueset_free(self.0) }
    }
}

fn new_queueset() -> Qs {
    let mut cfg = std::mem::MaybeUninit::uninit();
    // SAFETY: writable out.
    assert_eq!(
        unsafe { apf_queueset_config_default(cfg.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut cfg = unsafe { cfg.assume_init() };
    cfg.concurrency_limit = 1;
    cfg.queues = 1;
    cfg.hand_size = 1;
    let (mut p, name) = (null_mut(), "bare");
    // SAFETY: valid name, config and outs.
    let st = unsafe {
        apf_queueset_new(
            name.as_ptr().cast(),
            name.len(),
            &cfg,
            true,
            &mut p,
            null_mut(),
        )
    };
    assert_eq!(st, apf_status::APF_OK);
    Qs(p)
}

fn start_at(q: &Qs) -> apf_queueset_decision {
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: live queueset, writable out.
    let st = unsafe { apf_queueset_start(q.0, 7, null(), 0, 0, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    unsafe { out.assume_init() }
}

/// NULL as the dispatcher: a queueset's request, or no owner check.
fn no_dispatcher() -> D {
    D(null_mut())
}

#[test]
fn a_queuesets_request_is_refused_to_a_dispatcher_and_driven_with_null() {
    let (d, q, none) = (new_dispatcher(), new_queueset(), no_dispatcher());
    let running = start_at(&q);
    let queued = start_at(&q);
    assert_eq!(running.outcome, EXECUTE);
    assert_eq!(queued.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    const NOT_OWNER: apf_status = apf_status::APF_ERR_INVALID_PARAMETER;
    assert_eq!(finish(&d, running.request), NOT_OWNER);
    assert_eq!(poll(&d, queued.request), Err(NOT_OWNER));
    assert_eq!(cancel(&d, queued.request), Err(NOT_OWNER));
    assert_eq!(wait(&d, queued.request, 0), Err(NOT_OWNER));
    // SAFETY: live dispatcher; any handle value is allowed.
    let release = unsafe { apf_request_release_seats(d.0, running.request, 0) };
    assert_eq!(release, NOT_OWNER);
    // Nothing changed: NULL drives them through their lifecycle.
    assert_eq!(poll(&none, queued.request), Ok(QUEUED));
    finish_ok(&none, running.request);
    assert_eq!(poll(&none, queued.request), Ok(EXECUTE));
    finish_ok(&none, queued.request);
    assert_eq!(
        finish(&none, queued.request),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    // Just retired, and still refused to the dispatcher.
    assert_eq!(finish(&d, queued.request), NOT_OWNER);
}

#[test]
fn a_dispatchers_request_is_driven_with_null_too() {
    let (d, none) = (new_dispatcher(), no_dispatcher());
    let running = start(&d);
    let queued = start(&d);
    assert_eq!(queued.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    assert_eq!(poll(&none, queued.request), Ok(QUEUED));
    assert_eq!(cancel(&none, queued.request), Ok(true));
    let queued = start(&d);
    // SAFETY: no dispatcher named; any handle value is allowed.
    let release = unsafe { apf_request_release_seats(null_mut(), running.request, 0) };
    assert_eq!(release, apf_status::APF_OK);
    assert_eq!(poll(&none, queued.request), Ok(EXECUTE), "the seat went on");
    // SAFETY: as above.
    let costed = unsafe { apf_finish_with_cost(null_mut(), running.request, 0, 2.0) };
    assert_eq!(costed, apf_status::APF_OK);
    finish_ok(&none, queued.request);
    assert_eq!(
        poll(&d, queued.request),
        Err(apf_status::APF_ERR_INVALID_HANDLE)
    );
}

#[test]
fn live_request_handles_are_unique_across_dispatchers_and_queuesets() {
    // One slab: no two live requests of the process share a slot, so not
    // even the handles' low halves repeat (per-object slabs handed each
    // object's first request the same slot, told apart by a salt only).
    let dispatchers: Vec<D> = (0..3).map(|_| new_dispatcher()).collect();
    let queuesets: Vec<Qs> = (0..3).map(|_| new_queueset()).collect();
    let mut handles = Vec::new();
    for _ in 0..2 {
        handles.extend(dispatchers.iter().map(|d| start(d).request));
        handles.extend(queuesets.iter().map(|q| start_at(q).request));
    }
    let slots: std::collections::HashSet<u32> = handles.iter().map(|&h| h as u32).collect();
    assert_eq!(slots.len(), handles.len(), "{handles:x?}");
    let ids: std::collections::HashSet<u64> = handles.iter().copied().collect();
    assert_eq!(ids.len(), handles.len());
}

#[test]
fn a_handle_outliving_its_owner_is_an_error_and_other_owners_keep_theirs() {
    let (kept, none) = (new_dispatcher(), no_dispatcher());
    let keep = start(&kept);
    let kept_q = new_queueset();
    let keep_q = start_at(&kept_q);

    let d = new_dispatcher();
    let (running, queued) = (start(&d), start(&d));
    assert_eq!(queued.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    assert!(stats(&d).contains("requests_live 2 "), "{}", stats(&d));
    assert!(
        stats(&kept).contains("requests_live 1 "),
        "{}",
        stats(&kept)
    );
    // Checked right after each free, before a start may reuse the slots.
    let gone = |handles: [u64; 2]| {
        for h in handles {
            assert_eq!(
                finish(&none, h),
                apf_status::APF_ERR_INVALID_HANDLE,
                "{h:#x}"
            );
            assert_eq!(poll(&none, h), Err(apf_status::APF_ERR_INVALID_HANDLE));
            assert_eq!(cancel(&none, h), Err(apf_status::APF_ERR_INVALID_HANDLE));
            // Another live dispatcher is told the request is not its own.
            assert_eq!(finish(&kept, h), apf_status::APF_ERR_INVALID_PARAMETER);
        }
    };
    drop(d);
    gone([running.request, queued.request]);
    let q = new_queueset();
    let (q_running, q_queued) = (start_at(&q), start_at(&q));
    drop(q);
    gone([q_running.request, q_queued.request]);
    // The frees retired only their own requests.
    assert_eq!(poll(&kept, keep.request), Ok(EXECUTE));
    assert!(
        stats(&kept).contains("requests_live 1 "),
        "{}",
        stats(&kept)
    );
    finish_ok(&kept, keep.request);
    assert!(
        stats(&kept).contains("requests_live 0 "),
        "{}",
        stats(&kept)
    );
    finish_ok(&none, keep_q.request);
}
