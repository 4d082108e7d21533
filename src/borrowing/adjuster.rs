//! The periodic borrowing adjustment: every period (ten seconds by default)
//! on the crate's clock, end each level's demand period, update its
//! statistics, compute every CurrentCL and hand them to a callback.

use super::allocate::{allocate_current_cls, LevelDemand, Regime};
use super::limits::{
    level_limits, validate_levels, BorrowingConfigError, LevelConfig, LevelLimits,
};
use super::stats::SeatDemandStats;
use crate::clock::{Clock, Instant, Timer};
use crate::stats::SeatDemandHandle;
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// Kubernetes' borrowing adjustment period.
pub const DEFAULT_ADJUSTMENT_PERIOD: Duration = Duration::from_secs(10);

/// The shortest adjustment period accepted. Kubernetes' is fixed at ten
/// seconds; anything much shorter only measures noise, and each adjustment
/// takes every level's lock.
pub const MIN_ADJUSTMENT_PERIOD: Duration = Duration::from_millis(100);

/// A steady adjuster facing at least this many periods with nothing else
/// due skips to the last of them (see `Inner::on_timer`).
const COALESCE_AFTER_PERIODS: u64 = 64;

/// Tunables of a [`BorrowingAdjuster`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdjusterOptions {
    /// Time between adjustments; at least [`MIN_ADJUSTMENT_PERIOD`].
    pub period: Duration,
}

impl Default for AdjusterOptions {
    fn default() -> Self {
        AdjusterOptions {
            period: DEFAULT_ADJUSTMENT_PERIOD,
        }
    }
}

/// One level as the last adjustment saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelAdjustment {
    /// The level's name.
    pub name: String,
    /// Its configured limits (NominalCL, LendableCL, BorrowingCL).
    pub limits: LevelLimits,
    /// Its seat demand over the period just ended.
    pub stats: SeatDemandStats,
    /// max(MinCurrentCL, smoothed demand).
    pub target: f64,
    /// MinCurrentCL: the lower bound of its CurrentCL this time (its last
    /// period's high watermark of demand, clipped to MinCL..=NominalCL for
    /// a limited level).
    pub min_current_cl: u32,
    /// The CurrentCL (concurrency limit, in seats) it was given.
    pub current_cl: u32,
}

/// The last adjustment, for metrics and debugging.
#[derive(Debug, Clone, PartialEq)]
pub struct AdjustmentReport {
    /// When the adjustment ran.
    pub at: Instant,
    /// The server's concurrency limit shared by all levels.
    pub server_cl: u32,
    /// The FairProp found (zero unless `regime` is `Fair`).
    pub fair_prop: f64,
    /// How the CurrentCLs were found.
    pub regime: Regime,
    /// Every level, in configuration order.
    pub levels: Vec<LevelAdjustment>,
}

