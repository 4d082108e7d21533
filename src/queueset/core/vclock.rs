//! The level's virtual time R and the arithmetic that charges requests in
//! it.
//!
//! # Invariants
//! 1. R never decreases: it is advanced only by [`VirtualClock::advance`],
//!    by a non-negative increment, when real time passes
//!    ([`VirtualClock::tick`]), at the rate the core computes from the
//!    level's demand (Kubernetes' equal division, or the max-min water
//!    level).
//! 2. `last_sync` never decreases: a time earlier than one already seen
//!    counts as no time passing.
//! 3. `seat_g` is one seat × the configured service-time guess G as
//!    virtual work, kept with the configuration so charging multiplies
//!    instead of converting G at every request.

use crate::clock::{duration_nanos, Instant};
use crate::queueset::vtime::{seats_times, seats_times_nanos, VTime};
use crate::work_estimate::WorkEstimate;
use std::time::Duration;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct VirtualClock {
    r: VTime,
    last_sync: Instant,
    seat_g: VTime,
}

impl VirtualClock {
    pub(crate) fn new(service_time_guess: Duration, now: Instant) -> VirtualClock {
        VirtualClock {
            r: 0,
            last_sync: now,
            seat_g: seats_times(1, service_time_guess),
        }
    }

    /// R now (as of the last sync).
    #[inline]
    pub(crate) fn r(&self) -> VTime {
        self.r
    }

    /// The instant of the last sync.
    #[inline]
    pub(crate) fn last_sync(&self) -> Instant {
        self.last_sync
    }

    /// One seat × G as virtual work.
    #[inline]
    pub(crate) fn seat_g(&self) -> VTime {
        self.seat_g
    }

    /// A new service-time guess (a reconfiguration).
    pub(crate) fn set_guess(&mut self, service_time_guess: Duration) {
        self.seat_g = seats_times(1, service_time_guess);
    }

    /// Real time moves to `now`: returns the nanoseconds that passed since
    /// the last sync, or None if none did (invariant 2). The caller then
    /// advances R for them.
    #[inline]
    pub(crate) fn tick(&mut self, now: Instant) -> Option<u64> {
        if now <= self.last_sync {
            return None;
        }
        let dt = duration_nanos(now.saturating_since(self.last_sync));
        self.last_sync = now;
        Some(dt)
    }

    /// R advances by `increment` (invariant 1).
    #[inline]
    pub(crate) fn advance(&mut self, increment: VTime) {
        debug_assert!(increment >= 0, "R never decreases");
        self.r += increment;
    }

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
}
