#![cfg(all(feature = "simulator", not(loom)))]
//! Seats that follow real cost (issue 11 part 3), on simulator workloads
//! on the manual clock: long requests that keep their seats starve the
//! other flow of their level, and releasing the seats after the initial
//! phase keeps the victims within 10% of their max-min fair share.

use apf::config::Config;
use apf::simulator::{self, Report, Workload};

fn run(yaml: &str) -> Report {
    let w = Workload::from_yaml_str(yaml).unwrap_or_else(|e| panic!("{e}"));
    simulator::run(&Config::builtin(), &w, 1, &mut |_| {})
        .expect("simulation runs")
        .0
}

/// Watches (32 clients, each keeping a 10 s watch open) and short GETs (64
/// clients back to back) share the global-default level. `release` is the
/// watches' `releaseSeatsAfter` line, if any.
fn watches_and_victims(release: &str) -> String {
    format!(
        "
duration: 30s
server: {{concurrencyLimit: 30}}
flows:
  - name: watches
    user: watcher
    groups: [system:authenticated]
    verb: watch
    resource: pods
    clients: 32
    service: 10s
    {release}
  - name: victims
    user: victim
    groups: [system:authenticated]
    resource: configmaps
    clients: 64
    service: 50ms
"
    )
}

/// The victims' average seats, and their max-min fair share of the level's
/// seats: what the watches do not need, and at least half (two flows that
/// both want more than the level has). The victims' 64 clients always want
/// more seats than the level has, whatever borrowing lends it.
fn victims_and_fair_share(report: &Report) -> (f64, f64) {
    let secs = 30.0;
    let watches = report.flow("watches").unwrap();
    let victims = report.flow("victims").unwrap();
    assert_eq!(watches.level, victims.level, "one level");
    let level = report.level(&victims.level).unwrap();
    let limit = level.mean_limit.expect("a limited level");
    let watch_seats = watches.seat_seconds / secs;
    let fair = (limit - watch_seats).max(limit / 2.0);
    (victims.seat_seconds / secs, fair)
}

#[test]
fn watches_pin_the_level_unless_they_release_their_seats() {
    let pinned = run(&watches_and_victims(""));
    let (got, fair) = victims_and_fair_share(&pinned);
    eprintln!("pinned: victims {got:.2} seats, fair {fair:.2}");
    assert!(
        got < 0.5 * fair,
        "static seats: the watches pin the level, victims {got:.2} seats of a fair {fair:.2}"
    );
    let released = run(&watches_and_victims("releaseSeatsAfter: 100ms"));
    let (got, fair) = victims_and_fair_share(&released);
    assert!(
        got >= 0.9 * fair,
        "released seats: victims {got:.2} seats of a fair {fair:.2}"
    );
    eprintln!("released: victims {got:.2} seats, fair {fair:.2}");
}

#[test]
fn release_after_must_be_positive() {
    let e = Workload::from_yaml_str(&watches_and_victims("releaseSeatsAfter: 0s")).unwrap_err();
    assert!(e.to_string().contains("flows[0].releaseSeatsAfter"), "{e}");
}

/// LISTs estimated at 1 seat that really cost 10 (32 clients, 100 ms) and
/// GETs that cost their 1 seat (160 clients, 50 ms) share one level of
/// about 77 seats (up to 10 per request), whose flow schema estimates
/// `cost` (`static` or `learned`: from the costs the requests report at
/// their finish).
fn lists_and_victims(cost: &str) -> Report {
    let config = Config::from_yaml_str(&format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: shared}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 100
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Queue, queuing: {{queues: 64, handSize: 6, queueLengthLimit: 200}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: everyone
  annotations: {{apf.libapf.io/cost: {cost}}}
spec:
  priorityLevelConfiguration: {{name: shared}}
  matchingPrecedence: 100
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: Group, group: {{name: system:authenticated}}}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}}]
"#
    ))
    .expect("parses");
    let w = Workload::from_yaml_str(
        "
duration: 30s
server: {concurrencyLimit: 80}
flows:
  - name: lists
    user: lister
    groups: [system:authenticated]
    verb: list
    resource: pods
    clients: 32
    service: 100ms
    actualSeats: 10
  - name: victims
    user: victim
    groups: [system:authenticated]
    resource: configmaps
    clients: 160
    service: 50ms
    actualSeats: 1
",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    simulator::run(&config, &w, 1, &mut |_| {})
        .expect("simulation runs")
        .0
}

#[test]
fn learned_costs_keep_victims_within_10_percent_of_their_share_of_real_work() {
    // Both flows want more than the level has: max-min gives each half of
    // the server's real work.
    let fair = 0.5;
    let fixed = lists_and_victims("static");
    let victims = fixed.flow("victims").unwrap();
    let lists = fixed.flow("lists").unwrap();
    assert_eq!(lists.level, victims.level, "one level");
    eprintln!(
        "static: victims' share of real work {:.3}",
        victims.cost_share
    );
    assert!(
        victims.cost_share < 0.5 * fair,
        "static estimate: the LISTs take ten times the work their seats say, victims {:.3}",
        victims.cost_share
    );
    let learned = lists_and_victims("learned");
    let victims = learned.flow("victims").unwrap();
    eprintln!(
        "learned: victims' share of real work {:.3}",
        victims.cost_share
    );
    assert!(
        (victims.cost_share - fair).abs() <= 0.1 * fair,
        "learned estimate: victims {:.3} of a fair {fair}",
        victims.cost_share
    );
}

#[test]
fn actual_seats_must_be_a_seat_count() {
    let e = Workload::from_yaml_str(&watches_and_victims("actualSeats: -1")).unwrap_err();
    assert!(e.to_string().contains("flows[0].actualSeats"), "{e}");
}
