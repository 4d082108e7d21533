//! An executing request that other threads may release seats of and finish
//! through a handle (the C ABI's request table): release and finish of the
//! one request made exclusive end to end.
//!
//! # Why
//! A release through a handle is split in two: [`RequestGuard::begin_release`]
//! checks and counts the seats under the table's lock, and
//! [`LevelRelease::complete`] gives them back after the lock is dropped
//! (giving seats back can dispatch waiters and run completion callbacks,
//! which may call back into libapf and must not meet the table's lock).
//! Between the halves the request is still in the table. If a finish on
//! another thread took it and finished it there, the level saw the finish
//! before the release's second half: under the `flow` policies the finish
//! had already taken the request's flow out of the flow table, so the
//! release found no queue for it and lowered the level's seats but not its
//! queue's, leaving phantom seats on that queue for good (issue 22).
//!
//! The protocol, its steps and what they guarantee, are at [`SharedRequest`].
// Under loom only the models below use it (the C ABI does not build).
#![cfg_attr(loom, allow(dead_code))]

use super::{LevelRelease, RequestGuard};
use crate::clock::Instant;
use crate::queueset::ReleaseError;

/// An executing request in a handle table that several threads may release
/// seats of and finish (the C ABI's request handles): release and finish of
/// the one request exclusive end to end. Every method but
/// [`SharedRequest::finish`] runs under the lock that guards the table's
/// entry, and a release's [`LevelRelease::complete`] outside it.
///
/// # Protocol
/// 1. A release begins ([`SharedRequest::begin_release`]) only while no
///    finish was asked for, and counts itself until it ends.
/// 2. A finish asked for ([`SharedRequest::ask_finish`]) is recorded; the
///    request reads as finished from then on. If no release is in flight,
///    the asker takes the request out of the table and finishes it.
/// 3. A release ends ([`SharedRequest::end_release`]) once its `complete`
///    returned; the last one to end with a finish recorded takes the
///    request out of the table and finishes it.
///
/// So the level sees each release complete before the finish, and no
/// release after it. Rust code holding a [`RequestGuard`] needs none of
/// this: `release_seats(&mut self)` and `finish(self)` cannot overlap.
#[derive(Debug)]
pub struct SharedRequest {
    guard: RequestGuard,
    /// Releases begun and not yet ended (their seats may not be back yet).
    releases: u32,
    /// The finish asked for while releases were in flight, done by the last.
    finish: Option<AskedFinish>,
}

/// A finish asked for: its end and the cost reported with it.
#[derive(Debug, Clone, Copy)]
struct AskedFinish {
    end: Instant,
    cost: Option<f64>,
}

impl SharedRequest {
    /// An executing request entering a handle table, no release in flight.
    pub fn new(guard: RequestGuard) -> SharedRequest {
        SharedRequest {
            guard,
            releases: 0,
            finish: None,
        }
    }

    /// Whether its finish was asked for: the request then reads as
    /// finished, whatever releases still have to end.
    pub fn finishing(&self) -> bool {
        self.finish.is_some()
    }

    /// The current time on its level's clock (a finish asked for with no
    /// end time of its caller's ends now).
    pub fn now(&self) -> Instant {
        self.guard.level.clock().now()
    }

    /// The seats it still holds (see [`RequestGuard::seats`]).
    pub fn seats(&self) -> u64 {
        self.guard.seats()
    }

    /// Under the table's lock: begin a release of `seats`. Give the release
    /// to [`LevelRelease::complete`] after dropping the lock, then call
    /// [`end_release`](Self::end_release) under it. Once
    /// [`finishing`](Self::finishing), [`ReleaseError::NothingHeld`]: the
    /// finish gives every seat back.
    pub fn begin_release(&mut self, seats: u32) -> Result<LevelRelease, ReleaseError> {
        if self.finishing() {
            return Err(ReleaseError::NothingHeld);
        }
        let release = self.guard.begin_release(seats)?;
        self.releases += 1;
        Ok(release)
    }

    /// Under the table's lock, once a release begun here completed. True
    /// when it was the last release of a request whose finish was asked
    /// for meanwhile: the caller then takes the request out of the table
    /// and calls [`finish`](Self::finish) after dropping the lock.
    #[must_use = "true: the caller must finish the request"]
    pub fn end_release(&mut self) -> bool {
        debug_assert!(self.releases > 0, "a release ends after it began");
        if self.releases == 0 {
            return false; // no release began: nothing to end
        }
        self.releases -= 1;
        self.releases == 0 && self.finishing()
    }

    /// Under the table's lock: ask for the finish at `end`, reporting
    /// `cost` (checked by the caller: finite, 0 or more; one that is not
    /// finishes the request without a cost). True when no release is in
    /// flight: the caller then takes the request out of the table and calls
    /// [`finish`](Self::finish) after dropping the lock. False: the last
    /// release to end does, or (once [`finishing`](Self::finishing)) the
    /// finish asked for first, which this one does not replace.
    #[must_use = "true: the caller must finish the request"]
    pub fn ask_finish(&mut self, end: Instant, cost: Option<f64>) -> bool {
        debug_assert!(!self.finishing(), "one finish per request");
        if self.finishing() {
            return false;
        }
        self.finish = Some(AskedFinish { end, cost });
        self.releases == 0
    }

