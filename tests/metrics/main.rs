//! Metrics and dumps end to end: a scripted workload on the manual clock,
//! the exposition parsed back by a strict OpenMetrics text parser and
//! checked value by value, each dump's columns and rows, the workqueue
//! exporter, the series count of the built-in configuration, and tallies
//! that balance under any interleaving. One module a concept; the
//! requests and the dispatcher all of them use are here.
#![cfg(not(loom))]

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::RequestTicket;
use apf::queueset::RejectReason;
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

#[path = "../support/dumps.rs"]
mod dumps;
#[path = "../support/openmetrics.rs"]
mod openmetrics;
#[path = "../support/two_levels.rs"]
mod two_levels;
use two_levels::{config, STRICT, TIGHT};

mod balance;
mod cardinality;
mod dump;
mod kinds;
mod options;
mod utilization;
mod workload;
mod workqueues;

fn tenant(user: &'static str) -> RequestDigest<'static> {
    RequestDigest {
        user,
        groups: &["tenants", "system:authenticated"],
        verb: "list",
        is_resource_request: true,
        api_group: "apps",
        resource: "deployments",
        namespace: "team-a",
        path: "/apis/apps/v1/namespaces/team-a/deployments",
        ..RequestDigest::default()
    }
}

fn batch() -> RequestDigest<'static> {
    RequestDigest {
        user: "bob",
        groups: &["batch", "system:authenticated"],
        verb: "create",
        is_resource_request: true,
        resource: "jobs",
        api_group: "batch",
        namespace: "jobs",
        ..RequestDigest::default()
    }
}

fn admin() -> RequestDigest<'static> {
    RequestDigest {
        user: "root",
        groups: &["system:masters", "system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "pods",
        ..RequestDigest::default()
    }
}

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn dispatcher() -> (Dispatcher, apf::clock::ManualClock) {
    dispatcher_with(config(1))
}

fn dispatcher_with(config: Config) -> (Dispatcher, apf::clock::ManualClock) {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        // NominalCL = ceil(5 × shares / 25): tight 2, strict 2, catch-all 1.
        server_concurrency_limit: 5,
        borrowing_period: Duration::from_secs(3600),
        ..DispatcherOptions::default()
    };
    let d = Dispatcher::new(&config, options, clock).expect("valid config");
    (d, manual)
}

fn executes(d: &Dispatcher, digest: &RequestDigest<'_>) -> apf::level::RequestGuard {
    match d.start_request(digest, one_seat(), None).outcome {
        Outcome::Execute(g) => g,
        other => panic!("expected to execute: {other:?}"),
    }
}

fn queues(d: &Dispatcher, digest: &RequestDigest<'_>) -> RequestTicket {
    match d.start_request(digest, one_seat(), None).outcome {
        Outcome::Queued(t) => t,
        other => panic!("expected to queue: {other:?}"),
    }
}

fn rejected(d: &Dispatcher, digest: &RequestDigest<'_>) -> RejectReason {
    match d.start_request(digest, one_seat(), None).outcome {
        Outcome::Rejected(r) => r,
        other => panic!("expected a rejection: {other:?}"),
    }
}

const EXEMPT: [(&str, &str); 2] = [("priority_level", "exempt"), ("flow_schema", "exempt")];

fn with<'a>(base: &[(&'a str, &'a str)], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(more).copied().collect()
}

const P: &str = "apiserver_flowcontrol_";

fn m(name: &str) -> String {
    format!("{P}{name}")
}
