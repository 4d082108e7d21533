//! The controller on a simulated clock, against a fluid model of a backend
//! that slows down beyond its capacity (the simulator's model, in closed
//! form): convergence from above and below, following a capacity halving
//! without oscillating, the probe's life cycle, and the invariants for any
//! sequence of windows. No real time anywhere.

use super::*;
use crate::clock::Instant;
use proptest::prelude::*;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// A backend of capacity `k` seats, unloaded latency `base` ns, and
/// `overload` extra slowdown per unit of concurrency beyond `k` (the
/// simulator's backend model): latency(n) = base for n ≤ k, else
/// base × n/k × (1 + overload × (n/k − 1)).
#[derive(Clone, Copy)]
struct Backend {
    k: f64,
    base: f64,
    overload: f64,
}

impl Backend {
    fn latency(&self, n: f64) -> f64 {
        if n <= self.k {
            self.base
        } else {
            let x = n / self.k;
            self.base * x * (1.0 + self.overload * (x - 1.0))
        }
    }

    /// One window of `len` ns with `limit` seats and `demand` seats of
    /// offered concurrency (a closed loop that keeps them busy).
    fn window(&self, at: u64, len: u64, limit: u32, demand: f64) -> Window {
        let n = demand.min(f64::from(limit));
        let latency = self.latency(n.max(1.0));
        let completed = (n * len as f64 / latency).floor() as u64;
        Window {
            at: Instant::from_nanos(at),
            completed,
            latency_nanos: (completed as f64 * latency) as u128,
            in_flight: n as u64,
            allowed: u64::from(limit),
            waiting: (demand - n).max(0.0) as u64,
        }
    }

    fn goodput(&self, n: f64) -> f64 {
        n / self.latency(n.max(1.0))
    }
}

/// Runs `ctl` for `secs` of simulated time from `start` ns; returns the
/// limits applied, one per window, and the end time.
fn drive(
    ctl: &mut GradientController,
    backend: impl Fn(u64) -> Backend,
    demand: f64,
    start: u64,
    secs: u64,
) -> (Vec<u32>, u64) {
    let len = duration_nanos(ctl.options().update_interval);
    let mut limit = ctl.limit();
    let mut out = Vec::new();
    let mut at = start;
    while at < start + secs * 1_000 * MS {
        at += len;
        let w = backend(at).window(at, len, limit, demand);
        limit = ctl.update(&w);
        out.push(limit);
    }
    (out, at)
}

use crate::clock::duration_nanos;

fn backend(k: f64) -> Backend {
    Backend {
        k,
        base: 20.0 * MS as f64,
        overload: 0.5,
    }
}

/// The limit a window-by-window run settles at: the last `n` limits.
fn tail(limits: &[u32], n: usize) -> &[u32] {
    &limits[limits.len() - n..]
}

#[test]
fn starts_with_a_probe_and_resumes_the_initial_limit() {
    let opts = AdaptiveOptions::default();
    let mut ctl = GradientController::new(opts, 400, Instant::ZERO);
    assert_eq!(ctl.limit(), opts.probe_limit);
    assert!(matches!(ctl.phase(), ControllerPhase::Draining { .. }));
    // Still 300 seats in flight from before: the probe waits.
    let busy = Window {
        at: Instant::from_nanos(250 * MS),
        completed: 1000,
        latency_nanos: 1000 * 80 * u128::from(MS),
        in_flight: 300,
        allowed: 8,
        waiting: 0,
    };
    assert_eq!(ctl.update(&busy), opts.probe_limit);
    assert!(matches!(ctl.phase(), ControllerPhase::Draining { .. }));
    // Drained: this window's completions are the backlog's, not counted.
    let drained = Window {
        in_flight: 8,
        at: Instant::from_nanos(500 * MS),
        ..busy
    };
    ctl.update(&drained);
    assert!(matches!(
        ctl.phase(),
        ControllerPhase::Measuring { completed: 0, .. }
    ));
    assert_eq!(ctl.min_latency_secs(), None);
    // 30 then 30 completions at 20 ms: measured once 50 are in.
    let probe = |at: u64| Window {
        at: Instant::from_nanos(at * MS),
        completed: 30,
        latency_nanos: 30 * 20 * u128::from(MS),
        in_flight: 3,
        allowed: 8,
        waiting: 0,
    };
    assert_eq!(ctl.update(&probe(750)), opts.probe_limit);
    assert_eq!(ctl.update(&probe(1000)), 400);
    assert_eq!(ctl.phase(), ControllerPhase::Adapting);
    assert!((ctl.min_latency_secs().unwrap() - 0.020).abs() < 1e-12);
    assert_eq!(
        ctl.next_probe(),
        Instant::from_nanos(1000 * MS).saturating_add(opts.probe_interval)
    );
    assert_eq!(ctl.probes(), 1);
}

