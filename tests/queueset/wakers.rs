//! Wakers of async waiters run with no lock of the level held: a waker may
//! call back into the queueset (as an embedding's completion callback does)
//! without deadlocking.
#![cfg(not(loom))]

use apf::clock::Clock;
use apf::queueset::{Admission, QueueSet, QueueSetConfig, Request};
use apf::work_estimate::WorkEstimate;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

struct CallsBack {
    qs: Arc<QueueSet>,
    seen: Mutex<Vec<u32>>,
}

impl Wake for CallsBack {
    fn wake(self: Arc<Self>) {
        // Takes the level lock: would deadlock if woken under it.
        let stats = self.qs.stats();
        self.seen.lock().unwrap().push(stats.seats_in_use);
    }
}

#[test]
fn a_waker_may_call_back_into_the_queueset() {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        concurrency_limit: 1,
        queues: 4,
        hand_size: 2,
        ..QueueSetConfig::default()
    };
    let qs = Arc::new(QueueSet::new(cfg, clock).unwrap());
    let request = Request {
        flow_hash: 1,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    };
    let Admission::Execute(holder) = qs.start(&request) else {
        panic!("fits")
    };
    let Admission::Queued(mut dispatched) = qs.start(&request) else {
        panic!("queues")
    };
    let Admission::Queued(mut timed_out) = qs.start(&request) else {
        panic!("queues")
    };
    let waker_state = Arc::new(CallsBack {
        qs: qs.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let waker = Waker::from(waker_state.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut dispatched).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut timed_out).poll(&mut cx).is_pending());
    holder.finish(); // dispatches `dispatched`: its waker runs
    assert_eq!(*waker_state.seen.lock().unwrap(), vec![1]);
    let guard = match Pin::new(&mut dispatched).poll(&mut cx) {
        std::task::Poll::Ready(Ok(g)) => g,
        other => panic!("dispatched, got {other:?}"),
    };
    manual.advance(Duration::from_secs(60)); // times out `timed_out` from the timer: its waker runs
    assert_eq!(waker_state.seen.lock().unwrap().len(), 2);
    assert!(matches!(
        Pin::new(&mut timed_out).poll(&mut cx),
        std::task::Poll::Ready(Err(_))
    ));
    drop(guard);
    assert_eq!(qs.stats().seats_in_use, 0);
}
