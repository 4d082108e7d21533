//! Two limited levels for metrics tests: "tight" queues, "strict"
//! rejects; requests of group "tenants" go to the first, "batch" to the
//! second. Included with `#[path]` by tests/metrics/ and the other
//! metrics tests.
#![allow(dead_code)]

use apf::classification::RequestDigest;
use apf::clock::{Clock, ManualClock};
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::RequestGuard;
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

/// "tight" (shares 10) has one queue of at most 2 requests; "strict"
/// (shares 10) rejects instead of queuing; catch-all has shares 5. The
/// schemas match both resource and non-resource requests of their group.
pub const CONFIG: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tight}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: strict}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: tenants}
spec:
  priorityLevelConfiguration: {name: tight}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: tenants}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: batch}
spec:
  priorityLevelConfiguration: {name: strict}
  matchingPrecedence: 200
  rules:
  - subjects: [{kind: Group, group: {name: batch}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

/// [`CONFIG`] with `queues` queues at "tight" instead of one.
pub fn config(queues: u32) -> Config {
    let yaml = CONFIG.replace("queues: 1,", &format!("queues: {queues},"));
    Config::from_yaml_str(&yaml).expect("valid yaml")
}

/// 18 seats: NominalCL = ceil(18 × 10 / 25) = 8 for tight and strict,
/// so at most ceil(8 × 0.15) = 2 seats a request; borrowing adjusts once
/// an hour, so never on its own in a test.
pub fn options() -> DispatcherOptions {
    DispatcherOptions {
        server_concurrency_limit: 18,
        borrowing_period: Duration::from_secs(3600),
        ..DispatcherOptions::default()
    }
}

/// A dispatcher of [`CONFIG`] with [`options`] on a manual clock.
pub fn dispatcher() -> (Dispatcher, ManualClock) {
    let (clock, manual) = Clock::manual();
    let d = Dispatcher::new(&config(1), options(), clock).expect("valid config");
    (d, manual)
}

/// The labels of tight's and strict's series.
pub const TIGHT: [(&str, &str); 2] = [("priority_level", "tight"), ("flow_schema", "tenants")];
pub const STRICT: [(&str, &str); 2] = [("priority_level", "strict"), ("flow_schema", "batch")];

/// A non-resource request (`get /healthz`) of user alice in `group`
/// ("tenants", or else "batch").
pub fn digest(group: &'static str) -> RequestDigest<'static> {
    let groups: &'static [&'static str] = match group {
        "tenants" => &["tenants"],
        _ => &["batch"],
    };
    RequestDigest {
        user: "alice",
        groups,
        verb: "get",
        path: "/healthz",
        ..RequestDigest::default()
    }
}

pub fn seats(n: u32) -> WorkEstimate {
    WorkEstimate::new(n, 0, Duration::ZERO)
}

pub fn execute(d: &Dispatcher, group: &'static str, n: u32) -> RequestGuard {
    match d.start_request(&digest(group), seats(n), None).outcome {
        Outcome::Execute(g) => g,
        other => panic!("expected to execute: {other:?}"),
    }
}
