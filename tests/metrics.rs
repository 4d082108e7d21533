//! Metrics and dumps end to end: a scripted workload on the manual clock,
//! the exposition parsed back by a strict OpenMetrics text parser and
//! checked value by value, each dump's columns and rows, the workqueue
//! exporter, and the series count of the built-in configuration.
#![cfg(not(loom))]

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::RequestTicket;
use apf::metrics::{Exporter, RegisterError, BUILTIN_CONFIG_SERIES, CONTENT_TYPE};
use apf::queueset::RejectReason;
use apf::work_estimate::WorkEstimate;
use apf::workqueue::{Config as QueueConfig, Workqueue};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[path = "support/openmetrics.rs"]
mod openmetrics;
use openmetrics::{parse, parse_value, try_parse};
#[path = "support/dumps.rs"]
mod dumps;
use dumps::table;

#[test]
fn the_parser_rejects_what_it_must() {
    let bad = [
        "# HELP a x\n# TYPE a counter\n",
        "# HELP a x\n# TYPE a counter\na 1\n# EOF\n",
        "# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\na{l=\"1\"} 2\n# EOF\n",
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n# EOF\n",
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 1\nh_sum 0\n# EOF\n",
        "# HELP a x\n# TYPE a gauge\na{l=1} 1\n# EOF\n",
        "# HELP a x\n# TYPE a gauge\nb 1\n# EOF\n",
        "# HELP a x\n# TYPE a gauge\na 1 123\n# EOF\n",
    ];
    for text in bad {
        assert!(try_parse(text).is_err(), "accepted {text:?}");
    }
    let good = "# HELP a x\n# TYPE a gauge\na{l=\"q\\\"\\n\"} 1.5\n# EOF\n";
    assert_eq!(parse(good).get("a", &[("l", "q\"\n")]), 1.5);
}

// ----- the scripted workload ----------------------------------------------------

/// A queuing level `tight` (one queue of two unless `queues` says more) and
/// a reject level `strict`.
fn config(queues: u32) -> Config {
    let yaml = CONFIG.replace("queues: 1,", &format!("queues: {queues},"));
    Config::from_yaml_str(&yaml).expect("valid yaml")
}

const CONFIG: &str = r#"
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
"#;

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

const TIGHT: [(&str, &str); 2] = [("priority_level", "tight"), ("flow_schema", "tenants")];
const STRICT: [(&str, &str); 2] = [("priority_level", "strict"), ("flow_schema", "batch")];
const EXEMPT: [(&str, &str); 2] = [("priority_level", "exempt"), ("flow_schema", "exempt")];

fn with<'a>(base: &[(&'a str, &'a str)], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(more).copied().collect()
}

const P: &str = "apiserver_flowcontrol_";

fn m(name: &str) -> String {
    format!("{P}{name}")
}

