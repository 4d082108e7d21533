//! Kubernetes' time-weighted ratio histograms of a level
//! (`apiserver_flowcontrol_priority_level_seat_utilization` and
//! `..._priority_level_request_utilization`): the ratio of what the level
//! holds to what it may hold, observed at the end of every nanosecond, so a
//! bucket's count is the nanoseconds the ratio spent in it and the sum is
//! the ratio's integral over time.
//!
//! The level's core adds the time since its last change at every change
//! (in `Core::sync`, under the level lock, while the event ring is replayed
//! or on the slow path), never on the lock-free hot path; a scrape adds the
//! time since the last change to a copy.

use super::core::Core;
use crate::clock::{duration_nanos, Instant};

/// Kubernetes' bounds of `priority_level_seat_utilization` (both 0.99 and
/// 1 so that `histogram_quantile` shows saturation).
pub const SEAT_UTILIZATION_BUCKETS: [f64; 13] = [
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
];

/// Kubernetes' bounds of `priority_level_request_utilization`.
pub const REQUEST_UTILIZATION_BUCKETS: [f64; 10] =
    [0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1.0];

/// A histogram of a ratio weighted by the nanoseconds it held.
#[derive(Clone, Debug, PartialEq)]
pub struct RatioHistogram<const N: usize> {
    bounds: &'static [f64; N],
    per_bucket: [u64; N],
    overflow: u64,
    sum: f64,
}

impl<const N: usize> RatioHistogram<N> {
    pub(crate) fn new(bounds: &'static [f64; N]) -> Self {
        RatioHistogram {
            bounds,
            per_bucket: [0; N],
            overflow: 0,
            sum: 0.0,
        }
    }

    /// The ratio was `ratio` for `nanos` nanoseconds. A binary search: a
    /// busy level's ratios sit near 1, at the end of the bounds, and this
    /// runs at every change of the level (measured in docs/operators.md).
    pub(crate) fn observe(&mut self, ratio: f64, nanos: u64) {
        match self
            .per_bucket
            .get_mut(self.bounds.partition_point(|&b| b < ratio))
        {
            Some(bucket) => *bucket = bucket.saturating_add(nanos),
            None => self.overflow = self.overflow.saturating_add(nanos),
        }
        self.sum += ratio * nanos as f64;
    }

    /// A whole count `n` held for `nanos` nanoseconds, for bounds that end
    /// at 1 with every other bound below 1 (`read_vs_write`'s): 0 is the
    /// first bucket, 1 the last, more is above them, so no search.
    pub(crate) fn observe_count(&mut self, n: u32, nanos: u64) {
        debug_assert!(
            self.bounds[0] == 0.0 && self.bounds[N - 1] == 1.0 && self.bounds[N - 2] < 1.0
        );
        let bucket = match n {
            0 => &mut self.per_bucket[0],
            1 => &mut self.per_bucket[N - 1],
            _ => &mut self.overflow,
        };
        *bucket = bucket.saturating_add(nanos);
        self.sum += f64::from(n) * nanos as f64;
    }

    /// Add `v` to the integral alone (a change reported after later ones:
    /// its time is known, but the buckets of that time are already filled).
    pub(crate) fn add_to_sum(&mut self, v: f64) {
        self.sum += v;
    }

    /// The inclusive upper bounds.
    pub fn bounds(&self) -> &[f64; N] {
        self.bounds
    }

    /// Nanoseconds per bucket (not cumulative).
    pub fn per_bucket(&self) -> &[u64; N] {
        &self.per_bucket
    }

    /// Nanoseconds above the last bound (a level holding more than its
    /// limit: a wide request running alone, or a limit lowered by
    /// borrowing while requests executed).
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// All nanoseconds observed.
    pub fn count(&self) -> u64 {
        self.per_bucket
            .iter()
            .fold(self.overflow, |a, &b| a.saturating_add(b))
    }