#[test]
fn a_probe_without_completions_keeps_the_old_minimum_and_times_out() {
    let opts = AdaptiveOptions::default();
    let mut ctl = GradientController::new(opts, 100, Instant::ZERO);
    let b = backend(100.0);
    let (_, end) = drive(&mut ctl, |_| b, 500.0, 0, 5);
    let min = ctl.min_latency_secs().unwrap();
    // The next probe is due; no traffic at all from then on.
    let mut at = ctl.next_probe().as_nanos();
    let idle = |at: u64| Window {
        at: Instant::from_nanos(at),
        ..Window::default()
    };
    assert!(at > end);
    ctl.update(&idle(at));
    assert_eq!(ctl.probes(), 2);
    let timeout = duration_nanos(opts.probe_timeout);
    let mut windows = 0;
    while ctl.phase() != ControllerPhase::Adapting {
        at += 250 * MS;
        ctl.update(&idle(at));
        windows += 1;
        assert!(
            windows <= 2 * timeout / (250 * MS) + 2,
            "the probe never ends"
        );
    }
    assert_eq!(ctl.min_latency_secs(), Some(min));
}

#[test]
fn windows_with_few_completions_change_nothing_until_merged() {
    let opts = AdaptiveOptions::default();
    let mut ctl = GradientController::new(opts, 100, Instant::ZERO);
    let b = backend(100.0);
    let (limits, end) = drive(&mut ctl, |_| b, 500.0, 0, 3);
    let before = (*limits.last().unwrap(), ctl.estimate(), ctl.gradient());
    let w = Window {
        at: Instant::from_nanos(end + 250 * MS),
        completed: u64::from(opts.min_window_samples) - 1,
        // Ten times the minimum latency: would halve the step if counted.
        latency_nanos: u128::from(opts.min_window_samples - 1) * 200 * u128::from(MS),
        in_flight: 100,
        allowed: 100,
        waiting: 0,
    };
    assert_eq!(ctl.update(&w), before.0);
    assert_eq!((ctl.estimate(), ctl.gradient()), (before.1, before.2));
    // One more completion, in the next window: the two count together,
    // at ten times the minimum latency.
    let next = Window {
        at: Instant::from_nanos(end + 500 * MS),
        completed: 1,
        latency_nanos: 200 * u128::from(MS),
        ..w
    };
    ctl.update(&next);
    assert_eq!(ctl.gradient(), MIN_GRADIENT);
    assert!(ctl.estimate() < before.1);
}

#[test]
fn a_limit_twice_too_high_comes_down_to_low_latency_and_full_goodput() {
    let b = backend(100.0);
    let mut ctl = GradientController::new(AdaptiveOptions::default(), 200, Instant::ZERO);
    let (limits, _) = drive(&mut ctl, |_| b, 1000.0, 0, 30);
    for &l in tail(&limits, 40) {
        let n = f64::from(l);
        assert!(b.latency(n) <= 1.5 * b.base, "limit {l}: latency too high");
        assert!(
            b.goodput(n) >= 0.9 * b.goodput(b.k),
            "limit {l}: goodput too low"
        );
    }
}

#[test]
fn a_limit_twice_too_low_grows_to_full_goodput() {
    let b = backend(100.0);
    let mut ctl = GradientController::new(AdaptiveOptions::default(), 50, Instant::ZERO);
    let (limits, _) = drive(&mut ctl, |_| b, 1000.0, 0, 30);
    for &l in tail(&limits, 40) {
        assert!(b.goodput(f64::from(l)) >= 0.9 * b.goodput(b.k), "limit {l}");
    }
}

/// Windows after a capacity halving at `at_ns` until the limit is within
/// the band where the halved backend keeps 90% goodput and 1.5× latency,
/// and whether it ever leaves the band again afterwards.
fn follow_halving(opts: AdaptiveOptions) -> (usize, bool) {
    let mut ctl = GradientController::new(opts, 100, Instant::ZERO);
    let halve_at = 20_000 * MS;
    let model = |at: u64| backend(if at > halve_at { 50.0 } else { 100.0 });
    let (limits, _) = drive(&mut ctl, model, 1000.0, 0, 40);
    let len = duration_nanos(opts.update_interval);
    let first_after = (halve_at / len) as usize;
    let half = model(halve_at + 1);
    let ok = |l: u32| {
        let n = f64::from(l);
        half.latency(n) <= 1.5 * half.base && half.goodput(n) >= 0.9 * half.goodput(half.k)
    };
    let after = &limits[first_after..];
    let settled = after.iter().position(|&l| ok(l)).expect("never follows");
    let stays = after[settled..].iter().all(|&l| ok(l));
    (settled, stays)
}

