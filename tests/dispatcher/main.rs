//! The APF controller (the dispatcher) end to end, on the manual clock.
//! This file: the built-in configuration, classification to levels,
//! isolation between levels, reconfiguration, borrowing. One module a
//! concept besides: the dispatcher at the edges of its input (`edges`), a
//! configuration as a cluster prints it (`config_roundtrip`), learned cost
//! (`cost_learned`), the adaptive limit (`adaptive_limit`) and the
//! request-to-digest helper (`request_info`).
#![cfg(not(loom))]

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::queueset::RejectReason;
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

const SA_GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:tenant",
    "system:authenticated",
];

fn service_account_list(user: &'static str) -> RequestDigest<'static> {
    RequestDigest {
        user,
        groups: SA_GROUPS,
        verb: "list",
        is_resource_request: true,
        api_group: "",
        resource: "configmaps",
        namespace: "tenant",
        path: "/api/v1/namespaces/tenant/configmaps",
        ..RequestDigest::default()
    }
}

fn leader_election() -> RequestDigest<'static> {
    RequestDigest {
        user: "system:kube-scheduler",
        groups: &["system:authenticated"],
        verb: "update",
        is_resource_request: true,
        api_group: "coordination.k8s.io",
        resource: "leases",
        namespace: "kube-system",
        name: "kube-scheduler",
        path: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler",
        ..RequestDigest::default()
    }
}

fn node_heartbeat() -> RequestDigest<'static> {
    RequestDigest {
        user: "system:node:node-1",
        groups: &["system:nodes", "system:authenticated"],
        verb: "update",
        is_resource_request: true,
        api_group: "coordination.k8s.io",
        resource: "leases",
        namespace: "kube-node-lease",
        name: "node-1",
        path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1",
        ..RequestDigest::default()
    }
}

#[test]
fn requests_land_at_their_levels_with_names_and_uids() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    for (digest, schema, level) in [
        (
            service_account_list("system:serviceaccount:tenant:app"),
            "service-accounts",
            "workload-low",
        ),
        (
            leader_election(),
            "system-leader-election",
            "leader-election",
        ),
        (node_heartbeat(), "system-node-high", "node-high"),
    ] {
        let decision = d.start_request(&digest, one_seat(), None);
        assert_eq!(decision.flow_schema.name, schema, "{digest:?}");
        assert_eq!(decision.priority_level.name, level, "{digest:?}");
        assert!(matches!(decision.outcome, Outcome::Execute(_)));
    }
    for level in d.levels() {
        assert_eq!(
            level.stats().queueset.seats_in_use,
            0,
            "guards dropped: seats back at {}",
            level.name
        );
    }
}

/// A flood at workload-low fills its seats and queues, and is rejected once
/// its queues are full; leader election and node heartbeats at their own
/// levels still execute at once.
#[test]
fn a_flood_at_workload_low_does_not_delay_leader_election_or_node_high() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let low = d.level("workload-low").expect("built in");
    let mut held = Vec::new();
    let mut rejected = 0;
    for _ in 0..10_000 {
        match d
            .start_request(
                &service_account_list("system:serviceaccount:tenant:flooder"),
                one_seat(),
                None,
            )
            .outcome
        {
            Outcome::Rejected(RejectReason::QueueFull) => rejected += 1,
            Outcome::Rejected(other) => panic!("unexpected rejection {other}"),
            other => held.push(other),
        }
    }
    let stats = low.stats().queueset;
    assert_eq!(
        stats.seats_in_use, stats.concurrency_limit,
        "the flood holds every seat of workload-low"
    );
    assert!(
        stats.requests_waiting > 0 && rejected > 0,
        "the flood queues, then is rejected: {stats:?}"
    );
    for digest in [leader_election(), node_heartbeat()] {
        for _ in 0..5 {
            let decision = d.start_request(&digest, one_seat(), None);
            assert!(
                matches!(decision.outcome, Outcome::Execute(_)),
                "{} must not wait",
                decision.priority_level.name
            );
        }
    }
    drop(held);
    let stats = low.stats().queueset;
    assert_eq!(
        (stats.seats_in_use, stats.requests_waiting),
        (0, 0),
        "nothing admitted is lost"
    );
}

#[test]
fn an_invalid_reconfiguration_leaves_the_old_config_in_force() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let before: Vec<String> = d.levels().iter().map(|l| l.name.clone()).collect();
    let bad = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: broken}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse:
      type: Queue
      queuing: {queues: 4, handSize: 9, queueLengthLimit: 10}
"#;
    let config = Config::from_yaml_str(bad).expect("parses");
    let err = d
        .reconfigure(&config)
        .expect_err("hand size above queues is invalid");
    assert!(err.to_string().contains("handSize"), "{err}");
    let after: Vec<String> = d.levels().iter().map(|l| l.name.clone()).collect();
    assert_eq!(before, after);
}

