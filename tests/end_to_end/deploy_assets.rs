//! The Grafana dashboard (deploy/grafana/apf-dashboard.json) and the
//! Prometheus alert rules (deploy/prometheus/apf-alerts.yaml) name only
//! metrics that a running dispatcher really exports: every metric name in
//! either file must be a sample name of an exposition made by a workload
//! that exercises every family (scripts/check-deploy.sh checks the rules'
//! syntax and behaviour with promtool).
#![cfg(not(loom))]

use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::metrics::Exporter;
use apf::workqueue::{QueueConfig, Workqueue};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::openmetrics;
use crate::two_levels;
use openmetrics::parse;
use two_levels::{config, digest, execute, options, seats};

const DASHBOARD: &str = include_str!("../../deploy/grafana/apf-dashboard.json");
const RULES: &str = include_str!("../../deploy/prometheus/apf-alerts.yaml");
const RULE_TESTS: &str = include_str!("../../deploy/prometheus/apf-alerts.test.yaml");

/// Every word of `text` that starts like one of libapf's metric names.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| word(c)) {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
        let w = &tail[..end];
        if w.starts_with("apiserver_flowcontrol_") || w.starts_with("workqueue_") {
            names.insert(w.to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// An exposition with a series in every family: queuing, dispatch without
/// room, every rejection reason a queuing and a rejecting level give, waits,
/// executions, time passing, and a named workqueue that did some work.
fn busy_exposition() -> String {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        wait_limit: Duration::from_secs(1),
        ..options()
    };
    let d = Arc::new(Dispatcher::new(&config(1), options, clock.clone()).expect("valid"));
    let exporter = Exporter::with_dispatcher(d.clone());
    let q: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(
        QueueConfig::with_clock(clock).named("pods"),
    ));
    exporter.register_workqueue(&q).expect("named");
    q.add(1);
    manual.advance(Duration::from_millis(5));
    let item = q.get().expect("queued");
    q.done(&item).expect("processing");

    // tight (8 seats): full; a two-seat request and a one-seat one fill
    // its queue, the next is rejected (queue-full).
    let mut held: Vec<_> = (0..3).map(|_| execute(&d, "tenants", 2)).collect();
    let (one, two) = (execute(&d, "tenants", 1), execute(&d, "tenants", 1));
    let start = |n| d.start_request(&digest("tenants"), seats(n), None).outcome;
    let Outcome::Queued(mut wide) = start(2) else {
        panic!("expected to queue")
    };
    let Outcome::Queued(mut late) = start(1) else {
        panic!("expected to queue")
    };
    assert!(matches!(start(1), Outcome::Rejected(_)));
    // strict (8 seats): full, then a concurrency-limit rejection.
    held.extend((0..4).map(|_| execute(&d, "batch", 2)));
    assert!(matches!(
        d.start_request(&digest("batch"), seats(2), None).outcome,
        Outcome::Rejected(_)
    ));
    // One seat frees: too few for the two-seat head (no accommodation);
    // a second one lets it start.
    manual.advance(Duration::from_millis(100));
    drop(one);
    assert!(wide.poll().is_none(), "no room for two seats");
    drop(two);
    held.push(wide.poll().expect("decided").expect("dispatched"));
    // The last waiter times out.
    manual.advance(Duration::from_secs(2));
    assert!(matches!(late.poll(), Some(Err(_))));
    drop(held);
    exporter.text()
}

#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_exported() {
    let text = busy_exposition();
    let exp = parse(&text);
    let exported: BTreeSet<String> = exp
        .families
        .values()
        .flat_map(|f| f.samples.iter().map(|s| s.name.clone()))
        .collect();
    for (file, content) in [
        ("deploy/grafana/apf-dashboard.json", DASHBOARD),
        ("deploy/prometheus/apf-alerts.yaml", RULES),
        ("deploy/prometheus/apf-alerts.test.yaml", RULE_TESTS),
    ] {
        let named = metric_names(content);
        assert!(named.len() >= 3, "{file} names metrics");
        let missing: Vec<&String> = named.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics the exposition does not have: {missing:?}"
        );
    }
    // The queries' label names exist on those metrics too.
    for label in [
        "priority_level",
        "flow_schema",
        "reason",
        "phase",
        "execute",
        "name",
        "le",
    ] {
        assert!(text.contains(&format!("{label}=\"")), "{label}");
    }
}

#[test]
fn the_dashboard_is_grafana_json_with_a_query_on_every_panel() {
    let dash: serde_json::Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    assert_eq!(dash["uid"], "libapf-apf");
    let panels = dash["panels"].as_array().expect("panels");
    let mut queries = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(!metric_names(expr).is_empty(), "{expr}");
            queries += 1;
        }
    }
    assert!(queries >= 15);
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "priority_level"]);
    // Panels do not overlap on Grafana's 24-column grid.
    let mut cells = BTreeSet::new();
    for p in panels {
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64(),
            g["y"].as_u64(),
            g["w"].as_u64(),
            g["h"].as_u64(),
        );
        let (x, y, w, h) = (x.unwrap(), y.unwrap(), w.unwrap(), h.unwrap());
        assert!(x + w <= 24, "{}", p["title"]);
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "{} overlaps", p["title"]);
            }
        }
    }
}

#[test]
fn the_name_scan_finds_names_in_queries() {
    let names = metric_names(
        "sum(rate(apiserver_flowcontrol_rejected_requests_total{x=\"y\"}[5m])) / workqueue_depth",
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "apiserver_flowcontrol_rejected_requests_total",
            "workqueue_depth"
        ]
    );
}
