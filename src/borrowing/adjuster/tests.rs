use super::super::test_support::default_levels;
use super::*;
use crate::clock::ManualClock;

type Log = Arc<Mutex<Vec<(u64, Vec<u32>)>>>;

/// An adjuster on a manual clock whose callback logs (time in seconds,
/// CurrentCLs).
fn logged(server_cl: u32, levels: &[LevelConfig]) -> (BorrowingAdjuster, ManualClock, Clock, Log) {
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
    let demand: Vec<SeatDemandHandle> = (0..4).map(|i| adjuster.seat_demand(i).unwrap()).collect();
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
