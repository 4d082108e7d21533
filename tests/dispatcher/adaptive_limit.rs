//! The adaptive server concurrency limit in a dispatcher, on the manual
//! clock: off by default, options checked, the adapted total shared by
//! borrowing exactly as a fixed limit of the same size, exempt traffic never
//! limited by it, execution times measured by the probe, shown in the
//! metrics and the dump, and kept across a reconfiguration.
#![cfg(not(loom))]

use apf::adaptive::AdaptiveOptions;
use apf::classification::RequestDigest;
use apf::clock::{Clock, ManualClock};
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherError, DispatcherOptions, Outcome};
use apf::level::{RequestGuard, RequestTicket};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

/// A service account's list: workload-low in the built-in configuration.
fn tenant_list() -> RequestDigest<'static> {
    RequestDigest {
        user: "system:serviceaccount:tenant:app",
        groups: &[
            "system:serviceaccounts",
            "system:serviceaccounts:tenant",
            "system:authenticated",
        ],
        verb: "list",
        is_resource_request: true,
        resource: "configmaps",
        namespace: "tenant",
        path: "/api/v1/namespaces/tenant/configmaps",
        ..RequestDigest::default()
    }
}

/// A cluster admin's request: the exempt level.
fn admin_get() -> RequestDigest<'static> {
    RequestDigest {
        user: "admin",
        groups: &["system:masters", "system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "nodes",
        path: "/api/v1/nodes",
        ..RequestDigest::default()
    }
}

fn adaptive(options: AdaptiveOptions, initial: u32) -> (Dispatcher, ManualClock) {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: initial,
        adaptive: Some(options),
        ..DispatcherOptions::default()
    };
    let d = Dispatcher::new(&Config::builtin(), options, clock).expect("valid options");
    (d, manual)
}

fn fixed(total: u32) -> (Dispatcher, ManualClock) {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: total,
        ..DispatcherOptions::default()
    };
    (Dispatcher::builtin(options, clock), manual)
}

/// Bounds that pin the gradient's total to `total`.
fn pinned(total: u32) -> AdaptiveOptions {
    AdaptiveOptions {
        min_limit: total,
        max_limit: total,
        ..AdaptiveOptions::default()
    }
}

#[test]
fn off_by_default_and_then_nothing_shows() {
    assert_eq!(DispatcherOptions::default().adaptive, None);
    let (d, _manual) = fixed(600);
    assert_eq!(d.adaptive(), None);
    assert_eq!(d.server_concurrency_limit(), 600);
    assert!(!d.metrics_text().contains("adaptive_"));
    assert_eq!(d.dump_adaptive_limit().lines().count(), 1);
}

#[test]
fn out_of_range_options_are_refused_by_name() {
    let (clock, _manual) = Clock::manual();
    let options = DispatcherOptions {
        adaptive: Some(AdaptiveOptions {
            smoothing_percent: 0,
            ..AdaptiveOptions::default()
        }),
        ..DispatcherOptions::default()
    };
    match Dispatcher::new(&Config::builtin(), options, clock) {
        Err(DispatcherError::Adaptive(e)) => {
            assert_eq!(e.field, "smoothing_percent");
            assert!(e.to_string().contains("smoothing_percent"), "{e}");
        }
        other => panic!("expected an adaptive options error, got {other:?}"),
    }
}

#[test]
fn the_adapted_total_is_shared_as_a_fixed_limit_of_that_size() {
    for total in [20, 150, 600, 5_000] {
        let (d, manual) = adaptive(pinned(total), total);
        let opts = d.adaptive().unwrap().options;
        // It starts probing, with the probe's total shared by borrowing.
        assert_eq!(d.server_concurrency_limit(), opts.probe_limit);
        assert_eq!(
            d.current_limits(),
            fixed(opts.probe_limit).0.current_limits()
        );
        // No completion: the probe times out, and the gradient's total
        // (pinned here) takes over.
        manual.advance(opts.probe_timeout + opts.update_interval * 2);
        let report = d.adaptive().unwrap();
        assert!(!report.probing, "{report:?}");
        assert_eq!(d.server_concurrency_limit(), total);
        let (f, _fm) = fixed(total);
        assert_eq!(d.current_limits(), f.current_limits(), "total {total}");
        let (a, b) = (d.borrowing().report(), f.borrowing().report());
        assert_eq!(a.server_cl, b.server_cl);
        for (x, y) in a.levels.iter().zip(&b.levels) {
            assert_eq!(x.limits, y.limits, "{}", x.name);
            assert_eq!(x.current_cl, y.current_cl, "{}", x.name);
        }
    }
}

#[test]
fn borrowing_shares_the_adapted_total_with_demand_as_it_shares_a_fixed_one() {
    let total = 200;
    let (d, manual) = adaptive(pinned(total), total);
    let (f, fixed_manual) = fixed(total);
    // Fifty requests at workload-low on both, held: executing or queued,
    // the level's seat demand is fifty either way.
    let mut held: Vec<Outcome> = Vec::new();
    for _ in 0..50 {
        for x in [&d, &f] {
            let out = x.start_request(&tenant_list(), one_seat(), None).outcome;
            assert!(!matches!(out, Outcome::Rejected(_)));
            held.push(out);
        }
    }
    // Past one borrowing period: both adjusted from the same demand.
    let step = Duration::from_millis(250);
    for _ in 0..44 {
        manual.advance(step);
        fixed_manual.advance(step);
    }
    assert_eq!(d.server_concurrency_limit(), total);
    let (a, b) = (d.borrowing().report(), f.borrowing().report());
    assert!(a.levels.iter().any(|l| l.stats.high_watermark >= 50));
    for (x, y) in a.levels.iter().zip(&b.levels) {
        assert_eq!(x.stats, y.stats, "{}", x.name);
        assert_eq!(x.current_cl, y.current_cl, "{}", x.name);
    }
    assert_eq!(d.current_limits(), f.current_limits());
    drop(held);
}

