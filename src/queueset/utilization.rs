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

/// Numerators below this are timed exactly, one counter per value.
const SMALL: usize = 64;

/// A histogram of a ratio weighted by the nanoseconds it held.
///
/// Observed for each of the level's counts at every replayed event (twice
/// per uncontended start+finish), so the observation is one addition: the
/// ratio is `numerator / denominator`, and while the denominator (the
/// level's limit) stays the same, a small numerator's nanoseconds go to a
/// counter of that very numerator; the buckets and the integral are worked
/// out from those counters only when the denominator changes or the
/// histogram is read (`RatioHistogram::settle`). Larger numerators find
/// their bucket among precomputed integer thresholds at once. Either way
/// every numerator lands in the bucket its `f64` ratio falls in (the
/// thresholds are found with that very comparison), and the integral is
/// kept exactly as the sum of numerator × nanoseconds, divided once per
/// denominator.
#[derive(Clone, Debug, PartialEq)]
pub struct RatioHistogram<const N: usize> {
    bounds: &'static [f64; N],
    per_bucket: [u64; N],
    overflow: u64,
    /// The integral of the ratio over the time observed at earlier
    /// denominators.
    settled_sum: f64,
    /// The denominator of the observations since it last changed (0 before
    /// the first one).
    denominator: f64,
    /// `thresholds[i]`: the smallest numerator whose ratio to `denominator`
    /// exceeds `bounds[i]` (`u64::MAX` if none does).
    thresholds: [u64; N],
    /// The sum of numerator × nanoseconds observed at `denominator` and
    /// settled.
    weighted: u128,
    /// `small[v]`: nanoseconds at numerator `v` not yet settled into the
    /// buckets and `weighted`.
    small: [u64; SMALL],
}

impl<const N: usize> RatioHistogram<N> {
    pub(crate) fn new(bounds: &'static [f64; N]) -> Self {
        RatioHistogram {
            bounds,
            per_bucket: [0; N],
            overflow: 0,
            settled_sum: 0.0,
            denominator: 0.0,
            thresholds: [u64::MAX; N],
            weighted: 0,
            small: [0; SMALL],
        }
    }

    /// The ratio was `numerator / denominator` for `nanos` nanoseconds,
    /// at the denominator of the last [`RatioHistogram::rebase`].
    #[inline(always)]
    pub(crate) fn observe(&mut self, numerator: u64, nanos: u64) {
        match self.small.get_mut(numerator as usize) {
            // Cannot wrap: 2^64 nanoseconds are 584 years.
            Some(t) if numerator < SMALL as u64 => *t = t.wrapping_add(nanos),
            _ => self.observe_in_bucket(numerator, nanos),
        }
    }

    fn observe_in_bucket(&mut self, numerator: u64, nanos: u64) {
        // The thresholds ascend with the bounds: the numerator's bucket is
        // the number of them it reaches.
        match self
            .per_bucket
            .get_mut(self.thresholds.partition_point(|&t| t <= numerator))
        {
            Some(bucket) => *bucket = bucket.saturating_add(nanos),
            None => self.overflow = self.overflow.saturating_add(nanos),
        }
        // Cannot wrap: 2^128 seat-nanoseconds are 10^13 years at 2^32
        // seats.
        self.weighted = self
            .weighted
            .wrapping_add(u128::from(numerator) * u128::from(nanos));
    }

    /// Move the small numerators' time into the buckets and the integral,
    /// at the current denominator. (The accessors count unsettled time too;
    /// settling only keeps a long-lived histogram's reads short.)
    pub(crate) fn settle(&mut self) {
        for v in 0..SMALL {
            let nanos = std::mem::take(&mut self.small[v]);
            if nanos != 0 {
                self.observe_in_bucket(v as u64, nanos);
            }
        }
    }

