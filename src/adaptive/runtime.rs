//! The controller at work in a dispatcher: every update interval, on the
//! dispatcher's clock, read what the limited levels' replays already
//! tallied (completions and their execution-time sum, seats in use,
//! limits), hand the difference since the last interval to the
//! [`GradientController`] as one [`Window`], and give the total it returns
//! to borrowing, which shares it among the levels as it shares a fixed
//! `server_concurrency_limit`.
//!
//! Nothing here runs on a request's way in or out: the latency samples are
//! the execution times the level's event-ring replay already folds into its
//! `request_execution_seconds` tallies.
//!
//! Lock order: a level's lock (reading its totals, released before the
//! next step), then `state`, then borrowing's (`apply`), then the levels'
//! again inside borrowing's callback. Nothing takes `state` while holding a
//! lock of borrowing or of a level.

use super::controller::{ControllerPhase, GradientController, Window};
use super::options::AdaptiveOptions;
use crate::clock::{Clock, Instant, Timer};
use crate::level::Level;
use crate::queueset::LatencyTotals;
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The adaptive limit's state, for metrics and dumps.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveReport {
    /// The total seats shared by the levels now.
    pub limit: u32,
    /// The smoothed limit the gradient follows (a probe returns to it).
    pub estimate: f64,
    /// The minimum latency the last probe measured, seconds.
    pub min_latency_secs: Option<f64>,
    /// The last window's mean execution time, seconds.
    pub latency_secs: Option<f64>,
    /// The last gradient applied, in [0.5, 2].
    pub gradient: f64,
    /// Whether a minimum-latency probe is under way.
    pub probing: bool,
    /// Probes started so far.
    pub probes: u64,
    /// The windows taken so far.
    pub updates: u64,
    /// The options in force.
    pub options: AdaptiveOptions,
}

type Apply = Box<dyn Fn(u32) + Send + Sync>;

/// Runs a [`GradientController`] over a set of levels.
pub(crate) struct AdaptiveLimit {
    inner: Arc<Inner>,
}

struct Inner {
    options: AdaptiveOptions,
    /// The levels in force (the dispatcher's borrowing table).
    levels: Arc<Mutex<Vec<Arc<Level>>>>,
    apply: Apply,
    state: Mutex<State>,
    timer: Mutex<Option<Timer>>,
    stopped: AtomicBool,
}

struct State {
    controller: GradientController,
    /// Each level's totals at the last update, to take differences.
    last: Vec<(Arc<Level>, Reading)>,
    updates: u64,
}

/// What one update reads of a level: its execution-time totals, then the
/// costs servers reported at finish (after the replay, so a report is never
/// read after its completion).
#[derive(Debug, Clone, Copy)]
struct Reading {
    totals: LatencyTotals,
    /// Cost reports so far, and their sum in millionths of a seat.
    cost_reports: u64,
    cost_micros: u64,
}

impl AdaptiveLimit {
    /// Start adapting: the controller begins with a probe, so the total
    /// the caller must apply first is [`AdaptiveLimit::limit`]; each update
    /// calls `apply` with the new total when it changes. `options` must be
    /// valid.
    pub(crate) fn start(
        clock: &Clock,
        options: AdaptiveOptions,
        initial: u32,
        levels: Arc<Mutex<Vec<Arc<Level>>>>,
        apply: impl Fn(u32) + Send + Sync + 'static,
    ) -> AdaptiveLimit {
        let now = clock.now();
        let inner = Arc::new(Inner {
            options,
            levels,
            apply: Box::new(apply),
            state: Mutex::new(State {
                controller: GradientController::new(options, initial, now),
                last: Vec::new(),
                updates: 0,
            }),
            timer: Mutex::new(None),
            stopped: AtomicBool::new(false),
        });
        // Baselines now, so the first window covers one interval.
        let totals = inner.read_totals();
        lock(&inner.state).last = totals;
        // The timer's callback owns an Arc of `inner`; `Drop` breaks the
        // cycle by dropping the timer.
        let on_timer = inner.clone();
        let timer = clock.timer(move |at| on_timer.update(at));
        timer.set(now.saturating_add(options.update_interval));
        *lock(&inner.timer) = Some(timer);
        AdaptiveLimit { inner }
    }

