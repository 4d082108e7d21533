//! A request's end: the seats it still holds are given back at once,
//! linger for its additional latency, or are held for its flow's next
//! request (the flow policy's anticipation). Seats it released early went
//! back at their release (`release`), so they are never held here.

use super::{charged_seats, Core, Lingering};
use crate::clock::Instant;
use crate::stats::Phase;
use crate::work_estimate::WorkEstimate;
use std::cmp::Reverse;

impl Core {
    /// A request admitted from a queue (or without one) finishes at `now`,
    /// still holding `held` of its seats (fewer than its estimate's if it
    /// released some early, see `release_early`). Returns the seats to give
    /// back now (0 when they linger).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &mut self,
        queue: u32,
        flow: Option<u64>,
        tag: u32,
        estimate: WorkEstimate,
        held: u32,
        start: Instant,
        now: Instant,
    ) -> u32 {
        let queue = self.flow_leaves(queue, flow);
        self.tallies.get(tag).end(start, now);
        self.tallies.note(Phase::Executing, tag, -1, now);
        self.end_executing(queue, charged_seats(estimate, held), start, now);
        // Only the seats still held are given back, held for the flow or
        // kept for an additional latency: those released early went back
        // at their release (never held for the flow), and a request that
        // released them all has none left to hold.
        let seats = held;
        if estimate.additional_latency.is_zero() || seats == 0 {
            if let Some(flow) = flow.filter(|_| seats > 0 && self.anticipates(queue, seats)) {
                let hold = self.cfg.anticipation().unwrap_or_default();
                let until = now.saturating_add(hold);
                self.linger(until, queue, tag, seats, Some(flow));
                return 0;
            }
            self.tallies.get(tag).release(seats);
            self.release(queue, seats);
            return seats;
        }
        let until = now.saturating_add(estimate.additional_latency);
        self.linger(until, queue, tag, seats, None);
        0
    }

    /// Hold `seats` of `queue` until `until` (for an additional latency,
    /// or for `for_flow`'s next request).
    fn linger(&mut self, until: Instant, queue: u32, tag: u32, seats: u32, for_flow: Option<u64>) {
        self.linger_seq += 1;
        self.lingering_seats += u64::from(seats);
        self.holds += u32::from(for_flow.is_some());
        self.lingering.push(Reverse(Lingering {
            until,
            seq: self.linger_seq,
            queue,
            tag,
            seats,
            for_flow,
        }));
    }

    /// Seats held by `l` (already out of the heap) are free again.
    /// Returns them, to give back to the admission word.
    pub(crate) fn end_lingering(&mut self, l: &Lingering) -> u32 {
        self.lingering_seats -= u64::from(l.seats);
        self.holds -= u32::from(l.for_flow.is_some());
        self.tallies.get(l.tag).release(l.seats);
        self.release(l.queue, l.seats);
        l.seats
    }
}
