//! Threads: a blocking wait in real time, a wait ended from another
//! thread, many threads sharing a dispatcher, and a free with requests
//! still live.

use super::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[test]
fn wait_times_out_in_real_time_and_leaves_the_request_queued() {
    let d = tiny().dispatcher();
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    let t0 = std::time::Instant::now();
    // The timeout is the caller's real time (the dispatcher's manual clock
    // stands still), so this test does block for 20 ms.
    assert_eq!(wait(&d, q.request, 20_000_000), Ok((QUEUED, NONE)));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!(
        wait(&d, q.request, 0),
        Ok((QUEUED, NONE)),
        "0 does not block"
    );
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(wait(&d, q.request, 0), Ok((EXECUTE, NONE)));
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

#[test]
fn a_blocked_wait_ends_when_another_thread_decides_or_cancels() {
    let d = std::sync::Arc::new(tiny().dispatcher());
    let a = start(&d, "alice");
    let q = start(&d, "alice");
    let waiter = {
        let d = d.clone();
        std::thread::spawn(move || wait(&d, q.request, u64::MAX))
    };
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
    assert_eq!(waiter.join().unwrap(), Ok((EXECUTE, NONE)));
    let q2 = start(&d, "alice");
    let waiter = {
        let d = d.clone();
        std::thread::spawn(move || wait(&d, q2.request, u64::MAX))
    };
    // Whether the waiter blocks before or after the cancel, it ends.
    assert_eq!(cancel(&d, q2.request), Ok(true));
    assert_eq!(
        waiter.join().unwrap(),
        Err(apf_status::APF_ERR_INVALID_HANDLE)
    );
    assert_eq!(finish(&d, q.request), apf_status::APF_OK);
}

// ----- concurrency and teardown ------------------------------------------------

#[test]
fn many_threads_start_wait_and_finish_without_losing_a_seat() {
    let d = std::sync::Arc::new(tiny().dispatcher());
    let executed = std::sync::Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (d, executed) = (d.clone(), executed.clone());
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let dec = start(&d, "alice");
                    let outcome = match dec.outcome {
                        QUEUED => wait(&d, dec.request, u64::MAX).unwrap().0,
                        o => o,
                    };
                    if outcome == EXECUTE {
                        executed.fetch_add(1, Ordering::Relaxed);
                        assert_eq!(finish(&d, dec.request), apf_status::APF_OK);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(executed.load(Ordering::Relaxed) > 0);
    let line = level_line(&d, "tiny");
    assert_eq!(field(&line, "seats_in_use"), 0, "{line}");
    assert_eq!(field(&line, "waiting"), 0, "{line}");
    assert_eq!(
        field(&line, "dispatched"),
        executed.load(Ordering::Relaxed) as u64,
        "{line}"
    );
    assert!(
        stats(&d).starts_with("now_ns 0 requests_live 0 "),
        "{}",
        stats(&d)
    );
}

static AFTER_FREE: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_after_free(_user: *mut c_void, _request: u64) {
    AFTER_FREE.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn free_with_live_requests_finishes_and_cancels_them_silently() {
    let d = tiny().dispatcher();
    // SAFETY: a plain function, callable from any thread.
    assert_eq!(
        unsafe { apf_dispatcher_set_completion_callback(d.0, Some(count_after_free), null_mut()) },
        apf_status::APF_OK
    );
    let mut fd = -1;
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_completion_fd(d.0, &mut fd) },
        apf_status::APF_OK
    );
    let _executing = start(&d, "alice");
    let _queued = start(&d, "alice");
    let _queued2 = start(&d, "alice");
    drop(d);
    assert_eq!(
        AFTER_FREE.load(Ordering::SeqCst),
        0,
        "no callback during free"
    );
}