    /// Outside the table's lock, once taken out of the table: finish as
    /// asked (or at once, for a request dropped without a finish asked,
    /// as when its table is torn down).
    pub fn finish(self) {
        debug_assert_eq!(self.releases, 0, "finish after every release");
        let Some(AskedFinish { end, cost }) = self.finish else {
            return; // dropping the guard finishes the request now
        };
        match cost {
            None => self.guard.finish_at(end),
            Some(cost) => {
                // Checked by the caller; a refusal would finish it anyway.
                if let Err((guard, _)) = self.guard.finish_at_with_cost(end, cost) {
                    guard.finish_at(end);
                }
            }
        }
    }
}

/// loom models of the protocol: a release racing the finish of the same
/// request, through the layers the C ABI uses below its request table (the
/// table's shard lock is a loom mutex around the slot, driven exactly as
/// `ffi::request`'s `release_request_seats` and `finish_request` drive
/// the slab; the ABI itself does not build under loom). Run with
/// `scripts/loom.sh`. The core's invariant checks run at every settle of
/// the level (loom builds have debug assertions): a release that reaches
/// the level after the finish trips them at that step.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::clock::Clock;
    use crate::level::{Level, Outcome};
    use crate::queueset::{Fairness, QueueSet, QueueSetConfig};
    use crate::sync::{lock, Arc, Mutex};
    use crate::work_estimate::WorkEstimate;
    use loom::thread;
    use std::time::Duration;

    /// One slot of the request table: `None` once retired.
    type Slot = Arc<Mutex<Option<SharedRequest>>>;

    /// `release_request_seats`: begin under the lock, complete after it,
    /// end under it again (finishing if a finish came meanwhile).
    fn release(slot: &Slot, seats: u32) {
        let begun = match lock(slot).as_mut() {
            Some(shared) if !shared.finishing() => shared.begin_release(seats),
            _ => return, // finished first: a stale handle
        };
        begun.expect("the request holds the seats").complete();
        let last = {
            let mut slot = lock(slot);
            let shared = slot.as_mut().expect("the slot stays while releasing");
            if shared.end_release() {
                slot.take()
            } else {
                None
            }
        };
        if let Some(shared) = last {
            shared.finish();
        }
    }

    /// `finish_request`: ask under the lock; finish after it if no release
    /// is in flight.
    fn finish(slot: &Slot, end: Instant) {
        let taken = {
            let mut slot = lock(slot);
            let shared = slot.as_mut().expect("finished once");
            assert!(!shared.finishing(), "finished once");
            if shared.ask_finish(end, None) {
                slot.take()
            } else {
                None
            }
        };
        if let Some(shared) = taken {
            shared.finish();
        }
    }

    /// A flow-policy level of 2 seats and 2 queues; a request of flow 7
    /// holding both seats, admitted on the hot path (its queue is chosen
    /// when its start is replayed, and its release and finish find it in
    /// the flow table). `releases` threads release one seat each while the
    /// main thread finishes it. At the end nothing is held and no queue
    /// holds a seat.
    fn release_against_finish(fairness: Fairness, releases: u32) {
        loom::model(move || {
            let (clock, _manual) = Clock::manual();
            let cfg = QueueSetConfig {
                name: "loom".into(),
                concurrency_limit: 2,
                queues: 2,
                hand_size: 1,
                queue_length_limit: 4,
                fairness,
                ..QueueSetConfig::default()
            };
            let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
            let level = Arc::new(Level::limited("loom".into(), None, qs, clock.clone()));
            let estimate = WorkEstimate::new(2, 0, Duration::ZERO);
            let Outcome::Execute(guard) =
                Level::admit(&level, 0, 7, estimate, None, || unreachable!("it fits"))
            else {
                panic!("two free seats");
            };
            let slot: Slot = Arc::new(Mutex::new(Some(SharedRequest::new(guard))));
            let releasers: Vec<_> = (0..releases)
                .map(|_| {
                    let slot = slot.clone();
                    thread::spawn(move || release(&slot, 1))
                })
                .collect();
            finish(&slot, clock.now());
            for r in releasers {
                r.join().unwrap();
            }
            assert!(lock(&slot).is_none(), "finished exactly once");
            let qs = level.queueset().expect("limited");
            let stats = qs.stats();
            assert_eq!(stats.seats_in_use, 0, "every seat given back");
            assert_eq!(stats.requests_executing, 0, "the finish replayed");
            for q in qs.dump().queues {
                assert_eq!(q.seats_in_use, 0, "queue {}: no phantom seat", q.index);
                assert_eq!(q.executing, 0, "queue {}", q.index);
            }
        });
    }

    #[test]
    fn release_against_finish_under_flow() {
        release_against_finish(Fairness::Flow, 1);
    }

    #[test]
    fn release_against_finish_under_flow_maxmin() {
        release_against_finish(Fairness::FlowMaxMin, 1);
    }

    /// Two releases in flight: the finish waits for the last of them.
    #[test]
    fn two_releases_against_finish_under_flow() {
        release_against_finish(Fairness::Flow, 2);
    }
}
