//! From every level's limits and demand statistics to its CurrentCL: the
//! adjustment KEP-1040's "Dispatching" section prescribes, with Kubernetes'
//! refinements of the over-constrained case.
//!
//! 1. Each level gets a lower bound, MinCurrentCL: its last period's high
//!    watermark clipped to `[MinCL, NominalCL]` for a limited level and
//!    only from below for an exempt one, so exempt levels get all they
//!    used. An exempt level's CurrentCL is its MinCurrentCL.
//! 2. What the exempt levels take leaves RemainingCL of the sum of the
//!    NominalCLs for the limited levels. Then, as Kubernetes does it:
//!    - RemainingCL ≤ Σ MinCL: every limited level gets its MinCL (the
//!      seats it never lends; the exempt levels simply overrun the sum);
//!    - RemainingCL ≤ Σ MinCurrentCL: every limited level gets MinCL plus
//!      one common fraction of its MinCurrentCL − MinCL;
//!    - otherwise the FairProp problem with lower bound MinCurrentCL,
//!      upper bound MaxCL and target max(MinCurrentCL, smoothed demand),
//!      required to sum to RemainingCL.
//! 3. Each CurrentCL is rounded to the nearest integer, halves away from
//!    zero.
//!
//! The KEP scales the lower bounds down in the over-constrained case, which
//! could take a level below its MinCL; Kubernetes (since 1.31) never does,
//! and its exempt-borrowing test requires that, so this follows Kubernetes.
//! Kubernetes requires the FairProp sum to be the whole sum of the NominalCLs
//! even when exempt levels took part of it, which makes the CurrentCLs add
//! up to more than the server's limit; this follows the KEP and requires
//! RemainingCL, so the CurrentCLs of all levels sum to Σ NominalCL up to
//! rounding whenever the bounds allow.

use super::limits::LevelLimits;
use super::solver::{fair_allocation, AllocItem, AllocRegime};

/// One level's input to an adjustment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelDemand {
    /// The level's configured limits.
    pub limits: LevelLimits,
    /// Highest seat demand of the period just ended.
    pub high_watermark: u32,
    /// Smoothed seat demand envelope. Non-finite or negative counts as zero.
    pub smoothed: f64,
}

impl LevelDemand {
    /// MinCurrentCL: the lower bound of this level's new CurrentCL.
    pub fn min_current_cl(&self) -> u32 {
        let (min_cl, nominal_cl) = bounds_below(&self.limits);
        if self.limits.exempt {
            min_cl.max(self.high_watermark)
        } else {
            min_cl.max(nominal_cl.min(self.high_watermark))
        }
    }

    /// Target: what this level would be fairly happy with.
    pub fn target(&self) -> f64 {
        let smoothed = if self.smoothed.is_finite() && self.smoothed > 0.0 {
            self.smoothed
        } else {
            0.0
        };
        f64::from(self.min_current_cl()).max(smoothed)
    }
}

/// MinCL and NominalCL, with MinCL never above NominalCL even for limits
/// built by hand.
fn bounds_below(limits: &LevelLimits) -> (u32, u32) {
    (limits.min_cl().min(limits.nominal_cl), limits.nominal_cl)
}

/// How the limited levels' CurrentCLs were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// The exempt levels left no more than Σ MinCL: every limited level is
    /// at its MinCL.
    Exhausted,
    /// The exempt levels left no more than Σ MinCurrentCL: every limited
    /// level got MinCL plus a common fraction of the rest of its
    /// MinCurrentCL.
    Squeezed,
    /// The FairProp problem decided, in the given regime.
    Fair(AllocRegime),
}

/// The outcome of one adjustment.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// CurrentCL of every level, in the order of the input.
    pub current_cls: Vec<u32>,
    /// The FairProp found; zero unless `regime` is `Fair`.
    pub fair_prop: f64,
    /// How the CurrentCLs were found.
    pub regime: Regime,
}

