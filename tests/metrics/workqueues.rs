//! The workqueue exporter: named queues exported until dropped, next to a
//! dispatcher in one exposition.

use super::*;
use apf::metrics::{Exporter, RegisterError, BUILTIN_CONFIG_SERIES};
use apf::workqueue::{QueueConfig, Workqueue};
use openmetrics::parse;
use std::sync::Arc;

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
