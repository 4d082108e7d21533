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
