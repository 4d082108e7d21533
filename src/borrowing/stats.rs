//! Per-level seat demand statistics carried from one adjustment period to
//! the next: the period's high watermark, mean and deviation, and the
//! smoothed envelope that drives borrowing.

use crate::stats::IntegratorResults;

/// The smoothing coefficient A of KEP-1040: each period keeps this fraction
/// of the old smoothed demand (a half-life of about five minutes with the
/// default ten-second period).
pub const SMOOTHING_COEFFICIENT: f64 = 0.977;

/// One level's seat demand statistics. A new level starts with all zeros:
/// a higher start would fake pressure that decays only slowly, while real
/// pressure is tracked at once.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SeatDemandStats {
    /// Highest demand of the last period (rounded, as Kubernetes rounds).
    pub high_watermark: u32,
    /// Time-weighted mean demand of the last period of nonzero length.
    pub avg: f64,
    /// Time-weighted standard deviation over that period.
    pub std_dev: f64,
    /// Exponentially smoothed envelope (`avg + std_dev`), which rises at
    /// once to a higher envelope and decays toward a lower one.
    pub smoothed: f64,
}

impl SeatDemandStats {
    /// Fold in the observations of a period that just ended.
    ///
    /// As in Kubernetes, a period of zero length (two adjustments at one
    /// instant) updates only the high watermark, and a non-finite deviation
    /// counts as zero.
    pub fn update(&mut self, obs: &IntegratorResults) {
        self.high_watermark = obs.max;
        if obs.duration.is_zero() {
            return;
        }
        let avg = finite_or_zero(obs.average);
        let std_dev = finite_or_zero(obs.std_dev);
        self.avg = avg;
        self.std_dev = std_dev;
        let envelope = avg + std_dev;
        let decayed =
            SMOOTHING_COEFFICIENT * self.smoothed + (1.0 - SMOOTHING_COEFFICIENT) * envelope;
        self.smoothed = envelope.max(decayed);
    }

    /// `avg + std_dev` of the last period.
    pub fn envelope(&self) -> f64 {
        self.avg + self.std_dev
    }
}

fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn obs(avg: f64, std_dev: f64, max: u32) -> IntegratorResults {
        IntegratorResults {
            duration: Duration::from_secs(10),
            average: avg,
            std_dev,
            min: 0,
            max,
        }
    }

    #[test]
    fn smoothed_jumps_up_and_decays_down() {
        let mut s = SeatDemandStats::default();
        s.update(&obs(8.0, 2.0, 12));
        assert_eq!(s.smoothed, 10.0, "rises at once to the envelope");
        assert_eq!(s.high_watermark, 12);
        s.update(&obs(0.0, 0.0, 0));
        assert!((s.smoothed - 10.0 * 0.977).abs() < 1e-12);
        s.update(&obs(5.0, 0.0, 5));
        let expected = 0.977 * (10.0 * 0.977) + 0.023 * 5.0;
        assert!((s.smoothed - expected).abs() < 1e-12);
    }

    #[test]
    fn half_life_is_about_five_minutes_of_ten_second_periods() {
        let mut s = SeatDemandStats::default();
        s.update(&obs(100.0, 0.0, 100));
        for _ in 0..30 {
            s.update(&obs(0.0, 0.0, 0));
        }
        assert!((45.0..55.0).contains(&s.smoothed), "{}", s.smoothed);
    }

    #[test]
    fn zero_length_period_updates_only_the_watermark() {
        let mut s = SeatDemandStats::default();
        s.update(&obs(4.0, 1.0, 6));
        let before = s;
        s.update(&IntegratorResults {
            duration: Duration::ZERO,
            average: 100.0,
            std_dev: 0.0,
            min: 0,
            max: 100,
        });
        assert_eq!(s.high_watermark, 100);
        assert_eq!(
            (s.avg, s.std_dev, s.smoothed),
            (before.avg, before.std_dev, before.smoothed)
        );
    }

    #[test]
    fn non_finite_observations_never_poison_the_state() {
        let mut s = SeatDemandStats::default();
        s.update(&obs(f64::NAN, f64::NAN, 1));
        s.update(&obs(f64::INFINITY, -1.0, 1));
        assert_eq!((s.avg, s.std_dev, s.smoothed), (0.0, 0.0, 0.0));
    }
}
