//! The configured concurrency limits of each priority level: NominalCL,
//! LendableCL, BorrowingCL, and the bounds MinCL and MaxCL they give.

use std::error::Error;
use std::fmt;

/// What borrowing needs to know of one priority level's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelConfig {
    /// Identifies the level across reconfigurations: a level keeps its
    /// demand statistics when a new configuration has one of the same name.
    pub name: String,
    /// Exempt levels never queue; their seats still count in borrowing.
    pub exempt: bool,
    /// NominalConcurrencyShares (NCS).
    pub nominal_shares: u32,
    /// lendablePercent, 0 to 100.
    pub lendable_percent: u32,
    /// borrowingLimitPercent; `None` (Kubernetes' nil) means no limit.
    /// Ignored for exempt levels, whose borrowing is implicitly unlimited.
    pub borrowing_limit_percent: Option<u32>,
}

impl LevelConfig {
    /// A limited level with Kubernetes' defaults for the optional fields:
    /// nothing lendable, borrowing unlimited.
    pub fn limited(name: impl Into<String>, nominal_shares: u32) -> Self {
        LevelConfig {
            name: name.into(),
            exempt: false,
            nominal_shares,
            lendable_percent: 0,
            borrowing_limit_percent: None,
        }
    }

    /// An exempt level with Kubernetes' defaults (no shares, nothing
    /// lendable).
    pub fn exempt(name: impl Into<String>) -> Self {
        LevelConfig {
            exempt: true,
            ..LevelConfig::limited(name, 0)
        }
    }

    /// The same level with `lendablePercent` set (0..=100; checked by
    /// [`validate_levels`]).
    pub fn with_lendable_percent(mut self, percent: u32) -> Self {
        self.lendable_percent = percent;
        self
    }

    /// The same level with `borrowingLimitPercent` set (`None`: unlimited).
    pub fn with_borrowing_limit_percent(mut self, percent: Option<u32>) -> Self {
        self.borrowing_limit_percent = percent;
        self
    }

    /// The same level with its nominal concurrency shares set.
    pub fn with_nominal_shares(mut self, shares: u32) -> Self {
        self.nominal_shares = shares;
        self
    }
}

/// A configuration borrowing cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BorrowingConfigError {
    /// `lendablePercent` above 100.
    LendablePercentOutOfRange {
        /// The level's name.
        level: String,
        /// The percent given.
        value: u32,
    },
    /// Two levels of one configuration share a name.
    DuplicateName {
        /// The name they share.
        level: String,
    },
    /// An adjustment period shorter than
    /// [`MIN_ADJUSTMENT_PERIOD`](super::MIN_ADJUSTMENT_PERIOD): zero would
    /// adjust forever at one instant, a few nanoseconds would spend the
    /// timer thread on adjustments.
    AdjustmentPeriodTooShort {
        /// The period given.
        period: std::time::Duration,
    },
}

impl fmt::Display for BorrowingConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BorrowingConfigError::LendablePercentOutOfRange { level, value } => write!(
                f,
                "priority level {level:?}: lendablePercent must be between 0 and 100, inclusive, not {value}"
            ),
            BorrowingConfigError::DuplicateName { level } => {
                write!(f, "priority level {level:?} appears more than once")
            }
            BorrowingConfigError::AdjustmentPeriodTooShort { period } => write!(
                f,
                "borrowing_period (the borrowing adjustment period) must be at least {:?}, not {period:?}",
                super::MIN_ADJUSTMENT_PERIOD
            ),
        }
    }
}

impl Error for BorrowingConfigError {}

/// Check every level of a configuration.
pub fn validate_levels(levels: &[LevelConfig]) -> Result<(), BorrowingConfigError> {
    let mut names: Vec<&str> = Vec::with_capacity(levels.len());
    for level in levels {
        if level.lendable_percent > 100 {
            return Err(BorrowingConfigError::LendablePercentOutOfRange {
                level: level.name.clone(),
                value: level.lendable_percent,
            });
        }
        names.push(&level.name);
    }
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(BorrowingConfigError::DuplicateName {
            level: pair[0].to_owned(),
        });
    }
    Ok(())
}

/// One level's configured limits, in seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LevelLimits {
    /// Whether the level is exempt (its CurrentCL follows its demand).
    pub exempt: bool,
    /// NominalCL = ceil(ServerCL · NCS / Σ NCS) over all levels.
    pub nominal_cl: u32,
    /// LendableCL = round(NominalCL · lendablePercent / 100).
    pub lendable_cl: u32,
    /// BorrowingCL = round(NominalCL · borrowingLimitPercent / 100), or
    /// ServerCL when unlimited (and always for exempt levels).
    pub borrowing_cl: u32,
}

impl LevelLimits {
    /// MinCL = NominalCL − LendableCL: what this level keeps however much
    /// others want.
    pub fn min_cl(&self) -> u32 {
        self.nominal_cl.saturating_sub(self.lendable_cl)
    }