type Callback = Box<dyn Fn(&[u32]) + Send + Sync>;
// A plain std Arc: it only shares a closure, and loom's Arc cannot hold `dyn`.
type Refresher = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Runs borrowing for one set of priority levels.
///
/// The queueset of each level feeds the level's [`SeatDemandHandle`]
/// (from [`BorrowingAdjuster::seat_demand`]) on every change of its seat
/// demand. Every period the adjuster computes the CurrentCLs and calls the
/// callback with them, in the order of the configured levels. It also
/// adjusts at once on [`adjust_now`](Self::adjust_now) and
/// [`reconfigure`](Self::reconfigure), restarting the period. When one
/// manual-clock advance jumps over many periods in which nothing else falls
/// due and the statistics have settled, the adjustments that would all
/// compute the same are coalesced into one at the last period's end.
///
/// The callback runs on the clock's timer thread (inside
/// [`ManualClock::advance`](crate::clock::ManualClock::advance) for a manual
/// clock) or on the thread that asked for the adjustment. Calls never
/// overlap and come in the order the adjustments were made. The callback may
/// read the adjuster ([`current_cls`](Self::current_cls),
/// [`report`](Self::report), ...) but must not adjust or reconfigure it, and
/// must not block for long. A panic in the callback is caught and the
/// periodic adjustment goes on.
///
/// ```
/// use apf::borrowing::{AdjusterOptions, BorrowingAdjuster, LevelConfig};
/// use apf::clock::Clock;
/// use std::time::Duration;
///
/// let (clock, manual) = Clock::manual();
/// let levels = [
///     LevelConfig::exempt("exempt"),
///     LevelConfig::limited("busy", 50).with_lendable_percent(50),
///     LevelConfig::limited("idle", 50).with_lendable_percent(50),
/// ];
/// let adjuster =
///     BorrowingAdjuster::new(&clock, 100, &levels, AdjusterOptions::default(), |cls| {
///         // Hand each CurrentCL to its level's queueset here.
///         let _ = cls;
///     })
///     .unwrap();
/// // The queueset of "busy" reports 80 seats of demand.
/// adjuster.seat_demand(1).unwrap().set(80, clock.now());
/// manual.advance(Duration::from_secs(10));
/// // "idle" keeps its 25 unlendable seats; "busy" borrows the other 25.
/// assert_eq!(adjuster.current_cls(), vec![0, 75, 25]);
/// ```
pub struct BorrowingAdjuster {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Clock,
    period: Duration,
    callback: Callback,
    /// Brings the demand integrators up to date before a period ends (the
    /// queuesets report demand lazily); see [`BorrowingAdjuster::set_demand_refresher`].
    refresher: Mutex<Option<Refresher>>,
    /// Serialises adjustments together with their delivery, so callbacks
    /// see CurrentCLs in the order they were computed. Taken before `state`.
    adjusting: Mutex<()>,
    state: Mutex<State>,
    timer: Mutex<Option<Timer>>,
    stopped: AtomicBool,
}

struct State {
    server_cl: u32,
    levels: Vec<LevelState>,
    fair_prop: f64,
    regime: Regime,
    at: Instant,
    /// The last adjustment was a fixed point: every level's demand was
    /// constant through the period and its statistics came out unchanged
    /// (so the CurrentCLs, a function of them, did too). Until the demand
    /// changes, every later adjustment computes exactly the same.
    steady: bool,
}

struct LevelState {
    config: LevelConfig,
    limits: LevelLimits,
    demand: SeatDemandHandle,
    stats: SeatDemandStats,
    current_cl: u32,
}

impl LevelState {
    fn new(config: LevelConfig, limits: LevelLimits, now: Instant) -> Self {
        LevelState {
            config,
            limits,
            demand: {
                let demand = SeatDemandHandle::new(now);
                demand.with(|d| d.set_nominal(limits.nominal_cl, now));
                demand
            },
            stats: SeatDemandStats::default(),
            current_cl: 0,
        }
    }

    fn demand_input(&self) -> LevelDemand {
        LevelDemand {
            limits: self.limits,
            high_watermark: self.stats.high_watermark,
            smoothed: self.stats.smoothed,
        }
    }
}

impl BorrowingAdjuster {
    /// An adjuster for `levels` sharing `server_cl` seats. The initial
    /// CurrentCLs (all demand zero) are computed at once and readable with
    /// [`current_cls`](Self::current_cls); the callback is first called at
    /// the first adjustment, one period from now.
    pub fn new(
        clock: &Clock,
        server_cl: u32,
        levels: &[LevelConfig],
        options: AdjusterOptions,
        callback: impl Fn(&[u32]) + Send + Sync + 'static,
    ) -> Result<Self, BorrowingConfigError> {
        validate_levels(levels)?;
        if options.period < MIN_ADJUSTMENT_PERIOD {
            return Err(BorrowingConfigError::AdjustmentPeriodTooShort {
                period: options.period,
            });
        }
        let now = clock.now();
        let levels = level_limits(server_cl, levels)
            .into_iter()
            .zip(levels)
            .map(|(limits, config)| LevelState::new(config.clone(), limits, now))
            .collect();
        let mut state = State {
            server_cl,
            levels,
            fair_prop: 0.0,
            regime: Regime::Exhausted,
            at: now,
            steady: false,
        };
        state.adjust(now);
        let inner = Arc::new(Inner {
            clock: clock.clone(),
            period: options.period,
            callback: Box::new(callback),
            refresher: Mutex::new(None),
            adjusting: Mutex::new(()),
            state: Mutex::new(state),
            timer: Mutex::new(None),
            stopped: AtomicBool::new(false),
        });
        // The timer's callback owns the Arc, which makes a cycle through
        // `inner.timer`; `Drop` breaks it by dropping the timer.
        let on_timer = inner.clone();
        let timer = clock.timer(move |at| on_timer.on_timer(at));
        timer.set(now.saturating_add(options.period));
        *lock(&inner.timer) = Some(timer);
        Ok(BorrowingAdjuster { inner })
    }