#[test]
fn a_scripted_workload_shows_in_every_metric() {
    let (d, manual) = dispatcher();
    // t = 0: two tenants' requests take both seats; two more queue; the
    // queue is then full.
    let a1 = executes(&d, &tenant("alice"));
    let a2 = executes(&d, &tenant("alice"));
    let mut a3 = queues(&d, &tenant("alice"));
    let a4 = queues(&d, &tenant("carol"));
    assert_eq!(rejected(&d, &tenant("alice")), RejectReason::QueueFull);
    // The reject level: two run, the third is refused.
    let b1 = executes(&d, &batch());
    let b2 = executes(&d, &batch());
    assert_eq!(rejected(&d, &batch()), RejectReason::ConcurrencyLimit);
    let root = executes(&d, &admin());

    let exp = parse(&d.metrics_text());
    assert_eq!(exp.get(&m("current_inqueue_requests"), &TIGHT), 2.0);
    assert_eq!(exp.get(&m("current_inqueue_seats"), &TIGHT), 2.0);
    assert_eq!(exp.get(&m("current_executing_requests"), &TIGHT), 2.0);
    assert_eq!(exp.get(&m("current_executing_seats"), &TIGHT), 2.0);
    assert_eq!(exp.get(&m("current_executing_requests"), &EXEMPT), 1.0);
    assert_eq!(exp.get(&m("current_executing_requests"), &STRICT), 2.0);

    // t = 10 ms: a1 ends, a3 starts after a 10 ms wait.
    manual.advance(ms(10));
    drop(a1);
    let a3_guard = a3.poll().expect("dispatched").expect("not rejected");
    // t = 20 ms: carol gives up; a6 queues behind nothing but full seats.
    manual.advance(ms(10));
    assert!(a4.cancel());
    let mut a6 = queues(&d, &tenant("dave"));
    // t = 300 ms: the exempt request ends.
    manual.advance(ms(280));
    drop(root);
    // t = 15.02 s: a6 times out after its 15 s wait limit.
    manual.advance(Duration::from_millis(14_720));
    assert_eq!(
        a6.poll().expect("decided").expect_err("timed out"),
        RejectReason::TimeOut
    );
    // t = 16 s: everything ends.
    manual.advance(ms(980));
    drop((a2, a3_guard, b1, b2));

    let text = d.metrics_text();
    let exp = parse(&text);
    // Counters.
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TIGHT), 3.0);
    for (reason, n) in [("queue-full", 1.0), ("time-out", 1.0), ("cancelled", 1.0)] {
        let labels = with(&TIGHT, &[("reason", reason)]);
        assert_eq!(
            exp.get(&m("rejected_requests_total"), &labels),
            n,
            "{reason}"
        );
    }
    assert!(
        !exp.has(
            &m("rejected_requests_total"),
            &with(&TIGHT, &[("reason", "concurrency-limit")])
        ),
        "a queuing level cannot reject for concurrency-limit"
    );
    assert_eq!(exp.get(&m("dispatched_requests_total"), &STRICT), 2.0);
    let strict_limit = with(&STRICT, &[("reason", "concurrency-limit")]);
    assert_eq!(exp.get(&m("rejected_requests_total"), &strict_limit), 1.0);
    assert_eq!(exp.get(&m("dispatched_requests_total"), &EXEMPT), 1.0);
    assert!(!exp.has(&m("rejected_requests_total"), &EXEMPT));
    // Gauges back to zero.
    for g in [
        "current_inqueue_requests",
        "current_executing_requests",
        "current_executing_seats",
    ] {
        assert_eq!(exp.get(&m(g), &TIGHT), 0.0, "{g}");
    }
    // Waits of the requests that executed: 0, 0 and 10 ms.
    let wait = m("request_wait_duration_seconds");
    let ran = with(&TIGHT, &[("execute", "true")]);
    assert_eq!(exp.bucket(&wait, &ran, "0"), 2.0);
    assert_eq!(exp.bucket(&wait, &ran, "0.005"), 2.0);
    assert_eq!(exp.bucket(&wait, &ran, "0.02"), 3.0);
    assert_eq!(exp.get(&format!("{wait}_count"), &ran), 3.0);
    assert!((exp.get(&format!("{wait}_sum"), &ran) - 0.010).abs() < 1e-12);
    // Waits of the rejected ones: 0 (queue full), 20 ms (cancelled), 15 s.
    let refused = with(&TIGHT, &[("execute", "false")]);
    assert_eq!(exp.bucket(&wait, &refused, "0"), 1.0);
    assert_eq!(exp.bucket(&wait, &refused, "0.02"), 2.0);
    assert_eq!(exp.bucket(&wait, &refused, "10"), 2.0);
    assert_eq!(exp.bucket(&wait, &refused, "15"), 3.0);
    assert!((exp.get(&format!("{wait}_sum"), &refused) - 15.02).abs() < 1e-9);
    // The reject level: two zero waits that ran, one that did not.
    assert_eq!(
        exp.bucket(&wait, &with(&STRICT, &[("execute", "true")]), "0"),
        2.0
    );
    assert_eq!(
        exp.bucket(&wait, &with(&STRICT, &[("execute", "false")]), "0"),
        1.0
    );
    assert!(
        !exp.has(&format!("{wait}_count"), &EXEMPT),
        "exempt waits are not observed"
    );
    // Execution: a1 10 ms, a2 16 s, a3 15.99 s; the exempt one 300 ms.
    let exec = m("request_execution_seconds");
    let regular = with(&TIGHT, &[("type", "regular")]);
    assert_eq!(exp.bucket(&exec, &regular, "0.02"), 1.0);
    assert_eq!(exp.bucket(&exec, &regular, "15"), 1.0);
    assert_eq!(exp.bucket(&exec, &regular, "30"), 3.0);
    assert!((exp.get(&format!("{exec}_sum"), &regular) - (0.01 + 16.0 + 15.99)).abs() < 1e-9);
    assert_eq!(exp.bucket(&exec, &EXEMPT, "0.2"), 0.0);
    assert_eq!(exp.bucket(&exec, &EXEMPT, "0.5"), 1.0);
    // Queue lengths after enqueue: a1, a2 (hot path) 1; a3 1; a4 2; a6 1.
    let qlen = m("request_queue_length_after_enqueue");
    assert_eq!(exp.bucket(&qlen, &TIGHT, "0"), 0.0);
    assert_eq!(exp.bucket(&qlen, &TIGHT, "10"), 5.0);
    assert_eq!(exp.get(&format!("{qlen}_sum"), &TIGHT), 6.0);
    assert!(
        !exp.has(&format!("{qlen}_count"), &STRICT),
        "a reject level has no queue"
    );
    // Per-level limits, from borrowing.
    let level = |name| [("priority_level", name)];
    assert_eq!(exp.get(&m("nominal_limit_seats"), &level("tight")), 2.0);
    assert_eq!(exp.get(&m("lower_limit_seats"), &level("tight")), 2.0);
    assert_eq!(exp.get(&m("current_limit_seats"), &level("tight")), 2.0);
    assert_eq!(exp.get(&m("nominal_limit_seats"), &level("catch-all")), 1.0);
    assert!(exp.get(&m("upper_limit_seats"), &level("tight")) >= 2.0);
    assert!(exp.get(&m("current_r"), &level("tight")) > 0.0);
    assert!(!exp.has(&m("current_r"), &level("strict")));
    assert!(exp.get(&m("seat_fair_frac"), &[]) >= 0.0);
    // The families are Kubernetes' and typed as Kubernetes types them.
    for (family, kind) in [
        ("rejected_requests", "counter"),
        ("dispatched_requests", "counter"),
        ("current_inqueue_requests", "gauge"),
        ("current_inqueue_seats", "gauge"),
        ("current_executing_requests", "gauge"),
        ("current_executing_seats", "gauge"),
        ("request_wait_duration_seconds", "histogram"),
        ("request_execution_seconds", "histogram"),
        ("request_queue_length_after_enqueue", "histogram"),
        ("nominal_limit_seats", "gauge"),
        ("lower_limit_seats", "gauge"),
        ("upper_limit_seats", "gauge"),
        ("current_limit_seats", "gauge"),
        ("demand_seats_high_watermark", "gauge"),
        ("demand_seats_average", "gauge"),
        ("demand_seats_stdev", "gauge"),
        ("demand_seats_smoothed", "gauge"),
        ("target_seats", "gauge"),
        ("seat_fair_frac", "gauge"),
        ("current_r", "gauge"),
    ] {
        let f = exp
            .families
            .get(&m(family))
            .unwrap_or_else(|| panic!("{family} missing"));
        assert_eq!(f.kind, kind, "{family}");
        assert!(!f.help.is_empty());
    }
    // Kubernetes' buckets.
    let les: Vec<String> = exp
        .buckets(&wait, &ran)
        .into_iter()
        .map(|(le, _)| le)
        .collect();
    let expected: Vec<f64> = vec![
        0.0,
        0.005,
        0.02,
        0.05,
        0.1,
        0.2,
        0.5,
        1.0,
        2.0,
        5.0,
        10.0,
        15.0,
        30.0,
        f64::INFINITY,
    ];
    let got: Vec<f64> = les.iter().map(|l| parse_value(l).unwrap()).collect();
    assert_eq!(got, expected);
    let qles: Vec<f64> = exp
        .buckets(&qlen, &TIGHT)
        .iter()
        .map(|(l, _)| parse_value(l).unwrap())
        .collect();
    assert_eq!(
        qles,
        vec![
            0.0,
            10.0,
            25.0,
            50.0,
            100.0,
            250.0,
            500.0,
            1000.0,
            f64::INFINITY
        ]
    );
    assert!(CONTENT_TYPE.starts_with("application/openmetrics-text"));
}

