use super::*;

const MINIMAL: &str = "
duration: 10s
flows:
  - name: app
    user: alice
    groups: [system:authenticated]
    resource: pods
    rate: 100
";

#[test]
fn minimal_workload_takes_defaults() {
    let w = Workload::from_yaml_str(MINIMAL).unwrap();
    assert_eq!(w.duration, Duration::from_secs(10));
    assert_eq!(w.seed, 1);
    assert_eq!(w.server.concurrency_limit, 600);
    assert_eq!(w.sample_interval, Duration::from_millis(83));
    let f = &w.flows[0];
    assert_eq!(f.replicas, 1);
    assert_eq!(f.arrival, Arrival::Poisson { rate: 100.0 });
    assert_eq!(f.service, ServiceTime::Constant(Duration::from_millis(10)));
    assert_eq!((f.initial_seats, f.final_seats), (1, 0));
    assert_eq!(f.request.verb, "get");
    assert_eq!(f.request.path, "/api/v1/pods");
}

#[test]
fn every_field_is_read() {
    let text = "
name: full
description: every field
duration: 2m
seed: 7
sampleInterval: 1s
servedFraction: 0.9
server: {concurrencyLimit: 50, serviceTimeGuess: 1ms, waitLimit: 5s, borrowingPeriod: 2s}
flows:
  - name: tenant
    replicas: 3
    user: 'system:serviceaccount:t-{i}:app'
    groups: [system:serviceaccounts, 'system:serviceaccounts:t-{i}']
    verb: update
    apiGroup: apps
    resource: deployments
    subresource: status
    namespace: 't-{i}'
    objectName: web
    clients: 4
    think: 250ms
    retryAfter: 2s
    service: {lognormal: {median: 20ms, sigma: 0.5}}
    seats: {initial: 2, final: 3}
    additionalLatency: 100ms
    timeout: 30s
    phases: [{at: 10s, scale: 2}, {at: 20s, scale: 0}]
    bursts: [{at: 5s, requests: 100, over: 1s}]
    expect: served
  - name: metrics
    user: prometheus
    nonResource: true
    path: /metrics
    verb: get
    rate: 0.5
    service: {uniform: {min: 1ms, max: 3ms}}
    seats: 2
";
    let w = Workload::from_yaml_str(text).unwrap();
    assert_eq!(w.seed, 7);
    assert_eq!(w.served_fraction, 0.9);
    assert_eq!(w.server.concurrency_limit, 50);
    assert_eq!(w.server.borrowing_period, Duration::from_secs(2));
    let t = &w.flows[0];
    assert_eq!(
        t.arrival,
        Arrival::Closed {
            clients: 4,
            think: Duration::from_millis(250)
        }
    );
    assert_eq!(t.retry_after, Duration::from_secs(2));
    assert_eq!(
        t.service,
        ServiceTime::Lognormal {
            median: Duration::from_millis(20),
            sigma: 0.5
        }
    );
    assert_eq!((t.initial_seats, t.final_seats), (2, 3));
    assert_eq!(t.additional_latency, Duration::from_millis(100));
    assert_eq!(t.timeout, Some(Duration::from_secs(30)));
    assert_eq!(t.phases.len(), 2);
    assert_eq!(t.bursts[0].over, Duration::from_secs(1));
    assert_eq!(t.expect, Some(Expectation::Served));
    assert_eq!(
        t.request.path,
        "/apis/apps/v1/namespaces/t-{i}/deployments/web/status"
    );
    let r = super::replica(&t.request, 2);
    assert_eq!(r.user, "system:serviceaccount:t-2:app");
    assert_eq!(r.groups[1], "system:serviceaccounts:t-2");
    assert_eq!(r.namespace, "t-2");
    let m = &w.flows[1];
    assert!(!m.request.is_resource_request);
    assert_eq!((m.initial_seats, m.final_seats), (2, 0));
}

fn errors(text: &str) -> Vec<String> {
    Workload::from_yaml_str(text)
        .unwrap_err()
        .0
        .iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn parse_errors_name_the_field() {
    let e = errors(&MINIMAL.replace("rate: 100", "rate: 100\n    sevice: 5ms"));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("flows[0].sevice: unknown field `sevice`"),
        "{e:?}"
    );
    let e = errors(&MINIMAL.replace("rate: 100", "rate: 100\n    service: 5 parsecs"));
    assert!(e[0].starts_with("flows[0].service: unknown unit"), "{e:?}");
    let e = errors(&MINIMAL.replace(
        "rate: 100",
        "rate: 100\n    service: {lognormal: {median: 5ms}}",
    ));
    assert!(e[0].contains("missing field `sigma`"), "{e:?}");
    let e = errors(&MINIMAL.replace("10s", "ten seconds"));
    assert!(e[0].starts_with("duration: "), "{e:?}");
}

