//! Kubernetes' virtual-time gauges of a level that queues (`dispatch_r`,
//! `latest_s`, `next_s_bounds`, `next_discounted_s_bounds`), for metrics
//! only: no decision reads them.
//!
//! Kubernetes sets all four at every dispatch from a queue, scanning every
//! queue for the bounds. Here a dispatch (on the slow path, or a hot-path
//! start when its record is replayed: Kubernetes would have queued and
//! dispatched it at once) only notes R and the dispatched queue's S, two
//! stores; the bounds are computed when a scrape asks, under the level
//! lock, over the queues with waiting requests then. With nothing waiting
//! they are the last dispatched request's (docs/operators.md).

use super::Core;
use crate::queueset::vtime::VTime;

/// What the last dispatch from a queue saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DispatchNote {
    /// R at the dispatch.
    pub(crate) r: VTime,
    /// The dispatched request's S (its queue's next-dispatch R).
    pub(crate) s: VTime,
    /// S less the estimated work its queue had in progress.
    pub(crate) discounted_s: VTime,
}

/// The virtual-time gauges of a level, in [`VTime`] units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchGauges {
    /// R at the last dispatch (`dispatch_r`).
    pub dispatch_r: VTime,
    /// S of the last dispatched request (`latest_s`).
    pub latest_s: VTime,
    /// Min and max over the queues with waiting requests of their oldest
    /// request's S (`next_s_bounds`).
    pub next_s: (VTime, VTime),
    /// The same less each queue's estimated work in progress (seats in use
    /// × the service time guess) (`next_discounted_s_bounds`).
    pub next_discounted_s: (VTime, VTime),
}

impl Core {
    /// S of queue `q`'s oldest waiting request, less the work it has in
    /// progress, as Kubernetes estimates it.
    fn discounted(&self, q: usize, s: VTime) -> VTime {
        s - self.vclock.seat_g() * VTime::from(self.queues[q].seats_in_use)
    }

    /// A request of queue `q` is dispatched now, its S being the queue's
    /// next-dispatch R (call before charging the request's work).
    #[inline]
    pub(crate) fn note_dispatch(&mut self, q: usize) {
        let s = self.queues[q].next_dispatch_r;
        self.last_dispatch = Some(DispatchNote {
            r: self.r(),
            s,
            discounted_s: self.discounted(q, s),
        });
    }

    /// The gauges now, if anything was ever dispatched from a queue (as in
    /// Kubernetes, the series appear at the first dispatch).
    pub(crate) fn dispatch_gauges(&self) -> Option<DispatchGauges> {
        let last = self.last_dispatch?;
        let mut bounds: Option<((VTime, VTime), (VTime, VTime))> = None;
        for (q, queue) in self.queues.iter().enumerate() {
            if queue.waiting.is_empty() {
                continue;
            }
            let s = queue.next_dispatch_r;
            let d = self.discounted(q, s);
            let ((s_min, s_max), (d_min, d_max)) = bounds.unwrap_or(((s, s), (d, d)));
            bounds = Some(((s_min.min(s), s_max.max(s)), (d_min.min(d), d_max.max(d))));
        }
        let (next_s, next_discounted_s) =
            bounds.unwrap_or(((last.s, last.s), (last.discounted_s, last.discounted_s)));
        Some(DispatchGauges {
            dispatch_r: last.r,
            latest_s: last.s,
            next_s,
            next_discounted_s,
        })
    }
}
