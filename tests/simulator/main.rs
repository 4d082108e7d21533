#![cfg(all(feature = "simulator", not(loom)))]
//! The simulator as a library: the example workloads, determinism, the
//! built-in noisy-neighbour scenario's verdict, and the workload features
//! (open and closed loops, phases, bursts, seats, additional latency,
//! timeouts) measured against what they should produce. Modules: the
//! adaptive limit judged in the simulator (`adaptive`) and seats that follow
//! real cost (`cost`).

use apf::config::Config;
use apf::queueset::RejectReason;
use apf::simulator::{self, Report, RunStats, Workload};
use std::time::Duration;

fn run(workload: &Workload, seed: u64) -> (Report, RunStats) {
    simulator::run(&Config::builtin(), workload, seed, &mut |_| {}).expect("simulation runs")
}

fn workload(yaml: &str) -> Workload {
    Workload::from_yaml_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The simulator's tallies agree with the dispatcher's own counters, and
/// with each other.
fn check_consistency(report: &Report, stats: &RunStats) {
    assert_eq!(stats.requests, report.requests);
    assert!(stats.events >= stats.requests);
    let arrived: u64 = report.flows.iter().map(|f| f.arrived).sum();
    assert_eq!(arrived, report.requests);
    for l in &report.levels {
        // The dispatcher counts a dispatch when it happens; the simulator
        // collects every decision before the end and cancels what still
        // waits, so both count the same dispatches.
        assert_eq!(
            l.dispatched, l.dispatcher_dispatched,
            "level {}: the simulator saw {} dispatches, the dispatcher counted {}",
            l.name, l.dispatched, l.dispatcher_dispatched
        );
        assert!(l.completed <= l.dispatched);
        assert_eq!(l.wait.count(), l.dispatched);
    }
    for f in &report.flows {
        assert!(f.dispatched + f.rejected_total() <= f.arrived, "{}", f.name);
        assert!(f.completed <= f.dispatched);
        assert_eq!(f.wait.count(), f.dispatched);
    }
    let share: f64 = report.flows.iter().map(|f| f.seat_share).sum();
    assert!(report.flows.iter().all(|f| f.seat_seconds == 0.0) || (share - 1.0).abs() < 1e-9);
    let n = report.series.times.len();
    assert!(n > 0);
    for l in 0..report.levels.len() {
        assert_eq!(report.series.level_queue_length[l].len(), n);
        assert_eq!(report.series.level_limit[l].len(), n);
    }
    // The per-interval counts of the charts add up to the totals.
    let s = &report.series;
    for (i, f) in report.flows.iter().enumerate() {
        assert_eq!(s.flow_arrived[i].len(), n);
        assert_eq!(
            s.flow_arrived[i].iter().sum::<u64>(),
            f.arrived,
            "{}",
            f.name
        );
        assert_eq!(
            s.flow_completed[i].iter().sum::<u64>(),
            f.completed,
            "{}",
            f.name
        );
    }
    for reason in RejectReason::ALL {
        let total: u64 = report
            .flows
            .iter()
            .map(|f| f.rejected[reason as usize])
            .sum();
        assert_eq!(
            s.rejected[reason as usize].iter().sum::<u64>(),
            total,
            "{reason:?}"
        );
    }
    for (f, per_interval) in report.flows.iter().zip(&report.series.flow_seat_seconds) {
        let sum: f64 = per_interval.iter().sum();
        assert!(
            (sum - f.seat_seconds).abs() <= 1e-6 * f.seat_seconds.max(1.0) + 1e-9
                || sum < f.seat_seconds,
            "{}: intervals {sum} vs total {}",
            f.name,
            f.seat_seconds
        );
    }
}

#[test]
fn every_example_workload_loads_and_runs() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/workloads");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        seen += 1;
        let w = Workload::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let short = w.duration.min(secs(4));
        let w = w.with_duration(short).unwrap();
        let (report, stats) = run(&w, 1);
        assert_eq!(report.flows.len(), w.flows.len(), "{}", path.display());
        assert!(report.requests > 0, "{}", path.display());
        check_consistency(&report, &stats);
        let text = report.render();
        for f in &report.flows {
            assert!(text.contains(&f.label()), "{}", path.display());
        }
        // The server-limit chart comes with an adaptive limit or a backend.
        let extra = usize::from(w.server.adaptive.is_some() || w.backend.is_some());
        assert_eq!(simulator::charts(&report).len(), 6 + extra);
    }
    assert!(seen >= 3, "examples/workloads holds the examples");
    assert_eq!(
        simulator::noisy_neighbour(),
        workload(&std::fs::read_to_string(format!("{dir}/noisy-neighbour.yaml")).unwrap()),
        "the built-in scenario is the example file"
    );
}

