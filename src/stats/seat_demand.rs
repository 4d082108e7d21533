//! Time-weighted statistics of one priority level's seat demand.
//!
//! The queueset reports the level's seat demand (occupied seats plus the
//! seats of queued requests) on every change; the borrowing adjuster reads
//! and restarts the statistics once per adjustment period. Updates are O(1)
//! and never allocate: the integrals are kept as exact integers (seat·ns and
//! seat²·ns), so nothing drifts however many updates a period sees, and the
//! variance is derived only when a period is read.

use super::utilization::RatioHistogram;
use crate::clock::{duration_nanos, Instant};
use crate::sync::{lock, Arc, Mutex};
use std::fmt;
use std::time::Duration;

/// What one integration period observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntegratorResults {
    /// Length of the period.
    pub duration: Duration,
    /// Time-weighted mean of the demand. When `duration` is zero this is the
    /// value at the period's end (the limit of the mean over a shrinking
    /// period), never NaN.
    pub average: f64,
    /// Time-weighted population standard deviation; zero when `duration` is
    /// zero.
    pub std_dev: f64,
    /// Lowest value seen in the period, including its value at the start.
    pub min: u32,
    /// Highest value seen in the period, including its value at the start.
    pub max: u32,
}

/// Integrates a step function of time (seat demand) for one level.
///
/// Not synchronised: embed it under a lock you already hold, or share it
/// through a [`SeatDemandHandle`].
#[derive(Debug, Clone)]
pub struct SeatDemandIntegrator {
    value: u32,
    /// Time up to which the integrals below are complete.
    last: Instant,
    elapsed_nanos: u64,
    /// ∫ x dt in seat·ns.
    sum_x: u128,
    /// ∫ x² dt in seat²·ns.
    sum_xx: u128,
    min: u32,
    max: u32,
    /// The demand over the level's NominalCL, observed at the end of every
    /// nanosecond (Kubernetes' `demand_seats`), since creation: periods do
    /// not restart it.
    ratio: RatioHistogram<12>,
    /// NominalCL, the ratio's denominator (0 counts as 1).
    nominal: u32,
}

/// Kubernetes' bounds of `apiserver_flowcontrol_demand_seats`.
pub const DEMAND_SEATS_BUCKETS: [f64; 12] =
    [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.8, 4.0, 6.0];

impl SeatDemandIntegrator {
    /// An integrator whose value is zero from `now` on.
    pub fn new(now: Instant) -> Self {
        let mut ratio = RatioHistogram::new(&DEMAND_SEATS_BUCKETS);
        ratio.rebase(1.0);
        SeatDemandIntegrator {
            value: 0,
            last: now,
            elapsed_nanos: 0,
            sum_x: 0,
            sum_xx: 0,
            min: 0,
            max: 0,
            ratio,
            nominal: 1,
        }
    }

    /// The level's NominalCL is `nominal` from `now` on (the ratio's
    /// denominator; 0 counts as 1, as the utilization ratios do).
    pub fn set_nominal(&mut self, nominal: u32, now: Instant) {
        self.advance(now);
        let nominal = nominal.max(1);
        if nominal != self.nominal {
            self.nominal = nominal;
            self.ratio.rebase(f64::from(nominal));
        }
    }

    /// Demand over NominalCL, time-weighted, from creation up to `now`
    /// (without advancing the integrator).
    pub fn demand_ratio_at(&self, now: Instant) -> RatioHistogram<12> {
        let mut ratio = self.ratio.clone();
        let dt = duration_nanos(now.saturating_since(self.last));
        if now > self.last {
            ratio.observe(u64::from(self.value), dt);
        }
        ratio
    }

    /// The current value.
    pub fn value(&self) -> u32 {
        self.value
    }

