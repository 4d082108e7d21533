//! The gradient controller: a pure, deterministic function from latency
//! windows to a server concurrency limit. It owns no clock, no thread and
//! no lock; whoever runs it (the dispatcher's `runtime.rs`, a
//! test, the simulator) hands it one [`Window`] per update interval.
//!
//! # The rule
//! Windows are merged until they hold at least `min_window_samples`
//! completions (a mean of fewer is noise); then, for the merged window:
//!
//! ```text
//! latency   = window's latency sum / window's completions   (mean)
//! gradient  = clamp((min_latency × (1 + tolerance) / latency)^gain, 0.5, 2)
//! target    = estimate × gradient
//! target    = min(target, estimate)   when the window was app-limited
//!                                      (in flight < estimate / 2 and
//!                                       nothing waiting in a queue)
//! estimate  = clamp(estimate × (1 − smoothing) + target × smoothing,
//!                   min_limit, max_limit)
//! limit     = round(estimate)
//! ```
//!
//! So the limit settles where the mean latency is `1 + tolerance` times the
//! minimum latency: below that the gradient is above 1 and the limit grows,
//! above it the limit shrinks, by at most half (gradient 0.5) or double (2)
//! of the smoothed step per window. `gain` (an integer exponent) sets how
//! hard the gradient answers a given latency ratio without moving that
//! fixed point: with gain 1 (Envoy's and Gradient2's form) an uncongested
//! backend lets the limit grow by only `smoothing × tolerance` (2%) per
//! window; with the default 3 and a 10% tolerance, `1.1³ ≈ 1.33` lets it
//! grow by 6.6%, and at 25% tolerance `1.25³ ≈ 1.95` by almost 20%.
//!
//! # Slow start
//! Until the first window whose latency exceeds the target, the gradient is
//! 2 (doubling, smoothed: +20% a window at the default smoothing), as TCP's
//! slow start: the dispatcher starts the total at `min_limit`, so no total
//! is used before a latency vouched for the one below it.
//!
//! # The minimum-latency probe
//! `min_latency` is measured, not guessed: at start, every `probe_interval`,
//! and when the limit sat at `min_limit` for [`STUCK_AT_MIN_WINDOWS`]
//! windows in a row with latency over the target (the minimum may be
//! stale), the controller asks for
//! `probe_limit` seats. It first waits until the requests in flight fit that
//! limit (`Draining`, so the backlog of the loaded period does not count),
//! then averages the latency of the next `probe_samples` completions
//! (`Measuring`); that mean is the new minimum latency, and the limit goes
//! back to the estimate it had before the probe. A probe that does not get
//! its samples within `probe_timeout` ends with what it has (or, with no
//! sample at all, keeps the old minimum).
//!
//! # Invariants (checked by `tests.rs` on a simulated clock)
//! - The limit is always in `[min(probe_limit, min_limit), max_limit]`, and
//!   outside a probe in `[min_limit, max_limit]`.
//! - The gradient is always in `[0.5, 2]`.
//! - The same windows give the same limits (no clock, no randomness).
//! - One update moves the estimate by a factor in
//!   `[1 − smoothing × (1 − 0.5), 1 + smoothing × (2 − 1)]` (before the
//!   bounds): with the default 20%, at most −10% or +20% per window.
//! - A window with too few completions changes nothing but the probe
//!   schedule; its completions count in the next.

use super::options::AdaptiveOptions;
use crate::clock::{duration_nanos, Instant};

/// The least gradient: the limit at most halves its smoothed step per window.
pub const MIN_GRADIENT: f64 = 0.5;
/// The greatest gradient: the limit at most doubles its smoothed step per window.
pub const MAX_GRADIENT: f64 = 2.0;
/// Windows in a row at `min_limit` that start a new probe (Envoy uses 5).
pub const STUCK_AT_MIN_WINDOWS: u32 = 5;