/// Compute every level's CurrentCL (see the module documentation). Total:
/// never fails, never panics, and every limited level's CurrentCL lies in
/// `[MinCL, MaxCL]`.
pub fn allocate_current_cls(levels: &[LevelDemand]) -> Allocation {
    let nominal_sum: i64 = levels.iter().map(|l| i64::from(l.limits.nominal_cl)).sum();
    let mut current_cls = vec![0u32; levels.len()];
    let mut remaining = nominal_sum;
    let mut limited = Vec::with_capacity(levels.len());
    let (mut min_cl_sum, mut min_current_sum) = (0i64, 0i64);
    for (i, level) in levels.iter().enumerate() {
        let min_current = level.min_current_cl();
        if level.limits.exempt {
            current_cls[i] = min_current;
            remaining -= i64::from(min_current);
        } else {
            min_cl_sum += i64::from(bounds_below(&level.limits).0);
            min_current_sum += i64::from(min_current);
            limited.push(i);
        }
    }

    if remaining <= min_cl_sum {
        for &i in &limited {
            current_cls[i] = bounds_below(&levels[i].limits).0;
        }
        return Allocation {
            current_cls,
            fair_prop: 0.0,
            regime: Regime::Exhausted,
        };
    }
    if remaining <= min_current_sum {
        // remaining > min_cl_sum, so the denominator is positive.
        let share = (remaining - min_cl_sum) as f64 / (min_current_sum - min_cl_sum) as f64;
        for &i in &limited {
            let min_cl = bounds_below(&levels[i].limits).0;
            let spare = f64::from(levels[i].min_current_cl() - min_cl);
            current_cls[i] = min_cl + round_seats(spare * share);
        }
        return Allocation {
            current_cls,
            fair_prop: 0.0,
            regime: Regime::Squeezed,
        };
    }

    let items: Vec<AllocItem> = limited
        .iter()
        .map(|&i| {
            let level = &levels[i];
            let lower = level.min_current_cl();
            AllocItem {
                target: level.target(),
                lower: f64::from(lower),
                upper: f64::from(level.limits.max_cl().max(lower)),
            }
        })
        .collect();
    let fair = fair_allocation(remaining as f64, &items);
    for (&i, alloc) in limited.iter().zip(&fair.allocs) {
        current_cls[i] = round_seats(*alloc);
    }
    Allocation {
        current_cls,
        fair_prop: fair.fair_prop,
        regime: Regime::Fair(fair.regime),
    }
}

