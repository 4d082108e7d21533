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
use crate::queueset::vtime::{seats_times, seats_times_nanos, VTime};
use crate::work_estimate::WorkEstimate;

/// The initial seats a request is still charged for while it holds `held`
/// seats: its initial seats, fewer once it released some (a request holds
/// the most of its initial and final seats; it gives up the final-only ones
/// first).
pub(crate) fn charged_seats(estimate: WorkEstimate, held: u32) -> u32 {
    estimate.initial_seats.min(held)
}

impl Core {
    /// The work a request is charged at dispatch: `vtime::total_work` at
    /// the level's G (the same integer: `seat_g × n` is `(n × G) << 20`).
    #[inline]
    pub(crate) fn charge(&self, e: &WorkEstimate) -> VTime {
        let final_part = if e.final_seats == 0 {
            0
        } else {
            seats_times(e.final_seats, e.additional_latency)
        };
        self.seat_g * VTime::from(e.initial_seats) + final_part
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
        self.seat_g * VTime::from(initial_seats)
            - seats_times_nanos(
                initial_seats,
                end.as_nanos().saturating_sub(start.as_nanos()),
            )
    }

    /// A request that executes holding `held` seats gives `seats` of them
    /// back at `now` (the caller checked `0 < seats <= held` and gives them
    /// back in the admission word after this). The request keeps executing:
    /// its queue stays active, and its finish releases what it still holds.
    ///
    /// Under the flow policy (`flow` is Some) the request stays in the flow
    /// table (its flow keeps its queue until it finishes); a request
    /// admitted lock-free (`FLOW_QUEUE`) has its queue looked up there,
    /// the ring being replayed. The seats go back to the level at once:
    /// they are never held for the flow (anticipation holds only the seats
    /// a finish frees, see `finish`), so released and held seats are each
    /// given back exactly once.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn release_early(
        &mut self,
        queue: u32,
        flow: Option<u64>,
        tag: u32,
        estimate: WorkEstimate,
        held: u32,
        seats: u32,
        start: Instant,
        now: Instant,
    ) {
        debug_assert!(seats > 0 && seats <= held, "release within what is held");
        let queue = self.executing_queue(queue, flow);
        self.tallies.get(tag).release(seats);
        if queue != NO_QUEUE {
            let q = queue as usize;
            let refunded = charged_seats(estimate, held) - charged_seats(estimate, held - seats);
            if refunded > 0 {
                let g = self.cfg.service_time_guess;
                let actual = now.saturating_since(start);
                self.queues[q].next_dispatch_r -=
                    seats_times(refunded, g) - seats_times(refunded, actual);
                self.bound_and_reindex(q);
            }
        }
        self.release(queue, seats);
    }
}
