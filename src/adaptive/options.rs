//! The adaptive limit's tuning, and why each default is what it is
//! (measurements: `docs/adaptive-limit.md`).

use std::fmt;
use std::time::Duration;

/// The shortest update interval accepted: each update replays every
/// limited level's event ring and takes its lock once.
pub const MIN_UPDATE_INTERVAL: Duration = Duration::from_millis(10);

/// The adaptive server concurrency limit's settings. Integer percents (as
/// Envoy's `Percent` fields) keep the options comparable and hashable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdaptiveOptions {
    /// The least total the gradient may set (a probe may go below it).
    pub min_limit: u32,
    /// The greatest total the gradient may set.
    pub max_limit: u32,
    /// How often a window of latencies is taken and the limit updated.
    /// 250 ms: with 20% smoothing and gradients clamped to [0.5, 2] the
    /// limit moves by at most 10% (down) or 20% (up) per window, so it
    /// halves in about seven windows (under two seconds).
    pub update_interval: Duration,
    /// The latency, over the minimum, the limit settles at, in percent: 10
    /// settles at 1.1 × the minimum latency. Envoy's default buffer is 25;
    /// on a backend that loses throughput to contention past its capacity
    /// (the simulator's `overload: 0.5`), 25 costs 7% of the goodput and 10
    /// about 3% (docs/adaptive-limit.md).
    pub tolerance_percent: u32,
    /// How much of each window's target the limit takes, in percent (20, as
    /// Netflix's Gradient2): lower is steadier and slower.
    pub smoothing_percent: u32,
    /// The exponent on the latency ratio (1 ..= 8): how hard the gradient
    /// answers a latency away from the target. 3: an uncongested backend
    /// lets the limit grow by ~20% a window (a slow start from `min_limit`
    /// to 600 seats in about six seconds), and 1.5× the target latency cuts
    /// it by 10%.
    pub gain: u32,
    /// Windows with fewer completions than this change nothing: their mean
    /// is noise.
    pub min_window_samples: u32,
    /// Time between minimum-latency probes (Envoy has no default): a probe
    /// holds the total at a few seats for about a second in the simulator's
    /// scenarios, under 2% of a minute.
    pub probe_interval: Duration,
    /// The total a probe asks for: "few requests outstanding" (Envoy's
    /// default `min_concurrency`, 3). Borrowing still gives every limited
    /// level with shares at least one seat.
    pub probe_limit: u32,
    /// Completions a probe averages (Envoy's default `request_count`, 50).
    pub probe_samples: u32,
    /// The longest a probe drains or measures before it ends with what it
    /// has.
    pub probe_timeout: Duration,
}

impl Default for AdaptiveOptions {
    fn default() -> Self {
        AdaptiveOptions {
            min_limit: 8,
            max_limit: 10_000,
            update_interval: Duration::from_millis(250),
            tolerance_percent: 10,
            smoothing_percent: 20,
            gain: 3,
            min_window_samples: 16,
            probe_interval: Duration::from_secs(60),
            probe_limit: 3,
            probe_samples: 50,
            probe_timeout: Duration::from_secs(2),
        }
    }
}

/// Why adaptive options were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveConfigError {
    /// The option's name, as in [`AdaptiveOptions`].
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for AdaptiveConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "adaptive limit: {}: {}", self.field, self.message)
    }
}

impl std::error::Error for AdaptiveConfigError {}

impl AdaptiveOptions {
    /// Every option in range, or the first that is not.
    pub fn validate(&self) -> Result<(), AdaptiveConfigError> {
        let err = |field, message: String| Err(AdaptiveConfigError { field, message });
        let max = crate::queueset::MAX_CONCURRENCY_LIMIT;
        if self.min_limit == 0 {
            return err("min_limit", "must be at least 1".into());
        }
        if self.max_limit < self.min_limit || self.max_limit > max {
            return err(
                "max_limit",
                format!(
                    "must be between min_limit ({}) and {max}, not {}",
                    self.min_limit, self.max_limit
                ),
            );
        }
        if self.update_interval < MIN_UPDATE_INTERVAL {
            return err(
                "update_interval",
                format!("must be at least {MIN_UPDATE_INTERVAL:?}"),
            );
        }
        if self.tolerance_percent == 0 || self.tolerance_percent > 1000 {
            return err("tolerance_percent", "must be 1 to 1000".into());
        }
        if self.smoothing_percent == 0 || self.smoothing_percent > 100 {
            return err("smoothing_percent", "must be 1 to 100".into());
        }
        if self.gain == 0 || self.gain > 8 {
            return err("gain", "must be 1 to 8".into());
        }
        if self.probe_limit == 0 || self.probe_limit > self.max_limit {
            return err(
                "probe_limit",
                format!("must be between 1 and max_limit ({})", self.max_limit),
            );
        }
        if self.probe_samples == 0 {
            return err("probe_samples", "must be at least 1".into());
        }
        if self.probe_interval < self.update_interval {
            return err("probe_interval", "must be at least update_interval".into());
        }
        if self.probe_timeout < self.update_interval {
            return err("probe_timeout", "must be at least update_interval".into());
        }
        Ok(())
    }
}