#[test]
fn same_seed_same_report_other_seed_other_report() {
    let w = simulator::noisy_neighbour()
        .with_duration(secs(12))
        .unwrap();
    let (a, _) = run(&w, 5);
    let (b, _) = run(&w, 5);
    assert_eq!(a, b, "deterministic for a seed");
    assert_eq!(a.render(), b.render());
    assert_eq!(simulator::charts(&a), simulator::charts(&b));
    let (c, _) = run(&w, 6);
    assert_ne!(a.requests, c.requests, "another seed, other arrivals");
}

/// The README's claim: the runaway is held back; the polite tenants on its
/// own level and the system traffic on theirs keep their service.
#[test]
fn noisy_neighbour_verdict_holds() {
    let w = simulator::noisy_neighbour()
        .with_duration(secs(20))
        .unwrap();
    let (report, stats) = run(&w, w.seed);
    check_consistency(&report, &stats);
    let verdict = report.verdict();
    assert!(verdict.pass, "{}", report.render());
    assert_eq!(verdict.checks.len(), 3);

    let runaway = report.flow("runaway-controller").unwrap();
    assert_eq!(runaway.level, "workload-low");
    assert!(runaway.rejected[RejectReason::QueueFull as usize] > 100_000);
    assert!(runaway.served < 0.6, "{}", runaway.served);

    let tenants = report.flow("tenant").unwrap();
    assert_eq!(
        tenants.level, "workload-low",
        "the same level as the runaway"
    );
    assert_eq!(tenants.rejected_total(), 0);
    assert!(tenants.served >= 0.97, "{}", tenants.served);
    assert!(tenants.worst_replica_served.unwrap() >= 0.9);
    let done = tenants.throughput * w.duration.as_secs_f64();
    assert!(
        (done - tenants.demand).abs() / tenants.demand < 0.05,
        "throughput {done} close to demand {}",
        tenants.demand
    );
    assert!(
        tenants.wait.quantile(0.99) < 20_000_000,
        "{:?}",
        tenants.wait
    );
    assert!(
        tenants.wait.quantile(0.5) * 10 < runaway.wait.quantile(0.5),
        "tenants wait far less than the runaway"
    );

    for (flow, level) in [
        ("node-heartbeat", "node-high"),
        ("leader-election", "leader-election"),
    ] {
        let f = report.flow(flow).unwrap();
        assert_eq!(f.level, level);
        assert!(f.served >= 0.95, "{flow}: {}", f.served);
        assert_eq!(f.rejected_total(), 0, "{flow}");
        let l = report.level(level).unwrap();
        assert_eq!(l.rejected_total(), 0, "{level}");
        assert_eq!(l.max_queue_length, 0, "{level} never queued");
        assert!(l.wait.max() < 1_000_000, "{level}: {:?}", l.wait);
    }
}