#[test]
fn a_capacity_halving_is_followed_within_three_seconds_without_oscillating() {
    let opts = AdaptiveOptions::default();
    let (windows, stays) = follow_halving(opts);
    let secs = windows as f64 * opts.update_interval.as_secs_f64();
    assert!(secs <= 3.0, "took {secs} s");
    assert!(stays, "left the band after reaching it");
}

#[test]
fn an_app_limited_window_never_raises_the_limit() {
    let b = backend(100.0);
    let mut ctl = GradientController::new(AdaptiveOptions::default(), 300, Instant::ZERO);
    // Demand of 40 seats: latency is the minimum, the gradient says grow,
    // but 40 < 300 / 2.
    let (limits, _) = drive(&mut ctl, |_| b, 40.0, 0, 30);
    let adapting: Vec<u32> = limits.iter().copied().filter(|&l| l != 3).collect();
    assert!(adapting.iter().all(|&l| l <= 300), "{adapting:?}");
}

#[test]
fn stuck_at_the_minimum_probes_again() {
    let opts = AdaptiveOptions::default();
    let mut ctl = GradientController::new(opts, 100, Instant::ZERO);
    let b = backend(100.0);
    let (_, mut at) = drive(&mut ctl, |_| b, 1000.0, 0, 3);
    assert_eq!(ctl.probes(), 1);
    // The backend is now ten times slower at any concurrency.
    let slow = Backend {
        base: b.base * 10.0,
        ..b
    };
    let mut limit = ctl.limit();
    for _ in 0..200 {
        at += 250 * MS;
        limit = ctl.update(&slow.window(at, 250 * MS, limit, 1000.0));
        if ctl.probes() > 1 {
            break;
        }
    }
    assert_eq!(ctl.probes(), 2, "no probe at the minimum");
    // The new probe measures the slower latency, and the limit recovers.
    let (limits, _) = drive(&mut ctl, |_| slow, 1000.0, at, 20);
    assert!((ctl.min_latency_secs().unwrap() - 0.2).abs() < 1e-9);
    assert!(*limits.last().unwrap() >= 90, "{:?}", tail(&limits, 5));
}

#[test]
fn probes_come_every_probe_interval() {
    let opts = AdaptiveOptions {
        probe_interval: Duration::from_secs(10),
        ..AdaptiveOptions::default()
    };
    let mut ctl = GradientController::new(opts, 100, Instant::ZERO);
    let b = backend(100.0);
    drive(&mut ctl, |_| b, 1000.0, 0, 35);
    // At start, then about every 10 s plus the probe's own length.
    assert_eq!(ctl.probes(), 4);
}

#[test]
fn every_bad_option_is_refused_by_name() {
    let ok = AdaptiveOptions::default();
    assert_eq!(ok.validate(), Ok(()));
    let cases: [(&str, AdaptiveOptions); 11] = [
        ("gain", AdaptiveOptions { gain: 0, ..ok }),
        ("min_limit", AdaptiveOptions { min_limit: 0, ..ok }),
        ("max_limit", AdaptiveOptions { max_limit: 7, ..ok }),
        (
            "max_limit",
            AdaptiveOptions {
                max_limit: u32::MAX,
                ..ok
            },
        ),
        (
            "update_interval",
            AdaptiveOptions {
                update_interval: Duration::from_millis(1),
                ..ok
            },
        ),
        (
            "tolerance_percent",
            AdaptiveOptions {
                tolerance_percent: 0,
                ..ok
            },
        ),
        (
            "smoothing_percent",
            AdaptiveOptions {
                smoothing_percent: 101,
                ..ok
            },
        ),
        (
            "probe_limit",
            AdaptiveOptions {
                probe_limit: 0,
                ..ok
            },
        ),
        (
            "probe_samples",
            AdaptiveOptions {
                probe_samples: 0,
                ..ok
            },
        ),
        (
            "probe_interval",
            AdaptiveOptions {
                probe_interval: Duration::from_millis(100),
                ..ok
            },
        ),
        (
            "probe_timeout",
            AdaptiveOptions {
                probe_timeout: Duration::ZERO,
                ..ok
            },
        ),
    ];
    for (field, opts) in cases {
        let e = opts.validate().unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(field));
    }
}

