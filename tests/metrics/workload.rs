//! The scripted workload: every metric, value by value, and the parser
//! it is read back with.

use super::*;
use apf::metrics::CONTENT_TYPE;
use openmetrics::{parse, parse_value, try_parse};

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
