#![cfg(not(loom))]
//! Learned cost (issue 11 part 3): a flow schema annotated
//! `apf.libapf.io/cost: learned` gets its requests' seats from the costs
//! reported when earlier requests of the same (schema, verb, resource)
//! finished; other schemas keep the static estimate; a bad annotation is a
//! configuration error naming the object and the field.

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::RequestGuard;
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn config(cost: &str) -> String {
    format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: wide, uid: uid-wide}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 100
    lendablePercent: 0
    limitResponse: {{type: Queue, queuing: {{queues: 4, handSize: 2, queueLengthLimit: 10}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: listers
  uid: uid-listers
  annotations: {{apf.libapf.io/cost: {cost}}}
spec:
  priorityLevelConfiguration: {{name: wide}}
  matchingPrecedence: 100
  rules:
  - subjects: [{{kind: User, user: {{name: lister}}}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}}]
"#
    )
}

fn dispatcher(cost: &str) -> Dispatcher {
    let (clock, _manual) = Clock::manual();
    let cfg = Config::from_yaml_str(&config(cost)).expect("parses");
    let opts = DispatcherOptions {
        server_concurrency_limit: 200,
        ..DispatcherOptions::default()
    };
    Dispatcher::new(&cfg, opts, clock).expect("valid")
}

fn run(d: &Dispatcher, verb: &str, resource: &str) -> RequestGuard {
    let digest = RequestDigest {
        user: "lister",
        verb,
        is_resource_request: true,
        resource,
        ..RequestDigest::default()
    };
    let one_seat = WorkEstimate::new(1, 0, Duration::ZERO);
    match d.start_request(&digest, one_seat, None).outcome {
        Outcome::Execute(g) => g,
        _ => panic!("the level has room"),
    }
}

#[test]
fn later_requests_get_the_seats_their_predecessors_cost() {
    let d = dispatcher("learned");
    let first = run(&d, "list", "pods");
    assert_eq!(first.seats(), 1, "nothing learned yet: the static estimate");
    first.finish_with_cost(10.0).expect("a valid cost");
    let second = run(&d, "list", "pods");
    assert_eq!(second.seats(), 10, "learned from the report");
    second.finish_with_cost(10.0).unwrap();
    assert_eq!(run(&d, "list", "nodes").seats(), 1, "another resource");
    assert_eq!(run(&d, "get", "pods").seats(), 1, "another verb");
    // Cheaper LISTs bring the estimate down over a few reports.
    for _ in 0..30 {
        run(&d, "list", "pods").finish_with_cost(1.0).unwrap();
    }
    assert_eq!(run(&d, "list", "pods").seats(), 1);
}

#[test]
fn a_static_schema_ignores_reported_costs() {
    let d = dispatcher("static");
    run(&d, "list", "pods").finish_with_cost(10.0).unwrap();
    assert_eq!(run(&d, "list", "pods").seats(), 1);
}

#[test]
fn a_bad_cost_is_refused_and_the_request_still_holds_its_seats() {
    let d = dispatcher("learned");
    let g = run(&d, "list", "pods");
    let (g, e) = g.finish_with_cost(f64::NAN).expect_err("NaN");
    assert!(e.to_string().contains("cost"), "{e}");
    let (g, _) = g.finish_with_cost(-1.0).expect_err("negative");
    assert_eq!(g.seats(), 1);
    g.finish_with_cost(2.0).unwrap();
    assert_eq!(run(&d, "list", "pods").seats(), 2);
}

#[test]
fn a_bad_annotation_names_the_object_and_the_field() {
    let cfg = Config::from_yaml_str(&config("learnt")).expect("parses");
    let (clock, _manual) = Clock::manual();
    let e = Dispatcher::new(&cfg, DispatcherOptions::default(), clock)
        .expect_err("an unknown cost mode")
        .to_string();
    assert!(
        e.contains("listers") && e.contains("apf.libapf.io/cost") && e.contains("learnt"),
        "{e}"
    );
}
