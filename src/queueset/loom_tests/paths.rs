//! loom models of the queueset's lock-free protocols: the hot path's
//! admission CAS and finish subtraction racing with the slow path's queuing,
//! dispatch, cancellation and reconfiguration. Run with `scripts/loom.sh`.
use super::{assert_idle, config};
use crate::queueset::{Admission, QueueSet, QueueSetConfig, RejectReason, Request};
use loom::sync::Arc;
use loom::thread;

/// A level of `limit` seats and two queues; the models here never move
/// its clock.
fn level(limit: u32) -> Arc<QueueSet> {
    level_of(config(limit, 2))
}

fn level_of(cfg: QueueSetConfig) -> Arc<QueueSet> {
    let (qs, _) = super::level(cfg);
    qs
}

/// A one-seat request of `flow`.
fn request(flow: u64) -> Request {
    super::request(flow, 1)
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
        let (qs, _manual) = super::level(QueueSetConfig {
            name: "loom-flow".into(),
            hand_size: 2,
            fairness: crate::queueset::Fairness::Flow,
            ..config(1, 2)
        });
        let other = qs.clone();
        let t = thread::spawn(move || run_one(&other, 7));
        assert!(run_one(&qs, 7));
        assert!(t.join().unwrap());
        assert_idle(&qs);
        assert_eq!(qs.stats().held_seats, 0);
    });
}
