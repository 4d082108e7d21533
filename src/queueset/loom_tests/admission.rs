//! loom models of the admission word's protocol (src/queueset/admission.rs)
//! on the paths that once broke it: a level that does not queue, where the
//! slow path used to check for room and then add its seats, so a hot-path
//! CAS could land in between (two requests ran at limit 1); a hot-path start
//! replayed after the slow path queued a waiter on the same queue, which
//! left the queue's key in the ready index stale; and a request wider than
//! the limit, which may run only when nothing else executes.
//!
//! Each model checks the invariants at every step an executing request can
//! observe, through an independent record of what executes (`Observed`),
//! not only at the end. Run with `scripts/loom.sh`.
use super::{assert_idle, config, request};
use crate::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::time::Duration;

/// What the model's threads saw executing: seats and requests, updated by
/// each request right after it is admitted and right before it finishes.
struct Observed {
    limit: u32,
    state: Mutex<(u32, u32)>,
}

impl Observed {
    fn new(limit: u32) -> Arc<Observed> {
        Arc::new(Observed {
            limit,
            state: Mutex::new((0, 0)),
        })
    }

    /// A request of `seats` began executing: the level never runs over its
    /// limit, except one request wider than the limit running alone.
    fn began(&self, seats: u32) {
        let mut st = self.state.lock().unwrap();
        st.0 += seats;
        st.1 += 1;
        assert!(
            st.0 <= self.limit || st.1 == 1,
            "{} seats in use by {} requests at limit {}",
            st.0,
            st.1,
            self.limit
        );
    }

    fn ending(&self, seats: u32) {
        let mut st = self.state.lock().unwrap();
        st.0 -= seats;
        if seats > 0 {
            st.1 -= 1;
        }
    }

    /// A request holding `held` seats is about to release `seats` of them
    /// early and keep executing: from now on it counts for `held - seats`
    /// (a request that holds none no longer counts as running beside a
    /// too-wide one).
    fn releasing(&self, held: u32, seats: u32) {
        let mut st = self.state.lock().unwrap();
        st.0 -= seats;
        if seats == held {
            st.1 -= 1;
        }
    }
}

/// A level of `limit` seats and `queues` queues (see [`config`]); the
/// models here never move its clock.
fn level(limit: u32, queues: u32) -> Arc<QueueSet> {
    level_of(config(limit, queues))
}

fn level_of(cfg: QueueSetConfig) -> Arc<QueueSet> {
    let (qs, _) = super::level(cfg);
    qs
}

/// What every model here does around its two requests: `other` runs on a
/// spawned thread while `this` runs on the model's own, both at `qs` and
/// recorded in one [`Observed`] of the level's `limit`; once both are done
/// the level must be idle. Returns what `this` and `other` returned.
fn race(
    qs: Arc<QueueSet>,
    limit: u32,
    other: impl FnOnce(&QueueSet, &Observed) -> bool + Send + 'static,
    this: impl FnOnce(&QueueSet, &Observed) -> bool,
) -> (bool, bool) {
    let seen = Observed::new(limit);
    let (qs2, seen2) = (qs.clone(), seen.clone());
    let t = thread::spawn(move || other(&qs2, &seen2));
    let this = this(&qs, &seen);
    let other = t.join().unwrap();
    assert_idle(&qs);
    (this, other)
}

/// Start a request of `flow` for `seats` and wait if it queues: its guard
/// once it executes, or None when it is rejected or its wait fails.
fn admit(qs: &QueueSet, flow: u64, seats: u32) -> Option<Guard<'_>> {
    match qs.start(&request(flow, seats)) {
        Admission::Execute(g) => Some(g),
        Admission::Queued(t) => t.wait().ok(),
        Admission::Rejected(_) => None,
    }
}

/// Start, wait if queued, run (observed), finish. Returns whether it ran.
fn run(qs: &QueueSet, seen: &Observed, flow: u64, seats: u32) -> bool {
    run_probing(qs, seen, flow, seats, false)
}

/// [`run`], and with `probe`, read the level's stats while executing: a
/// slow-path operation that replays the ring and runs the core's invariant
/// checks at that step.
fn run_probing(qs: &QueueSet, seen: &Observed, flow: u64, seats: u32, probe: bool) -> bool {
    let Some(guard) = admit(qs, flow, seats) else {
        return false;
    };
    let held = guard.estimate().max_seats();
    seen.began(held);
    if probe {
        let _ = qs.stats();
    }
    seen.ending(held);
    guard.finish();
    true
}

/// Defect 1: at a level that does not queue (limit 1), a request that must
/// take the slow path (0 initial seats: clamped there to 1) races a 1-seat
/// request on the hot path. At most one may execute at any moment; the
/// other is rejected or runs after.
#[test]
fn a_non_queuing_level_never_runs_over_its_limit() {
    loom::model(|| {
        let (hot, slow) = race(
            level(1, 0),
            1,
            |qs, seen| run(qs, seen, 1, 0),
            |qs, seen| run(qs, seen, 2, 1),
        );
        assert!(hot || slow, "one of them runs");
    });
}