    /// End the current period now: adjust, call the callback, and start
    /// the next period.
    pub fn adjust_now(&self) {
        let _adjusting = lock(&self.inner.adjusting);
        self.inner.refresh_demand();
        let now = self.inner.clock.now();
        let current = lock(&self.inner.state).adjust(now);
        self.inner.arm(now);
        (self.inner.callback)(&current);
    }

    /// Switch to a new set of levels or server limit, as KEP-1040 reacts to
    /// a configuration change: validated first (on error nothing changes);
    /// levels are matched by name, and a level that stays keeps its demand
    /// integrator and statistics while a new one starts at zero demand; the
    /// current period ends at once with an adjustment.
    ///
    /// The new CurrentCLs, in the order of `levels`, go to `publish`
    /// instead of the callback, while no other adjustment can run: publish
    /// the new level set there, so no callback ever pairs CurrentCLs with
    /// the wrong levels. `publish` must not adjust or reconfigure the
    /// adjuster.
    pub fn reconfigure(
        &self,
        server_cl: u32,
        levels: &[LevelConfig],
        publish: impl FnOnce(&[u32]),
    ) -> Result<(), BorrowingConfigError> {
        validate_levels(levels)?;
        let _adjusting = lock(&self.inner.adjusting);
        self.inner.refresh_demand();
        let now = self.inner.clock.now();
        let current = {
            let mut state = lock(&self.inner.state);
            state.replace_levels(server_cl, levels, now);
            state.adjust(now)
        };
        self.inner.arm(now);
        publish(&current);
        Ok(())
    }

    /// Share `server_cl` seats from now on (the adaptive limit's new
    /// total, see [`crate::adaptive`]): every level's limits are
    /// recomputed for it and the CurrentCLs allocated again from the
    /// demand statistics of the last adjustment, exactly what a fixed
    /// limit of `server_cl` would give with that demand, and handed to the
    /// callback. The demand period goes on (borrowing's statistics still
    /// cover whole periods). Nothing happens when the total is unchanged.
    pub fn set_server_cl(&self, server_cl: u32) {
        self.inner.set_server_cl(server_cl);
    }

