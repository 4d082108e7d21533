//! A hot-path start and a finish of the same queue and tag, replayed in one
//! step (issue 14, "cheaper accounting").
//!
//! Without contention a level's ring holds each request's start followed
//! at once by its finish. Replayed one at a time, the pair integrates R
//! twice (unavoidable: the rate differs before, during and after), and
//! between the two it also looks up the tally twice, re-keys the queue in
//! the ready index twice, feeds the demand index and checks for queues to
//! drop. When the queue has nothing waiting (so it has no key in the ready
//! index) and the level keeps no max-min demand index, most of that is a
//! no-op, and what remains is a handful of additions: the pair's net
//! effect on the queue is its charge, `S + work − initial × G + initial ×
//! actual` on top of `S = max(next dispatch R, R at the start)`, and on the
//! level's counts nothing but the seats the finish gives back.
//!
//! [`Core::replay_start_finish`] computes exactly the state that
//! `replay_start` followed by `replay_finish` leave (every field, down to
//! the last dispatch note, the round-robin position and the tallies), using
//! each record's own fields, so it does not matter whether the finish is
//! really the start's request: it only needs the same queue and tag. The
//! property test `fused_replay_equals_two_step` in `core/tests.rs` checks
//! it against the two-step replay after every record; the differential
//! tests check the whole queueset against the reference model.

use super::{Core, NO_QUEUE};
use crate::clock::Instant;
use crate::stats::Phase;
use crate::work_estimate::WorkEstimate;

/// The fields of a finish record (the queue and tag are its start's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The initial seats still charged.
    pub(crate) initial_seats: u32,
    /// The seats given back.
    pub(crate) seats: u32,
    /// When the finishing request started.
    pub(crate) start: Instant,
    /// When it finished.
    pub(crate) at: Instant,
}

impl Core {
    /// Replay a hot-path start of `queue` and `tag` followed at once by a
    /// finish of the same queue and tag: the same state as
    /// `replay_start(queue, tag, estimate, at)` then
    /// `replay_finish(queue, tag, end...)`. `midway` runs between the two,
    /// seeing the level's demand and last sync as the start left them (the
    /// drain feeds the borrowing demand observer there).
    #[inline]
    pub(crate) fn replay_start_finish(
        &mut self,
        queue: u32,
        tag: u32,
        estimate: WorkEstimate,
        at: Instant,
        end: Ended,
        midway: impl FnOnce(&Core),
    ) {
        if !self.fuses(queue) {
            self.replay_start(queue, tag, estimate, at);
            midway(self);
            self.replay_finish(queue, tag, end.initial_seats, end.seats, end.start, end.at);
            return;
        }
        let seats = estimate.max_seats();
        let queued = queue != NO_QUEUE;
        self.sync(at);
        // The queue's share of the start: with nothing waiting in it, the
        // queue is idle exactly when nothing of it executes, and an idle
        // queue restarts at the current R.
        if queued {
            let q = queue as usize;
            let work = self.charge(&estimate);
            let r = self.r();
            let target = &mut self.queues[q];
            if target.executing == 0 {
                target.next_dispatch_r = r;
            }
            let s = target.next_dispatch_r.max(r);
            target.next_dispatch_r = s;
            self.note_dispatch(q);
            self.queues[q].next_dispatch_r = s + work;
            // With nothing waiting in the queue, it becomes active exactly
            // when it was idle.
            self.queues.begin_executing(q, seats);
            self.queues.set_robin(q);
        }
        self.seats.executing += 1;
        self.seats.in_use += u64::from(seats);
        self.tallies.note(Phase::Executing, tag, 1, at);
        midway(self);
        self.sync(end.at);
        self.tallies.note(Phase::Executing, tag, -1, end.at);
        self.seats.executing -= 1;
        self.seats.in_use -= u64::from(end.seats);
        if queued {
            let q = queue as usize;
            let correction = self.finish_correction(end.initial_seats, end.start, end.at);
            // Idle again exactly when it was idle before the start.
            self.queues.end_executing(q);
            self.queues.release(q, end.seats);
            self.queues[q].next_dispatch_r -= correction;
            // Queues beyond the configured count go once empty; with no
            // extra queue there is nothing to drop, and the round-robin
            // position (this queue) stays in range.
            if self.queues.len() > self.cfg.queues as usize {
                self.drop_undesired_empty_queues();
            }
        }
        let tally = self.tallies.get(tag);
        tally.begin_at_once(seats, queued);
        tally.stats.work_estimated_seats.observe(seats.into());
        tally.end(end.start, end.at);
        tally.release(end.seats);
    }

    /// Whether a start and finish of `queue` can be replayed in one step:
    /// the queue exists and has nothing waiting (so re-keying it in the
    /// ready index is a no-op both times), and no max-min demand index
    /// must follow the queue's demand at each record.
    #[inline]
    fn fuses(&self, queue: u32) -> bool {
        self.water.is_none()
            && (queue == NO_QUEUE
                || self
                    .queues
                    .get(queue as usize)
                    .is_some_and(|q| q.waiting.is_empty() && q.ready_key.is_none()))
    }
}
