//! The exposition's name prefix and constant labels (issue 13): a service
//! embedding libapf is not an API server and may run several dispatchers.
#![cfg(not(loom))]

use crate::openmetrics;
use openmetrics::parse;

use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::metrics::{Exporter, ExpositionOptions, BUILTIN_CONFIG_SERIES};
use apf::workqueue::{QueueConfig, Workqueue};
use std::sync::Arc;

fn exporter(options: ExpositionOptions) -> Result<Exporter, String> {
    let (clock, _manual) = Clock::manual();
    let d = Arc::new(Dispatcher::builtin(DispatcherOptions::default(), clock));
    Exporter::with_dispatcher(d).with_options(options)
}

#[test]
fn every_series_gets_the_prefix_and_the_constant_labels() {
    let e = exporter(ExpositionOptions {
        prefix: Some("shop".into()),
        const_labels: vec![
            ("dispatcher".into(), "public".into()),
            ("region".into(), "eu".into()),
        ],
    })
    .expect("valid options");
    let q: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(
        QueueConfig::default().named("orders"),
    ));
    e.register_workqueue(&q).expect("named");
    let text = e.text();
    let exp = parse(&text);
    // Same series as without options: the labels are constant.
    assert_eq!(exp.series(), BUILTIN_CONFIG_SERIES + 5);
    assert_eq!(
        exp.get(
            "shop_workqueue_depth",
            &[
                ("name", "orders"),
                ("dispatcher", "public"),
                ("region", "eu")
            ]
        ),
        0.0
    );
    for line in text.lines().filter(|l| !l.is_empty() && *l != "# EOF") {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .or_else(|| line.strip_prefix("# UNIT "))
            .unwrap_or(line);
        assert!(name.starts_with("shop_"), "{line}");
        if !line.starts_with('#') {
            assert!(
                line.contains("dispatcher=\"public\"") && line.contains("region=\"eu\""),
                "{line}"
            );
        }
    }
    assert!(text.contains("shop_apiserver_flowcontrol_rejected_requests_total{"));
}

#[test]
fn bad_options_are_refused_naming_the_one_at_fault() {
    let label = |name: &str| ExpositionOptions {
        prefix: None,
        const_labels: vec![(name.into(), "x".into())],
    };
    for (options, want) in [
        (
            ExpositionOptions {
                prefix: Some("9lives".into()),
                const_labels: vec![],
            },
            "metrics prefix \"9lives\"",
        ),
        (
            ExpositionOptions {
                prefix: Some("a-b".into()),
                const_labels: vec![],
            },
            "metrics prefix \"a-b\"",
        ),
        (
            label("priority_level"),
            "constant label \"priority_level\": the metrics use this label",
        ),
        (label("le"), "constant label \"le\""),
        (label("bad-name"), "constant label \"bad-name\""),
        (label("__reserved"), "constant label \"__reserved\""),
        (
            ExpositionOptions {
                prefix: None,
                const_labels: vec![("a".into(), "1".into()), ("a".into(), "2".into())],
            },
            "constant label \"a\": given twice",
        ),
    ] {
        let e = exporter(options).expect_err(want);
        assert!(e.contains(want), "{e}");
    }
    assert!(exporter(ExpositionOptions::default()).is_ok());
}
