//! The dispatcher at the edges of its input, on the manual clock: an exempt
//! request claiming every seat there is, and a configuration whose flow
//! schema names a priority level that does not exist.
#![cfg(not(loom))]

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::work_estimate::{WorkEstimate, EXEMPT_MAX_SEATS};
use std::time::Duration;

fn admin() -> RequestDigest<'static> {
    RequestDigest {
        user: "admin",
        groups: &["system:masters", "system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "pods",
        namespace: "default",
        path: "/api/v1/namespaces/default/pods",
        ..RequestDigest::default()
    }
}

/// The limits borrowing gives the limited levels while one exempt request
/// of `seats` runs through a whole adjustment period.
fn limits_with_exempt_request(seats: u32) -> (Vec<(String, Option<u32>)>, u64) {
    let (clock, manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let decision = d.start_request(
        &admin(),
        WorkEstimate::new(seats, seats, Duration::ZERO),
        None,
    );
    assert_eq!(decision.priority_level.name, "exempt");
    let Outcome::Execute(guard) = decision.outcome else {
        panic!("exempt requests execute at once")
    };
    let held = d.level("exempt").unwrap().seats_in_use();
    manual.advance(Duration::from_secs(10));
    let limits = d.current_limits();
    drop(guard);
    (limits, held)
}

#[test]
fn an_exempt_request_is_capped_as_kubernetes_caps_estimates() {
    let (huge, held) = limits_with_exempt_request(u32::MAX);
    assert_eq!(held, u64::from(EXEMPT_MAX_SEATS), "seats capped");
    // The borrowing that follows is what a request at the cap causes, not
    // every limited level squeezed to its floor.
    let (at_cap, _) = limits_with_exempt_request(EXEMPT_MAX_SEATS);
    assert_eq!(huge, at_cap);
    let (idle, _) = limits_with_exempt_request(1);
    let sum = |l: &[(String, Option<u32>)]| l.iter().filter_map(|(_, cl)| *cl).sum::<u32>();
    assert!(
        sum(&huge) + EXEMPT_MAX_SEATS >= sum(&idle),
        "limited levels lose at most the cap: {huge:?} vs {idle:?}"
    );
}

#[test]
fn many_exempt_requests_are_counted_without_truncation() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let exempt = d.level("exempt").unwrap();
    let mut held = Vec::new();
    for _ in 0..1000 {
        held.push(d.start_request(
            &admin(),
            WorkEstimate::new(u32::MAX, 0, Duration::ZERO),
            None,
        ));
    }
    assert_eq!(exempt.seats_in_use(), 1000 * u64::from(EXEMPT_MAX_SEATS));
    assert_eq!(
        u64::from(exempt.stats().queueset.seats_in_use),
        exempt.seats_in_use()
    );
    drop(held);
    assert_eq!(exempt.seats_in_use(), 0);
}

/// A cluster dump whose flow schema names a priority level nobody created.
const DANGLING: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: orphan}
spec:
  priorityLevelConfiguration: {name: no-such-level}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: Group, group: {name: "system:masters"}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
"#;

#[test]
fn a_flow_schema_naming_a_missing_level_is_accepted_dangling_with_a_warning() {
    let config = Config::from_yaml_str(DANGLING).expect("parses");
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::new(&config, DispatcherOptions::default(), clock).expect("accepted");
    let warnings = d.config_notices();
    assert!(
        warnings
            .iter()
            .any(|n| n.to_string().contains("orphan") && n.to_string().contains("no-such-level")),
        "{warnings:?}"
    );
    // Dangling: it matches nothing, so the request falls through to the
    // next schema (exempt, for system:masters).
    let decision = d.start_request(&admin(), WorkEstimate::new(1, 0, Duration::ZERO), None);
    assert_eq!(decision.flow_schema.name, "exempt");
    // A reconfiguration to it is accepted too.
    let d = Dispatcher::builtin(DispatcherOptions::default(), Clock::manual().0);
    d.reconfigure(&config).expect("accepted");
    assert!(d
        .config_notices()
        .iter()
        .any(|n| n.to_string().contains("orphan")));
}

/// A configuration with one flow schema, `name`, for group `tenants`, at a
/// small level of its own.
fn one_schema(name: &str) -> Config {
    Config::from_yaml_str(&format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: tenants}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse: {{type: Queue, queuing: {{queues: 4, handSize: 2, queueLengthLimit: 5}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {name}}}
spec:
  priorityLevelConfiguration: {{name: tenants}}
  matchingPrecedence: 100
  rules:
  - subjects: [{{kind: Group, group: {{name: tenants}}}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
"#
    ))
    .unwrap()
}

fn tenant() -> RequestDigest<'static> {
    RequestDigest {
        user: "t",
        groups: &["tenants", "system:authenticated"],
        verb: "get",
        path: "/healthz",
        ..RequestDigest::default()
    }
}