#[test]
fn the_demand_statistics_follow_the_borrowing_report() {
    let (d, manual) = dispatcher();
    let held: Vec<_> = (0..2).map(|_| executes(&d, &tenant("alice"))).collect();
    // Hot-path admissions reach borrowing's demand statistics when the
    // level's event ring is replayed (a scrape replays it).
    let _ = d.metrics();
    manual.advance(Duration::from_secs(10));
    d.adjust_borrowing_now();
    let exp = parse(&d.metrics_text());
    let report = d.borrowing().report();
    let tight = report
        .levels
        .iter()
        .find(|l| l.name == "tight")
        .expect("level");
    let level = [("priority_level", "tight")];
    assert_eq!(tight.stats.high_watermark, 2);
    assert_eq!(exp.get(&m("demand_seats_high_watermark"), &level), 2.0);
    assert_eq!(exp.get(&m("demand_seats_average"), &level), tight.stats.avg);
    assert_eq!(
        exp.get(&m("demand_seats_stdev"), &level),
        tight.stats.std_dev
    );
    assert_eq!(
        exp.get(&m("demand_seats_smoothed"), &level),
        tight.stats.smoothed
    );
    assert_eq!(exp.get(&m("target_seats"), &level), tight.target);
    assert_eq!(exp.get(&m("seat_fair_frac"), &[]), report.fair_prop);
    drop(held);
}