#[test]
fn value_errors_are_all_collected() {
    let text = "
duration: 0s
server: {concurrencyLimit: 0}
flows:
  - name: a
    user: u
    rate: -1
    clients: 3
    service: {uniform: {min: 5ms, max: 1ms}}
    seats: 0
    phases: [{at: 2s, scale: 1}, {at: 1s, scale: -1}]
    expect: perfect
  - name: a
    user: u
    nonResource: true
";
    let e = errors(text);
    let want = [
        "duration: must be positive",
        "server.concurrencyLimit: must be between 1",
        "flows[0]: give either rate",
        "flows[0].service.uniform: min must not exceed max",
        "flows[0].seats.initial: must be between 1",
        "flows[0].resource: a resource request needs",
        "flows[0].phases[1].scale: must be between",
        "flows[0].phases[1].at: phases must be in increasing order",
        "flows[0].expect: unknown expectation",
        "flows[1].name: duplicate flow name",
        "flows[1]: give rate",
        "flows[1].path: a non-resource request needs a path",
    ];
    for w in want {
        assert!(
            e.iter().any(|m| m.starts_with(w)),
            "missing {w:?} in {e:#?}"
        );
    }
}

#[test]
fn limits_refuse_huge_workloads_before_building_anything() {
    let e = errors(&MINIMAL.replace("rate: 100", "clients: 4000000000\n    replicas: 4000"));
    assert!(e.iter().any(|m| m.contains("clients in all")), "{e:?}");
    let e = errors(&MINIMAL.replace("10s", "1000h"));
    assert!(
        e.iter().any(|m| m.starts_with("duration: at most")),
        "{e:?}"
    );
    let e = errors(&MINIMAL.replace(
            "rate: 100",
            "rate: 100\n    replicas: 500000\n    bursts: [{at: 1s, requests: 1}, {at: 2s, requests: 1}, {at: 3s, requests: 0}]",
        ));
    assert!(
        e.iter().any(|m| m.contains("bursts over all replicas")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.starts_with("flows[0].bursts[2].requests: must be at least 1")),
        "{e:?}"
    );
    let e = errors(&format!("sampleInterval: 1ns\n{MINIMAL}"));
    assert!(
        e.iter().any(|m| m.starts_with("sampleInterval: gives")),
        "{e:?}"
    );
}

#[test]
fn a_new_duration_resamples() {
    let w = Workload::from_yaml_str(MINIMAL).unwrap();
    let w = w.with_duration(Duration::from_secs(120)).unwrap();
    assert_eq!(w.duration, Duration::from_secs(120));
    assert_eq!(w.sample_interval, Duration::from_secs(1));
    assert!(w.clone().with_duration(Duration::ZERO).is_err());
    assert!(w.with_duration(Duration::from_secs(8 * 24 * 3600)).is_err());
}

#[test]
fn durations() {
    let ms = Duration::from_millis;
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("250ms"), Ok(ms(250)));
    assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
    assert_eq!(parse_duration("10µs"), Ok(Duration::from_micros(10)));
    assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
    for bad in [
        "",
        "5",
        "s",
        "1.2.3s",
        "-1s",
        "1e400s",
        "3 fortnights",
        "1e30h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn bytes_that_are_not_utf8_are_an_error() {
    let e = Workload::from_slice(&[0xff, 0xfe, b'a']).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"));
}

#[test]
fn expect_takes_a_word_or_bounds() {
    let flow = |expect: &str| {
        format!("duration: 1s\nflows:\n  - {{name: a, user: u, verb: get, resource: pods, rate: 1, expect: {expect}}}\n")
    };
    let w = Workload::from_yaml_str(&flow("served")).unwrap();
    assert_eq!(w.flows[0].expect, Some(Expectation::Served));
    let w = Workload::from_yaml_str(&flow("{served: 0.9, waitP99: 250ms}")).unwrap();
    let e = w.flows[0].expect.unwrap();
    assert_eq!(e.served_fraction(0.95), Some(0.9));
    assert_eq!(e.wait_p99(), Some(Duration::from_millis(250)));
    let w = Workload::from_yaml_str(&flow("{waitP99: 1s}")).unwrap();
    assert_eq!(w.flows[0].expect.unwrap().served_fraction(0.95), None);
    for (bad, message) in [
        (
            "{served: 1.5}",
            "flows[0].expect.served: must be a fraction",
        ),
        ("{}", "flows[0].expect: give `served`, `waitP99` or both"),
        ("{wait: 1s}", "unknown field `wait`"),
        ("{waitP99: soon}", "flows[0].expect.waitP99"),
        (
            "perfect",
            "flows[0].expect: unknown expectation \"perfect\"",
        ),
    ] {
        let e = Workload::from_yaml_str(&flow(bad)).unwrap_err().to_string();
        assert!(e.contains(message), "{bad}: {e}");
    }
}
