//! The request protocol: decisions and their interned names, stale and
//! foreign handles, queued and executing requests, time-outs on the manual
//! clock, a full queue, deadlines, the actual end and additional latency;
//! reconfiguration; and a panic contained at the boundary.

use super::*;
use std::ptr::null;

#[test]
fn decision_carries_interned_names_and_uids() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    assert_eq!((a.outcome, a.reject_reason), (EXECUTE, NONE));
    assert_ne!(a.request, 0);
    assert_eq!(str_of(a.flow_schema_name), "alice-schema");
    assert_eq!(str_of(a.flow_schema_uid), "uid-alice");
    assert_eq!(str_of(a.priority_level_name), "tiny");
    assert_eq!(str_of(a.priority_level_uid), "uid-tiny");
    let b = start(&d, "bob");
    assert_eq!(str_of(b.flow_schema_name), "catch-all");
    assert_eq!(
        str_of(b.flow_schema_uid),
        apf::uid::flow_schema_uid("catch-all"),
        "no metadata.uid: the derived UID"
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
    // The same object gives the same pointers (interned).
    let again = start(&d, "alice");
    assert_eq!(again.flow_schema_name.ptr, a.flow_schema_name.ptr);
    assert_eq!(finish(&d, again.request), apf_status::APF_OK);
}

#[test]
fn stale_unknown_and_foreign_handles_are_detected() {
    let d = tiny().dispatcher();
    let other = tiny().dispatcher();
    let a = start(&d, "alice");
    for h in [0, 1 << 40, u64::MAX, a.request ^ (1 << 32)] {
        assert_eq!(finish(&d, h), apf_status::APF_ERR_INVALID_HANDLE, "{h:#x}");
        assert_eq!(
            poll(&d, h),
            Err(apf_status::APF_ERR_INVALID_HANDLE),
            "{h:#x}"
        );
        assert_eq!(
            cancel(&d, h),
            Err(apf_status::APF_ERR_INVALID_HANDLE),
            "{h:#x}"
        );
    }
    assert_eq!(
        finish(&other, a.request),
        apf_status::APF_ERR_INVALID_PARAMETER,
        "another dispatcher's handle"
    );
    assert_eq!(poll(&d, a.request), Ok((EXECUTE, NONE)));
    assert_eq!(wait(&d, a.request, 0), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(
        finish(&d, a.request),
        apf_status::APF_ERR_INVALID_HANDLE,
        "double finish"
    );
    assert_eq!(poll(&d, a.request), Err(apf_status::APF_ERR_INVALID_HANDLE));
    // The slot is reused with a new generation: the old handle stays stale.
    // (Free slots are reused oldest first, and the process's one request
    // slab holds other tests' free slots too: start and finish until this
    // thread's shard comes round to it.)
    let b = (0..1 << 16)
        .map(|_| start(&d, "alice"))
        .find(|b| {
            let same_slot = b.request as u32 == a.request as u32;
            if !same_slot {
                assert_eq!(finish(&d, b.request), apf_status::APF_OK);
            }
            same_slot
        })
        .expect("the slot is reused");
    assert_ne!(b.request, a.request, "new generation");
    assert_eq!(finish(&d, a.request), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}

#[test]
fn queued_requests_cannot_be_finished_and_executing_ones_cannot_be_cancelled() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    assert_eq!(a.outcome, EXECUTE);
    let q = start(&d, "alice");
    assert_eq!((q.outcome, q.reject_reason), (QUEUED, NONE));
    assert_ne!(q.request, 0);
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_QUEUED);
    assert_eq!(
        cancel(&d, a.request),
        Err(apf_status::APF_ERR_REQUEST_EXECUTING)
    );
    assert_eq!(poll(&d, q.request), Ok((QUEUED, NONE)));
    // Finishing the executing request dispatches the queued one; until the
    // caller learns of it, it still counts as queued.
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_QUEUED);
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
    assert_eq!(field(&line, "dispatched"), 2, "{line}");
}

#[test]
fn manual_clock_times_out_a_queued_request_and_finish_then_reports_rejected() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    assert_eq!(q.outcome, QUEUED);
    advance(&d, SECOND / 2);
    assert_eq!(
        poll(&d, q.request),
        Ok((QUEUED, NONE)),
        "before the wait limit"
    );
    advance(&d, SECOND);
    let timed_out = (REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32);
    assert_eq!(poll(&d, q.request), Ok(timed_out));
    assert_eq!(
        poll(&d, q.request),
        Ok(timed_out),
        "reported again while the handle is remembered"
    );
    assert_eq!(finish(&d, q.request), apf_status::APF_ERR_REQUEST_REJECTED);
    assert_eq!(
        cancel(&d, q.request),
        Err(apf_status::APF_ERR_REQUEST_REJECTED)
    );
    let mut now = 0;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_now(d.0, &mut now) },
        apf_status::APF_OK
    );
    assert_eq!(now, SECOND + SECOND / 2);
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "rejected_time-out"), 1, "{line}");
}