#[test]
fn ids_of_removed_flow_schemas_are_reused_once_their_requests_are_gone() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::new(&one_schema("gen-0"), DispatcherOptions::default(), clock).unwrap();
    let first = d.start_request(&tenant(), WorkEstimate::new(1, 0, Duration::ZERO), None);
    assert_eq!(first.flow_schema.name, "gen-0");
    let old_id = first.flow_schema.id;
    let Outcome::Execute(guard) = first.outcome else {
        panic!("free seats")
    };
    drop(first.flow_schema);
    // gen-0 is removed while its request runs: its id is kept.
    d.reconfigure(&one_schema("gen-1")).unwrap();
    assert_eq!(d.schema_name(old_id).as_deref(), Some("gen-0"));
    let tenants = d.level("tenants").unwrap();
    assert!(tenants.tag_stats().iter().any(|(tag, _)| *tag == old_id));
    drop(guard);
    // Once it finished, the next reconfiguration frees it and drops its
    // tallies; a new name reuses it, starting from zero.
    d.reconfigure(&one_schema("gen-2")).unwrap();
    let reused = d.start_request(&tenant(), WorkEstimate::new(1, 0, Duration::ZERO), None);
    assert_eq!(reused.flow_schema.name, "gen-2");
    assert_eq!(reused.flow_schema.id, old_id, "the freed id is reused");
    assert_eq!(d.schema_name(old_id).as_deref(), Some("gen-2"));
    drop(reused);
    let stats = tenants.tag_stats();
    let (_, gen2) = stats.iter().find(|(tag, _)| *tag == old_id).unwrap();
    assert_eq!(gen2.dispatched, 1, "gen-0's count is not inherited");
    // Over a long life of renames, ids stay few.
    for i in 3..120 {
        d.reconfigure(&one_schema(&format!("gen-{i}"))).unwrap();
    }
    let ids: Vec<u32> = d.flow_schemas().iter().map(|s| s.id).collect();
    assert!(ids.iter().all(|&id| id < 16), "{ids:?}");
    assert!(d.schema_name(200).is_none());
}

/// Two limited levels, `stays` and (optionally) `goes`, 50 shares each.
fn two_levels(with_goes: bool) -> Config {
    let level = |name: &str| {
        format!(
            r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: {name}}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 50
    lendablePercent: 0
    limitResponse: {{type: Queue, queuing: {{queues: 4, handSize: 2, queueLengthLimit: 5}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: to-{name}}}
spec:
  priorityLevelConfiguration: {{name: {name}}}
  matchingPrecedence: 100
  rules:
  - subjects: [{{kind: Group, group: {{name: {name}}}}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
---
"#
        )
    };
    let mut text = level("stays");
    if with_goes {
        text += &level("goes");
    }
    Config::from_yaml_str(&text).unwrap()
}

#[test]
fn a_removed_level_keeps_its_shares_in_borrowing_until_it_has_drained() {
    let (clock, manual) = Clock::manual();
    let d = Dispatcher::new(&two_levels(true), DispatcherOptions::default(), clock).unwrap();
    let digest = RequestDigest {
        user: "u",
        groups: &["goes", "system:authenticated"],
        verb: "get",
        path: "/x",
        ..RequestDigest::default()
    };
    let decision = d.start_request(&digest, WorkEstimate::new(1, 0, Duration::ZERO), None);
    assert_eq!(decision.priority_level.name, "goes");
    let Outcome::Execute(guard) = decision.outcome else {
        panic!("free seats")
    };
    let stays_limit = |d: &Dispatcher| d.level("stays").unwrap().stats().queueset.concurrency_limit;
    let with_both = stays_limit(&d);
    // `goes` is removed while its request runs: as in Kubernetes its 50
    // shares still count, so `stays` does not grow yet, and borrowing still
    // adjusts `goes`.
    d.reconfigure(&two_levels(false)).unwrap();
    assert_eq!(stays_limit(&d), with_both);
    let in_borrowing = |d: &Dispatcher| {
        d.borrowing()
            .report()
            .levels
            .iter()
            .any(|l| l.name == "goes")
    };
    assert!(in_borrowing(&d));
    manual.advance(Duration::from_secs(10));
    assert!(in_borrowing(&d), "still there at the periodic adjustment");
    assert_eq!(d.quiescing_levels().len(), 1);
    drop(guard);
    // Idle at the next configuration change: dropped, and `stays` gets
    // the shares.
    d.reconfigure(&two_levels(false)).unwrap();
    assert!(!in_borrowing(&d));
    assert!(d.quiescing_levels().is_empty());
    assert!(
        stays_limit(&d) > with_both,
        "{} > {with_both}",
        stays_limit(&d)
    );
}