#[test]
fn counts_survive_a_reconfiguration_that_keeps_the_level() {
    let (d, _manual) = dispatcher();
    drop(executes(&d, &tenant("alice")));
    d.reconfigure(&config(1)).expect("valid");
    drop(executes(&d, &tenant("alice")));
    let exp = parse(&d.metrics_text());
    assert_eq!(exp.get(&m("dispatched_requests_total"), &TIGHT), 2.0);
}

// ----- dumps --------------------------------------------------------------------

#[test]
fn dump_priority_levels_has_kubernetes_columns_and_one_row_per_level() {
    let (d, manual) = dispatcher();
    let a1 = executes(&d, &tenant("alice"));
    let _a2 = executes(&d, &tenant("alice"));
    let waiting = queues(&d, &tenant("alice"));
    let _queued2 = queues(&d, &tenant("eve"));
    assert_eq!(rejected(&d, &tenant("alice")), RejectReason::QueueFull);
    manual.advance(ms(5));
    assert!(waiting.cancel());
    drop(a1);
    let (header, rows) = table(&d.dump_priority_levels());
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
            "DispatchedRequests",
            "RejectedRequests",
            "TimedoutRequests",
            "CancelledRequests"
        ]
    );
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        names,
        ["catch-all", "exempt", "strict", "tight"],
        "sorted by name"
    );
    let tight = &rows[3];
    // eve's request was dispatched when a1 ended: 3 dispatched, 2 running.
    assert_eq!(
        tight[1..],
        ["0", "false", "false", "0", "2", "3", "1", "0", "1"]
    );
    assert_eq!(
        rows[1][1..],
        ["0", "true", "false", "0", "0", "0", "0", "0", "0"]
    );
}

#[test]
fn a_removed_level_with_requests_is_quiescing() {
    let (d, _manual) = dispatcher();
    let held = executes(&d, &tenant("alice"));
    d.reconfigure(&Config::mandatory()).expect("valid");
    let (_, rows) = table(&d.dump_priority_levels());
    let tight = rows.iter().find(|r| r[0] == "tight").expect("still shown");
    assert_eq!(tight[3], "true");
    assert_eq!(tight[5], "1");
    drop(held);
    let (_, rows) = table(&d.dump_priority_levels());
    assert!(rows.iter().all(|r| r[0] != "tight"), "gone once idle");
}

#[test]
fn dump_queues_has_one_row_per_queue() {
    let (d, _manual) = dispatcher();
    let _a = executes(&d, &tenant("alice"));
    let _b = executes(&d, &tenant("alice"));
    let _w = queues(&d, &tenant("alice"));
    let (header, rows) = table(&d.dump_queues());
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "Index",
            "PendingRequests",
            "ExecutingRequests",
            "SeatsInUse",
            "NextDispatchR",
            "InitialSeatsSum",
            "MaxSeatsSum",
            "TotalWorkSum"
        ]
    );
    // Only tight queues: catch-all and strict reject, exempt never waits.
    let tight: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "tight").collect();
    assert_eq!(tight.len(), 1);
    assert_eq!(tight[0][1..5], ["0", "1", "2", "2"]);
    assert!(tight[0][5].ends_with("ss"));
    assert_eq!(tight[0][6..8], ["1", "1"]);
    // One waiting request's work: 1 seat × G (3 ms).
    assert_eq!(tight[0][8], "0.00300000ss");
    assert_eq!(rows.len(), 1);
}