/// Nearest whole seat count, halves away from zero; saturating, NaN → 0.
fn round_seats(x: f64) -> u32 {
    x.round() as u32
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::limits::{level_limits, LevelConfig};
    use super::super::test_support::default_levels;
    use super::*;
    use proptest::prelude::*;

    fn demands(limits: &[LevelLimits], hw_and_smoothed: &[(u32, f64)]) -> Vec<LevelDemand> {
        limits
            .iter()
            .zip(hw_and_smoothed)
            .map(|(&limits, &(high_watermark, smoothed))| LevelDemand {
                limits,
                high_watermark,
                smoothed,
            })
            .collect()
    }

    /// Kubernetes' TestBorrowing (borrowing_test.go) at the allocation
    /// level: two levels of 100 shares each plus the mandatory catch-all and
    /// exempt levels at ServerCL 24, level 0 with 24 seats of constant
    /// demand and level 1 with 6. Kubernetes expects level 0 to deliver
    /// about 16 and level 1 about 6.
    #[test]
    fn kubernetes_borrowing_test_lendable_limited() {
        let levels = vec![
            LevelConfig::limited("pl0", 100)
                .with_lendable_percent(50)
                .with_borrowing_limit_percent(Some(67)),
            LevelConfig::limited("pl1", 100)
                .with_lendable_percent(33)
                .with_borrowing_limit_percent(Some(50)),
            LevelConfig::limited("catch-all", 5),
            LevelConfig::exempt("exempt"),
        ];
        let limits = level_limits(24, &levels);
        let a = allocate_current_cls(&demands(
            &limits,
            &[(24, 24.0), (6, 6.0), (0, 0.0), (0, 0.0)],
        ));
        // FairProp 2/3: pl0 at 16, pl1 and catch-all held at their
        // MinCurrentCLs (8 and 1).
        assert_eq!(a.current_cls, vec![16, 8, 1, 0]);
        assert_eq!(a.regime, Regime::Fair(AllocRegime::Fair));
        assert!((a.fair_prop - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn kubernetes_borrowing_test_borrowing_limited() {
        let levels = vec![
            LevelConfig::limited("pl0", 100)
                .with_lendable_percent(50)
                .with_borrowing_limit_percent(Some(33)),
            LevelConfig::limited("pl1", 100)
                .with_lendable_percent(67)
                .with_borrowing_limit_percent(Some(50)),
            LevelConfig::limited("catch-all", 5),
            LevelConfig::exempt("exempt"),
        ];
        let limits = level_limits(24, &levels);
        let a = allocate_current_cls(&demands(
            &limits,
            &[(24, 24.0), (6, 6.0), (0, 0.0), (0, 0.0)],
        ));
        // pl0 stops at its MaxCL 16; the two seats left go to pl1 and
        // catch-all in proportion 6:1 (7.71 and 1.29 before rounding).
        assert_eq!(a.current_cls, vec![16, 8, 1, 0]);
        assert!((a.fair_prop - 9.0 / 7.0).abs() < 1e-12);
    }

    /// The three scenarios of Kubernetes' TestUpdateBorrowing
    /// (exempt_borrowing_test.go): workload-high, exempt, workload-low and
    /// catch-all at ServerCL (40 + 100 + 5) · 6 = 870.
    fn exempt_test_limits() -> Vec<LevelLimits> {
        let levels = vec![
            LevelConfig::limited("workload-high", 40).with_lendable_percent(50),
            LevelConfig::exempt("exempt").with_lendable_percent(50),
            LevelConfig::limited("workload-low", 100).with_lendable_percent(90),
            LevelConfig::limited("catch-all", 5),
        ];
        let limits = level_limits(870, &levels);
        let nominal: Vec<u32> = limits.iter().map(|l| l.nominal_cl).collect();
        assert_eq!(nominal, vec![240, 0, 600, 30], "no rounding up");
        limits
    }

    #[test]
    fn exempt_borrowing_beyond_the_server_limit_leaves_min_cls() {
        let limits = exempt_test_limits();
        let big = (970, 970.0);
        let a = allocate_current_cls(&demands(&limits, &[big, big, big, big]));
        assert_eq!(a.regime, Regime::Exhausted);
        assert_eq!(a.current_cls, vec![120, 970, 60, 30]);
    }

    #[test]
    fn exempt_borrowing_squeezes_halfway_between_min_cl_and_nominal() {
        let limits = exempt_test_limits();
        let big = (970, 970.0);
        let exempt = 870 - (180 + 330 + 30);
        let a = allocate_current_cls(&demands(&limits, &[big, (exempt, 330.0), big, big]));
        assert_eq!(a.regime, Regime::Squeezed);
        assert_eq!(a.current_cls, vec![180, 330, 330, 30]);
    }

    #[test]
    fn exempt_borrows_all_that_workload_low_lends() {
        let limits = exempt_test_limits();
        let big = (970, 970.0);
        let exempt = 870 - (240 + 60 + 30);
        let a = allocate_current_cls(&demands(&limits, &[big, (exempt, 540.0), (1, 1.0), big]));
        assert_eq!(a.current_cls, vec![240, 540, 60, 30]);
        assert_eq!(a.current_cls.iter().sum::<u32>(), 870);
    }

    /// Exempt demand takes its seats out of what the limited levels share,
    /// so the sum stays at the server limit (where Kubernetes would hand
    /// the limited levels the whole 870 on top of the exempt 100).
    #[test]
    fn exempt_demand_comes_out_of_the_fair_share() {
        let limits = exempt_test_limits();
        let a = allocate_current_cls(&demands(
            &limits,
            &[(100, 300.0), (100, 100.0), (10, 10.0), (30, 30.0)],
        ));
        assert_eq!(a.regime, Regime::Fair(AllocRegime::Fair));
        // 770 seats remain for targets 300, 60 and 30: FairProp 770/390
        // leaves every limited level strictly inside its bounds.
        assert!((a.fair_prop - 770.0 / 390.0).abs() < 1e-12);
        assert_eq!(a.current_cls, vec![592, 100, 118, 59]);
        let total: u32 = a.current_cls.iter().sum();
        assert!(total.abs_diff(870) <= 2, "{a:?}");
    }

    /// With no limited level the seats exempt levels leave go unused.
    #[test]
    fn only_exempt_levels() {
        let limits = level_limits(
            1412,
            &[LevelConfig::exempt("e")
                .with_nominal_shares(1)
                .with_lendable_percent(1)],
        );
        let a = allocate_current_cls(&demands(&limits, &[(0, 0.0)]));
        assert_eq!(a.current_cls, vec![1398]);
        assert_eq!(a.regime, Regime::Fair(AllocRegime::AtUpperBounds));
        assert_eq!(allocate_current_cls(&[]).current_cls, Vec::<u32>::new());
    }

    #[test]
    fn idle_defaults_scale_every_min_cl_by_one_proportion() {
        let limits = level_limits(600, &default_levels());
        let idle = vec![(0, 0.0); limits.len()];
        let a = allocate_current_cls(&demands(&limits, &idle));
        assert_eq!(a.current_cls[0], 0, "idle exempt takes nothing");
        let total: u32 = a.current_cls.iter().sum();
        assert!((total as i64 - 602).abs() <= 4, "{a:?}");
        for (l, c) in limits.iter().zip(&a.current_cls).skip(1) {
            assert!(l.min_cl() <= *c && *c <= l.max_cl());
        }
    }

    #[test]
    fn full_demand_everywhere_gives_nominal_cls() {
        let limits = level_limits(600, &default_levels());
        let full: Vec<(u32, f64)> = limits
            .iter()
            .map(|l| (l.nominal_cl, f64::from(l.nominal_cl)))
            .collect();
        let a = allocate_current_cls(&demands(&limits, &full));
        let nominal: Vec<u32> = limits.iter().map(|l| l.nominal_cl).collect();
        assert_eq!(a.current_cls, nominal);
    }

    #[test]
    fn a_busy_level_borrows_from_idle_lenders() {
        let limits = level_limits(600, &default_levels());
        let mut d: Vec<(u32, f64)> = limits.iter().map(|l| (l.min_cl(), 0.0)).collect();
        d[6] = (1000, 1000.0); // global-default wants everything
        let a = allocate_current_cls(&demands(&limits, &d));
        let lent: u32 = limits.iter().map(|l| l.lendable_cl).sum::<u32>() - limits[0].lendable_cl;
        // The exempt level (idle, 0 shares) lends nothing; global-default gets
        // its own nominal plus every other level's lendable seats.
        assert_eq!(
            a.current_cls[6],
            limits[6].nominal_cl + lent - limits[6].lendable_cl
        );
        for (i, (l, c)) in limits.iter().zip(&a.current_cls).enumerate().skip(1) {
            if i != 6 {
                assert_eq!(*c, l.min_cl(), "level {i}");
            }
        }
    }

    fn arb_level() -> impl Strategy<Value = (LevelConfig, u32, f64)> {
        (
            any::<bool>(),
            0u32..200,
            0u32..=100,
            prop::option::of(0u32..300),
            0u32..1500,
            prop_oneof![
                4 => 0.0f64..1500.0,
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
                1 => Just(-5.0),
            ],
        )
            .prop_map(|(exempt, shares, lendable, borrowing, hw, smoothed)| {
                let config = LevelConfig {
                    name: String::new(),
                    exempt,
                    nominal_shares: shares,
                    lendable_percent: lendable,
                    borrowing_limit_percent: borrowing,
                };
                (config, hw, smoothed)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn current_cls_respect_bounds_and_sum(
            server_cl in 0u32..5000,
            levels in prop::collection::vec(arb_level(), 0..10),
        ) {
            let configs: Vec<LevelConfig> = levels.iter().map(|l| l.0.clone()).collect();
            let limits = level_limits(server_cl, &configs);
            let input: Vec<LevelDemand> = limits
                .iter()
                .zip(&levels)
                .map(|(&limits, l)| LevelDemand { limits, high_watermark: l.1, smoothed: l.2 })
                .collect();
            let a = allocate_current_cls(&input);
            prop_assert_eq!(a.current_cls.len(), input.len());
            prop_assert!(a.fair_prop.is_finite());

            let nominal_sum: i64 = limits.iter().map(|l| i64::from(l.nominal_cl)).sum();
            let mut remaining = nominal_sum;
            let mut limited_sum = 0i64;
            let mut max_sum = 0i64;
            let mut count = 0i64;
            for (d, &c) in input.iter().zip(&a.current_cls) {
                if d.limits.exempt {
                    prop_assert_eq!(c, d.min_current_cl());
                    remaining -= i64::from(c);
                } else {
                    // Never below MinCL, never above MaxCL, whatever the demand.
                    prop_assert!(d.limits.min_cl() <= c && c <= d.limits.max_cl(), "{:?} {}", d, c);
                    limited_sum += i64::from(c);
                    max_sum += i64::from(d.limits.max_cl());
                    count += 1;
                }
            }
            let slack = count / 2 + 1;
            match a.regime {
                Regime::Exhausted => {}
                Regime::Squeezed => prop_assert!((limited_sum - remaining).abs() <= slack),
                Regime::Fair(AllocRegime::AtUpperBounds) => {
                    prop_assert_eq!(limited_sum, max_sum);
                    prop_assert!(max_sum <= remaining);
                }
                Regime::Fair(_) => {
                    // Everything sums to Σ NominalCL up to rounding.
                    prop_assert!((limited_sum - remaining).abs() <= slack, "{:?}", a);
                }
            }
        }
    }
}