/// `expect:` with bounds (issue 13): a served fraction and a wait p99 per
/// flow. Checked on the noisy-neighbour report (expectations are read from
/// each flow's report, so no second run is needed).
#[test]
fn expectations_bound_the_served_fraction_and_the_wait_p99() {
    use apf::simulator::Expectation;
    let w = simulator::noisy_neighbour()
        .with_duration(secs(12))
        .unwrap();
    let (mut report, _) = run(&w, w.seed);
    let runaway_p99 = report
        .flow("runaway-controller")
        .unwrap()
        .wait
        .quantile(0.99);
    assert!(
        runaway_p99 > 1_000_000,
        "the runaway waits: {runaway_p99} ns"
    );
    for f in &mut report.flows {
        f.expect = match f.name.as_str() {
            // Served is not checked, the wait is: it fails.
            "runaway-controller" => Some(Expectation::Bounds {
                served: None,
                wait_p99: Some(Duration::from_millis(1)),
            }),
            // Both hold.
            "tenant" => Some(Expectation::Bounds {
                served: Some(0.9),
                wait_p99: Some(secs(1)),
            }),
            // A stricter served fraction than the workload's 95% holds too.
            "node-heartbeat" => Some(Expectation::Bounds {
                served: Some(0.99),
                wait_p99: None,
            }),
            _ => None,
        };
    }
    let verdict = report.verdict();
    assert!(!verdict.pass);
    assert_eq!(verdict.checks.len(), 3);
    let by_flow = |name: &str| verdict.checks.iter().find(|c| c.flow == name).unwrap();
    assert!(!by_flow("runaway-controller").pass);
    assert_eq!(by_flow("runaway-controller").served_bound, None);
    assert!(by_flow("tenant").pass);
    assert!(by_flow("node-heartbeat").pass);
    let text = report.render();
    assert!(
        text.contains(
            "verdict: FAIL — 2 of 3 flows met their expectations (served fraction, wait p99)"
        ),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("FAIL ") && l.contains("runaway-controller"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with("— wait p99 over 1.0 ms"), "{line}");
}

#[test]
fn open_loop_rate_phases_and_bursts() {
    let w = workload(
        "
duration: 10s
sampleInterval: 1s
flows:
  - name: app
    user: alice
    groups: [system:authenticated]
    resource: pods
    rate: 200
    service: 5ms
    phases: [{at: 4s, scale: 0}, {at: 6s, scale: 2}]
  - name: batch
    user: batch
    groups: [system:authenticated]
    resource: jobs
    bursts: [{at: 2s, requests: 50}, {at: 8s, requests: 30, over: 1s}]
",
    );
    let (report, stats) = run(&w, 9);
    check_consistency(&report, &stats);
    let app = report.flow("app").unwrap();
    // 4 s at 200/s and 4 s at 400/s: 2,400 expected, σ ≈ 49.
    assert!((2_200..=2_600).contains(&app.arrived), "{}", app.arrived);
    let series = &report.series.flow_seat_seconds[0];
    // Off from 4 s to 6 s (a request started before 4 s ends just after).
    assert!(
        series[4] < 0.05 && series[5] == 0.0,
        "off from 4 s to 6 s: {series:?}"
    );
    assert!(series[7] > series[2] * 1.5, "doubled from 6 s: {series:?}");
    let batch = report.flow("batch").unwrap();
    assert_eq!(batch.arrived, 80, "bursts only");
    assert_eq!(batch.completed, 80);
    let batch_series = &report.series.flow_seat_seconds[1];
    let active: Vec<usize> = (0..10).filter(|&k| batch_series[k] > 0.0).collect();
    assert_eq!(active, vec![2, 8], "{batch_series:?}");
}

#[test]
fn closed_loop_clients_seats_and_additional_latency() {
    let w = workload(
        "
duration: 10s
flows:
  - name: looper
    user: alice
    groups: [system:authenticated]
    resource: pods
    clients: 4
    think: 90ms
    service: 10ms
    expect: served
  - name: writer
    user: bob
    groups: [system:authenticated]
    verb: update
    resource: configmaps
    namespace: default
    clients: 1
    service: 10ms
    seats: {initial: 2, final: 3}
    additionalLatency: 20ms
",
    );
    let (report, stats) = run(&w, 2);
    check_consistency(&report, &stats);
    let looper = report.flow("looper").unwrap();
    // Four clients, one request every 100 ms each.
    assert!(
        (396.0..=404.0).contains(&looper.demand),
        "{}",
        looper.demand
    );
    assert!(
        (390..=404).contains(&looper.completed),
        "{}",
        looper.completed
    );
    assert!(looper.served > 0.98 && report.verdict().pass);
    let writer = report.flow("writer").unwrap();
    // Back to back: 1,000 requests in 10 s, each holding 2 seats for 10 ms
    // and then 3 seats for 20 ms.
    assert!(
        (999..=1_000).contains(&writer.completed),
        "{}",
        writer.completed
    );
    // The request still executing at the end adds at most one more.
    let per_request = 2.0 * 0.010 + 3.0 * 0.020;
    let expected = writer.completed as f64 * per_request;
    assert!(
        writer.seat_seconds >= expected - 1e-9 && writer.seat_seconds <= expected + per_request,
        "{} vs {expected}",
        writer.seat_seconds
    );
}

#[test]
fn client_timeouts_are_rejections_by_reason() {
    let w = workload(
        "
duration: 5s
server: {concurrencyLimit: 30}
flows:
  - name: impatient
    user: alice
    groups: [system:authenticated]
    resource: pods
    rate: 2000
    service: 20ms
    timeout: 5ms
",
    );
    let (report, stats) = run(&w, 4);
    check_consistency(&report, &stats);
    let f = report.flow("impatient").unwrap();
    assert!(
        f.rejected[RejectReason::TimeOut as usize] > 0,
        "{:?}",
        f.rejected
    );
    assert!(f.dispatched > 200, "{}", f.dispatched);
    assert!(f.wait.max() <= 5_000_000, "nothing waits past its timeout");
    let level = report.level("global-default").unwrap();
    assert_eq!(level.rejected, f.rejected);
}

#[test]
fn a_configuration_the_dispatcher_refuses_is_an_error() {
    let mut config = Config::builtin();
    config.priority_levels[0].metadata.name = String::new();
    let w = simulator::noisy_neighbour();
    let err = simulator::run(&config, &w, 1, &mut |_| {}).unwrap_err();
    assert!(err.to_string().starts_with("configuration: "), "{err}");
}

#[test]
fn progress_reaches_the_end() {
    let w = workload(
        "
duration: 2s
sampleInterval: 100ms
flows:
  - {name: a, user: u, groups: [system:authenticated], resource: pods, rate: 10}
",
    );
    let mut seen = Vec::new();
    simulator::run(&Config::builtin(), &w, 1, &mut |f| seen.push(f)).unwrap();
    assert_eq!(seen.len(), 20);
    assert!(seen.windows(2).all(|p| p[0] < p[1]));
    assert_eq!(seen.last(), Some(&1.0));
}

/// A workload that ends with thousands of requests still queued: the run's
/// end cancels them rather than letting seats freed at the end cascade
/// through them, so the dispatcher's counters equal the simulator's.
#[test]
fn a_backlog_at_the_end_is_cancelled_not_dispatched() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/configs");
    let w =
        Workload::from_slice(&std::fs::read(format!("{dir}/small-service-workload.yaml")).unwrap())
            .unwrap()
            .with_duration(secs(4))
            .unwrap();
    let (report, stats) = run(&w, 1);
    let level = report
        .levels
        .iter()
        .find(|l| l.name == "global-default")
        .unwrap();
    assert!(
        level.arrived > level.dispatched + 1000,
        "the workload leaves a backlog: {} arrived, {} dispatched",
        level.arrived,
        level.dispatched
    );
    check_consistency(&report, &stats);
}