#[test]
fn dump_requests_lists_waiting_requests_with_their_details() {
    // Flows are told apart only when a level has more than one queue.
    let (d, manual) = dispatcher_with(config(4));
    let _a = executes(&d, &tenant("alice"));
    let _b = executes(&d, &tenant("alice"));
    manual.advance(ms(1500));
    let _w1 = queues(&d, &tenant("alice"));
    let _w2 = queues(&d, &tenant("mallory"));
    let (header, rows) = table(&d.dump_requests(false));
    assert_eq!(
        header,
        [
            "PriorityLevelName",
            "FlowSchemaName",
            "QueueIndex",
            "RequestIndexInQueue",
            "FlowDistingsher",
            "ArriveTime",
            "InitialSeats",
            "FinalSeats",
            "AdditionalLatency",
            "StartTime"
        ]
    );
    assert_eq!(rows.len(), 2);
    let mut rows = rows;
    rows.sort_by(|a, b| a[4].cmp(&b[4]));
    let alice_queue: u32 = rows[0][2].parse().expect("queue index");
    assert!(alice_queue < 4);
    assert_eq!(rows[0][..2], ["tight", "tenants"]);
    assert_eq!(
        rows[0][3..],
        ["0", "alice", "1.500000000s", "1", "0", "0s", "-"]
    );
    assert_eq!(rows[1][4], "mallory");
    let (header, mut rows) = table(&d.dump_requests(true));
    rows.sort_by(|a, b| a[4].cmp(&b[4]));
    assert_eq!(
        header[10..],
        [
            "UserName",
            "Verb",
            "APIPath",
            "Namespace",
            "Name",
            "APIVersion",
            "Resource",
            "SubResource"
        ]
    );
    assert_eq!(
        rows[1][10..],
        [
            "mallory",
            "list",
            "/apis/apps/v1/namespaces/team-a/deployments",
            "team-a",
            "",
            "apps",
            "deployments",
            ""
        ]
    );
    // Decided requests leave the dump.
    drop(_w1);
    let (_, rows) = table(&d.dump_requests(true));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][4], "mallory");
}

// ----- workqueues ---------------------------------------------------------------

#[test]
fn named_workqueues_are_exported_until_dropped() {
    let (clock, manual) = Clock::manual();
    let exporter = Exporter::new();
    let q: Arc<Workqueue<&str>> = Arc::new(Workqueue::with_config(
        QueueConfig::with_clock(clock.clone()).named("pods"),
    ));
    exporter.register_workqueue(&q).expect("named");
    let unnamed: Arc<Workqueue<&str>> = Arc::new(Workqueue::with_config(QueueConfig::with_clock(
        clock.clone(),
    )));
    assert_eq!(
        exporter.register_workqueue(&unnamed),
        Err(RegisterError::Unnamed)
    );
    let twin: Arc<Workqueue<&str>> = Arc::new(Workqueue::with_config(
        QueueConfig::with_clock(clock.clone()).named("pods"),
    ));
    assert_eq!(
        exporter.register_workqueue(&twin),
        Err(RegisterError::Duplicate("pods".into()))
    );
    q.add("a");
    q.add("b");
    q.add("a");
    manual.advance(ms(2));
    let item = q.get().expect("queued");
    manual.advance(Duration::from_millis(300));
    q.done(&item).expect("processing");
    let exp = parse(&exporter.text());
    let name = [("name", "pods")];
    assert_eq!(exp.get("workqueue_depth", &name), 1.0);
    assert_eq!(exp.get("workqueue_adds_total", &name), 2.0);
    assert_eq!(exp.get("workqueue_retries_total", &name), 0.0);
    assert_eq!(
        exp.get("workqueue_queue_duration_seconds_count", &name),
        1.0
    );
    assert_eq!(
        exp.bucket("workqueue_queue_duration_seconds", &name, "0.001"),
        0.0
    );
    assert_eq!(
        exp.bucket("workqueue_queue_duration_seconds", &name, "0.01"),
        1.0
    );
    assert_eq!(
        exp.bucket("workqueue_work_duration_seconds", &name, "0.1"),
        0.0
    );
    assert_eq!(
        exp.bucket("workqueue_work_duration_seconds", &name, "1"),
        1.0
    );
    assert!((exp.get("workqueue_work_duration_seconds_sum", &name) - 0.3).abs() < 1e-12);
    assert_eq!(exp.get("workqueue_unfinished_work_seconds", &name), 0.0);
    assert_eq!(
        exp.get("workqueue_longest_running_processor_seconds", &name),
        0.0
    );
    assert!(!exp.families.keys().any(|f| f.starts_with("apiserver_")));
    drop(q);
    assert!(exporter.workqueue_names().is_empty());
    exporter
        .register_workqueue(&twin)
        .expect("the name is free again");
    assert!(exporter.unregister_workqueue("pods"));
    assert!(!exporter.text().contains("workqueue_"));
}