#[test]
fn a_full_queue_rejects_at_start_with_handle_zero() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let q1 = start(&d, "alice");
    let q2 = start(&d, "alice");
    assert_eq!((q1.outcome, q2.outcome), (QUEUED, QUEUED));
    let r = start(&d, "alice");
    assert_eq!(r.outcome, REJECTED);
    assert_eq!(
        r.reject_reason,
        apf_reject_reason::APF_REJECT_QUEUE_FULL as u32
    );
    assert_eq!(r.request, 0);
    assert_eq!(
        str_of(r.priority_level_name),
        "tiny",
        "names even when rejected"
    );
    assert_eq!(finish(&d, r.request), apf_status::APF_ERR_INVALID_HANDLE);
    assert_eq!(cancel(&d, q1.request), Ok(true));
    assert_eq!(
        cancel(&d, q1.request),
        Err(apf_status::APF_ERR_INVALID_HANDLE),
        "cancelled handle is retired"
    );
    assert_eq!(cancel(&d, q2.request), Ok(true));
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "rejected_cancelled"), 2, "{line}");
    assert_eq!(field(&line, "rejected_queue-full"), 1, "{line}");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
}

#[test]
fn deadline_before_the_wait_limit_times_out_first() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let dg = pod("alice").digest();
    let mut out = std::mem::MaybeUninit::uninit();
    // SAFETY: valid pointers.
    let st = unsafe { apf_start_request(d.0, &dg, null(), SECOND / 10, out.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    let q = unsafe { out.assume_init() };
    assert_eq!(q.outcome, QUEUED);
    advance(&d, SECOND / 10);
    assert_eq!(
        poll(&d, q.request),
        Ok((REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32))
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
}

#[test]
fn finish_honours_the_actual_end_and_additional_latency() {
    let d = tiny().dispatcher();
    let est = apf_work_estimate {
        initial_seats: 1,
        final_seats: 1,
        additional_latency_nanos: SECOND / 2,
    };
    let a = try_start(&d, &pod("alice"), Some(est)).unwrap();
    assert_eq!(a.outcome, EXECUTE);
    advance(&d, SECOND / 4);
    // The request really ended at 0.1 s; its final seat is held until 0.6 s.
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_finish(d.0, a.request, SECOND / 10) },
        apf_status::APF_OK
    );
    let q = start(&d, "alice");
    assert_eq!(q.outcome, QUEUED, "the final seat is still held");
    advance(&d, SECOND / 4); // 0.5 s
    assert_eq!(poll(&d, q.request), Ok((QUEUED, NONE)));
    advance(&d, SECOND / 10); // 0.6 s
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

// ----- reconfiguration -------------------------------------------------------

#[test]
fn a_bad_reconfiguration_keeps_the_old_config() {
    let d = tiny().dispatcher();
    let before = stats(&d);
    for bad in [
        // No objects: it used to apply, dropping every level but the
        // mandatory ones.
        "",
        "# nothing\n---\n",
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
        "this is: [not valid",
        // handSize above queues does not validate.
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: tiny}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 5\n    limitResponse: {type: Queue, queuing: {queues: 2, handSize: 9, queueLengthLimit: 2}}\n",
    ] {
        // SAFETY: text readable for its length.
        let st = unsafe { apf_dispatcher_reconfigure(d.0, bad.as_ptr().cast(), bad.len(), err()) };
        assert_eq!(st, apf_status::APF_ERR_CONFIG, "{bad}");
        assert!(!last_error().is_empty());
    }
    assert!(last_error().contains("handSize"), "{}", last_error());
    assert_eq!(stats(&d), before);
    let a = start(&d, "alice");
    assert_eq!(str_of(a.priority_level_name), "tiny");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
}

#[test]
fn a_good_reconfiguration_switches_and_keeps_old_names_valid() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let old_name = a.priority_level_name;
    let json = r#"{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"PriorityLevelConfiguration","metadata":{"name":"other"},"spec":{"type":"Limited","limited":{"limitResponse":{"type":"Reject"}}}}"#;
    // SAFETY: text readable for its length.
    let st = unsafe { apf_dispatcher_reconfigure(d.0, json.as_ptr().cast(), json.len(), err()) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert!(stats(&d).contains("level other "));
    assert!(!stats(&d).contains("level tiny "));
    assert_eq!(str_of(old_name), "tiny", "names stay valid until free");
    // The request of the removed level still finishes.
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    let b = start(&d, "alice");
    assert_eq!(str_of(b.flow_schema_name), "catch-all");
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}

// ----- panics ---------------------------------------------------------------

#[test]
fn a_panic_inside_is_contained_and_the_library_stays_usable() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    // SAFETY: NULL is allowed.
    assert_eq!(
        unsafe { apf_test_panic(null(), err()) },
        apf_status::APF_ERR_PANIC
    );
    assert!(
        last_error().contains("deliberate panic"),
        "{}",
        last_error()
    );
    // A panic while holding the lock this thread's requests live under
    // poisons it; the dispatcher must go on working.
    // SAFETY: live dispatcher.
    assert_eq!(
        unsafe { apf_test_panic(d.0, err()) },
        apf_status::APF_ERR_PANIC
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    for _ in 0..3 {
        let b = start(&d, "alice");
        assert_eq!(b.outcome, EXECUTE);
        assert_eq!(finish(&d, b.request), apf_status::APF_OK);
    }
}
