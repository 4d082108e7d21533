//! Borrowing of concurrency between priority levels (KEP-1040,
//! "Dispatching").
//!
//! The server's concurrency limit is divided among all priority levels,
//! exempt ones included, in proportion to their shares (the NominalCLs);
//! every adjustment period each level's CurrentCL is recomputed from the
//! seat demand it showed, within the bounds its lendable and borrowing
//! percentages allow.
//!
//! Each level's seat demand is measured on the measuring floor below
//! ([`SeatDemandHandle`](crate::stats::SeatDemandHandle), fed by the
//! queueset); the pieces here, each usable alone, decide from it:
//! - [`SeatDemandStats`]: the per-level high watermark, mean, deviation and
//!   smoothed envelope (A = 0.977);
//! - [`level_limits`]: NominalCL, LendableCL, BorrowingCL, MinCL, MaxCL;
//! - [`allocate_current_cls`]: the pure function from limits and demand to
//!   CurrentCLs, built on [`fair_allocation`], the O(N log N) FairProp
//!   solver;
//! - [`BorrowingAdjuster`]: runs all of it every period on the crate's
//!   clock and hands the CurrentCLs to a callback.

mod adjuster;
mod allocate;
mod limits;
mod solver;
mod stats;

pub use adjuster::{
    AdjusterOptions, AdjustmentReport, BorrowingAdjuster, LevelAdjustment,
    DEFAULT_ADJUSTMENT_PERIOD, MIN_ADJUSTMENT_PERIOD,
};
pub use allocate::{allocate_current_cls, Allocation, LevelDemand, Regime};
pub use limits::{level_limits, validate_levels, BorrowingConfigError, LevelConfig, LevelLimits};
pub use solver::{
    fair_allocation, AllocItem, AllocRegime, FairAllocation, MAX_MAGNITUDE, MIN_TARGET,
};
pub use stats::{SeatDemandStats, SMOOTHING_COEFFICIENT};

#[cfg(all(test, not(loom)))]
pub(crate) mod test_support {
    use super::LevelConfig;

    /// Kubernetes' built-in priority levels with their shares and lendable
    /// percents (KEP-1040's tables).
    pub(crate) fn default_levels() -> Vec<LevelConfig> {
        let limited = |name: &str, shares, lendable| {
            LevelConfig::limited(name, shares).with_lendable_percent(lendable)
        };
        vec![
            LevelConfig::exempt("exempt").with_lendable_percent(50),
            limited("leader-election", 10, 0),
            limited("node-high", 40, 25),
            limited("system", 30, 33),
            limited("workload-high", 40, 50),
            limited("workload-low", 100, 90),
            limited("global-default", 20, 50),
            limited("catch-all", 5, 0),
        ]
    }
}