    /// Settle the integral at the old denominator and find the thresholds
    /// of the new one. The ratio `v as f64 / d` never decreases as `v`
    /// grows (the conversion and a correctly rounded division are both
    /// monotonic), so a binary search finds where it first exceeds each
    /// bound.
    #[cold]
    pub(crate) fn rebase(&mut self, denominator: f64) {
        self.settle();
        self.settled_sum = self.sum();
        self.weighted = 0;
        self.denominator = denominator;
        for (threshold, &bound) in self.thresholds.iter_mut().zip(self.bounds) {
            let exceeds = |v: u64| bound < v as f64 / denominator;
            *threshold = if exceeds(0) {
                0
            } else if !exceeds(u64::MAX) {
                u64::MAX
            } else {
                // exceeds(lo) is false, exceeds(hi) is true.
                let (mut lo, mut hi) = (0u64, u64::MAX);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if exceeds(mid) {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                hi
            };
        }
    }

    /// Add `v` (ratio × nanoseconds) to the integral alone: a change
    /// reported after later ones, whose time is known but whose buckets
    /// were already filled (`read_vs_write`'s levels replay at different
    /// times).
    pub(crate) fn add_to_sum(&mut self, v: f64) {
        self.settled_sum += v;
    }

    /// The bucket of numerator `v` at the current denominator (`N` is the
    /// overflow).
    fn bucket_of(&self, v: u64) -> usize {
        self.thresholds.partition_point(|&t| t <= v)
    }

    /// The inclusive upper bounds.
    pub fn bounds(&self) -> &[f64; N] {
        self.bounds
    }

    /// Nanoseconds per bucket (not cumulative).
    pub fn per_bucket(&self) -> [u64; N] {
        let mut per_bucket = self.per_bucket;
        for (v, &nanos) in self.small.iter().enumerate() {
            if let Some(b) = per_bucket.get_mut(self.bucket_of(v as u64)) {
                *b = b.saturating_add(nanos);
            }
        }
        per_bucket
    }

    /// Nanoseconds above the last bound (a level holding more than its
    /// limit: a wide request running alone, or a limit lowered by
    /// borrowing while requests executed).
    pub fn overflow(&self) -> u64 {
        self.small
            .iter()
            .enumerate()
            .filter(|&(v, _)| self.bucket_of(v as u64) == N)
            .fold(self.overflow, |a, (_, &nanos)| a.saturating_add(nanos))
    }

    /// All nanoseconds observed.
    pub fn count(&self) -> u64 {
        self.per_bucket
            .iter()
            .chain(&self.small)
            .fold(self.overflow, |a, &b| a.saturating_add(b))
    }

    /// The ratio's integral, in ratio × nanoseconds.
    pub fn sum(&self) -> f64 {
        let unsettled = self
            .small
            .iter()
            .enumerate()
            .fold(0u128, |a, (v, &nanos)| a + v as u128 * u128::from(nanos));
        let weighted = self.weighted + unsettled;
        if weighted == 0 {
            return self.settled_sum;
        }
        self.settled_sum + weighted as f64 / self.denominator
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
    /// The concurrency limit, queue length limit and queues the histograms'
    /// denominators were computed from (none before the first observation).
    denominators: Option<(u32, u32, u32)>,
}

impl Default for Utilization {
    fn default() -> Self {
        Utilization {
            seats: RatioHistogram::new(&SEAT_UTILIZATION_BUCKETS),
            executing: RatioHistogram::new(&REQUEST_UTILIZATION_BUCKETS),
            waiting: RatioHistogram::new(&REQUEST_UTILIZATION_BUCKETS),
            denominators: None,
        }
    }
}

impl Utilization {
    /// The level held `o` for `nanos` nanoseconds. Denominators of 0 count
    /// as 1 (a level that lent all its seats, one that does not queue), as
    /// Kubernetes' `max(1, ...)` does for the queue capacity.
    #[inline]
    pub(crate) fn observe(&mut self, o: Occupancy, nanos: u64) {
        if nanos == 0 {
            return;
        }
        // The denominators change only with the level's configuration
        // (borrowing, a new limit): compared as integers here, and the
        // histograms rebased on a change.
        let denominators = Some((o.concurrency_limit, o.queue_length_limit, o.queues));
        if denominators != self.denominators {
            self.rebase(o);
        }
        self.seats.observe(o.seats_in_use, nanos);
        self.executing.observe(o.requests_executing.into(), nanos);
        self.waiting.observe(o.requests_waiting.into(), nanos);
    }

    #[cold]
    fn rebase(&mut self, o: Occupancy) {
        self.denominators = Some((o.concurrency_limit, o.queue_length_limit, o.queues));
        let limit = f64::from(o.concurrency_limit.max(1));
        let capacity = f64::from(o.queue_length_limit.max(1)) * f64::from(o.queues.max(1));
        self.seats.rebase(limit);
        self.executing.rebase(limit);
        self.waiting.rebase(capacity);
    }

    /// Fold the per-value counters into the buckets and sums, so the
    /// histograms can be read.
    pub(crate) fn settle(&mut self) {
        self.seats.settle();
        self.executing.settle();
        self.waiting.settle();
    }
}

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
        u.settle();
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
        u.settle();
        assert_eq!(u.seats.per_bucket()[12], 7);
        assert_eq!(u.waiting.per_bucket()[9], 7);
    }