#[test]
fn an_exporter_puts_a_dispatcher_and_workqueues_in_one_exposition() {
    let (clock, _manual) = Clock::manual();
    let d = Arc::new(Dispatcher::builtin(
        DispatcherOptions::default(),
        clock.clone(),
    ));
    let exporter = Exporter::with_dispatcher(d.clone());
    let q: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(
        QueueConfig::with_clock(clock).named("nodes"),
    ));
    exporter.register_workqueue(&q).expect("named");
    let exp = parse(&exporter.text());
    assert_eq!(exp.get("workqueue_depth", &[("name", "nodes")]), 0.0);
    assert_eq!(
        exp.series(),
        BUILTIN_CONFIG_SERIES + 5,
        "five non-histogram series per idle queue"
    );
}

// ----- cardinality ----------------------------------------------------------------

/// Kubernetes' built-in configuration: the series of an idle server, and
/// the most it can have (every pair with every histogram).
#[test]
fn the_builtin_config_makes_a_bounded_number_of_series() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let exp = parse(&d.metrics_text());
    let idle = exp.series();
    let flow = d.metrics();
    let pairs: usize = flow.levels.iter().map(|l| l.schemas.len()).sum();
    let limited: usize = flow
        .levels
        .iter()
        .filter(|l| !l.exempt)
        .map(|l| l.schemas.len())
        .sum();
    let queuing: usize = flow
        .levels
        .iter()
        .filter(|l| l.queuing)
        .map(|l| l.schemas.len())
        .sum();
    // A duration histogram is 13 buckets + Inf + count + sum; a queue-length
    // one 8 + 3; a work-seats one 4 + 3; a dispatch-without-room counter
    // one per queuing pair; per limited level, a seat-utilization
    // histogram (13 + 3) and two request-utilization ones (10 + 3 each);
    // per level a demand-seats histogram (12 + 3); per queuing level, once
    // it dispatched, six virtual-time gauges; for the server, four
    // read-vs-write histograms (15 + 3).
    let limited_levels = flow.levels.iter().filter(|l| !l.exempt).count();
    let queuing_levels = flow.levels.iter().filter(|l| l.queuing).count();
    let most = idle
        + limited * 2 * 16
        + pairs * 16
        + queuing * 11
        + limited * 7
        + queuing
        + limited_levels * (16 + 2 * 13)
        + flow.levels.len() * 15
        + queuing_levels * 6
        + 4 * 18;
    println!(
        "built-in config: {} levels, {pairs} (level, schema) pairs, {idle} series idle, at most {most}",
        flow.levels.len()
    );
    assert_eq!(flow.levels.len(), 8);
    assert_eq!(pairs, d.flow_schemas().len(), "one pair per schema");
    assert_eq!(idle, BUILTIN_CONFIG_SERIES);
    // Every label is one of the bounded ones.
    let allowed = [
        "priority_level",
        "flow_schema",
        "reason",
        "execute",
        "type",
        "le",
        "phase",
        "request_kind",
        "bound",
    ];
    for family in exp.families.values() {
        for s in &family.samples {
            for k in s.labels.keys() {
                assert!(allowed.contains(&k.as_str()), "label {k}");
            }
        }
    }
    assert!(
        most < 1608,
        "fewer than the 1,608 of Kubernetes issue 108272"
    );
}

// ----- the tallies balance under any interleaving ---------------------------------