    /// MaxCL = NominalCL + BorrowingCL.
    pub fn max_cl(&self) -> u32 {
        self.nominal_cl.saturating_add(self.borrowing_cl)
    }
}

/// The limits of every level of a configuration, in order.
///
/// Exact integer arithmetic; it agrees with Kubernetes' floating-point
/// formulas for every input they compute exactly (all realistic ones). A
/// `lendable_percent` above 100 counts as 100 (validate first to report
/// it); shares that sum to zero give every level a NominalCL of zero.
pub fn level_limits(server_cl: u32, levels: &[LevelConfig]) -> Vec<LevelLimits> {
    let share_sum: u64 = levels.iter().map(|l| u64::from(l.nominal_shares)).sum();
    levels
        .iter()
        .map(|level| {
            let nominal_cl = nominal_cl(server_cl, level.nominal_shares, share_sum);
            let borrowing_cl = match level.borrowing_limit_percent {
                Some(percent) if !level.exempt => percent_of(nominal_cl, percent),
                _ => server_cl,
            };
            LevelLimits {
                exempt: level.exempt,
                nominal_cl,
                lendable_cl: percent_of(nominal_cl, level.lendable_percent.min(100)),
                borrowing_cl,
            }
        })
        .collect()
}

fn nominal_cl(server_cl: u32, shares: u32, share_sum: u64) -> u32 {
    if share_sum == 0 {
        return 0;
    }
    let numerator = u128::from(server_cl) * u128::from(shares);
    saturate(numerator.div_ceil(u128::from(share_sum)))
}

/// round(value · percent / 100), halves away from zero like Go's
/// `math.Round`.
fn percent_of(value: u32, percent: u32) -> u32 {
    saturate((u128::from(value) * u128::from(percent) + 50) / 100)
}

fn saturate(x: u128) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_support::default_levels;
    use super::*;

    #[test]
    fn default_levels_at_600_seats() {
        let limits = level_limits(600, &default_levels());
        let nominal: Vec<u32> = limits.iter().map(|l| l.nominal_cl).collect();
        // ceil(600 · NCS / 245)
        assert_eq!(nominal, vec![0, 25, 98, 74, 98, 245, 49, 13]);
        let min: Vec<u32> = limits.iter().map(|l| l.min_cl()).collect();
        assert_eq!(min, vec![0, 25, 73, 50, 49, 24, 24, 13]);
        let max: Vec<u32> = limits.iter().map(|l| l.max_cl()).collect();
        assert_eq!(max, vec![600, 625, 698, 674, 698, 845, 649, 613]);
    }

    #[test]
    fn borrowing_limit_and_rounding() {
        let levels = vec![
            LevelConfig::limited("a", 100)
                .with_lendable_percent(50)
                .with_borrowing_limit_percent(Some(67)),
            LevelConfig::limited("b", 100)
                .with_lendable_percent(33)
                .with_borrowing_limit_percent(Some(50)),
            LevelConfig::limited("catch-all", 5),
            LevelConfig::exempt("exempt").with_borrowing_limit_percent(Some(0)),
        ];
        let limits = level_limits(24, &levels);
        assert_eq!(limits[0].nominal_cl, 12);
        assert_eq!((limits[0].min_cl(), limits[0].max_cl()), (6, 20));
        assert_eq!((limits[1].min_cl(), limits[1].max_cl()), (8, 18));
        assert_eq!((limits[2].min_cl(), limits[2].max_cl()), (1, 25));
        assert_eq!(limits[3].borrowing_cl, 24, "exempt borrowing is unlimited");
    }

    #[test]
    fn half_rounds_away_from_zero() {
        assert_eq!(percent_of(10, 25), 3);
        assert_eq!(percent_of(10, 24), 2);
        assert_eq!(percent_of(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn zero_shares_everywhere_give_zero_limits() {
        let limits = level_limits(100, &[LevelConfig::exempt("e")]);
        assert_eq!(limits[0].nominal_cl, 0);
        assert_eq!(limits[0].max_cl(), 100);
    }

    #[test]
    fn validation_names_the_level() {
        let bad = vec![LevelConfig::limited("x", 1).with_lendable_percent(101)];
        assert_eq!(
            validate_levels(&bad),
            Err(BorrowingConfigError::LendablePercentOutOfRange {
                level: "x".into(),
                value: 101
            })
        );
        let dup = vec![LevelConfig::limited("x", 1), LevelConfig::limited("x", 2)];
        let err = validate_levels(&dup).unwrap_err();
        assert_eq!(
            err,
            BorrowingConfigError::DuplicateName { level: "x".into() }
        );
        assert!(err.to_string().contains("\"x\""));
        assert_eq!(validate_levels(&default_levels()), Ok(()));
    }
}
