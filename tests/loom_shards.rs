//! loom models of the sharded event rings (src/queueset/shards.rs): a
//! request admitted on one thread's shard and finished on another thread,
//! racing the lock holder's drain of both rings. Run with `scripts/loom.sh`
//! (two shards under loom; the first thread of a model run that admits gets
//! shard 0, the next shard 1).
#![cfg(loom)]

#[path = "support/loom.rs"]
mod support;
use apf::clock::Clock;
use apf::queueset::{QueueSet, RawAdmission, Request};
use loom::sync::Arc;
use loom::thread;
use support::{assert_idle, config};

/// A level of `limit` seats and two queues, and its clock (which the models
/// read, never move).
fn level(limit: u32) -> (Arc<QueueSet>, Clock) {
    let (qs, _) = support::level(config(limit, 2));
    let clock = qs.clock().clone();
    (qs, clock)
}

/// A one-seat request of `flow`.
fn request(flow: u64) -> Request {
    support::request(flow, 1)
}

/// A request starts on shard 0 and finishes on a thread of shard 1, which
/// then starts and finishes its own request, all at one instant (a manual
/// clock), while the first thread drains both rings. The finish must be
/// replayed after its start in every interleaving: had it gone to the
/// finishing thread's ring, the merge (finishes first on a tie) would
/// replay it before its start and the core's counts would underflow.
#[test]
fn finish_on_another_shard_against_drain() {
    loom::model(|| {
        let (qs, clock) = level(2);
        let RawAdmission::Execute(exec) = qs.admit(&request(1)) else {
            panic!("free seats: the hot path admits");
        };
        let other = qs.clone();
        let other_clock = clock.clone();
        let t = thread::spawn(move || {
            other.finish_execution(exec, other_clock.now());
            let RawAdmission::Execute(own) = other.admit(&request(2)) else {
                panic!("free seats: the hot path admits");
            };
            other.finish_execution(own, other_clock.now());
        });
        // The lock holder's drain races both pushes.
        let stats = qs.stats();
        assert!(stats.seats_in_use <= 2, "never above the limit");
        t.join().unwrap();
        assert_idle(&qs);
    });
}

/// Two shards each fill their ring (two records under loom) while the
/// other replays: every record is replayed once, whichever thread finds
/// its ring full.
#[test]
fn full_rings_on_two_shards() {
    loom::model(|| {
        let (qs, clock) = level(2);
        let other = qs.clone();
        let other_clock = clock.clone();
        let t = thread::spawn(move || {
            for flow in [3, 4] {
                let RawAdmission::Execute(e) = other.admit(&request(flow)) else {
                    panic!("at most two requests execute at once here");
                };
                other.finish_execution(e, other_clock.now());
            }
        });
        let RawAdmission::Execute(e) = qs.admit(&request(1)) else {
            panic!("at most two requests execute at once here");
        };
        qs.finish_execution(e, clock.now());
        t.join().unwrap();
        assert_idle(&qs);
    });
}
