//! The FairProp problem of KEP-1040: share a required sum among classes in
//! proportion to their targets, as far as each class's bounds allow.
//!
//! Find `p` (FairProp) with `Σ clamp(p·target(i), lower(i), upper(i)) =
//! required`. The left side is a nondecreasing piecewise-linear function of
//! `p` whose breakpoints are the relative bounds `lower/target` and
//! `upper/target`; sorting them and walking the segments finds `p` in
//! O(N log N). The result is unique in the allocations (not always in `p`).
//!
//! The function is total: every input, NaN and infinities included, gives
//! finite allocations, and no sequence of rounding errors can make the walk
//! "run out of bounds" (Kubernetes issue 120032): running past the last
//! breakpoint simply means every class is at its upper bound.

use std::cmp::Ordering;

/// A target below this counts as this, so that relative bounds stay finite.
pub const MIN_TARGET: f64 = 0.001;

/// Inputs are clamped into `[0, MAX_MAGNITUDE]`: far beyond any concurrency
/// limit, yet small enough that sums and products of them stay finite.
pub const MAX_MAGNITUDE: f64 = 1e15;

/// One class of the allocation problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocItem {
    /// What the class would get if every class got its target scaled by
    /// the same factor. Raised to `lower` (and to [`MIN_TARGET`]) if below.
    pub target: f64,
    /// Least the class may get. Negative or NaN counts as zero.
    pub lower: f64,
    /// Most the class may get. Below `lower` counts as `lower`.
    pub upper: f64,
}

/// Which constraint decided the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocRegime {
    /// The lower bounds sum to more than required: each class got its lower
    /// bound scaled down in one proportion (KEP-1040), so the allocations
    /// still sum to the requirement but undercut the bounds.
    OverConstrained,
    /// The lower bounds sum to the requirement: each class got its lower
    /// bound.
    AtLowerBounds,
    /// Some `p` satisfies every bound and the sum.
    Fair,
    /// The upper bounds sum to the requirement or less: each class got its
    /// upper bound, and the sum falls short if it had to.
    AtUpperBounds,
}

/// The allocations, in the order of the items, with the FairProp found.
#[derive(Debug, Clone, PartialEq)]
pub struct FairAllocation {
    /// The allocation of each item, in input order.
    pub allocs: Vec<f64>,
    /// The shared proportion: zero when over-constrained, otherwise a `p`
    /// with `alloc(i) = clamp(p·target(i), lower(i), upper(i))`.
    pub fair_prop: f64,
    /// Which bounds decided the allocation.
    pub regime: AllocRegime,
}

/// A class after sanitising, with its breakpoints.
#[derive(Debug, Clone, Copy)]
struct Class {
    target: f64,
    lower: f64,
    upper: f64,
    rel_lower: f64,
    rel_upper: f64,
}

impl Class {
    fn new(item: &AllocItem) -> Class {
        let lower = sanitize(item.lower);
        let upper = sanitize(item.upper).max(lower);
        let target = sanitize(item.target).max(lower).max(MIN_TARGET);
        Class {
            target,
            lower,
            upper,
            rel_lower: lower / target,
            rel_upper: upper / target,
        }
    }

    /// The allocation at proportion `p`, taking a bound exactly whenever
    /// `p` is at or past its breakpoint so bounds are met bit for bit.
    fn alloc_at(&self, p: f64) -> f64 {
        if p <= self.rel_lower {
            self.lower
        } else if p >= self.rel_upper {
            self.upper
        } else {
            (p * self.target).clamp(self.lower, self.upper)
        }
    }
}

fn sanitize(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, MAX_MAGNITUDE)
    }
}

/// Allocate `required` among `items` (see the module documentation).
pub fn fair_allocation(required: f64, items: &[AllocItem]) -> FairAllocation {
    let classes: Vec<Class> = items.iter().map(Class::new).collect();
    let required = sanitize(required);
    let low_sum: f64 = classes.iter().map(|c| c.lower).sum();
    let high_sum: f64 = classes.iter().map(|c| c.upper).sum();
    // Sums of values up to MAX_MAGNITUDE carry rounding errors far above
    // any fixed epsilon; compare relative to the requirement.
    let slack = 1e-12 * required.max(1.0);

    if low_sum > required + slack {
        let scale = required / low_sum;
        return FairAllocation {
            allocs: classes.iter().map(|c| c.lower * scale).collect(),
            fair_prop: 0.0,
            regime: AllocRegime::OverConstrained,
        };
    }
    if low_sum >= required - slack {
        return at_breakpoint_extreme(&classes, AllocRegime::AtLowerBounds);
    }
    if high_sum <= required + slack {
        return at_breakpoint_extreme(&classes, AllocRegime::AtUpperBounds);
    }

    let target_sum: f64 = classes.iter().map(|c| c.target).sum();
    let unbounded = required / target_sum;
    let highest_lower = fold(&classes, f64::NEG_INFINITY, |c| c.rel_lower, f64::max);
    let lowest_upper = fold(&classes, f64::INFINITY, |c| c.rel_upper, f64::min);
    let p = if highest_lower <= unbounded && unbounded <= lowest_upper {
        unbounded
    } else {
        solve_by_breakpoints(required, low_sum, &classes)
    };
    FairAllocation {
        allocs: classes.iter().map(|c| c.alloc_at(p)).collect(),
        fair_prop: p,
        regime: AllocRegime::Fair,
    }
}

