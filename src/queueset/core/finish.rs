//! A request's end: the seats it still holds are given back at once,
//! linger for its additional latency, or are held for its flow's next
//! request (the flow policy's anticipation). Seats it released early went
//! back at their release (`release`), so they are never held here.

use super::{Core, Lingering};
use crate::clock::Instant;
use crate::queueset::held::Held;
use crate::stats::Phase;

impl Core {
    /// A held request (admitted from a queue, or without one) finishes at
    /// `now`, still holding `held.seats()` of its seats (fewer than its
    /// estimate's if it released some early, see `release_early`). Returns
    /// the seats to give back now (0 when they linger).
    pub(crate) fn finish(&mut self, held: &Held, now: Instant) -> u32 {
        let (tag, estimate, flow) = (held.tag, held.estimate(), held.flow());
        let queue = self.flow_leaves(held.queue, flow);
        self.tallies.get(tag).end(held.start, now);
        self.tallies.note(Phase::Executing, tag, -1, now);
        self.end_executing(queue, held.charged_seats(), held.start, now);
        if let Some(flow) = flow {
            self.order_end(flow, held.charged_seats(), held.start, now);
        }
        // Only the seats still held are given back, held for the flow or
        // kept for an additional latency: those released early went back
        // at their release (never held for the flow), and a request that
        // released them all has none left to hold.
        let seats = held.seats();
        if estimate.additional_latency.is_zero() || seats == 0 {
            if let Some(flow) = flow.filter(|&f| seats > 0 && self.anticipates(f, seats)) {
                let hold = self.cfg.anticipation().unwrap_or_default();
                let until = now.saturating_add(hold);
                self.linger(until, queue, tag, seats, Some(flow), Some(flow));
                return 0;
            }
            self.tallies.get(tag).release(seats);
            self.release(queue, seats);
            if let Some(flow) = flow {
                self.order_release_seats(flow, seats);
                self.order_forget_if_idle(flow);
            }
            return seats;
        }
        let until = now.saturating_add(estimate.additional_latency);
        self.linger(until, queue, tag, seats, flow, None);
        0
    }

    /// Hold `seats` of `queue` (of `flow`'s request, when a flow policy
    /// admitted it) until `until` (for an additional latency, or for
    /// `for_flow`'s next request).
    fn linger(
        &mut self,
        until: Instant,
        queue: u32,
        tag: u32,
        seats: u32,
        flow: Option<u64>,
        for_flow: Option<u64>,
    ) {
        self.lingering
            .push(until, queue, tag, seats, flow, for_flow);
    }

    /// Seats held by `l` (already out of the lingering set) are free
    /// again. Returns them, to give back to the admission word. The flow's
    /// state, if idle now, is left to the caller to forget (a claimed hold
    /// is followed by its flow's next request).
    pub(crate) fn end_lingering(&mut self, l: &Lingering) -> u32 {
        self.tallies.get(l.tag).release(l.seats);
        self.release(l.queue, l.seats);
        if let Some(flow) = l.flow {
            self.order_release_seats(flow, l.seats);
        }
        l.seats
    }
}