fn any_options() -> impl Strategy<Value = AdaptiveOptions> {
    (
        1u32..50,
        0u32..500,
        1u32..200,
        1u32..=100,
        1u32..20,
        1u32..100,
    )
        .prop_map(
            |(min_limit, extra, tolerance, smoothing, probe_limit, probe_samples)| {
                AdaptiveOptions {
                    min_limit,
                    max_limit: min_limit + extra + probe_limit,
                    tolerance_percent: tolerance,
                    smoothing_percent: smoothing,
                    probe_limit,
                    probe_samples,
                    probe_interval: Duration::from_secs(5),
                    ..AdaptiveOptions::default()
                }
            },
        )
}

fn any_window() -> impl Strategy<Value = (u64, u64, u64, u64, u64)> {
    (
        1u64..2_000,
        0u64..5_000,
        0u64..2_000,
        0u64..2_000,
        0u64..2_000,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the windows: the limit stays in its bounds, the gradient
    /// in [0.5, 2], and the same windows give the same limits.
    #[test]
    fn invariants_hold_for_any_windows(
        opts in any_options(),
        initial in 0u32..2_000,
        windows in proptest::collection::vec(any_window(), 1..300),
    ) {
        prop_assert_eq!(opts.validate(), Ok(()));
        let mut a = GradientController::new(opts, initial, Instant::ZERO);
        let mut b = a.clone();
        let mut at = 0u64;
        for (step_ms, completed, mean_ms, in_flight, allowed) in windows {
            at += step_ms * MS;
            let w = Window {
                at: Instant::from_nanos(at),
                completed,
                latency_nanos: u128::from(completed) * u128::from(mean_ms * MS),
                in_flight,
                allowed,
                waiting: in_flight % 3,
            };
            let before = a.estimate();
            let adapting = a.phase() == ControllerPhase::Adapting;
            let limit = a.update(&w);
            prop_assert_eq!(limit, b.update(&w));
            prop_assert!(limit <= opts.max_limit);
            prop_assert!(limit >= opts.min_limit.min(opts.probe_limit));
            if a.phase() == ControllerPhase::Adapting {
                prop_assert!(limit >= opts.min_limit);
            } else {
                prop_assert_eq!(limit, opts.probe_limit);
            }
            prop_assert!((MIN_GRADIENT..=MAX_GRADIENT).contains(&a.gradient()));
            // One step moves the estimate by a bounded factor (or, at a
            // bound, to it).
            let s = f64::from(opts.smoothing_percent) / 100.0;
            let (down, up) = (1.0 - s * (1.0 - MIN_GRADIENT), 1.0 + s * (MAX_GRADIENT - 1.0));
            let e = a.estimate();
            if adapting {
                prop_assert!(
                    e >= (before * down).min(f64::from(opts.max_limit)) - 1e-9
                        && e <= (before * up).max(f64::from(opts.min_limit)) + 1e-9,
                    "{} -> {}", before, e
                );
            } else {
                prop_assert_eq!(e, before);
            }
            prop_assert!(a.estimate() >= f64::from(opts.min_limit));
            prop_assert!(a.estimate() <= f64::from(opts.max_limit));
        }
    }

    /// From any start within 20× of a backend's capacity, the limit ends
    /// where the latency is at most 1.5× the minimum and the goodput at
    /// least 90% of the best.
    #[test]
    fn converges_for_any_capacity_and_start(
        k in 20u32..2_000,
        ratio in 0.05f64..20.0,
        base_ms in 1u64..200,
    ) {
        let b = Backend { k: f64::from(k), base: (base_ms * MS) as f64, overload: 0.5 };
        let initial = (f64::from(k) * ratio).round() as u32;
        let mut ctl = GradientController::new(AdaptiveOptions::default(), initial, Instant::ZERO);
        let (limits, _) = drive(&mut ctl, |_| b, f64::from(k) * 10.0, 0, 40);
        for &l in tail(&limits, 20) {
            let n = f64::from(l);
            prop_assert!(b.latency(n) <= 1.5 * b.base, "k {} limit {}", k, l);
            prop_assert!(b.goodput(n) >= 0.9 * b.goodput(b.k), "k {} limit {}", k, l);
        }
    }
}