/// A removed level lingers while a request holds seats in it; a level that
/// stays keeps its state.
#[test]
fn reconfiguration_keeps_surviving_levels_and_lets_removed_ones_drain() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let leader = d.level("leader-election").expect("built in");
    let held = d.start_request(
        &service_account_list("system:serviceaccount:tenant:a"),
        one_seat(),
        None,
    );
    let Outcome::Execute(guard) = held.outcome else {
        panic!("free seats")
    };
    let low = held.priority_level.clone();
    // Keep only the mandatory objects: workload-low disappears.
    d.reconfigure(&Config::mandatory()).expect("valid");
    assert!(d.level("workload-low").is_none());
    assert!(d.level("leader-election").is_none());
    assert_eq!(
        low.stats().queueset.seats_in_use,
        1,
        "the removed level still holds the running request"
    );
    drop(guard);
    assert_eq!(low.stats().queueset.seats_in_use, 0);
    // Back to the built-in config: levels are new, the old handle is not reused.
    d.reconfigure(&Config::builtin()).expect("valid");
    let again = d.level("leader-election").expect("back");
    assert!(!std::sync::Arc::ptr_eq(&leader, &again));
    // A reconfiguration that keeps a level keeps the very same level.
    d.reconfigure(&Config::builtin()).expect("valid");
    assert!(std::sync::Arc::ptr_eq(
        &again,
        &d.level("leader-election").expect("kept")
    ));
}

/// Borrowing: with workload-low saturated and every other level idle, the
/// next adjustment lends it seats, up to what the others can lend.
#[test]
fn a_busy_level_borrows_from_idle_ones_at_the_next_adjustment() {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: 600,
        ..DispatcherOptions::default()
    };
    let d = Dispatcher::builtin(options, clock);
    let low = d.level("workload-low").expect("built in");
    let nominal = low.stats().queueset.concurrency_limit;
    let mut held = Vec::new();
    for i in 0..2000 {
        let who: &'static str = if i % 2 == 0 {
            "system:serviceaccount:tenant:a"
        } else {
            "system:serviceaccount:tenant:b"
        };
        let decision = d.start_request(&service_account_list(who), one_seat(), None);
        if !matches!(decision.outcome, Outcome::Rejected(_)) {
            held.push(decision);
        }
    }
    manual.advance(Duration::from_secs(10));
    let grown = low.stats().queueset.concurrency_limit;
    assert!(
        grown > nominal,
        "workload-low borrowed: {nominal} -> {grown}"
    );
    drop(held);
}

/// Requests admitted on the lock-free path report their demand lazily
/// (through the level's event ring). Borrowing must still see them when its
/// period ends: a level busy only with such requests shows that demand in
/// the adjustment that follows, not zero.
#[test]
fn borrowing_sees_demand_admitted_on_the_lock_free_path() {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: 600,
        ..DispatcherOptions::default()
    };
    let d = Dispatcher::builtin(options, clock);
    let low = d.level("workload-low").expect("built in");
    let nominal = low.stats().queueset.concurrency_limit;
    // Fewer starts than the ring holds, all within the limit: no replay
    // happens on the way, so only the end-of-period refresh can report them.
    let wanted = 20.min(nominal) as usize;
    let mut held = Vec::new();
    for _ in 0..wanted {
        let decision = d.start_request(
            &service_account_list("system:serviceaccount:tenant:a"),
            one_seat(),
            None,
        );
        assert!(matches!(decision.outcome, Outcome::Execute(_)));
        held.push(decision);
    }
    manual.advance(Duration::from_secs(10));
    let report = d.borrowing().report();
    let low_report = report
        .levels
        .iter()
        .find(|l| l.name == "workload-low")
        .expect("workload-low is a borrowing level");
    assert_eq!(
        low_report.stats.high_watermark, wanted as u32,
        "the adjustment saw the {wanted} seats held since the period began"
    );
    drop(held);
}

#[test]
fn a_configuration_with_no_objects_is_refused_and_the_old_one_stays() {
    // Applied, an empty configuration would drop every suggested level and
    // send everybody to catch-all; `Config::mandatory()` is the explicit way.
    let options = DispatcherOptions::default();
    let e = Dispatcher::new(&Config::default(), options.clone(), Clock::manual().0)
        .expect_err("no objects");
    assert!(
        e.to_string()
            .contains("no FlowSchema or PriorityLevelConfiguration"),
        "{e}"
    );
    let d = Dispatcher::builtin(options, Clock::manual().0);
    let e = d.reconfigure(&Config::default()).expect_err("no objects");
    assert!(
        e.to_string()
            .contains("no FlowSchema or PriorityLevelConfiguration"),
        "{e}"
    );
    assert!(
        d.level("workload-low").is_some(),
        "the built-in levels stay"
    );
    d.reconfigure(&Config::mandatory())
        .expect("only the mandatory ones, on purpose");
    assert!(d.level("workload-low").is_none());
}

mod adaptive_cost;
mod adaptive_limit;
mod config_roundtrip;
mod cost_learned;
mod edges;
mod request_info;