/// Defect 2: a hot-path start whose record reaches the ring only after the
/// slow path queued a waiter on the same queue (one queue, limit 1). The
/// replay raises that queue's next-dispatch R; its key in the ready index
/// must follow, or a later dispatch serves the wrong queue. The core's
/// invariant checks (debug builds: loom runs with debug assertions) compare
/// every key with next-dispatch R plus the head's work; the hot-path
/// request probes the level (a replay, then the checks) while it executes,
/// before its own finish would re-key the queue.
#[test]
fn a_late_replay_after_an_enqueue_keeps_the_ready_index_exact() {
    loom::model(|| {
        let ran = race(
            level(1, 1),
            1,
            |qs, seen| run(qs, seen, 7, 1),
            |qs, seen| run_probing(qs, seen, 9, 1, true),
        );
        assert_eq!(ran, (true, true));
    });
}

/// A request wider than the limit (3 seats at limit 2) waits until nothing
/// executes, then runs alone at its full width; it never runs beside the
/// narrow one, even when the narrow one's start has not been replayed yet
/// (the core's count of executing requests lags; the word does not).
#[test]
fn a_too_wide_request_runs_only_alone() {
    loom::model(|| {
        let ran = race(
            level(2, 1),
            2,
            |qs, seen| run(qs, seen, 3, 3),
            |qs, seen| run(qs, seen, 4, 1),
        );
        assert_eq!(ran, (true, true), "the wide request runs once alone");
    });
}

/// Start, wait if queued, run (observed), release `release` seats early,
/// then finish. Returns whether it ran.
fn run_releasing(qs: &QueueSet, seen: &Observed, flow: u64, seats: u32, release: u32) -> bool {
    let Some(mut guard) = admit(qs, flow, seats) else {
        return false;
    };
    let held = guard.estimate().max_seats();
    seen.began(held);
    seen.releasing(held, release);
    guard
        .release_seats(release)
        .expect("releases what it holds");
    let left = guard.held_seats();
    assert_eq!(left, held - release);
    seen.ending(left);
    guard.finish();
    true
}

/// An early release (issue 11 part 3) racing a waiter: a 2-seat request
/// at limit 2 releases one seat while a 1-seat request arrives (hot path,
/// or queued and then dispatched by the release or by the finish). The
/// release runs under the lock; the finish may take the hot path (nothing
/// waits) or the slow one. Every interleaving keeps the level within its
/// limit, and every seat comes back exactly once (the word and the core's
/// mirror both end at 0: `assert_idle` runs the core's invariant checks,
/// and the word's `give_back` asserts it never gives back more than held).
#[test]
fn an_early_release_gives_every_seat_back_once() {
    loom::model(|| {
        let ran = race(
            level(2, 1),
            2,
            |qs, seen| run(qs, seen, 5, 1),
            |qs, seen| run_releasing(qs, seen, 6, 2, 1),
        );
        assert_eq!(ran, (true, true));
    });
}

/// A request that released all its seats no longer blocks a request wider
/// than the limit (which runs only when no executing request holds seats),
/// and the wide one never runs beside a request that still holds any.
#[test]
fn a_full_release_lets_a_too_wide_request_run() {
    loom::model(|| {
        let ran = race(
            level(1, 1),
            1,
            |qs, seen| run(qs, seen, 3, 2),
            |qs, seen| run_releasing(qs, seen, 4, 1, 1),
        );
        assert_eq!(ran, (true, true), "the wide request runs");
    });
}

/// The same race under the flow fairness policy (issue 11 parts 1 and 3),
/// both requests of one flow: a request admitted on the hot path has its
/// queue chosen at replay, and the release finds it in the flow table
/// (each interleaving replays the other request's start and finish records
/// around it). One flow, so its finish never holds seats for it while its
/// other request waits in the same queue: a hold would end only when the
/// manual clock, which loom never advances, passes G.
#[test]
fn an_early_release_under_the_flow_policy_gives_every_seat_back_once() {
    loom::model(|| {
        let flow = QueueSetConfig {
            fairness: Fairness::Flow,
            ..config(2, 2)
        };
        let ran = race(
            level_of(flow),
            2,
            |qs, seen| run(qs, seen, 6, 1),
            |qs, seen| run_releasing(qs, seen, 6, 2, 1),
        );
        assert_eq!(ran, (true, true));
    });
}

/// The hold+release race with two flows (issue 11 loose end), under both
/// flow policies: flow 6's 2-seat request (limit 2, hand 2 of 2 queues,
/// so the flows take different queues) releases one seat early while flow
/// 5's 1-seat request runs on the hot path or waits. When flow 5's request
/// finishes while flow 6's waits, its seat is held for flow 5 (anticipation,
/// at most `MAX_ANTICIPATION`); flow 5's thread then moves the manual clock
/// past it, which fires the level's timer and ends the hold, so flow 6's
/// request runs. Every seat comes back exactly once, held seats included.
#[test]
fn an_early_release_beside_a_hold_of_another_flow() {
    for fairness in [Fairness::Flow, Fairness::FlowMaxMin] {
        loom::model(move || {
            let (qs, manual) = super::level(QueueSetConfig {
                name: "loom-two-flows".into(),
                hand_size: 2,
                fairness,
                ..config(2, 2)
            });
            let ran = race(
                qs,
                2,
                move |qs, seen| {
                    let ran = run(qs, seen, 5, 1);
                    manual.advance(crate::queueset::MAX_ANTICIPATION + Duration::from_millis(1));
                    ran
                },
                |qs, seen| run_releasing(qs, seen, 6, 2, 1),
            );
            assert_eq!(ran, (true, true));
        });
    }
}