    /// [`set_server_cl`](Self::set_server_cl) as a closure that keeps the
    /// adjuster's state alive (for the adaptive limit's timer).
    pub(crate) fn total_setter(&self) -> impl Fn(u32) + Send + Sync + 'static {
        let inner = self.inner.clone();
        move |server_cl| inner.set_server_cl(server_cl)
    }

    /// The seats shared by all levels now.
    pub fn server_cl(&self) -> u32 {
        lock(&self.inner.state).server_cl
    }

    /// [`reconfigure`](Self::reconfigure) keeping the total in force (for
    /// an adaptive total that a concurrent update may have just moved).
    pub(crate) fn reconfigure_keeping_total(
        &self,
        levels: &[LevelConfig],
        publish: impl FnOnce(&[u32]),
    ) -> Result<(), BorrowingConfigError> {
        validate_levels(levels)?;
        let _adjusting = lock(&self.inner.adjusting);
        self.inner.refresh_demand();
        let now = self.inner.clock.now();
        let current = {
            let mut state = lock(&self.inner.state);
            let server_cl = state.server_cl;
            state.replace_levels(server_cl, levels, now);
            state.adjust(now)
        };
        self.inner.arm(now);
        publish(&current);
        Ok(())
    }

    /// Call `refresh` at the end of every period (and before a
    /// reconfiguration), before the demand integrators are read: it should
    /// make every level report the demand changes it has not reported yet.
    /// It runs with adjustments serialised, so it must not adjust or
    /// reconfigure this adjuster; it may take the levels' locks (the order
    /// is adjuster, then level, then demand integrator).
    pub fn set_demand_refresher(&self, refresh: impl Fn() + Send + Sync + 'static) {
        *lock(&self.inner.refresher) = Some(std::sync::Arc::new(refresh));
    }

    /// The seat demand integrator the queueset of level `index` feeds.
    pub fn seat_demand(&self, index: usize) -> Option<SeatDemandHandle> {
        let state = lock(&self.inner.state);
        state.levels.get(index).map(|l| l.demand.clone())
    }

    /// The seat demand integrator of the level called `name`.
    pub fn seat_demand_by_name(&self, name: &str) -> Option<SeatDemandHandle> {
        let state = lock(&self.inner.state);
        let level = state.levels.iter().find(|l| l.config.name == name);
        level.map(|l| l.demand.clone())
    }

    /// The CurrentCLs of the last adjustment, in level order.
    pub fn current_cls(&self) -> Vec<u32> {
        let state = lock(&self.inner.state);
        state.levels.iter().map(|l| l.current_cl).collect()
    }

    /// Everything the last adjustment saw and decided.
    pub fn report(&self) -> AdjustmentReport {
        lock(&self.inner.state).report()
    }

    /// When the next periodic adjustment is due.
    pub fn next_adjustment(&self) -> Option<Instant> {
        lock(&self.inner.timer).as_ref().and_then(Timer::deadline)
    }

    /// The time between periodic adjustments.
    pub fn period(&self) -> Duration {
        self.inner.period
    }
}

impl Drop for BorrowingAdjuster {
    fn drop(&mut self) {
        self.inner.stopped.store(true, Ordering::Release);
        let timer = lock(&self.inner.timer).take();
        // Dropping the timer unregisters it, releasing its callback's Arc.
        drop(timer);
    }
}

impl fmt::Debug for BorrowingAdjuster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("BorrowingAdjuster")
            .field("period", &self.inner.period)
            .field("server_cl", &state.server_cl)
            .field("levels", &state.levels.len())
            .field("at", &state.at)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn on_timer(&self, at: Instant) {
        let _adjusting = lock(&self.adjusting);
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.refresh_demand();
        let (current, steady) = {
            let mut state = lock(&self.state);
            let current = state.adjust(at);
            (current, state.steady)
        };
        // One manual-clock advance can jump over many periods (by
        // UINT64_MAX through the C ABI: 1.8e9 of them). Once an adjustment
        // is a fixed point (see `State::steady`) and nothing else falls due
        // before the advance ends, every further adjustment in the gap would
        // compute exactly the same, so they are coalesced into one at the
        // last period's end. The result is the same as adjusting every
        // period; the work is bounded by how long the statistics take to
        // settle (a few thousand periods at most), not by the time passed.
        // Short gaps still get one callback per period, as callers expect.
        // The real clock's timer fires at the current time, so a stalled
        // process adjusts once, as Kubernetes' periodic goroutine does.
        let period = crate::clock::duration_nanos(self.period);
        let behind = self
            .clock
            .horizon()
            .as_nanos()
            .saturating_sub(at.as_nanos());
        if steady && behind / period >= COALESCE_AFTER_PERIODS {
            let last = at.as_nanos() + behind / period * period;
            if let Some(timer) = lock(&self.timer).as_ref() {
                timer.set(Instant::from_nanos(last));
            }
        } else {
            self.arm(at);
        }
        // The library must outlive a faulty callback: the timer thread is
        // shared by every timer of the clock.
        let _ = catch_unwind(AssertUnwindSafe(|| (self.callback)(&current)));
    }

    fn set_server_cl(&self, server_cl: u32) {
        let _adjusting = lock(&self.adjusting);
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        let now = self.clock.now();
        let current = {
            let mut state = lock(&self.state);
            if state.server_cl == server_cl {
                return;
            }
            state.rescale(server_cl, now)
        };
        let _ = catch_unwind(AssertUnwindSafe(|| (self.callback)(&current)));
    }

    fn refresh_demand(&self) {
        // Cloned out so the refresher runs without our lock: it takes the
        // levels' locks, and a faulty one must not poison adjustments.
        let refresher = lock(&self.refresher).clone();
        if let Some(refresh) = refresher {
            let _ = catch_unwind(AssertUnwindSafe(|| refresh()));
        }
    }

    /// Schedule the next periodic adjustment one period after `now`.
    fn arm(&self, now: Instant) {
        if let Some(timer) = lock(&self.timer).as_ref() {
            timer.set(now.saturating_add(self.period));
        }
    }
}

