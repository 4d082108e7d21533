//! Unit tests of the dispatcher that need its crate-internal hooks or
//! look inside its levels. They live here, above everything they build,
//! so that no lower module's tests import the dispatcher (the module graph
//! stays a ladder; see `module_graph_tests`).

use super::*;
use crate::config::Config;
use crate::queueset::{Fairness, RejectReason};

/// The `apf.libapf.io/fairness` annotation reaches the level's queueset.
#[test]
fn the_dispatcher_gives_the_level_its_policy() {
    let text = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata:\n  name: tenants\n  annotations: {apf.libapf.io/fairness: flow}\nspec: {type: Limited, limited: {nominalConcurrencyShares: 10, limitResponse: {type: Queue, queuing: {queues: 64, handSize: 6}}}}\n";
    let config = Config::from_yaml_str(text).expect("parses");
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::new(&config, DispatcherOptions::default(), clock).expect("valid");
    let level = d.level("tenants").expect("configured");
    let qs = level.queueset().expect("a queuing level");
    assert_eq!(qs.config().fairness, Fairness::Flow);
}

/// The dispatcher replaces a failed level with a new one at its next
/// reconfiguration; requests then classify to the new level and run.
#[test]
fn the_dispatcher_replaces_a_failed_level_when_it_reconfigures() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let digest = RequestDigest {
        user: "alice",
        groups: &["system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "pods",
        namespace: "default",
        path: "/api/v1/namespaces/default/pods",
        ..RequestDigest::default()
    };
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    let level = d.level("global-default").expect("built in");
    let qs = level.queueset().expect("limited");
    qs.poison_for_test();
    // Noticed by the next operation that takes the level lock.
    let _ = qs.stats();
    assert!(qs.failed());
    let refused = d.start_request(&digest, one, None);
    assert!(matches!(
        refused.outcome,
        Outcome::Rejected(RejectReason::LevelFailed)
    ));
    d.reconfigure(&Config::builtin()).expect("valid");
    let fresh = d.level("global-default").expect("built in");
    assert!(!Arc::ptr_eq(&level, &fresh), "replaced");
    let served = d.start_request(&digest, one, None);
    assert!(matches!(served.outcome, Outcome::Execute(_)));
}

/// A request writes neither its level's nor its flow schema's shared
/// reference count (issue 21: those are lines every core of the level
/// writes): its decision and its guard hold its shard's leases. The counts
/// are the same while it runs as before it started, and its level and
/// schema stay the ones it started on across a reconfiguration.
#[test]
fn a_request_holds_its_level_and_schema_without_writing_their_shared_counts() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let digest = RequestDigest {
        user: "system:serviceaccount:shop:frontend",
        groups: &["system:serviceaccounts", "system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "configmaps",
        namespace: "shop",
        path: "/api/v1/namespaces/shop/configmaps",
        ..RequestDigest::default()
    };
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    let level = d.level("workload-low").expect("built in");
    let schema = d
        .flow_schemas()
        .into_iter()
        .find(|s| s.name == "service-accounts")
        .expect("built in");
    let (level_count, schema_count) = (Arc::strong_count(&level), Arc::strong_count(&schema));
    let decision = d.start_request(&digest, one, None);
    assert!(Arc::ptr_eq(decision.priority_level.arc(), &level));
    assert!(Arc::ptr_eq(decision.flow_schema.arc(), &schema));
    let Outcome::Execute(guard) = decision.outcome else {
        panic!("free seats")
    };
    assert_eq!(
        Arc::strong_count(&level),
        level_count,
        "level's shared count"
    );
    assert_eq!(
        Arc::strong_count(&schema),
        schema_count,
        "schema's shared count"
    );
    // Removed by a reconfiguration, the level lives on for its request,
    // which finishes there.
    d.reconfigure(&Config::mandatory()).expect("valid");
    assert!(d.level("workload-low").is_none());
    assert_eq!(level.seats_in_use(), 1);
    drop(guard);
    assert_eq!(
        level.seats_in_use(),
        0,
        "finished at the level it started on"
    );
    drop(decision.priority_level);
    drop(decision.flow_schema);
    // The snapshot's leases went with the old snapshot: only ours is left
    // (and the retired list's, until a reconfiguration finds it idle).
    d.reconfigure(&Config::mandatory()).expect("valid");
    assert_eq!(Arc::strong_count(&level), 1, "no lease left behind");
}

/// A dropped guard finishes its request at the clock's now, at a limited
/// level (whose queueset reads the clock for it: the guard hands it an end
/// in the far future, which it clamps to now) and at an exempt one: the
/// execution time is exactly the time the clock moved, and every seat is
/// back. Fails if the far-future end were taken as the end.
#[test]
fn a_dropped_guard_finishes_at_now() {
    let (clock, manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    for (user, group, level) in [
        ("alice", "system:authenticated", "global-default"),
        ("root", "system:masters", "exempt"),
    ] {
        let groups = [group];
        let digest = RequestDigest {
            user,
            groups: &groups,
            verb: "get",
            is_resource_request: true,
            resource: "pods",
            namespace: "default",
            path: "/api/v1/namespaces/default/pods",
            ..RequestDigest::default()
        };
        let decision = d.start_request(&digest, one, None);
        assert_eq!(decision.priority_level.name, level);
        let Outcome::Execute(guard) = decision.outcome else {
            panic!("{level}: a free seat");
        };
        manual.advance(Duration::from_millis(7));
        drop(guard);
        let l = d.level(level).expect("configured");
        let execution: u128 = l.tag_stats().iter().map(|(_, t)| t.execution.sum()).sum();
        assert_eq!(execution, 7_000_000, "{level}: executed 7 ms, in ns");
        assert_eq!(l.seats_in_use(), 0, "{level}: its seat is back");
    }
}