/// What the server saw over one update interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// The end of the window.
    pub at: Instant,
    /// Requests that finished executing in the window (at limited levels).
    pub completed: u64,
    /// The sum of their execution times (start to finish), in nanoseconds.
    pub latency_nanos: u128,
    /// Seats in use at limited levels at the end of the window.
    pub in_flight: u64,
    /// Seats the limited levels may use at the end of the window (the sum
    /// of their CurrentCLs): a probe measures once `in_flight` fits it.
    pub allowed: u64,
    /// Requests waiting in the limited levels' queues at the end of the
    /// window: with some, the load is held back by the limit (or by how
    /// borrowing shares it), not app-limited.
    pub waiting: u64,
}

impl Window {
    /// The window's mean latency in nanoseconds, if it saw a completion.
    pub fn mean_latency_nanos(&self) -> Option<f64> {
        (self.completed > 0).then(|| self.latency_nanos as f64 / self.completed as f64)
    }
}

/// Where the controller is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ControllerPhase {
    /// Following the gradient.
    Adapting,
    /// A probe waits for the requests in flight to fit the probe limit.
    Draining {
        /// When the probe started.
        since: Instant,
    },
    /// A probe averages the latency of the completions it sees.
    Measuring {
        /// When the probe started.
        since: Instant,
        /// Completions averaged so far.
        completed: u64,
        /// Their latency sum, nanoseconds.
        latency_nanos: u128,
    },
}

/// The gradient controller (see the module documentation).
#[derive(Debug, Clone)]
pub struct GradientController {
    options: AdaptiveOptions,
    /// The smoothed limit, in `[min_limit, max_limit]`; kept through probes.
    estimate: f64,
    /// The last probe's mean latency, nanoseconds.
    min_latency: Option<f64>,
    /// The last window's mean latency, nanoseconds.
    latency: Option<f64>,
    /// The last gradient applied (1 before the first).
    gradient: f64,
    phase: ControllerPhase,
    next_probe: Instant,
    at_min: u32,
    probes: u64,
    /// Completions (and their latency sum) of windows too small to use
    /// alone, carried into the next.
    carried: (u64, u128),
    /// No window has been over the target latency yet.
    slow_start: bool,
}

impl GradientController {
    /// A controller starting from `initial` seats (clamped to the bounds),
    /// with a probe at once: nothing is known of the backend's latency yet.
    /// `options` must be valid ([`AdaptiveOptions::validate`]).
    pub fn new(options: AdaptiveOptions, initial: u32, now: Instant) -> GradientController {
        let estimate = f64::from(initial.clamp(options.min_limit, options.max_limit));
        GradientController {
            options,
            estimate,
            min_latency: None,
            latency: None,
            gradient: 1.0,
            phase: ControllerPhase::Draining { since: now },
            next_probe: now,
            at_min: 0,
            probes: 1,
            carried: (0, 0),
            slow_start: true,
        }
    }

    /// The options it runs with.
    pub fn options(&self) -> &AdaptiveOptions {
        &self.options
    }

    /// The server concurrency limit to apply now.
    pub fn limit(&self) -> u32 {
        match self.phase {
            ControllerPhase::Adapting => self.rounded_estimate(),
            ControllerPhase::Draining { .. } | ControllerPhase::Measuring { .. } => {
                self.options.probe_limit
            }
        }
    }

    fn rounded_estimate(&self) -> u32 {
        // The estimate stays within the u32 bounds, so the cast is exact.
        (self.estimate.round() as u32).clamp(self.options.min_limit, self.options.max_limit)
    }

    /// The smoothed limit the gradient follows (also during a probe, which
    /// returns to it).
    pub fn estimate(&self) -> f64 {
        self.estimate
    }

    /// The minimum latency the last probe measured, in seconds.
    pub fn min_latency_secs(&self) -> Option<f64> {
        self.min_latency.map(|ns| ns / 1e9)
    }

    /// The last window's mean latency, in seconds.
    pub fn latency_secs(&self) -> Option<f64> {
        self.latency.map(|ns| ns / 1e9)
    }

    /// The last gradient applied, in `[0.5, 2]` (1 before the first).
    pub fn gradient(&self) -> f64 {
        self.gradient
    }

    /// Whether no window has exceeded the target latency yet (the limit
    /// doubles, smoothed, each window).
    pub fn slow_start(&self) -> bool {
        self.slow_start
    }