impl State {
    /// End every level's demand period at `now`, fold it into the
    /// statistics, and compute the CurrentCLs.
    fn adjust(&mut self, now: Instant) -> Vec<u32> {
        let mut steady = true;
        for level in &mut self.levels {
            let observed = level.demand.reset(now);
            let before = level.stats;
            level.stats.update(&observed);
            steady &= !observed.duration.is_zero()
                && observed.min == observed.max
                && level.stats == before;
        }
        self.steady = steady;
        let inputs: Vec<LevelDemand> = self.levels.iter().map(LevelState::demand_input).collect();
        let allocation = allocate_current_cls(&inputs);
        for (level, &cl) in self.levels.iter_mut().zip(&allocation.current_cls) {
            level.current_cl = cl;
        }
        self.fair_prop = allocation.fair_prop;
        self.regime = allocation.regime;
        self.at = now;
        allocation.current_cls
    }

    /// The CurrentCLs for a new total, from the statistics in hand.
    fn rescale(&mut self, server_cl: u32, now: Instant) -> Vec<u32> {
        let configs: Vec<LevelConfig> = self.levels.iter().map(|l| l.config.clone()).collect();
        for (level, limits) in self
            .levels
            .iter_mut()
            .zip(level_limits(server_cl, &configs))
        {
            level.demand.with(|d| d.set_nominal(limits.nominal_cl, now));
            level.limits = limits;
        }
        self.server_cl = server_cl;
        // The limits changed: the next adjustment is no fixed point.
        self.steady = false;
        let inputs: Vec<LevelDemand> = self.levels.iter().map(LevelState::demand_input).collect();
        let allocation = allocate_current_cls(&inputs);
        for (level, &cl) in self.levels.iter_mut().zip(&allocation.current_cls) {
            level.current_cl = cl;
        }
        self.fair_prop = allocation.fair_prop;
        self.regime = allocation.regime;
        allocation.current_cls
    }

    fn replace_levels(&mut self, server_cl: u32, configs: &[LevelConfig], now: Instant) {
        let mut old: Vec<Option<LevelState>> = self.levels.drain(..).map(Some).collect();
        let limits = level_limits(server_cl, configs);
        self.levels = configs
            .iter()
            .zip(limits)
            .map(|(config, limits)| {
                let kept = old
                    .iter_mut()
                    .find(|l| l.as_ref().is_some_and(|l| l.config.name == config.name))
                    .and_then(Option::take);
                match kept {
                    Some(level) => {
                        level.demand.with(|d| d.set_nominal(limits.nominal_cl, now));
                        LevelState {
                            config: config.clone(),
                            limits,
                            ..level
                        }
                    }
                    None => LevelState::new(config.clone(), limits, now),
                }
            })
            .collect();
        self.server_cl = server_cl;
    }

    fn report(&self) -> AdjustmentReport {
        AdjustmentReport {
            at: self.at,
            server_cl: self.server_cl,
            fair_prop: self.fair_prop,
            regime: self.regime,
            levels: self
                .levels
                .iter()
                .map(|l| {
                    let input = l.demand_input();
                    LevelAdjustment {
                        name: l.config.name.clone(),
                        limits: l.limits,
                        stats: l.stats,
                        target: input.target(),
                        min_current_cl: input.min_current_cl(),
                        current_cl: l.current_cl,
                    }
                })
                .collect(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
