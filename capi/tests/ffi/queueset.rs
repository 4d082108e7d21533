//! `apf_queueset`, called from Rust exactly as C calls it: configuration
//! errors naming the field, NULL pointers, the request protocol (execute,
//! queue, dispatch on finish, deadline on the manual clock, cancel, stale
//! handles), completion notification, stats and the JSON dump.
use apf_capi::*;
use std::ptr::{null, null_mut};

use crate::support::{err, last_error, take_text};

fn config(limit: u32, queues: u32, hand: u32, qll: u32) -> apf_queueset_config {
    let mut c = std::mem::MaybeUninit::uninit();
    // SAFETY: `c` is writable.
    assert_eq!(
        unsafe { apf_queueset_config_default(c.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    let mut c = unsafe { c.assume_init() };
    c.concurrency_limit = limit;
    c.queues = queues;
    c.hand_size = hand;
    c.queue_length_limit = qll;
    c
}

struct Qs(*mut apf_queueset);

impl Drop for Qs {
    fn drop(&mut self) {
        // SAFETY: made by apf_queueset_new, freed once.
        unsafe { apf_queueset_free(self.0) }
    }
}

fn new_qs(cfg: &apf_queueset_config) -> Qs {
    let mut p = null_mut();
    let name = "level-a";
    // SAFETY: valid name, config and out pointer.
    let st =
        unsafe { apf_queueset_new(name.as_ptr().cast(), name.len(), cfg, true, &mut p, err()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    Qs(p)
}

fn start(q: &Qs, hash: u64, deadline: u64) -> apf_queueset_decision {
    let mut d = std::mem::MaybeUninit::uninit();
    let est = apf_work_estimate {
        initial_seats: 1,
        final_seats: 0,
        additional_latency_nanos: 0,
    };
    // SAFETY: live queueset, readable estimate, writable out.
    let st = unsafe { apf_queueset_start(q.0, hash, &est, deadline, 3, d.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    // SAFETY: written on APF_OK.
    unsafe { d.assume_init() }
}

/// `apf_request_poll` of a queueset's request (no dispatcher).
fn poll(h: u64) -> (u32, u32) {
    let (mut o, mut r) = (0u32, 0u32);
    // SAFETY: no dispatcher named, writable outs.
    let st = unsafe { apf_request_poll(null_mut(), h, &mut o, &mut r) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    (o, r)
}

fn stats(q: &Qs) -> apf_queueset_stats {
    let mut s = apf_queueset_stats::default();
    // SAFETY: live queueset, writable out.
    assert_eq!(
        unsafe { apf_queueset_read_stats(q.0, &mut s) },
        apf_status::APF_OK
    );
    s
}

#[test]
fn bad_configuration_is_refused_naming_the_level_and_field() {
    let mut p = null_mut();
    let name = "level-x";
    let cfg = config(1, 4, 9, 10);
    // SAFETY: valid arguments.
    let st =
        unsafe { apf_queueset_new(name.as_ptr().cast(), name.len(), &cfg, true, &mut p, err()) };
    assert_eq!(st, apf_status::APF_ERR_CONFIG);
    let msg = last_error();
    assert!(msg.contains("level-x") && msg.contains("handSize"), "{msg}");
    assert!(p.is_null());

    let cfg = config(1, 4, 2, 0);
    // SAFETY: valid arguments.
    let st =
        unsafe { apf_queueset_new(name.as_ptr().cast(), name.len(), &cfg, true, &mut p, err()) };
    assert_eq!(st, apf_status::APF_ERR_CONFIG);
    assert!(last_error().contains("queueLengthLimit"));

    // SAFETY: NULL config and NULL queueset are reported, not dereferenced.
    unsafe {
        assert_eq!(
            apf_queueset_new(
                name.as_ptr().cast(),
                name.len(),
                null(),
                true,
                &mut p,
                err()
            ),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_queueset_reconfigure(null_mut(), &cfg, err()),
            apf_status::APF_ERR_NULL_POINTER
        );
        // No dispatcher named, and handle 0 is never issued.
        assert_eq!(
            apf_finish(null_mut(), 0, 0),
            apf_status::APF_ERR_INVALID_HANDLE
        );
        apf_queueset_free(null_mut());
    }

    // A refused reconfiguration keeps the old configuration.
    let q = new_qs(&config(2, 4, 2, 10));
    // SAFETY: live queueset.
    assert_eq!(
        unsafe { apf_queueset_reconfigure(q.0, &config(1, 4, 5, 10), err()) },
        apf_status::APF_ERR_CONFIG
    );
    assert_eq!(stats(&q).concurrency_limit, 2);
}

#[test]
fn config_struct_size_is_checked() {
    let mut p = null_mut();
    let name = "level-s";
    let mut cfg = config(1, 4, 2, 10);
    assert_eq!(cfg.struct_size, std::mem::size_of::<apf_queueset_config>());
    cfg.struct_size = 0;
    // SAFETY: valid arguments; the size is refused before the fields are read.
    let st =
        unsafe { apf_queueset_new(name.as_ptr().cast(), name.len(), &cfg, true, &mut p, err()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
    let msg = last_error();
    assert!(
        msg.contains("apf_queueset_config.struct_size is 0"),
        "{msg}"
    );
    assert!(p.is_null());

    // A newer caller's struct: accepted while the unknown tail is zero.
    #[repr(C)]
    struct Newer {
        known: apf_queueset_config,
        extra: u64,
    }
    let mut newer = Newer {
        known: config(1, 4, 2, 10),
        extra: 0,
    };
    newer.known.struct_size = std::mem::size_of::<Newer>();
    let q = new_qs(&config(2, 4, 2, 10));
    // SAFETY: `newer` is readable for its struct_size.
    assert_eq!(
        unsafe { apf_queueset_reconfigure(q.0, &newer.known, err()) },
        apf_status::APF_OK
    );
    assert_eq!(stats(&q).concurrency_limit, 1);
    newer.extra = 7;
    newer.known.concurrency_limit = 3;
    // SAFETY: as above.
    assert_eq!(
        unsafe { apf_queueset_reconfigure(q.0, &newer.known, err()) },
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(
        stats(&q).concurrency_limit,
        1,
        "a refused struct changes nothing"
    );
}

#[test]
fn queue_dispatch_deadline_cancel_and_stale_handles() {
    let q = new_qs(&config(1, 4, 2, 10));
    let first = start(&q, 11, 0);
    assert_eq!(first.outcome, apf_outcome::APF_OUTCOME_EXECUTE as u32);
    let second = start(&q, 22, 0);
    assert_eq!(second.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    assert_ne!(second.waiting_id, 0);
    // Deadline at 5 ms on the manual clock.
    let third = start(&q, 33, 5_000_000);
    assert_eq!(third.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    let fourth = start(&q, 44, 0);

    let mut fd = -1;
    // SAFETY: live queueset, writable out.
    assert_eq!(
        unsafe { apf_queueset_completion_fd(q.0, &mut fd) },
        apf_status::APF_OK
    );
    assert!(fd >= 0);

    // SAFETY: live queueset.
    assert_eq!(
        unsafe { apf_queueset_advance_clock(q.0, 10_000_000) },
        apf_status::APF_OK
    );
    assert_eq!(
        poll(third.request),
        (
            apf_outcome::APF_OUTCOME_REJECTED as u32,
            apf_reject_reason::APF_REJECT_TIME_OUT as u32
        )
    );

    let mut cancelled = false;
    // SAFETY: no dispatcher named, writable out.
    assert_eq!(
        unsafe { apf_request_cancel(null_mut(), fourth.request, &mut cancelled) },
        apf_status::APF_OK
    );
    assert!(cancelled);

    // Finishing a queued request is refused; finishing the first
    // dispatches the second, which the completion queue reports.
    // SAFETY: no dispatcher named; any handle value is allowed.
    assert_eq!(
        unsafe { apf_finish(null_mut(), second.request, 0) },
        apf_status::APF_ERR_REQUEST_QUEUED
    );
    // SAFETY: no dispatcher named; any handle value is allowed.
    assert_eq!(
        unsafe { apf_finish(null_mut(), first.request, 0) },
        apf_status::APF_OK
    );
    let mut taken = Vec::new();
    loop {
        let (mut h, mut some) = (0u64, false);
        // SAFETY: live queueset, writable outs.
        assert_eq!(
            unsafe { apf_queueset_take_completion(q.0, &mut h, &mut some) },
            apf_status::APF_OK
        );
        if !some {
            break;
        }
        taken.push(h);
    }
    assert!(taken.contains(&second.request), "{taken:?}");
    assert_eq!(
        poll(second.request).0,
        apf_outcome::APF_OUTCOME_EXECUTE as u32
    );
    let mut idle = true;
    // SAFETY: live queueset, writable out.
    assert_eq!(
        unsafe { apf_queueset_is_idle(q.0, &mut idle) },
        apf_status::APF_OK
    );
    assert!(!idle);
    // SAFETY: no dispatcher named; any handle value is allowed.
    assert_eq!(
        unsafe { apf_finish(null_mut(), second.request, 0) },
        apf_status::APF_OK
    );
    // SAFETY: no dispatcher named; the handle is now stale.
    assert_eq!(
        unsafe { apf_finish(null_mut(), second.request, 0) },
        apf_status::APF_ERR_INVALID_HANDLE
    );
    // SAFETY: live queueset, writable out.
    assert_eq!(
        unsafe { apf_queueset_is_idle(q.0, &mut idle) },
        apf_status::APF_OK
    );
    assert!(idle);

    let s = stats(&q);
    assert_eq!(
        (s.dispatched, s.rejected_time_out, s.rejected_cancelled),
        (2, 1, 1)
    );
}

#[test]
fn dump_lists_waiting_requests_by_id_and_tag() {
    let q = new_qs(&config(1, 4, 2, 10));
    let _running = start(&q, 1, 0);
    let waiting = start(&q, 2, 0);
    // SAFETY: a NULL out is refused, not written.
    assert_eq!(
        unsafe { apf_queueset_dump_json(q.0, null_mut()) },
        apf_status::APF_ERR_NULL_POINTER
    );
    // SAFETY: live queueset; `t` is a writable apf_text.
    let (st, dump) = take_text(|t| unsafe { apf_queueset_dump_json(q.0, t) });
    assert_eq!(st, apf_status::APF_OK);
    let v: serde_json::Value = serde_json::from_str(&dump.unwrap()).unwrap();
    assert_eq!(v["waiting"], 1);
    assert_eq!(v["executing"], 1);
    assert_eq!(v["queues"].as_array().unwrap().len(), 4);
    let w = &v["waiting_requests"][0];
    assert_eq!(w["id"], waiting.waiting_id);
    assert_eq!(w["tag"], 3);
    assert_eq!(w["queue"], waiting.queue);
    assert_eq!(waiting.queue_length, 1);
}

#[test]
fn queued_decision_reports_queue_length_and_r() {
    // One seat, one queue: every request after the first waits in queue 0.
    let q = new_qs(&config(1, 1, 1, 10));
    let first = start(&q, 1, 0);
    assert_eq!(first.outcome, apf_outcome::APF_OUTCOME_EXECUTE as u32);
    assert_eq!((first.queue_length, first.current_r), (0, 0.0));
    let second = start(&q, 2, 0);
    let third = start(&q, 3, 0);
    assert_eq!(third.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    assert_eq!((second.queue_length, third.queue_length), (1, 2));
    assert_eq!((second.queue, third.queue), (0, 0));
    // R moves while requests wait; a later arrival reports R as the dump
    // shows it at the same instant.
    // SAFETY: live queueset.
    assert_eq!(
        unsafe { apf_queueset_advance_clock(q.0, 1_000_000_000) },
        apf_status::APF_OK
    );
    let fourth = start(&q, 4, 0);
    assert_eq!(fourth.queue_length, 3);
    // SAFETY: live queueset; `t` is a writable apf_text.
    let (st, dump) = take_text(|t| unsafe { apf_queueset_dump_json(q.0, t) });
    assert_eq!(st, apf_status::APF_OK);
    let v: serde_json::Value = serde_json::from_str(&dump.unwrap()).unwrap();
    assert!(fourth.current_r > second.current_r, "{fourth:?} {second:?}");
    assert_eq!(v["current_r"].as_f64(), Some(fourth.current_r));
}

#[test]
fn a_released_seat_dispatches_the_waiter_and_is_given_back_once() {
    let q = new_qs(&config(1, 4, 2, 10));
    let first = start(&q, 11, 0);
    assert_eq!(first.outcome, apf_outcome::APF_OUTCOME_EXECUTE as u32);
    let second = start(&q, 22, 0);
    assert_eq!(second.outcome, apf_outcome::APF_OUTCOME_QUEUED as u32);
    // SAFETY: no dispatcher named (a queueset's requests).
    let release = |h: u64, seats: u32| unsafe { apf_request_release_seats(null_mut(), h, seats) };
    assert_eq!(
        release(second.request, 0),
        apf_status::APF_ERR_REQUEST_QUEUED
    );
    assert_eq!(
        release(first.request, 2),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(
        release(first.request, 0),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    assert_eq!(
        poll(second.request).0,
        apf_outcome::APF_OUTCOME_EXECUTE as u32
    );
    assert_eq!(
        release(first.request, 0),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(stats(&q).seats_in_use, 1, "the second's seat only");
    // SAFETY: no dispatcher named; any handle value is allowed.
    assert_eq!(
        unsafe { apf_finish(null_mut(), first.request, 0) },
        apf_status::APF_OK
    );
    assert_eq!(
        stats(&q).seats_in_use,
        1,
        "the first gave back nothing more"
    );
    assert_eq!(
        release(first.request, 1),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    // SAFETY: no dispatcher named; any handle value is allowed.
    assert_eq!(
        unsafe { apf_finish(null_mut(), second.request, 0) },
        apf_status::APF_OK
    );
    assert_eq!(stats(&q).seats_in_use, 0);
    // SAFETY: no dispatcher named; handle 0 is never issued.
    let zero = unsafe { apf_request_release_seats(null_mut(), 0, 0) };
    assert_eq!(zero, apf_status::APF_ERR_INVALID_HANDLE);
}

/// The queues (by index) holding waiting requests, from the JSON dump.
fn queues_with_waiters(q: &Qs) -> Vec<usize> {
    // SAFETY: live queueset; `t` is a writable apf_text.
    let (st, dump) = take_text(|t| unsafe { apf_queueset_dump_json(q.0, t) });
    assert_eq!(st, apf_status::APF_OK);
    let v: serde_json::Value = serde_json::from_str(&dump.unwrap()).unwrap();
    let queues = v["queues"].as_array().unwrap();
    (0..queues.len())
        .filter(|&i| queues[i]["waiting"].as_u64().unwrap_or(0) > 0)
        .collect()
}

#[test]
fn the_fairness_field_chooses_the_policy_and_is_checked() {
    // Under `flow` and `flow-maxmin`, a busy flow keeps to one queue; under Kubernetes'
    // policy its waiting requests spread over its hand.
    for (fairness, spread) in [
        (apf_fairness::APF_FAIRNESS_KUBERNETES, true),
        (apf_fairness::APF_FAIRNESS_FLOW, false),
        (apf_fairness::APF_FAIRNESS_FLOW_MAXMIN, false),
    ] {
        let mut cfg = config(1, 16, 4, 10);
        cfg.fairness = fairness as u32;
        let q = new_qs(&cfg);
        let _running = start(&q, 77, 0);
        for _ in 0..4 {
            start(&q, 77, 0);
        }
        let used = queues_with_waiters(&q);
        assert_eq!(used.len() > 1, spread, "{fairness:?}: queues {used:?}");
    }

    // A value that names no policy is a configuration error naming it.
    let mut cfg = config(1, 16, 4, 10);
    cfg.fairness = 7;
    let (mut p, name) = (null_mut(), "level-f");
    // SAFETY: valid arguments.
    let st =
        unsafe { apf_queueset_new(name.as_ptr().cast(), name.len(), &cfg, true, &mut p, err()) };
    assert_eq!(st, apf_status::APF_ERR_CONFIG);
    let msg = last_error();
    assert!(
        msg.contains("level-f") && msg.contains("apf_queueset_config.fairness is 7"),
        "{msg}"
    );
    assert!(p.is_null());

    // A caller built against the first header (no `fairness` field) keeps
    // the default policy: its struct ends where the field begins.
    let mut old = config(1, 16, 4, 10);
    old.fairness = 7; // past the caller's struct: never read
    old.struct_size = std::mem::offset_of!(apf_queueset_config, fairness);
    let q = new_qs(&old);
    let _running = start(&q, 77, 0);
    for _ in 0..4 {
        start(&q, 77, 0);
    }
    assert!(queues_with_waiters(&q).len() > 1, "the default policy");
}

/// Issue 22 through a bare queueset: 4 handlers, each with a helper thread
/// that releases one of its request's two seats just as the handler
/// finishes it, 300 rounds under each flow policy; every release lands
/// before the finish or finds the request finished, and the idle queueset
/// holds no seat on any queue (its JSON dump). Before the fix a release
/// could reach the level after the finish and leave a phantom seat.
#[test]
fn a_release_racing_the_finish_leaves_no_seat_on_a_queue() {
    use std::sync::{Arc, Barrier};
    struct Shared(Qs);
    // SAFETY: the ABI promises a queueset may be used from any thread.
    unsafe impl Send for Shared {}
    // SAFETY: as above.
    unsafe impl Sync for Shared {}
    let two_seats = apf_work_estimate {
        initial_seats: 2,
        final_seats: 0,
        additional_latency_nanos: 0,
    };
    for fairness in [
        apf_fairness::APF_FAIRNESS_FLOW,
        apf_fairness::APF_FAIRNESS_FLOW_MAXMIN,
    ] {
        let mut cfg = config(16, 8, 2, 10);
        cfg.fairness = fairness as u32;
        let q = Arc::new(Shared(new_qs(&cfg)));
        let mut threads = Vec::new();
        for flow in 0..4u64 {
            let barrier = Arc::new(Barrier::new(2));
            let (tx, rx) = std::sync::mpsc::channel::<u64>();
            let (q1, b1) = (q.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..300 {
                    let mut d = std::mem::MaybeUninit::uninit();
                    // SAFETY: live queueset, readable estimate, writable out.
                    let st = unsafe {
                        apf_queueset_start(q1.0 .0, 100 + flow, &two_seats, 0, 0, d.as_mut_ptr())
                    };
                    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
                    // SAFETY: written on APF_OK.
                    let d = unsafe { d.assume_init() };
                    assert_eq!(d.outcome, apf_outcome::APF_OUTCOME_EXECUTE as u32);
                    tx.send(d.request).unwrap();
                    b1.wait();
                    // SAFETY: no dispatcher named.
                    let st = unsafe { apf_finish(null_mut(), d.request, 0) };
                    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
                    b1.wait();
                }
            }));
            threads.push(std::thread::spawn(move || {
                for handle in rx.iter() {
                    barrier.wait();
                    // SAFETY: live queueset.
                    match unsafe { apf_request_release_seats(null_mut(), handle, 1) } {
                        apf_status::APF_OK | apf_status::APF_ERR_INVALID_HANDLE => {}
                        other => panic!("release: {other:?} {}", last_error()),
                    }
                    barrier.wait();
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        let q = &q.0;
        assert_eq!(stats(q).seats_in_use, 0, "{fairness:?}");
        // SAFETY: live queueset; `t` is a writable apf_text.
        let (st, dump) = take_text(|t| unsafe { apf_queueset_dump_json(q.0, t) });
        assert_eq!(st, apf_status::APF_OK);
        let v: serde_json::Value = serde_json::from_str(&dump.unwrap()).unwrap();
        for (i, queue) in v["queues"].as_array().unwrap().iter().enumerate() {
            assert_eq!(queue["seats_in_use"], 0, "{fairness:?}: queue {i}: {queue}");
        }
    }
}
