//! Completion notification: the completion fd and queue, and a callback
//! that runs outside libapf's locks and may call back in.

use super::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

fn fd_readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn completion_fd_is_readable_exactly_while_decisions_wait_to_be_taken() {
    let d = tiny().dispatcher();
    let mut fd = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd) },
        apf_status::APF_OK
    );
    assert!(fd >= 0);
    assert!(!fd_readable(fd));
    let a = start(&d, "alice");
    let q1 = start(&d, "alice");
    let q2 = start(&d, "alice");
    assert!(!fd_readable(fd), "nothing decided yet");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert!(fd_readable(fd));
    assert_eq!(take(&d), Some(q1.request));
    assert!(!fd_readable(fd), "queue emptied");
    assert_eq!(take(&d), None);
    assert_eq!(poll(&d, q1.request), Ok((EXECUTE, NONE)));
    // q2 times out while q1 executes.
    advance(&d, 2 * SECOND);
    assert!(fd_readable(fd));
    let mut fd2 = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd2) },
        apf_status::APF_OK
    );
    assert_eq!(fd, fd2, "one fd per dispatcher");
    assert_eq!(take(&d), Some(q2.request));
    assert_eq!(
        poll(&d, q2.request),
        Ok((REJECTED, apf_reject_reason::APF_REJECT_TIME_OUT as u32))
    );
    // A cancellation is not announced.
    let q3 = start(&d, "alice");
    assert_eq!(cancel(&d, q3.request), Ok(true));
    assert!(!fd_readable(fd));
    assert_eq!(take(&d), None);
    assert_eq!(finish(&d, q1.request), apf_status::APF_OK);
}

#[test]
fn the_completion_queue_stays_off_until_asked_for() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(take(&d), None, "not collected before the first take");
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    let q2 = start(&d, "alice");
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    assert_eq!(take(&d), Some(q2.request), "collected after the first take");
    assert_eq!(wait(&d, q2.request, u64::MAX), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q2.request), apf_status::APF_OK);
}

struct Calls {
    dispatcher: *mut apf_dispatcher,
    seen: Mutex<Vec<u64>>,
    reentrant_status: Mutex<Vec<apf_status>>,
}

unsafe extern "C" fn record(user: *mut c_void, request: u64) {
    // SAFETY: `user` is the `Calls` the test registered, alive until the
    // callback is cleared.
    let calls = unsafe { &*(user as *const Calls) };
    calls.seen.lock().unwrap().push(request);
    // Calling back into libapf from the callback must work (no lock is
    // held): stats take the level's lock, a start takes it too.
    // SAFETY: live dispatcher; writable apf_text.
    let (st, _) = take_text(|t| unsafe { apf_dispatcher_stats_text(calls.dispatcher, t) });
    calls.reentrant_status.lock().unwrap().push(st);
    // SAFETY: live dispatcher; changing the callback inside it is refused.
    let st = unsafe { apf_dispatcher_set_completion_callback(calls.dispatcher, None, null_mut()) };
    calls.reentrant_status.lock().unwrap().push(st);
    // SAFETY: freeing the dispatcher from its own callback is ignored (the
    // dispatcher is in use below this frame); the test goes on using it,
    // first right here (under ASan a free that was not ignored is a
    // use-after-free at once).
    unsafe { apf_dispatcher_free(calls.dispatcher) };
    let (st, _) = take_text(|t| unsafe { apf_dispatcher_stats_text(calls.dispatcher, t) });
    calls.reentrant_status.lock().unwrap().push(st);
}

#[test]
fn the_callback_runs_outside_libapf_locks_and_may_call_back_in() {
    let d = tiny().dispatcher();
    let calls = Box::new(Calls {
        dispatcher: d.0,
        seen: Mutex::new(Vec::new()),
        reentrant_status: Mutex::new(Vec::new()),
    });
    let user = &*calls as *const Calls as *mut c_void;
    // SAFETY: `record` may be called with `user` from any thread while the
    // callback is set; `calls` outlives it.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, Some(record), user) },
        apf_status::APF_OK
    );
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    // The dispatch happens inside this finish, on this thread: a callback
    // run under the level's lock would deadlock here, so run it on a thread
    // and fail instead of hanging.
    let (tx, rx) = mpsc::channel();
    let (dp, h) = (d.0 as usize, a.request);
    std::thread::spawn(move || {
        // SAFETY: the dispatcher outlives this thread's one call (the test
        // waits for it below).
        let st = unsafe { apf_finish(dp as *mut apf_dispatcher, h, 0) };
        let _ = tx.send(st);
    });
    let Ok(st) = rx.recv_timeout(Duration::from_secs(60)) else {
        // The finishing thread is stuck inside the callback: freeing the
        // dispatcher would wait for it forever, so leak it and fail.
        std::mem::forget(d);
        std::mem::forget(calls);
        panic!("apf_finish deadlocked: the callback ran under a libapf lock");
    };
    assert_eq!(st, apf_status::APF_OK);
    assert_eq!(*calls.seen.lock().unwrap(), vec![q.request]);
    assert_eq!(
        *calls.reentrant_status.lock().unwrap(),
        vec![
            apf_status::APF_OK,
            apf_status::APF_ERR_IN_CALLBACK,
            apf_status::APF_OK,
        ]
    );
    assert_eq!(poll(&d, q.request), Ok((EXECUTE, NONE)));
    // Timeouts from the manual clock's advance are announced too.
    let q2 = start(&d, "alice");
    advance(&d, 2 * SECOND);
    assert_eq!(*calls.seen.lock().unwrap(), vec![q.request, q2.request]);
    // SAFETY: clearing the callback; afterwards it is not called.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, None, null_mut()) },
        apf_status::APF_OK
    );
    let q3 = start(&d, "alice");
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
    assert_eq!(calls.seen.lock().unwrap().len(), 2);
    assert_eq!(poll(&d, q3.request), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q3.request), apf_status::APF_OK);
}