fn fold(
    classes: &[Class],
    init: f64,
    key: impl Fn(&Class) -> f64,
    pick: impl Fn(f64, f64) -> f64,
) -> f64 {
    classes.iter().map(key).fold(init, pick)
}

/// Every class at its lower (or upper) bound, with the least (greatest)
/// proportion that puts them all there.
fn at_breakpoint_extreme(classes: &[Class], regime: AllocRegime) -> FairAllocation {
    let (allocs, fair_prop) = if classes.is_empty() {
        (Vec::new(), 0.0)
    } else if regime == AllocRegime::AtLowerBounds {
        (
            classes.iter().map(|c| c.lower).collect(),
            fold(classes, f64::INFINITY, |c| c.rel_lower, f64::min),
        )
    } else {
        (
            classes.iter().map(|c| c.upper).collect(),
            fold(classes, 0.0, |c| c.rel_upper, f64::max),
        )
    };
    FairAllocation {
        allocs,
        fair_prop,
        regime,
    }
}

/// A breakpoint: where class `class` starts (lower) or stops (upper)
/// following `p`.
#[derive(Debug, Clone, Copy)]
struct Breakpoint {
    at: f64,
    class: usize,
    is_upper: bool,
}

/// Walk the breakpoints upward from the lowest, keeping the allocation sum
/// at the current `p` and its slope (the sum of the targets of the classes
/// strictly between their bounds), until the sum reaches `required`.
///
/// Precondition: `low_sum < required < Σ upper`.
fn solve_by_breakpoints(required: f64, low_sum: f64, classes: &[Class]) -> f64 {
    let mut points: Vec<Breakpoint> = classes
        .iter()
        .enumerate()
        .flat_map(|(class, c)| {
            [
                Breakpoint {
                    at: c.rel_lower,
                    class,
                    is_upper: false,
                },
                Breakpoint {
                    at: c.rel_upper,
                    class,
                    is_upper: true,
                },
            ]
        })
        .collect();
    // At equal positions a class's lower breakpoint comes first, so the
    // count of following classes never dips below zero.
    points.sort_unstable_by(|a, b| {
        a.at.total_cmp(&b.at)
            .then_with(|| match (a.is_upper, b.is_upper) {
                (false, true) => Ordering::Less,
                (true, false) => Ordering::Greater,
                _ => Ordering::Equal,
            })
    });

    let mut p = points[0].at;
    let mut sum = low_sum;
    let mut slope = 0.0;
    let mut following = 0usize;
    for point in &points {
        if point.at > p && following > 0 {
            let reach = sum + slope * (point.at - p);
            if reach >= required {
                // The crossing lies in [p, point.at]; clamping guards
                // against a slope that rounding left tiny.
                return (p + (required - sum) / slope).clamp(p, point.at);
            }
            sum = reach;
        }
        p = p.max(point.at);
        let target = classes[point.class].target;
        if point.is_upper {
            following = following.saturating_sub(1);
            slope = if following == 0 { 0.0 } else { slope - target };
        } else {
            following += 1;
            slope += target;
        }
    }
    // Rounding kept the running sum just below the requirement even past
    // the last breakpoint: every class is at its upper bound.
    p
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(target: f64, lower: f64, upper: f64) -> AllocItem {
        AllocItem {
            target,
            lower,
            upper,
        }
    }

    fn sum(v: &[f64]) -> f64 {
        v.iter().sum()
    }

    /// The obviously-correct slow reference: bisection on the proportion.
    fn bisect(required: f64, items: &[AllocItem]) -> Vec<f64> {
        let classes: Vec<Class> = items.iter().map(Class::new).collect();
        let total = |p: f64| classes.iter().map(|c| c.alloc_at(p)).sum::<f64>();
        let (mut lo, mut hi) = (0.0f64, fold(&classes, 0.0, |c| c.rel_upper, f64::max));
        for _ in 0..300 {
            let mid = 0.5 * (lo + hi);
            if total(mid) < required {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        classes.iter().map(|c| c.alloc_at(hi)).collect()
    }

    #[test]
    fn proportional_when_no_bound_binds() {
        let a = fair_allocation(30.0, &[item(1.0, 0.0, 100.0), item(2.0, 0.0, 100.0)]);
        assert_eq!(a.regime, AllocRegime::Fair);
        assert_eq!(a.allocs, vec![10.0, 20.0]);
        assert_eq!(a.fair_prop, 10.0);
    }

    #[test]
    fn an_upper_bound_passes_its_share_to_the_others() {
        // p = 16/24 puts the first class at 16 and the others at their floors.
        let a = fair_allocation(
            25.0,
            &[
                item(24.0, 12.0, 20.0),
                item(8.0, 8.0, 18.0),
                item(1.0, 1.0, 25.0),
            ],
        );
        assert_eq!(a.regime, AllocRegime::Fair);
        assert!((a.allocs[0] - 16.0).abs() < 1e-9, "{a:?}");
        assert_eq!(&a.allocs[1..], &[8.0, 1.0]);
    }

    #[test]
    fn lower_bounds_hold_back_the_proportion() {
        let a = fair_allocation(10.0, &[item(10.0, 6.0, 20.0), item(10.0, 0.0, 20.0)]);
        assert_eq!(a.allocs, vec![6.0, 4.0]);
        assert!((a.fair_prop - 0.4).abs() < 1e-12);
    }

    #[test]
    fn over_constrained_scales_the_lower_bounds_down() {
        let a = fair_allocation(6.0, &[item(5.0, 4.0, 9.0), item(8.0, 8.0, 9.0)]);
        assert_eq!(a.regime, AllocRegime::OverConstrained);
        assert_eq!(a.allocs, vec![2.0, 4.0]);
        assert_eq!(a.fair_prop, 0.0);
    }

    #[test]
    fn under_constrained_gives_every_upper_bound() {
        let a = fair_allocation(100.0, &[item(5.0, 1.0, 9.0), item(8.0, 2.0, 10.0)]);
        assert_eq!(a.regime, AllocRegime::AtUpperBounds);
        assert_eq!(a.allocs, vec![9.0, 10.0]);
    }

    #[test]
    fn exact_lower_sum_gives_lower_bounds() {
        let a = fair_allocation(12.0, &[item(5.0, 4.0, 9.0), item(8.0, 8.0, 9.0)]);
        assert_eq!(a.regime, AllocRegime::AtLowerBounds);
        assert_eq!(a.allocs, vec![4.0, 8.0]);
    }

    /// A class whose bounds coincide shares its breakpoint position with
    /// itself; it must never count as following `p`.
    #[test]
    fn zero_width_class_amid_a_following_one() {
        let a = fair_allocation(5.0, &[item(2.0, 1.0, 1.0), item(1.0, 0.0, 10.0)]);
        assert_eq!(a.allocs, vec![1.0, 4.0]);
        assert_eq!(a.fair_prop, 4.0);
    }

    #[test]
    fn zero_targets_count_as_min_target() {
        let a = fair_allocation(2.0, &[item(0.0, 0.0, 1.0), item(0.0, 0.0, 1.0)]);
        assert_eq!(a.allocs, vec![1.0, 1.0]);
        let a = fair_allocation(1.0, &[item(0.0, 0.0, 5.0), item(1.0, 0.0, 5.0)]);
        assert!((a.allocs[0] - 1.0 / 1001.0).abs() < 1e-12, "{a:?}");
    }

    /// The bounds and targets logged in Kubernetes issue 120032 (one target
    /// NaN), with a requirement of 600 seats.
    #[test]
    fn kubernetes_issue_120032_inputs_solve() {
        let items = [
            item(f64::NAN, 13.0, 613.0),
            item(24.0, 24.0, 649.0),
            item(25.0, 25.0, 625.0),
            item(73.0, 73.0, 698.0),
            item(50.0, 50.0, 674.0),
            item(49.0, 49.0, 698.0),
            item(24.0, 24.0, 845.0),
        ];
        let a = fair_allocation(600.0, &items);
        assert_eq!(a.regime, AllocRegime::Fair);
        assert!((sum(&a.allocs) - 600.0).abs() < 1e-9, "{a:?}");
        assert!(a.allocs.iter().all(|x| x.is_finite()));
        // The NaN target counts as its lower bound, and every target equals
        // its lower bound, so every class scales by one proportion.
        let p = 600.0 / 258.0;
        for (x, it) in a.allocs.iter().zip(&items) {
            assert!((x - it.lower * p).abs() < 1e-9, "{a:?}");
        }
    }

    #[test]
    fn garbage_in_finite_out() {
        let nasty = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, 1e300];
        for &r in &nasty {
            for &t in &nasty {
                for &l in &nasty {
                    for &u in &nasty {
                        let a = fair_allocation(r, &[item(t, l, u), item(1.0, 0.0, 2.0)]);
                        assert!(a.allocs.iter().all(|x| x.is_finite() && *x >= 0.0), "{a:?}");
                        assert!(a.fair_prop.is_finite(), "{a:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn empty_problem() {
        let a = fair_allocation(5.0, &[]);
        assert!(a.allocs.is_empty());
        assert_eq!((a.regime, a.fair_prop), (AllocRegime::AtUpperBounds, 0.0));
        let a = fair_allocation(0.0, &[]);
        assert_eq!((a.regime, a.fair_prop), (AllocRegime::AtLowerBounds, 0.0));
    }

    /// Small whole numbers, so breakpoints often coincide.
    fn arb_whole_item() -> impl Strategy<Value = AllocItem> {
        (0u8..4, 0u8..3, 0u8..3).prop_map(|(lower, dt, du)| {
            let lower = f64::from(lower);
            item(lower + f64::from(dt), lower, lower + f64::from(du))
        })
    }

    fn arb_item() -> impl Strategy<Value = AllocItem> {
        prop_oneof![arb_real_item(), arb_whole_item()]
    }

    fn arb_real_item() -> impl Strategy<Value = AllocItem> {
        (0.0f64..5.0, 0.0f64..2.0, 0.0f64..3.0, 0u8..8).prop_map(|(x, dt, du, shape)| {
            // Mix in zero targets, zero-width bounds and shared breakpoints.
            let lower = if shape == 0 { 0.0 } else { x.floor() };
            let target = match shape {
                1 => 0.0,
                2 => lower,
                _ => lower + dt,
            };
            let upper = if shape == 3 { lower } else { lower + du };
            AllocItem {
                target,
                lower,
                upper,
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn solves_within_bounds_and_sums(
            items in prop::collection::vec(arb_item(), 0..12),
            frac in 0.0f64..1.0,
        ) {
            let classes: Vec<Class> = items.iter().map(Class::new).collect();
            let low: f64 = classes.iter().map(|c| c.lower).sum();
            let high: f64 = classes.iter().map(|c| c.upper).sum();
            let required = (low + (high - low) * frac).round().clamp(low, high);
            let a = fair_allocation(required, &items);
            for (c, x) in classes.iter().zip(&a.allocs) {
                prop_assert!(c.lower <= *x && *x <= c.upper, "{:?} {:?}", c, a);
            }
            prop_assert!((sum(&a.allocs) - required).abs() <= 1e-9 * required.max(1.0), "{:?}", a);
            // The proportion explains every allocation that no bound fixes.
            if a.regime == AllocRegime::Fair {
                for (c, x) in classes.iter().zip(&a.allocs) {
                    prop_assert!((c.alloc_at(a.fair_prop) - x).abs() <= 1e-9 * x.max(1.0));
                }
            }
            let reference = bisect(required, &items);
            for (x, y) in a.allocs.iter().zip(&reference) {
                prop_assert!((x - y).abs() <= 1e-6 * required.max(1.0), "{:?} vs {:?}", a.allocs, reference);
            }
        }

        #[test]
        fn infeasible_requirements_pick_the_nearest_answer(
            items in prop::collection::vec(arb_item(), 1..12),
            over in 0.5f64..50.0,
            shrink in 0.0f64..0.99,
            below in any::<bool>(),
        ) {
            let classes: Vec<Class> = items.iter().map(Class::new).collect();
            let low: f64 = classes.iter().map(|c| c.lower).sum();
            let high: f64 = classes.iter().map(|c| c.upper).sum();
            if below {
                prop_assume!(low > 0.5);
                let required = low * shrink;
                let a = fair_allocation(required, &items);
                prop_assert_eq!(a.regime, AllocRegime::OverConstrained);
                prop_assert!((sum(&a.allocs) - required).abs() <= 1e-9 * required.max(1.0));
                for (c, x) in classes.iter().zip(&a.allocs) {
                    prop_assert!(*x <= c.lower);
                }
            } else {
                let a = fair_allocation(high + over, &items);
                prop_assert_eq!(a.regime, AllocRegime::AtUpperBounds);
                for (c, x) in classes.iter().zip(&a.allocs) {
                    prop_assert_eq!(c.upper, *x);
                }
            }
        }

        #[test]
        fn any_floats_give_finite_allocations(
            raw in prop::collection::vec((any::<f64>(), any::<f64>(), any::<f64>()), 0..8),
            required in any::<f64>(),
        ) {
            let items: Vec<AllocItem> = raw.iter().map(|&(t, l, u)| item(t, l, u)).collect();
            let a = fair_allocation(required, &items);
            prop_assert_eq!(a.allocs.len(), items.len());
            prop_assert!(a.allocs.iter().all(|x| x.is_finite() && *x >= 0.0));
            prop_assert!(a.fair_prop.is_finite());
        }
    }
}
