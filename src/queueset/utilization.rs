//! What the level's core reports to its utilization histograms
//! ([`Utilization`], on the measuring floor in `crate::stats`): its
//! occupancy at each change, and a scrape's copy brought up to date.

use super::core::Core;
use crate::clock::{duration_nanos, Instant};
use crate::stats::{Occupancy, Utilization};

impl Core {
    /// What the level holds now, and its limits.
    #[inline]
    pub(super) fn occupancy(&self) -> Occupancy {
        Occupancy {
            seats_in_use: self.seats.in_use,
            requests_executing: self.requests_executing(),
            requests_waiting: self.requests_waiting(),
            concurrency_limit: self.cfg.concurrency_limit,
            queues: self.cfg.queues,
            queue_length_limit: self.cfg.queue_length_limit,
        }
    }

    /// The utilization up to `now`: what was observed, plus the time since
    /// the last change at the current occupancy.
    pub(crate) fn utilization_at(&self, now: Instant) -> Utilization {
        let mut u = self.utilization.clone();
        u.observe(
            self.occupancy(),
            duration_nanos(now.saturating_since(self.last_sync())),
        );
        u.settle();
        u
    }
}
