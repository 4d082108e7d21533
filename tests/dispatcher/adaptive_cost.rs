//! The adaptive limit divides its latency samples by the costs servers
//! report at finish (`RequestGuard::finish_with_cost`): on the manual
//! clock, a backend that never slows with concurrency sees its load shift
//! from cheap requests (10 ms) to costly ones (40 ms). Without reports the
//! shift reads as congestion (four times the probed minimum) and the total
//! falls towards `min_limit`; with each request reporting its cost (1 and 4
//! seats) the latency per seat stays at the minimum and the total holds.
#![cfg(not(loom))]

use apf::adaptive::AdaptiveOptions;
use apf::classification::RequestDigest;
use apf::clock::{Clock, ManualClock};
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::{RequestGuard, RequestTicket};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

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

fn adaptive() -> (Dispatcher, ManualClock) {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: 200,
        adaptive: Some(AdaptiveOptions {
            probe_samples: 20,
            ..AdaptiveOptions::default()
        }),
        ..DispatcherOptions::default()
    };
    let d = Dispatcher::new(&Config::builtin(), options, clock).expect("valid options");
    (d, manual)
}

/// `n` requests always outstanding, each executing `latency` (whatever
/// the concurrency), for `millis` of manual time; each finishes reporting
/// `cost` if given.
fn closed_loop(
    d: &Dispatcher,
    manual: &ManualClock,
    n: usize,
    latency: Duration,
    cost: Option<f64>,
    millis: u64,
) {
    let mut running: Vec<RequestGuard> = Vec::new();
    let mut waiting: Vec<RequestTicket> = Vec::new();
    for _ in 0..millis {
        let now = d.clock().now();
        let (due, keep): (Vec<RequestGuard>, Vec<RequestGuard>) = running
            .into_iter()
            .partition(|g| now.saturating_since(g.start_time()) >= latency);
        running = keep;
        for g in due {
            match cost {
                Some(c) => g.finish_with_cost(c).expect("a valid cost"),
                None => g.finish(),
            }
        }
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
            let one_seat = WorkEstimate::new(1, 0, Duration::ZERO);
            match d.start_request(&tenant_list(), one_seat, None).outcome {
                Outcome::Execute(g) => running.push(g),
                Outcome::Queued(t) => waiting.push(t),
                Outcome::Rejected(_) => break,
            }
        }
        manual.advance(Duration::from_millis(1));
    }
}

/// The total after 6 s of cheap requests, then after 6 s of costly ones.
fn shift(report_costs: bool) -> (u32, u32, f64) {
    let (d, manual) = adaptive();
    let cost = |c: f64| report_costs.then_some(c);
    closed_loop(&d, &manual, 60, Duration::from_millis(10), cost(1.0), 6_000);
    let a = d.adaptive().unwrap();
    let min = a.min_latency_secs.expect("the probe measured");
    assert!((0.0099..0.0101).contains(&min), "{a:?}");
    let before = a.limit;
    closed_loop(&d, &manual, 60, Duration::from_millis(40), cost(4.0), 6_000);
    let a = d.adaptive().unwrap();
    (before, a.limit, a.latency_secs.unwrap())
}

#[test]
fn a_costlier_mix_without_reports_reads_as_congestion() {
    let (before, after, latency) = shift(false);
    assert!(before > 20, "the slow start grew the total: {before}");
    assert!((0.039..0.041).contains(&latency), "{latency}");
    // A 0.9 gradient every window (the latency 4 × the minimum): seen
    // 442 -> 35 in the 6 s.
    assert!(after * 4 <= before, "{before} -> {after}");
}

#[test]
fn reported_costs_keep_the_latency_per_seat_and_the_total() {
    let (before, after, latency) = shift(true);
    assert!(before > 20, "the slow start grew the total: {before}");
    // 40 ms for 4 seats: 10 ms a seat, the probed minimum.
    assert!((0.0099..0.0101).contains(&latency), "{latency}");
    assert!(after >= before, "{before} -> {after}");
}