mod balance {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// A request of user `u` of schema tenants (0), batch (1) or exempt (2).
        Start(u8, u8),
        Finish(usize),
        Cancel(usize),
        Advance(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, 0u8..4).prop_map(|(s, u)| Op::Start(s, u)),
            2 => (0usize..16).prop_map(Op::Finish),
            1 => (0usize..16).prop_map(Op::Cancel),
            2 => (1u16..20_000).prop_map(Op::Advance),
        ]
    }

    const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];

    #[derive(Default)]
    struct Expected {
        dispatched: u64,
        rejected: [u64; 4],
        executing: u32,
        waiting: u32,
    }

    fn check(d: &Dispatcher, model: &BTreeMap<&str, Expected>) -> Result<(), TestCaseError> {
        let flow = d.metrics();
        for level in &flow.levels {
            for s in &level.schemas {
                let st = &s.stats;
                let e = model.get(s.name.as_str());
                let (dispatched, rejected, executing, waiting) = e.map_or((0, [0; 4], 0, 0), |e| {
                    (e.dispatched, e.rejected, e.executing, e.waiting)
                });
                prop_assert_eq!(st.dispatched, dispatched, "{} dispatched", s.name);
                prop_assert_eq!(st.rejected, rejected, "{} rejected", s.name);
                prop_assert_eq!(st.executing, executing, "{} executing", s.name);
                prop_assert_eq!(st.waiting, waiting, "{} waiting", s.name);
                prop_assert_eq!(st.seats_in_use, executing as u64, "{} seats", s.name);
                prop_assert_eq!(st.execution.count(), dispatched - executing as u64);
                if !level.exempt {
                    prop_assert_eq!(st.wait_dispatched.count(), dispatched);
                    prop_assert_eq!(st.wait_rejected.count(), rejected.iter().sum::<u64>());
                }
                if level.queuing {
                    // Every request that started or waited joined a queue once.
                    let joined = st.queue_length.count();
                    let queued = dispatched + rejected[1] + rejected[2] + waiting as u64;
                    prop_assert!(joined <= queued && joined + dispatched >= queued);
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn tallies_match_what_requests_saw(ops in proptest::collection::vec(op(), 1..60)) {
            let (d, manual) = dispatcher();
            let mut model: BTreeMap<&str, Expected> = BTreeMap::new();
            let mut guards: Vec<(&str, apf::level::RequestGuard)> = Vec::new();
            let mut tickets: Vec<(&str, RequestTicket)> = Vec::new();
            for op in ops {
                match op {
                    Op::Start(s, u) => {
                        let (schema, digest) = match s {
                            0 => ("tenants", tenant(USERS[u as usize])),
                            1 => ("batch", batch()),
                            _ => ("exempt", admin()),
                        };
                        let e = model.entry(schema).or_default();
                        match d.start_request(&digest, one_seat(), None).outcome {
                            Outcome::Execute(g) => {
                                e.dispatched += 1;
                                e.executing += 1;
                                guards.push((schema, g));
                            }
                            Outcome::Queued(t) => {
                                e.waiting += 1;
                                tickets.push((schema, t));
                            }
                            Outcome::Rejected(r) => e.rejected[r as usize] += 1,
                        }
                    }
                    Op::Finish(i) if !guards.is_empty() => {
                        let (schema, g) = guards.remove(i % guards.len());
                        drop(g);
                        model.get_mut(schema).expect("started").executing -= 1;
                    }
                    Op::Cancel(i) if !tickets.is_empty() => {
                        let (schema, t) = tickets.remove(i % tickets.len());
                        let e = model.get_mut(schema).expect("started");
                        e.waiting -= 1;
                        // Pending at the last poll, and nothing happened since.
                        prop_assert!(t.cancel());
                        e.rejected[RejectReason::Cancelled as usize] += 1;
                    }
                    Op::Advance(ms) => manual.advance(Duration::from_millis(ms as u64)),
                    _ => {}
                }
                // Collect decisions.
                let mut still = Vec::new();
                for (schema, mut t) in tickets.drain(..) {
                    match t.poll() {
                        None => still.push((schema, t)),
                        Some(result) => {
                            let e = model.get_mut(schema).expect("started");
                            e.waiting -= 1;
                            match result {
                                Ok(g) => {
                                    e.dispatched += 1;
                                    e.executing += 1;
                                    guards.push((schema, g));
                                }
                                Err(r) => e.rejected[r as usize] += 1,
                            }
                        }
                    }
                }
                tickets = still;
                check(&d, &model)?;
            }
            // Everything ends: every gauge is back to zero.
            drop(guards);
            for (_, t) in tickets.drain(..) {
                drop(t);
            }
            for level in d.metrics().levels {
                for s in level.schemas {
                    prop_assert_eq!(s.stats.executing, 0);
                    prop_assert_eq!(s.stats.waiting, 0);
                    prop_assert_eq!(s.stats.seats_in_use, 0);
                }
            }
        }
    }
}