    /// Where the controller is.
    pub fn phase(&self) -> ControllerPhase {
        self.phase
    }

    /// Probes started so far (the first one at creation).
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// When the next periodic probe is due.
    pub fn next_probe(&self) -> Instant {
        self.next_probe
    }

    /// Take one window into account; returns the limit to apply now.
    pub fn update(&mut self, w: &Window) -> u32 {
        if let Some(mean) = w.mean_latency_nanos() {
            self.latency = Some(mean);
        }
        match self.phase {
            ControllerPhase::Draining { since } => {
                if w.in_flight <= w.allowed || self.timed_out(since, w.at) {
                    // This window's completions started under the old
                    // limit: they do not count.
                    self.phase = ControllerPhase::Measuring {
                        since,
                        completed: 0,
                        latency_nanos: 0,
                    };
                }
            }
            ControllerPhase::Measuring {
                since,
                completed,
                latency_nanos,
            } => {
                let completed = completed + w.completed;
                let latency_nanos = latency_nanos + w.latency_nanos;
                if completed >= u64::from(self.options.probe_samples) || self.timed_out(since, w.at)
                {
                    if completed > 0 {
                        self.min_latency = Some(latency_nanos as f64 / completed as f64);
                    }
                    self.phase = ControllerPhase::Adapting;
                    self.at_min = 0;
                    self.next_probe = w.at.saturating_add(self.options.probe_interval);
                } else {
                    self.phase = ControllerPhase::Measuring {
                        since,
                        completed,
                        latency_nanos,
                    };
                }
            }
            ControllerPhase::Adapting => self.adapt(w),
        }
        self.limit()
    }

    fn timed_out(&self, since: Instant, now: Instant) -> bool {
        now.as_nanos().saturating_sub(since.as_nanos())
            >= duration_nanos(self.options.probe_timeout)
    }

    fn start_probe(&mut self, now: Instant) {
        self.phase = ControllerPhase::Draining { since: now };
        self.probes += 1;
        self.carried = (0, 0);
    }

    fn adapt(&mut self, w: &Window) {
        if w.at >= self.next_probe || self.at_min >= STUCK_AT_MIN_WINDOWS {
            self.start_probe(w.at);
            return;
        }
        let Some(min_latency) = self.min_latency else {
            // No probe has seen a completion yet: probe again once there
            // is traffic.
            if w.completed > 0 {
                self.start_probe(w.at);
            }
            return;
        };
        let completed = self.carried.0 + w.completed;
        let latency_nanos = self.carried.1 + w.latency_nanos;
        if completed < u64::from(self.options.min_window_samples) {
            self.carried = (completed, latency_nanos);
            return;
        }
        self.carried = (0, 0);
        let latency = latency_nanos as f64 / completed as f64;
        let tolerance = 1.0 + f64::from(self.options.tolerance_percent) / 100.0;
        let target_latency = min_latency * tolerance;
        if latency > target_latency {
            self.slow_start = false;
        }
        let gradient = if self.slow_start || latency <= 0.0 {
            MAX_GRADIENT
        } else {
            (target_latency / latency)
                .powi(self.options.gain as i32)
                .clamp(MIN_GRADIENT, MAX_GRADIENT)
        };
        self.gradient = gradient;
        let mut target = self.estimate * gradient;
        // App-limited: the load did not reach half the limit and nothing
        // waits, so a low latency says nothing about a higher one.
        if (w.in_flight as f64) < self.estimate / 2.0 && w.waiting == 0 {
            target = target.min(self.estimate);
        }
        let smoothing = f64::from(self.options.smoothing_percent) / 100.0;
        let (lo, hi) = (
            f64::from(self.options.min_limit),
            f64::from(self.options.max_limit),
        );
        self.estimate = (self.estimate * (1.0 - smoothing) + target * smoothing).clamp(lo, hi);
        if gradient < 1.0 && self.rounded_estimate() == self.options.min_limit {
            self.at_min += 1;
        } else {
            self.at_min = 0;
        }
    }
}