    /// The demand is `value` from `now` on.
    ///
    /// A `now` earlier than the latest time already seen (two threads that
    /// read the clock before racing for a lock) counts as that latest time:
    /// time never runs backward inside an integrator.
    #[inline]
    pub fn set(&mut self, value: u32, now: Instant) {
        self.advance(now);
        self.value = value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// The demand changes by `delta` from `now` on, saturating at zero and
    /// at `u32::MAX`.
    #[inline]
    pub fn add(&mut self, delta: i64, now: Instant) {
        let next = (i64::from(self.value)).saturating_add(delta);
        self.set(next.clamp(0, i64::from(u32::MAX)) as u32, now);
    }

    /// The statistics of the period so far, up to `now`.
    pub fn results(&mut self, now: Instant) -> IntegratorResults {
        self.advance(now);
        let (average, std_dev) = self.mean_and_deviation();
        IntegratorResults {
            duration: Duration::from_nanos(self.elapsed_nanos),
            average,
            std_dev,
            min: self.min,
            max: self.max,
        }
    }

    /// The statistics of the period up to `now`, and a new period starting
    /// at `now` whose minimum and maximum start at the current value.
    pub fn reset(&mut self, now: Instant) -> IntegratorResults {
        let results = self.results(now);
        self.elapsed_nanos = 0;
        self.sum_x = 0;
        self.sum_xx = 0;
        self.min = self.value;
        self.max = self.value;
        results
    }

    #[inline]
    fn advance(&mut self, now: Instant) {
        if now <= self.last {
            return;
        }
        let dt = duration_nanos(now.saturating_since(self.last));
        self.last = now;
        self.ratio.observe(u64::from(self.value), dt);
        let x = u128::from(self.value);
        let dt = u128::from(dt);
        self.elapsed_nanos = self.elapsed_nanos.saturating_add(dt as u64);
        self.sum_x = self.sum_x.saturating_add(x * dt);
        // x² < 2^64 and dt < 2^64, so the product fits in u128.
        self.sum_xx = self.sum_xx.saturating_add(x * x * dt);
    }

    fn mean_and_deviation(&self) -> (f64, f64) {
        if self.elapsed_nanos == 0 {
            return (f64::from(self.value), 0.0);
        }
        let t = self.elapsed_nanos as f64;
        let mean = self.sum_x as f64 / t;
        // variance · t² = t·∫x² − (∫x)², exactly, while it fits in u128
        // (always for realistic demands over a period); otherwise in f64,
        // where rounding can push a zero variance slightly negative, which
        // must not become a NaN (Kubernetes issue 120032 began with a NaN
        // standard deviation).
        let elapsed = u128::from(self.elapsed_nanos);
        let variance = match (
            self.sum_xx.checked_mul(elapsed),
            self.sum_x.checked_mul(self.sum_x),
        ) {
            (Some(a), Some(b)) => a.saturating_sub(b) as f64 / t / t,
            _ => (self.sum_xx as f64 / t - mean * mean).max(0.0),
        };
        (mean, variance.sqrt())
    }
}

/// A shared [`SeatDemandIntegrator`]: the queueset feeds it, the borrowing
/// adjuster reads and restarts it. Cloning shares the integrator.
///
/// Each call takes a short uncontended lock (the adjuster takes it once per
/// period); nothing allocates after creation.
#[derive(Clone)]
pub struct SeatDemandHandle {
    inner: Arc<Mutex<SeatDemandIntegrator>>,
}

impl SeatDemandHandle {
    /// A handle to a new integrator whose value is zero from `now` on.
    pub fn new(now: Instant) -> Self {
        SeatDemandHandle {
            inner: Arc::new(Mutex::new(SeatDemandIntegrator::new(now))),
        }
    }

    /// See [`SeatDemandIntegrator::set`].
    #[inline]
    pub fn set(&self, value: u32, now: Instant) {
        lock(&self.inner).set(value, now);
    }

    /// See [`SeatDemandIntegrator::add`]. Prefer this over `set` when
    /// several threads change the demand without a common lock: deltas
    /// commute, absolute values read before the lock do not.
    #[inline]
    pub fn add(&self, delta: i64, now: Instant) {
        lock(&self.inner).add(delta, now);
    }

    /// The current value.
    pub fn value(&self) -> u32 {
        lock(&self.inner).value()
    }

    /// Run `f` on the integrator under one lock (for a batch of updates).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut SeatDemandIntegrator) -> R) -> R {
        f(&mut lock(&self.inner))
    }

    /// See [`SeatDemandIntegrator::results`].
    pub fn results(&self, now: Instant) -> IntegratorResults {
        lock(&self.inner).results(now)
    }

    /// See [`SeatDemandIntegrator::reset`].
    pub fn reset(&self, now: Instant) -> IntegratorResults {
        lock(&self.inner).reset(now)
    }

