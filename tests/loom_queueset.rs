//! loom models of the queueset's lock-free protocols: the hot path's
//! admission CAS and finish subtraction racing with the slow path's queuing,
//! dispatch, cancellation and reconfiguration. Run with `scripts/loom.sh`.
#![cfg(loom)]

use apf::clock::Clock;
use apf::queueset::{Admission, QueueSet, QueueSetConfig, RejectReason, Request};
use apf::work_estimate::WorkEstimate;
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

fn level(limit: u32) -> Arc<QueueSet> {
    let (clock, _manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "loom".into(),
        concurrency_limit: limit,
        queues: 2,
        hand_size: 1,
        queue_length_limit: 4,
        ..QueueSetConfig::default()
    };
    Arc::new(QueueSet::new(cfg, clock).expect("valid config"))
}

fn request(flow: u64) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    }
}

/// Start, wait if queued, finish. Returns whether the request executed.
fn run_one(qs: &QueueSet, flow: u64) -> bool {
    match qs.start(&request(flow)) {
        Admission::Execute(guard) => {
            guard.finish();
            true
        }
        Admission::Queued(ticket) => match ticket.wait() {
            Ok(guard) => {
                guard.finish();
                true
            }
            Err(reason) => panic!("rejected: {reason}"),
        },
        Admission::Rejected(reason) => panic!("rejected: {reason}"),
    }
}

fn assert_idle(qs: &QueueSet) {
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "every seat given back");
    assert_eq!(stats.requests_executing, 0);
    assert_eq!(stats.requests_waiting, 0);
}

/// A hot-path finish races with an arrival that finds no seat and queues:
/// the waiter is never left behind (no lost wake-up) and no seat leaks.
#[test]
fn admit_against_finish() {
    loom::model(|| {
        let qs = level(1);
        let other = qs.clone();
        let t = thread::spawn(move || run_one(&other, 1));
        assert!(run_one(&qs, 2));
        assert!(t.join().unwrap());
        assert_idle(&qs);
    });
}

/// A waiting request's cancellation races with the finish that would
/// dispatch it: it either runs (and finishes) or is cancelled, never both,
/// and no seat leaks.
#[test]
fn cancel_against_dispatch() {
    loom::model(|| {
        let qs = level(1);
        let Admission::Execute(holder) = qs.start(&request(1)) else {
            panic!("first request fits")
        };
        let other = qs.clone();
        let t = thread::spawn(move || match other.start(&request(2)) {
            Admission::Queued(ticket) => ticket.cancel(),
            Admission::Execute(g) => {
                g.finish();
                false
            }
            Admission::Rejected(r) => panic!("rejected: {r}"),
        });
        holder.finish();
        let _cancelled = t.join().unwrap();
        assert_idle(&qs);
        let stats = qs.stats();
        assert!(stats.rejected[RejectReason::Cancelled as usize] <= 1);
    });
}

/// A finish races with a reconfiguration that raises the limit while a
/// request waits: the waiter runs, and the seat count stays exact.
#[test]
fn finish_against_reconfigure() {
    loom::model(|| {
        let qs = level(1);
        let Admission::Execute(holder) = qs.start(&request(1)) else {
            panic!("first request fits")
        };
        let waiter = qs.clone();
        let t = thread::spawn(move || run_one(&waiter, 2));
        let other = qs.clone();
        let r = thread::spawn(move || other.set_concurrency_limit(2).expect("valid"));
        holder.finish();
        r.join().unwrap();
        assert!(t.join().unwrap());
        assert_idle(&qs);
    });
}

/// [`admit_against_finish`] under the flow fairness policy, both requests
/// of one flow: the hot path records the flow's hash and the replay chooses
/// its queue, racing with the slow path's queuing in the flow's queue; no
/// lost wake-up, no seat or flow-table entry left behind. (Two flows would
/// let the finishing one hold its seat for up to G, which needs the clock
/// to move; the differential and shuttle tests cover holds.)
#[test]
fn admit_against_finish_under_flow() {
    loom::model(|| {
        let (clock, _manual) = Clock::manual();
        let cfg = QueueSetConfig {
            name: "loom-flow".into(),
            concurrency_limit: 1,
            queues: 2,
            hand_size: 2,
            queue_length_limit: 4,
            fairness: apf::queueset::Fairness::Flow,
            ..QueueSetConfig::default()
        };
        let qs = Arc::new(QueueSet::new(cfg, clock).expect("valid config"));
        let other = qs.clone();
        let t = thread::spawn(move || run_one(&other, 7));
        assert!(run_one(&qs, 7));
        assert!(t.join().unwrap());
        assert_idle(&qs);
        assert_eq!(qs.stats().held_seats, 0);
    });
}
