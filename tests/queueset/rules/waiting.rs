//! Waiting: the future and the blocking wait.

use super::*;

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn the_future_is_woken_and_ready_when_its_request_is_dispatched() {
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let mut t = l.queue(flow_to(4, 1, 1), est(1));
    let wakes = Arc::new(CountingWaker::default());
    let waker = Waker::from(wakes.clone());
    assert!(poll_once(&mut t, &waker).is_pending());
    assert!(poll_once(&mut t, &waker).is_pending(), "polled again");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    l.advance_ms(3);
    drop(g);
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "woken once, by the finish"
    );
    match poll_once(&mut t, &waker) {
        Poll::Ready(Ok(guard)) => {
            assert_eq!(guard.start_time(), l.at(3));
            l.check(&[&guard], 0, 0);
        }
        other => panic!("expected a dispatch, got {other:?}"),
    };
}

#[test]
fn the_future_is_woken_by_a_manual_clock_advance_when_it_times_out() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 50 * MS;
    let l = level(c);
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let mut t = l.queue(flow_to(4, 1, 1), est(1));
    let first = Arc::new(CountingWaker::default());
    let second = Arc::new(CountingWaker::default());
    assert!(poll_once(&mut t, &Waker::from(first.clone())).is_pending());
    // A later poll with another waker replaces the first.
    assert!(poll_once(&mut t, &Waker::from(second.clone())).is_pending());
    l.advance_ms(50);
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        poll_once(&mut t, &Waker::from(second.clone())),
        Poll::Ready(Err(RejectReason::TimeOut))
    ));
    l.check(&[&g], 0, 0);
}

#[test]
fn a_blocking_wait_is_woken_by_a_finish_on_another_thread() {
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let t = l.queue(flow_to(4, 1, 1), est(1));
    let (tx, rx) = mpsc::channel();
    let gate = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            gate.wait();
            let got = t.wait().map(|g| g.start_time());
            tx.send(got).unwrap();
        });
        gate.wait();
        l.advance_ms(7);
        assert!(rx.try_recv().is_err(), "still waiting before the finish");
        drop(g);
        assert_eq!(rx.recv().unwrap(), Ok(l.at(7)));
    });
    l.check(&[], 0, 0);
}

#[test]
fn a_blocking_wait_is_woken_by_a_manual_clock_advance_on_another_thread() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 40 * MS;
    let l = level(c);
    let _g = l.exec(flow_to(4, 1, 0), est(1));
    let t = l.queue(flow_to(4, 1, 1), est(1));
    let (tx, rx) = mpsc::channel();
    let gate = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            gate.wait();
            tx.send(t.wait().map(|g| g.start_time())).unwrap();
        });
        gate.wait();
        l.advance_ms(39);
        assert!(
            rx.try_recv().is_err(),
            "still waiting before the wait limit"
        );
        l.advance_ms(1);
        assert_eq!(rx.recv().unwrap(), Err(RejectReason::TimeOut));
    });
}

/// Requests of one queue that time out at the same instant leave it
/// together, and the queue is bounded once, by the head that remains: not
/// after each removal, which lifted the queue's next-dispatch R to the
/// arrival R of a head about to time out as well (found by the shuttle
/// history check against the reference model). Observable while the queue
/// still executes a request.
#[test]
fn requests_timing_out_together_leave_their_queue_unbounded_by_each_other() {
    let l = level(cfg(1, 1, 1, 10));
    let running = l.exec(1, est(1));
    assert_eq!(l.ndr(0), seat_s(1, G));
    let deadline = Some(l.at(10));
    let mut first = queued(l.start_with_deadline(1, est(1), deadline));
    l.advance_ms(5); // R = 5 seat-ms: the second arrives far past the queue's R
    let mut second = queued(l.start_with_deadline(1, est(1), deadline));
    l.advance_ms(5);
    assert_eq!(refused(&mut first), RejectReason::TimeOut);
    assert_eq!(refused(&mut second), RejectReason::TimeOut);
    assert_eq!(l.ndr(0), seat_s(1, G), "no waiter left to bound the queue");
    drop(running);
}