    /// The ratio's bucket and integral as plain `f64` arithmetic gives
    /// them (the histogram's first form, one division per observation).
    fn plain_observe(
        bounds: &[f64],
        per_bucket: &mut [u64],
        sum: &mut f64,
        numerator: u64,
        denominator: f64,
        nanos: u64,
    ) {
        let ratio = numerator as f64 / denominator;
        let i = bounds.partition_point(|&b| b < ratio);
        per_bucket[i] += nanos;
        *sum += ratio * nanos as f64;
    }

    fn observe_at<const N: usize>(
        h: &mut RatioHistogram<N>,
        numerator: u64,
        denominator: f64,
        nanos: u64,
    ) {
        if denominator.to_bits() != h.denominator.to_bits() {
            h.rebase(denominator);
        }
        h.observe(numerator, nanos);
    }

    proptest::proptest! {
        /// The integer thresholds put every numerator in the bucket its
        /// `f64` ratio falls in, across changes of the denominator, and the
        /// integral agrees to rounding.
        #[test]
        fn integer_buckets_match_the_f64_ratio(
            steps in proptest::collection::vec(
                (0u64..3000, proptest::sample::select(vec![1u32, 3, 7, 10, 100, 999, 1000, 4096]), 1u64..1_000_000),
                1..200,
            )
        ) {
            let mut h = RatioHistogram::new(&SEAT_UTILIZATION_BUCKETS);
            let mut plain = [0u64; 14];
            let mut plain_sum = 0.0;
            for &(numerator, denominator, nanos) in &steps {
                let d = f64::from(denominator);
                observe_at(&mut h, numerator, d, nanos);
                plain_observe(&SEAT_UTILIZATION_BUCKETS, &mut plain, &mut plain_sum, numerator, d, nanos);
            }
            h.settle();
            proptest::prop_assert_eq!(&h.per_bucket()[..], &plain[..13]);
            proptest::prop_assert_eq!(h.overflow(), plain[13]);
            let tolerance = 1e-9 * plain_sum.abs().max(1.0);
            proptest::prop_assert!((h.sum() - plain_sum).abs() <= tolerance, "{} vs {}", h.sum(), plain_sum);
        }
    }

    #[test]
    fn a_ratio_on_a_bound_stays_in_its_bucket() {
        // A ratio equal to a bound in f64 belongs to that bound's bucket
        // (`le`); the thresholds must not move it to the next one.
        for (numerator, denominator) in [
            (99u64, 100.0),
            (1, 10.0),
            (3, 10.0),
            (7, 10.0),
            (10, 10.0),
            (11, 10.0),
        ] {
            let mut h = RatioHistogram::new(&SEAT_UTILIZATION_BUCKETS);
            let mut plain = [0u64; 14];
            let mut sum = 0.0;
            observe_at(&mut h, numerator, denominator, 1);
            h.settle();
            plain_observe(
                &SEAT_UTILIZATION_BUCKETS,
                &mut plain,
                &mut sum,
                numerator,
                denominator,
                1,
            );
            assert_eq!(
                &h.per_bucket()[..],
                &plain[..13],
                "{numerator}/{denominator}"
            );
            assert_eq!(h.overflow(), plain[13], "{numerator}/{denominator}");
        }
    }
}