    /// The total the controller asks for now.
    pub(crate) fn limit(&self) -> u32 {
        lock(&self.inner.state).controller.limit()
    }

    /// The controller's state now.
    pub(crate) fn report(&self) -> AdaptiveReport {
        let st = lock(&self.inner.state);
        let c = &st.controller;
        AdaptiveReport {
            limit: c.limit(),
            estimate: c.estimate(),
            min_latency_secs: c.min_latency_secs(),
            latency_secs: c.latency_secs(),
            gradient: c.gradient(),
            probing: c.phase() != ControllerPhase::Adapting,
            probes: c.probes(),
            updates: st.updates,
            options: self.inner.options,
        }
    }
}

impl Drop for AdaptiveLimit {
    fn drop(&mut self) {
        self.inner.stopped.store(true, Ordering::Release);
        let timer = lock(&self.inner.timer).take();
        drop(timer);
    }
}

impl fmt::Debug for AdaptiveLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimit")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Every limited level's totals, each read under its own lock.
    fn read_totals(&self) -> Vec<(Arc<Level>, Reading)> {
        // Cloned so no level is replayed with the table locked.
        let levels = lock(&self.levels).clone();
        levels
            .into_iter()
            .filter_map(|level| {
                let totals = level.queueset()?.latency_totals();
                let (cost_reports, cost_micros) = level.reported_costs();
                let reading = Reading {
                    totals,
                    cost_reports,
                    cost_micros,
                };
                Some((level, reading))
            })
            .collect()
    }

    fn update(&self, at: Instant) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        let totals = self.read_totals();
        let mut st = lock(&self.state);
        let window = window(&st.last, &totals, at);
        st.last = totals;
        st.updates += 1;
        let before = st.controller.limit();
        let limit = st.controller.update(&window);
        if limit != before {
            // Under `state`, so totals reach borrowing in the order they
            // were computed. The library must outlive a faulty callback.
            let _ = catch_unwind(AssertUnwindSafe(|| (self.apply)(limit)));
        }
        drop(st);
        if let Some(timer) = lock(&self.timer).as_ref() {
            timer.set(at.saturating_add(self.options.update_interval));
        }
    }
}

/// The window between two readings: per level, the difference of its
/// totals. A level new since `last` counts from its next reading; one
/// whose totals went down (a flow schema's tally forgotten) sits this
/// window out.
///
/// When servers reported costs at finish in the window, its latency is
/// per seat of cost: the latency sum is scaled so that the controller's
/// mean (sum / completions) is the latency sum over the window's cost, a
/// completion without a report counting 1 seat. A shift of the mix towards
/// costlier requests then does not read as congestion. A window without
/// reports is left as it is.
fn window(last: &[(Arc<Level>, Reading)], now: &[(Arc<Level>, Reading)], at: Instant) -> Window {
    let mut w = Window {
        at,
        ..Window::default()
    };
    let (mut reports, mut cost_micros) = (0u64, 0u128);
    for (level, r) in now {
        let t = &r.totals;
        w.in_flight += t.seats_in_use;
        w.allowed += u64::from(t.limit);
        w.waiting += t.waiting;
        let Some((_, before)) = last.iter().find(|(l, _)| Arc::ptr_eq(l, level)) else {
            continue;
        };
        let b = &before.totals;
        if t.completed >= b.completed && t.latency_nanos >= b.latency_nanos {
            let completed = t.completed - b.completed;
            w.completed += completed;
            w.latency_nanos += t.latency_nanos - b.latency_nanos;
            // Reports are read after the replay: a few may be of
            // completions the next window counts (hence the saturation).
            let level_reports = r.cost_reports.wrapping_sub(before.cost_reports);
            reports += level_reports;
            cost_micros += u128::from(r.cost_micros.wrapping_sub(before.cost_micros))
                + u128::from(completed.saturating_sub(level_reports)) * 1_000_000;
        }
    }
    if reports > 0 && cost_micros > 0 && w.completed > 0 {
        w.latency_nanos = w
            .latency_nanos
            .saturating_mul(u128::from(w.completed) * 1_000_000)
            / cost_micros;
    }
    w
}
