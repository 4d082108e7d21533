//! Runs a saturated level in a loop on one thread, for profilers
//! (`valgrind --tool=callgrind target/release/examples/saturated_profile
//! [ITERATIONS [SEATS [OUTSTANDING]]]`).
//!
//! The level has `SEATS` seats (default 1) and the thread keeps
//! `OUTSTANDING` requests (default 8) outstanding, so the rest wait: one
//! iteration finishes an executing request (its seat dispatches a waiter,
//! whose waker records it), starts a new one (it queues) and polls the
//! dispatched waiter's ticket. The level's shape is the scaling bench's
//! `saturated` group's (64 queues, hands of 8) with one thread, so the
//! instructions per iteration are the serial cost of a saturated request
//! (docs/scaling.md, "The saturated level (issue 21)"). Kubernetes'
//! policy only: under the flow policies a finished request's seat may be
//! held for its flow (anticipation) until a timer, which one thread's
//! loop would have to sleep for.
use apf::clock::Clock;
use apf::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Wakes ticket `index` by recording it in the thread's list.
struct WakeSlot {
    index: usize,
    woken: Arc<Mutex<Vec<usize>>>,
}

impl Wake for WakeSlot {
    fn wake(self: Arc<Self>) {
        self.woken.lock().unwrap().push(self.index);
    }
}

fn arg<T: std::str::FromStr>(i: usize) -> Option<T> {
    std::env::args().nth(i).and_then(|s| s.parse().ok())
}

/// Polls ticket `slot`; a dispatched one joins `held`.
fn poll<'q>(
    slot: usize,
    wakers: &[Waker],
    tickets: &mut [Option<Ticket<'q>>],
    free: &mut Vec<usize>,
    held: &mut Vec<Guard<'q>>,
) {
    let Some(t) = tickets[slot].as_mut() else {
        return; // a stale wake
    };
    let mut cx = Context::from_waker(&wakers[slot]);
    if let Poll::Ready(decision) = Pin::new(t).poll(&mut cx) {
        tickets[slot] = None;
        free.push(slot);
        held.push(decision.expect("no deadline, no rejection"));
    }
}

fn main() {
    let n: u64 = arg(1).unwrap_or(1_000_000);
    let seats: u32 = arg(2).unwrap_or(1);
    let outstanding: usize = arg(3).unwrap_or(8);
    assert!(outstanding > seats as usize, "some requests must wait");
    let cfg = QueueSetConfig {
        name: "saturated".into(),
        concurrency_limit: seats,
        queues: 64,
        hand_size: 8,
        queue_length_limit: 1 << 20,
        fairness: Fairness::Kubernetes,
        ..QueueSetConfig::default()
    };
    let qs = QueueSet::new(cfg, Clock::real()).expect("valid config");
    let woken = Arc::new(Mutex::new(Vec::with_capacity(outstanding)));
    let wakers: Vec<Waker> = (0..outstanding)
        .map(|index| {
            Waker::from(Arc::new(WakeSlot {
                index,
                woken: woken.clone(),
            }))
        })
        .collect();
    let mut held: Vec<Guard<'_>> = Vec::new();
    let mut tickets: Vec<Option<Ticket<'_>>> = (0..outstanding).map(|_| None).collect();
    let mut free: Vec<usize> = (0..outstanding).collect();
    let mut seed = 1u64;
    let mut finished = 0u64;
    // The woken tickets, swapped with the wakers' list (no allocation).
    let mut dispatched: Vec<usize> = Vec::with_capacity(outstanding);

    loop {
        // Keep `outstanding` requests: new ones queue behind the seats.
        while held.len() + (outstanding - free.len()) < outstanding {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let r = Request {
                flow_hash: seed,
                estimate: WorkEstimate::new(1, 0, Duration::ZERO),
                deadline: None,
            };
            match qs.start(&r) {
                Admission::Execute(g) => held.push(g),
                Admission::Queued(t) => {
                    let slot = free.pop().expect("a free slot per outstanding request");
                    tickets[slot] = Some(t);
                    poll(slot, &wakers, &mut tickets, &mut free, &mut held);
                }
                Admission::Rejected(r) => panic!("saturated level rejected: {r:?}"),
            }
        }
        if finished == n {
            break;
        }
        // Finish one: its seat dispatches a waiter, whose waker runs.
        let g = held.pop().expect("a seat is held");
        g.finish();
        finished += 1;
        std::mem::swap(&mut dispatched, &mut *woken.lock().unwrap());
        for slot in dispatched.drain(..) {
            poll(slot, &wakers, &mut tickets, &mut free, &mut held);
        }
    }
    println!("{:?}", qs.stats());
    drop(held);
    drop(tickets);
}