/// The operator's charts: rejections over time by reason, throughput
/// against demand per flow, markers at phase changes and borrowing
/// adjustments, and each queuing level's capacity line.
#[test]
fn the_charts_show_rejections_demand_phases_borrowing_and_queue_capacity() {
    let w = simulator::noisy_neighbour()
        .with_duration(secs(14))
        .unwrap();
    let (report, stats) = run(&w, 3);
    check_consistency(&report, &stats);
    let charts: std::collections::BTreeMap<&str, String> =
        simulator::charts(&report).into_iter().collect();
    let names: Vec<&str> = charts.keys().copied().collect();
    assert_eq!(
        names,
        [
            "level-seats.svg",
            "queue-length.svg",
            "rejections.svg",
            "seat-share.svg",
            "throughput.svg",
            "wait-time.svg"
        ]
    );
    // The runaway's phase at 10 s, labelled on every chart over time.
    let s = &report.series;
    assert_eq!(
        s.phase_changes,
        [(10.0, "runaway-controller ×100".to_string())]
    );
    for chart in [
        "rejections.svg",
        "throughput.svg",
        "queue-length.svg",
        "level-seats.svg",
        "seat-share.svg",
    ] {
        assert!(
            charts[chart].contains("phase: runaway-controller ×100"),
            "{chart}"
        );
    }
    assert!(
        !charts["wait-time.svg"].contains("phase: "),
        "not a chart over time"
    );
    // Borrowing moves limits once the runaway's level fills.
    let moved = s.borrowing_adjustments();
    assert!(!moved.is_empty(), "limits moved");
    assert!(charts["level-seats.svg"].contains("borrowing moved a limit"));
    // The runaway is rejected after its phase starts, never before.
    let rejected_at = |k: usize| -> u64 { s.rejected.iter().map(|r| r[k]).sum() };
    let phase = s.times.iter().position(|&t| t > 10.0).unwrap();
    assert!((0..phase - 1).all(|k| rejected_at(k) == 0));
    assert!(rejected_at(s.times.len() - 1) > 0);
    for reason in ["queue-full", "time-out", "concurrency-limit", "cancelled"] {
        assert!(
            charts["rejections.svg"].contains(reason),
            "{reason} in the legend"
        );
    }
    // Demand (dashed) and throughput (solid) per flow.
    let throughput = &charts["throughput.svg"];
    assert!(
        throughput.contains("runaway-controller completed")
            && throughput.contains("runaway-controller arrived")
    );
    // The queue capacity line of each queuing level that saw traffic.
    let low = report
        .levels
        .iter()
        .find(|l| l.name == "workload-low")
        .unwrap();
    let capacity = low.queue_capacity.expect("workload-low queues");
    assert_eq!(capacity, 128 * 50);
    assert!(charts["queue-length.svg"].contains("workload-low capacity"));
    let exempt = report.levels.iter().find(|l| l.name == "exempt").unwrap();
    assert_eq!(exempt.queue_capacity, None);
}

mod adaptive;
mod adaptive_cost_reports;
mod cost;