    /// Whether both handles share one integrator.
    pub fn same_as(&self, other: &SeatDemandHandle) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for SeatDemandHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SeatDemandHandle")
            .field(&*lock(&self.inner))
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    /// The sequence Kubernetes' integrator test walks through.
    #[test]
    fn kubernetes_integrator_sequence() {
        let mut igr = SeatDemandIntegrator::new(at_ms(0));
        igr.add(3, at_ms(0));
        let r = igr.results(at_ms(1000));
        assert_eq!(r.duration, Duration::from_secs(1));
        assert_eq!((r.average, r.std_dev, r.min, r.max), (3.0, 0.0, 0, 3));
        let again = igr.reset(at_ms(1000));
        assert_eq!(r, again);

        igr.set(2, at_ms(1000));
        let r = igr.results(at_ms(1000));
        assert_eq!(r.duration, Duration::ZERO);
        assert_eq!((r.min, r.max), (2, 3));
        assert_eq!((r.average, r.std_dev), (2.0, 0.0), "no NaN at zero length");

        igr.add(-1, at_ms(1001));
        let r = igr.results(at_ms(1002));
        assert_eq!(r.duration, Duration::from_millis(2));
        assert!(close(r.average, 1.5), "{r:?}");
        assert!(close(r.std_dev, 0.5), "{r:?}");
        assert_eq!((r.min, r.max), (1, 3));
    }

    #[test]
    fn reset_starts_min_and_max_at_the_current_value() {
        let mut igr = SeatDemandIntegrator::new(at_ms(0));
        igr.set(10, at_ms(1));
        igr.set(4, at_ms(2));
        let r = igr.reset(at_ms(3));
        assert_eq!((r.min, r.max), (0, 10));
        let r = igr.results(at_ms(4));
        assert_eq!((r.min, r.max), (4, 4));
        assert_eq!((r.average, r.std_dev), (4.0, 0.0));
    }

    #[test]
    fn a_stale_time_does_not_move_time_backward() {
        let mut igr = SeatDemandIntegrator::new(at_ms(0));
        igr.set(5, at_ms(10));
        igr.set(7, at_ms(4));
        let r = igr.results(at_ms(20));
        assert_eq!(r.duration, Duration::from_millis(20));
        // 0 for 10 ms, then 7 (the stale set applies from 10 ms) for 10 ms.
        assert!(close(r.average, 3.5), "{r:?}");
    }

    #[test]
    fn add_saturates_at_zero() {
        let mut igr = SeatDemandIntegrator::new(at_ms(0));
        igr.add(-5, at_ms(1));
        assert_eq!(igr.value(), 0);
        igr.add(i64::MAX, at_ms(2));
        assert_eq!(igr.value(), u32::MAX);
    }

    #[test]
    fn huge_values_over_long_periods_stay_finite() {
        let mut igr = SeatDemandIntegrator::new(Instant::ZERO);
        igr.set(u32::MAX, Instant::ZERO);
        let r = igr.results(Instant::from_nanos(u64::MAX / 2));
        assert!(r.average.is_finite() && r.std_dev.is_finite(), "{r:?}");
        assert!(close(r.average, f64::from(u32::MAX)));
    }

    #[test]
    fn shared_handle_feeds_one_integrator() {
        let h = SeatDemandHandle::new(at_ms(0));
        let h2 = h.clone();
        assert!(h.same_as(&h2));
        h.add(2, at_ms(0));
        h2.add(2, at_ms(500));
        assert_eq!(h.value(), 4);
        let r = h.reset(at_ms(1000));
        assert!(close(r.average, 3.0), "{r:?}");
        assert!(close(r.std_dev, 1.0), "{r:?}");
        assert!(!h.same_as(&SeatDemandHandle::new(at_ms(0))));
    }

    proptest! {
        /// Against a direct f64 evaluation of the time-weighted moments.
        #[test]
        fn matches_direct_moments(steps in prop::collection::vec((0u32..1000, 1u64..1_000_000), 1..50)) {
            let mut igr = SeatDemandIntegrator::new(Instant::ZERO);
            let mut t = 0u64;
            let mut segments = Vec::new();
            for &(v, dt) in &steps {
                igr.set(v, Instant::from_nanos(t));
                segments.push((f64::from(v), dt as f64));
                t += dt;
            }
            let r = igr.results(Instant::from_nanos(t));
            let total: f64 = segments.iter().map(|s| s.1).sum();
            let mean = segments.iter().map(|s| s.0 * s.1).sum::<f64>() / total;
            let var = segments.iter().map(|s| (s.0 - mean).powi(2) * s.1).sum::<f64>() / total;
            prop_assert!((r.average - mean).abs() <= 1e-9 * mean.max(1.0));
            prop_assert!((r.std_dev - var.sqrt()).abs() <= 1e-6 * mean.max(1.0));
            prop_assert_eq!(r.max, steps.iter().map(|s| s.0).max().unwrap());
            prop_assert_eq!(r.min, 0);
        }
    }
}