#[test]
fn exempt_traffic_is_never_limited_by_the_adapted_total() {
    let opts = AdaptiveOptions {
        min_limit: 1,
        max_limit: 1,
        probe_limit: 1,
        ..AdaptiveOptions::default()
    };
    let (d, manual) = adaptive(opts, 1);
    manual.advance(Duration::from_secs(3));
    assert_eq!(d.server_concurrency_limit(), 1);
    let mut guards: Vec<RequestGuard> = Vec::new();
    for i in 0..500 {
        match d.start_request(&admin_get(), one_seat(), None).outcome {
            Outcome::Execute(g) => guards.push(g),
            other => panic!("exempt request {i} not executed at once: {other:?}"),
        }
    }
    // The limited levels are held to the total meanwhile.
    let mut tenants = Vec::new();
    let mut executing = 0;
    for _ in 0..20 {
        let out = d.start_request(&tenant_list(), one_seat(), None).outcome;
        executing += u32::from(matches!(out, Outcome::Execute(_)));
        tenants.push(out);
    }
    assert!(
        executing <= 1,
        "{executing} tenants executing under a total of 1"
    );
}

/// Keeps `n` tenant requests executing, each for `latency`, for `secs`,
/// stepping the clock by 1 ms; returns the completions.
fn closed_loop(
    d: &Dispatcher,
    manual: &ManualClock,
    n: usize,
    latency: Duration,
    secs: u64,
) -> u64 {
    let mut running: Vec<RequestGuard> = Vec::new();
    let mut waiting: Vec<RequestTicket> = Vec::new();
    let mut done = 0;
    for _ in 0..secs * 1000 {
        let now = d.clock().now();
        let (due, keep): (Vec<RequestGuard>, Vec<RequestGuard>) = running
            .into_iter()
            .partition(|g| now.saturating_since(g.start_time()) >= latency);
        running = keep;
        done += due.len() as u64;
        drop(due);
        let mut still = Vec::new();
        for mut t in waiting {
            match t.poll() {
                Some(Ok(g)) => running.push(g),
                Some(Err(_)) => {}
                None => still.push(t),
            }
        }
        waiting = still;
        while running.len() + waiting.len() < n {
            match d.start_request(&tenant_list(), one_seat(), None).outcome {
                Outcome::Execute(g) => running.push(g),
                Outcome::Queued(t) => waiting.push(t),
                Outcome::Rejected(_) => break,
            }
        }
        manual.advance(Duration::from_millis(1));
    }
    done
}

#[test]
fn the_probe_measures_execution_times_and_the_metrics_and_dump_show_them() {
    let opts = AdaptiveOptions {
        probe_samples: 20,
        ..AdaptiveOptions::default()
    };
    let (d, manual) = adaptive(opts, 100);
    let done = closed_loop(&d, &manual, 10, Duration::from_millis(20), 4);
    assert!(done > 100, "{done}");
    let a = d.adaptive().unwrap();
    let min = a.min_latency_secs.expect("the probe measured");
    assert!((0.020..0.0215).contains(&min), "{min}");
    assert!(!a.probing);
    // Ten requests outstanding at the minimum latency: app-limited, so
    // the total never grows past where it started.
    assert!(a.limit <= 100, "{a:?}");
    assert_eq!(d.server_concurrency_limit(), a.limit);
    let text = d.metrics_text();
    for series in [
        "apiserver_flowcontrol_adaptive_server_concurrency_limit ",
        "apiserver_flowcontrol_adaptive_limit_estimate ",
        "apiserver_flowcontrol_adaptive_min_latency_seconds ",
        "apiserver_flowcontrol_adaptive_latency_seconds ",
        "apiserver_flowcontrol_adaptive_gradient ",
        "apiserver_flowcontrol_adaptive_probing 0",
        "apiserver_flowcontrol_adaptive_probes_total 1",
    ] {
        assert!(text.contains(series), "no {series:?} in\n{text}");
    }
    let dump = d.dump_adaptive_limit();
    let rows: Vec<&str> = dump.lines().collect();
    assert_eq!(rows.len(), 2, "{dump}");
    assert!(rows[0].starts_with("Limit,"), "{dump}");
    assert!(rows[1].starts_with(&format!("{},", a.limit)), "{dump}");
}

#[test]
fn latency_above_tolerance_brings_the_total_down() {
    let (d, manual) = adaptive(AdaptiveOptions::default(), 200);
    // Probe at 20 ms, and a slow start while the latency stays there...
    closed_loop(&d, &manual, 150, Duration::from_millis(20), 6);
    let before = d.server_concurrency_limit();
    assert!(before >= 100, "{before}");
    // ...then the same load takes three times as long.
    closed_loop(&d, &manual, 150, Duration::from_millis(60), 2);
    let after = d.adaptive().unwrap();
    assert!(after.gradient < 1.0, "{after:?}");
    assert!(after.limit < before / 2, "{before} -> {after:?}");
    assert_eq!(d.server_concurrency_limit(), after.limit);
}

#[test]
fn a_reconfiguration_keeps_the_adapted_total() {
    let (d, manual) = adaptive(pinned(321), 321);
    manual.advance(Duration::from_secs(3));
    assert_eq!(d.server_concurrency_limit(), 321);
    d.reconfigure(&Config::builtin()).unwrap();
    assert_eq!(d.server_concurrency_limit(), 321);
    let (f, _fm) = fixed(321);
    assert_eq!(d.current_limits(), f.current_limits());
}
