//! The periodic borrowing adjustment: every period (ten seconds by default)
//! on the crate's clock, end each level's demand period, update its
//! statistics, compute every CurrentCL and hand them to a callback.

use super::allocate::{allocate_current_cls, LevelDemand, Regime};
use super::integrator::SeatDemandHandle;
use super::limits::{
    level_limits, validate_levels, BorrowingConfigError, LevelConfig, LevelLimits,
};
use super::stats::SeatDemandStats;
use crate::clock::{Clock, Instant, Timer};
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
pub struct LevelReport {
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
    pub levels: Vec<LevelReport>,
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
                    LevelReport {
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
mod tests {
    use super::super::test_support::default_levels;
    use super::*;
    use crate::clock::ManualClock;

    type Log = Arc<Mutex<Vec<(u64, Vec<u32>)>>>;

    /// An adjuster on a manual clock whose callback logs (time in seconds,
    /// CurrentCLs).
    fn logged(
        server_cl: u32,
        levels: &[LevelConfig],
    ) -> (BorrowingAdjuster, ManualClock, Clock, Log) {
        let (clock, manual) = Clock::manual();
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let (log2, clock2) = (log.clone(), clock.clone());
        let adjuster = BorrowingAdjuster::new(
            &clock,
            server_cl,
            levels,
            AdjusterOptions::default(),
            move |cls| {
                let secs = clock2.now().as_nanos() / 1_000_000_000;
                lock(&log2).push((secs, cls.to_vec()));
            },
        )
        .expect("valid config");
        (adjuster, manual, clock, log)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn exempt_test_levels() -> Vec<LevelConfig> {
        vec![
            LevelConfig::limited("workload-high", 40).with_lendable_percent(50),
            LevelConfig::exempt("exempt").with_lendable_percent(50),
            LevelConfig::limited("workload-low", 100).with_lendable_percent(90),
            LevelConfig::limited("catch-all", 5),
        ]
    }

    #[test]
    fn adjusts_every_period_on_the_manual_clock() {
        let (adjuster, manual, _clock, log) = logged(600, &default_levels());
        assert_eq!(
            adjuster.next_adjustment(),
            Some(Instant::ZERO.saturating_add(secs(10)))
        );
        manual.advance(secs(9));
        assert!(lock(&log).is_empty());
        manual.advance(secs(25));
        let times: Vec<u64> = lock(&log).iter().map(|e| e.0).collect();
        assert_eq!(times, vec![10, 20, 30]);
        assert_eq!(lock(&log)[2].1, adjuster.current_cls());
    }

    /// Kubernetes' TestUpdateBorrowing (exempt_borrowing_test.go), driven
    /// through the integrators on the manual clock.
    #[test]
    fn kubernetes_exempt_borrowing_scenarios() {
        let (adjuster, manual, clock, log) = logged(870, &exempt_test_levels());
        let demand: Vec<SeatDemandHandle> =
            (0..4).map(|i| adjuster.seat_demand(i).unwrap()).collect();
        let last = || lock(&log).last().unwrap().1.clone();

        // 1: everyone wants more than the server has.
        for d in &demand {
            d.set(970, clock.now());
        }
        manual.advance(secs(10));
        assert_eq!(last(), vec![120, 970, 60, 30]);
        assert_eq!(adjuster.report().regime, Regime::Exhausted);

        // 2: exempt drops to 330; the high watermark needs one more period
        // to forget 970.
        demand[1].set(330, clock.now());
        manual.advance(secs(20));
        assert_eq!(last(), vec![180, 330, 330, 30]);
        assert_eq!(adjuster.report().regime, Regime::Squeezed);

        // 3: workload-low idles; exempt takes exactly what it lends.
        demand[1].set(540, clock.now());
        demand[2].set(1, clock.now());
        manual.advance(secs(20));
        assert_eq!(last(), vec![240, 540, 60, 30]);
    }

    /// Translation of Kubernetes' TestBorrowing: constant demand of 24 and 6
    /// seats on two levels of nominal 12 at ServerCL 24.
    #[test]
    fn kubernetes_borrowing_scenario_through_the_adjuster() {
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
        let (adjuster, manual, clock, _log) = logged(24, &levels);
        adjuster.seat_demand(0).unwrap().set(24, clock.now());
        adjuster.seat_demand(1).unwrap().set(6, clock.now());
        manual.advance(secs(10));
        assert_eq!(adjuster.current_cls(), vec![16, 8, 1, 0]);
        let report = adjuster.report();
        assert_eq!(report.levels[0].stats.smoothed, 24.0);
        assert_eq!(report.levels[0].target, 24.0);
        assert_eq!(report.levels[1].min_current_cl, 8);
    }

    /// A burst raises the smoothed demand at once; once it is over the
    /// CurrentCL follows the decay, not the instantaneous demand.
    #[test]
    fn smoothing_holds_borrowed_seats_while_demand_decays() {
        let levels = vec![
            LevelConfig::limited("busy", 50).with_lendable_percent(50),
            LevelConfig::limited("lender", 50).with_lendable_percent(100),
        ];
        let (adjuster, manual, clock, log) = logged(100, &levels);
        let busy = adjuster.seat_demand(0).unwrap();
        let lender = adjuster.seat_demand(1).unwrap();
        lender.set(10, clock.now());
        busy.set(90, clock.now());
        manual.advance(secs(10));
        // busy: target 90, lender: target 10 (both at their watermarks).
        assert_eq!(lock(&log)[0].1, vec![90, 10]);
        busy.set(40, clock.now());
        manual.advance(secs(10));
        // The period's watermark is still 90 (the demand it started with)
        // and busy's smoothed demand decays only to 0.977·90 + 0.023·40 =
        // 88.85, so busy keeps 100·88.85/98.85 ≈ 89.9 seats.
        let cls = &lock(&log)[1].1;
        assert_eq!(cls, &vec![90, 10]);
        let s = adjuster.report().levels[0].stats.smoothed;
        assert!((s - (0.977 * 90.0 + 0.023 * 40.0)).abs() < 1e-9, "{s}");
    }

    #[test]
    fn adjust_now_ends_the_period_early_and_restarts_the_timer() {
        let (adjuster, manual, clock, log) = logged(600, &default_levels());
        manual.advance(secs(4));
        adjuster
            .seat_demand_by_name("workload-low")
            .unwrap()
            .set(300, clock.now());
        adjuster.adjust_now();
        assert_eq!(lock(&log).len(), 1);
        assert_eq!(
            adjuster.next_adjustment(),
            Some(Instant::ZERO.saturating_add(secs(14)))
        );
        let wl = adjuster.report().levels[5].clone();
        assert_eq!(wl.name, "workload-low");
        assert_eq!(wl.stats.high_watermark, 300);
        assert_eq!(wl.stats.avg, 0.0, "300 for zero time of a 4 s period");
        manual.advance(secs(10));
        let times: Vec<u64> = lock(&log).iter().map(|e| e.0).collect();
        assert_eq!(times, vec![4, 14]);
        assert_eq!(adjuster.report().levels[5].stats.avg, 300.0);
    }

    #[test]
    fn reconfigure_keeps_matching_levels_and_starts_new_ones_at_zero() {
        let (adjuster, manual, clock, log) = logged(100, &exempt_test_levels());
        let high = adjuster.seat_demand(0).unwrap();
        high.set(500, clock.now());
        manual.advance(secs(10));
        let before = adjuster.report().levels[0].stats;
        assert_eq!(before.smoothed, 500.0);

        manual.advance(secs(3));
        let new_levels = vec![
            LevelConfig::limited("newcomer", 40).with_lendable_percent(100),
            LevelConfig::limited("workload-high", 40).with_lendable_percent(50),
            LevelConfig::limited("catch-all", 5),
        ];
        let mut published = Vec::new();
        adjuster
            .reconfigure(200, &new_levels, |cls| published = cls.to_vec())
            .unwrap();
        assert_eq!(lock(&log).len(), 1, "publish replaces the callback");
        assert_eq!(published, adjuster.current_cls());
        assert!(
            adjuster.seat_demand(1).unwrap().same_as(&high),
            "kept by name"
        );
        assert!(adjuster.seat_demand_by_name("exempt").is_none());
        let report = adjuster.report();
        assert_eq!(report.server_cl, 200);
        assert_eq!(report.levels[0].stats, SeatDemandStats::default());
        assert!(report.levels[1].stats.smoothed >= 500.0 * 0.977);
        assert_eq!(
            adjuster.next_adjustment(),
            Some(Instant::ZERO.saturating_add(secs(23)))
        );
        // NominalCLs 95, 95 and 12. The idle newcomer lends all of its 95
        // seats, catch-all keeps its 12, and workload-high, whose smoothed
        // demand is still 500, gets the remaining 190.
        assert_eq!(published, vec![0, 190, 12]);
    }

    #[test]
    fn invalid_reconfiguration_changes_nothing() {
        let (adjuster, _manual, _clock, _log) = logged(100, &exempt_test_levels());
        let before = adjuster.report();
        let bad = vec![LevelConfig::limited("a", 1), LevelConfig::limited("a", 1)];
        let err = adjuster.reconfigure(5, &bad, |_| panic!("not published"));
        assert_eq!(
            err,
            Err(BorrowingConfigError::DuplicateName { level: "a".into() })
        );
        assert_eq!(adjuster.report(), before);
    }

    #[test]
    fn periods_below_the_minimum_are_rejected_by_name() {
        let (clock, _manual) = Clock::manual();
        for period in [Duration::ZERO, Duration::from_nanos(1), secs(1) / 20] {
            let err = BorrowingAdjuster::new(&clock, 10, &[], AdjusterOptions { period }, |_| {})
                .unwrap_err();
            assert_eq!(
                err,
                BorrowingConfigError::AdjustmentPeriodTooShort { period }
            );
            assert!(err.to_string().contains("borrowing_period"), "{err}");
        }
        let ok = AdjusterOptions {
            period: MIN_ADJUSTMENT_PERIOD,
        };
        assert!(BorrowingAdjuster::new(&clock, 10, &[], ok, |_| {}).is_ok());
    }

    #[test]
    fn one_large_advance_coalesces_steady_periods() {
        let (adjuster, manual, _clock, log) = logged(600, &default_levels());
        // No demand at all: the first adjustment is already a fixed point,
        // so a thousand periods cost two adjustments, the first and the
        // last.
        manual.advance(secs(10_000));
        let at: Vec<u64> = lock(&log).iter().map(|(s, _)| *s).collect();
        assert_eq!(at, vec![10, 10_000]);
        assert_eq!(
            adjuster.next_adjustment(),
            Some(Instant::ZERO.saturating_add(secs(10_010)))
        );
        // Up to the end of time: a few more, not 1.8e9 of them.
        manual.advance(Duration::MAX);
        assert!(lock(&log).len() <= 4, "{}", lock(&log).len());
    }

    #[test]
    fn coalesced_adjustments_equal_adjusting_every_period() {
        // Demand that rises, falls and then decays through the smoothing:
        // one advance over 3,000 periods must end exactly where 3,000
        // advances of one period each do.
        let run = |one_step: bool| {
            let (adjuster, manual, clock, log) = logged(600, &default_levels());
            let demand = adjuster.seat_demand(1).unwrap();
            demand.set(500, clock.now());
            manual.advance(secs(25));
            demand.set(3, clock.now());
            if one_step {
                manual.advance(secs(30_000));
            } else {
                for _ in 0..3_000 {
                    manual.advance(secs(10));
                }
            }
            let calls = lock(&log).len();
            (adjuster.report(), adjuster.next_adjustment(), calls)
        };
        let (coalesced, next_c, calls_c) = run(true);
        let (stepwise, next_s, calls_s) = run(false);
        assert_eq!(coalesced, stepwise);
        assert_eq!(next_c, next_s);
        assert!(
            calls_c < calls_s,
            "{calls_c} adjustments, not fewer than {calls_s}"
        );
    }

    #[test]
    fn a_long_advance_settles_and_stops_adjusting_every_period() {
        let (adjuster, manual, clock, log) = logged(600, &default_levels());
        let demand = adjuster.seat_demand(1).unwrap();
        demand.set(500, clock.now());
        manual.advance(secs(5));
        demand.set(0, clock.now());
        // The smoothed demand decays by 2.3% a period: it takes some
        // thousands of periods to settle in f64, then the rest coalesces.
        manual.advance(Duration::MAX);
        let calls = lock(&log).len();
        assert!(calls < 50_000, "{calls} adjustments");
        let after = adjuster.report();
        assert!(after.levels.iter().all(|l| l.stats.avg == 0.0));
    }

    #[test]
    fn coalescing_stops_at_another_timers_deadline() {
        let (_adjuster, manual, clock, log) = logged(600, &default_levels());
        // Another timer (a level's wait limit, say) due at 1,005 s: the
        // adjustments on either side of it happen, then the gap to 3,000 s
        // coalesces too.
        let other = clock.timer(|_| {});
        other.set(Instant::ZERO.saturating_add(secs(1_005)));
        manual.advance(secs(3_000));
        let at: Vec<u64> = lock(&log).iter().map(|(s, _)| *s).collect();
        assert_eq!(at, vec![10, 1_000, 1_010, 3_000]);
    }

    #[test]
    fn a_panicking_callback_does_not_stop_the_adjustments() {
        let (clock, manual) = Clock::manual();
        let calls = Arc::new(Mutex::new(0));
        let calls2 = calls.clone();
        let _adjuster = BorrowingAdjuster::new(
            &clock,
            10,
            &[LevelConfig::limited("a", 1)],
            AdjusterOptions::default(),
            move |_| {
                *lock(&calls2) += 1;
                panic!("faulty callback");
            },
        )
        .unwrap();
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        manual.advance(secs(30));
        std::panic::set_hook(hook);
        assert_eq!(*lock(&calls), 3);
    }

    #[test]
    fn dropping_the_adjuster_stops_its_timer() {
        let (adjuster, manual, _clock, log) = logged(100, &exempt_test_levels());
        let demand = adjuster.seat_demand(0).unwrap();
        drop(adjuster);
        manual.advance(secs(60));
        assert!(lock(&log).is_empty());
        // The queueset may still hold its handle; feeding it is harmless.
        demand.set(3, Instant::ZERO);
    }

    #[test]
    fn the_callback_may_read_the_adjuster() {
        let (clock, manual) = Clock::manual();
        let slot: Arc<Mutex<Option<Arc<BorrowingAdjuster>>>> = Arc::new(Mutex::new(None));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (slot2, seen2) = (slot.clone(), seen.clone());
        let adjuster = Arc::new(
            BorrowingAdjuster::new(
                &clock,
                50,
                &default_levels(),
                AdjusterOptions::default(),
                move |cls| {
                    if let Some(a) = lock(&slot2).as_ref() {
                        assert_eq!(a.current_cls(), cls);
                        lock(&seen2).push(a.report().at);
                    }
                },
            )
            .unwrap(),
        );
        *lock(&slot) = Some(adjuster.clone());
        manual.advance(secs(10));
        assert_eq!(lock(&seen).len(), 1);
        lock(&slot).take();
    }
}
