//! Seats given back before a request finishes (a watch after its initial
//! burst, a long request past its expensive phase): the request keeps
//! executing, holding fewer seats, and its queue is charged for the
//! released seats only the time it actually held them.
//!
//! Charging: at dispatch a queue is charged `initial seats × G` (the
//! service-time guess); when a request finishes after `d`, the charge is
//! corrected to `initial seats × d`. A release splits that correction: the
//! initial seats it gives up are corrected at the release, to the time they
//! were held, and the finish corrects only the initial seats still held. So
//! a request that held `n` initial seats for `d1` and `m < n` of them until
//! `d2` is charged `(n - m) × d1 + m × d2`, its real seat-time.

use super::{Core, NO_QUEUE};
use crate::clock::Instant;
use crate::queueset::held::Held;
use crate::queueset::vtime::{seats_times, VTime};
use crate::work_estimate::WorkEstimate;

impl Core {
    /// The work a request is charged at dispatch: `vtime::total_work` at
    /// the level's G (the same integer: `seat_g × n` is `(n × G) << 20`).
    #[inline]
    pub(crate) fn charge(&self, e: &WorkEstimate) -> VTime {
        self.vclock.charge(e)
    }

    /// What a finish takes back from its queue's charge: the initial seats'
    /// guessed time G less the time they really held, `initial × (G −
    /// actual)` in virtual work.
    #[inline]
    pub(crate) fn finish_correction(
        &self,
        initial_seats: u32,
        start: Instant,
        end: Instant,
    ) -> VTime {
        self.vclock.finish_correction(initial_seats, start, end)
    }

    /// A request that executes (`before`, as it was before this release)
    /// gives `seats` of its seats back at `now` (the caller checked `0 <
    /// seats <= before.seats()` and gives them back in the admission word
    /// after this). The request keeps executing:
    /// its queue stays active, and its finish releases what it still holds.
    ///
    /// Under the flow policy (`flow` is Some) the request stays in the flow
    /// table (its flow keeps its queue until it finishes); a request
    /// admitted lock-free (`FLOW_QUEUE`) has its queue looked up there,
    /// the ring being replayed. The seats go back to the level at once:
    /// they are never held for the flow (anticipation holds only the seats
    /// a finish frees, see `finish`), so released and held seats are each
    /// given back exactly once.
    pub(crate) fn release_early(&mut self, before: &Held, seats: u32, now: Instant) {
        debug_assert!(
            seats > 0 && seats <= before.seats(),
            "release within what is held"
        );
        let queue = self.executing_queue(before.queue, before.flow());
        self.tallies.get(before.tag).release(seats);
        if queue != NO_QUEUE {
            let q = queue as usize;
            let mut after = *before;
            after.released += seats;
            let refunded = before.charged_seats() - after.charged_seats();
            if let Some(flow) = before.flow() {
                self.order_release_early(flow, refunded, seats, before.start, now);
            }
            if refunded > 0 {
                let g = self.cfg.service_time_guess;
                let actual = now.saturating_since(before.start);
                self.queues[q].next_dispatch_r -=
                    seats_times(refunded, g) - seats_times(refunded, actual);
                self.queues.bound_and_reindex(q);
            }
        }
        self.release(queue, seats);
    }
}
