//! Two limited levels for metrics tests: "tight" queues, "strict"
//! rejects; requests of group "tenants" go to the first, "batch" to the
//! second.
#![allow(dead_code)]

use apf::classification::RequestDigest;
use apf::dispatcher::{Dispatcher, Outcome};
use apf::level::RequestGuard;
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

/// "tight" (shares 10) has one queue of at most 2 requests; "strict"
/// (shares 10) rejects instead of queuing; catch-all has shares 5.
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
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

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