    /// The ratio's integral, in ratio × nanoseconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// What a level holds at one moment, and its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Occupancy {
    pub(crate) seats_in_use: u64,
    pub(crate) requests_executing: u32,
    pub(crate) requests_waiting: u32,
    pub(crate) concurrency_limit: u32,
    pub(crate) queues: u32,
    pub(crate) queue_length_limit: u32,
}

/// The time-weighted utilization of one level.
#[derive(Clone, Debug, PartialEq)]
pub struct Utilization {
    /// Seats in use / the level's current limit (`phase="executing"`).
    pub seats: RatioHistogram<13>,
    /// Requests executing / the level's current limit.
    pub executing: RatioHistogram<10>,
    /// Requests waiting / (queue length limit × queues).
    pub waiting: RatioHistogram<10>,
}

impl Default for Utilization {
    fn default() -> Self {
        Utilization {
            seats: RatioHistogram::new(&SEAT_UTILIZATION_BUCKETS),
            executing: RatioHistogram::new(&REQUEST_UTILIZATION_BUCKETS),
            waiting: RatioHistogram::new(&REQUEST_UTILIZATION_BUCKETS),
        }
    }
}

impl Utilization {
    /// The level held `o` for `nanos` nanoseconds. Denominators of 0 count
    /// as 1 (a level that lent all its seats, one that does not queue), as
    /// Kubernetes' `max(1, ...)` does for the queue capacity.
    pub(crate) fn observe(&mut self, o: Occupancy, nanos: u64) {
        if nanos == 0 {
            return;
        }
        let limit = f64::from(o.concurrency_limit.max(1));
        self.seats.observe(o.seats_in_use as f64 / limit, nanos);
        self.executing
            .observe(f64::from(o.requests_executing) / limit, nanos);
        let capacity = f64::from(o.queue_length_limit.max(1)) * f64::from(o.queues.max(1));
        self.waiting
            .observe(f64::from(o.requests_waiting) / capacity, nanos);
    }
}

impl Core {
    /// What the level holds now, and its limits.
    pub(super) fn occupancy(&self) -> Occupancy {
        Occupancy {
            seats_in_use: self.seats_in_use,
            requests_executing: self.requests_executing,
            requests_waiting: self.requests_waiting,
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
        u
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn occupancy(seats: u64, executing: u32, waiting: u32) -> Occupancy {
        Occupancy {
            seats_in_use: seats,
            requests_executing: executing,
            requests_waiting: waiting,
            concurrency_limit: 10,
            queues: 4,
            queue_length_limit: 50,
        }
    }

    #[test]
    fn time_at_each_ratio_lands_in_its_bucket() {
        let mut u = Utilization::default();
        u.observe(occupancy(0, 0, 0), 100);
        u.observe(occupancy(10, 5, 20), 300);
        u.observe(occupancy(12, 1, 0), 50);
        u.observe(occupancy(12, 1, 0), 0);
        assert_eq!(u.seats.count(), 450);
        assert_eq!(u.seats.per_bucket()[0], 100, "idle");
        assert_eq!(u.seats.per_bucket()[12], 300, "exactly full is le=1");
        assert_eq!(u.seats.overflow(), 50, "above the limit");
        assert_eq!(u.seats.sum(), 300.0 + 1.2 * 50.0);
        // 5 of 10 executing: 0.5; 1 of 10: 0.1.
        assert_eq!(u.executing.per_bucket()[7], 300);
        assert_eq!(u.executing.per_bucket()[5], 50);
        // 20 waiting of 200 places: 0.1.
        assert_eq!(u.waiting.per_bucket()[5], 300);
        assert_eq!(u.waiting.per_bucket()[0], 150);
    }

    #[test]
    fn zero_limits_count_as_one() {
        let mut u = Utilization::default();
        let o = Occupancy {
            concurrency_limit: 0,
            queues: 0,
            queue_length_limit: 0,
            ..occupancy(1, 1, 1)
        };
        u.observe(o, 7);
        assert_eq!(u.seats.per_bucket()[12], 7);
        assert_eq!(u.waiting.per_bucket()[9], 7);
    }
}
