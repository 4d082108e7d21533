//! The adaptive limit through the C ABI: `apf_adaptive_options_default`
//! gives the Rust defaults, `apf_dispatcher_options.adaptive` turns the
//! limit on with the caller's tuning, `apf_dispatcher_read_adaptive` and the
//! metrics show it moving under load on the manual clock, and every
//! out-of-range field is refused with `APF_ERR_INVALID_PARAMETER` and an
//! `apf_error` naming the C field.
use crate::support::*;

use apf::adaptive::AdaptiveOptions;
use apf_capi::*;
use std::ptr::{null, null_mut};

/// One limited level with room to queue, beside catch-all.
const CONFIG: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: work, uid: uid-work}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 30
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 100}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice-schema, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: work}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

fn adaptive_default() -> apf_adaptive_options {
    let mut o = std::mem::MaybeUninit::uninit();
    // SAFETY: writable.
    assert_eq!(
        unsafe { apf_adaptive_options_default(o.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK.
    unsafe { o.assume_init() }
}

fn read(d: &D) -> apf_adaptive_state {
    let mut s = std::mem::MaybeUninit::uninit();
    // SAFETY: live dispatcher, writable out.
    let st = unsafe { apf_dispatcher_read_adaptive(d.0, s.as_mut_ptr()) };
    assert_eq!(st, apf_status::APF_OK);
    // SAFETY: written on APF_OK.
    unsafe { s.assume_init() }
}

fn with_adaptive(a: &apf_adaptive_options) -> apf_dispatcher_options {
    apf_dispatcher_options {
        manual_clock: true,
        server_concurrency_limit: 100,
        adaptive: a,
        ..default_options()
    }
}

fn metrics(d: &D) -> String {
    let mut t = std::mem::MaybeUninit::uninit();
    // SAFETY: live dispatcher, writable out.
    assert_eq!(
        unsafe { apf_dispatcher_metrics_text(d.0, t.as_mut_ptr()) },
        apf_status::APF_OK
    );
    // SAFETY: written on APF_OK; freed once below.
    let mut t = unsafe { t.assume_init() };
    // SAFETY: a live text.
    let s = unsafe { std::slice::from_raw_parts(t.ptr.cast::<u8>(), t.len) };
    let s = String::from_utf8(s.to_vec()).unwrap();
    // SAFETY: owned, freed once.
    unsafe { apf_text_free(&mut t) };
    s
}

/// The value of the metric line starting with `name `.
fn gauge(text: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

/// `clients` requests always outstanding (closed loop), each executing
/// `service_ms` of manual time, for `rounds` rounds; returns completions.
fn closed_loop(d: &D, clients: usize, service_ms: u64, rounds: usize) -> usize {
    let alice = Request::healthz("alice");
    let mut outstanding: Vec<u64> = Vec::new();
    let mut done = 0;
    for _ in 0..rounds {
        while outstanding.len() < clients {
            let dec = start(d, &alice);
            if dec.outcome != REJECTED {
                outstanding.push(dec.request);
            }
        }
        advance(d, service_ms * MS);
        // Decide first, then finish: a finish dispatches a queued request,
        // which must run its own `service_ms`.
        let polled: Vec<(u64, u32)> = outstanding
            .iter()
            .map(|&h| (h, poll(d, h).map_or(REJECTED, |(o, _)| o)))
            .collect();
        outstanding.clear();
        for (h, o) in polled {
            if o == EXECUTE {
                finish_ok(d, h);
                done += 1;
            } else if o == QUEUED {
                outstanding.push(h);
            }
        }
    }
    for h in outstanding {
        let _ = finish(d, h);
        let _ = cancel(d, h);
    }
    done
}

#[test]
fn the_defaults_are_the_rust_defaults() {
    let a = adaptive_default();
    let r = AdaptiveOptions::default();
    assert_eq!(a.struct_size, std::mem::size_of::<apf_adaptive_options>());
    assert_eq!(a.min_limit, r.min_limit);
    assert_eq!(a.max_limit, r.max_limit);
    assert_eq!(
        u128::from(a.update_interval_ns),
        r.update_interval.as_nanos()
    );
    assert_eq!(a.tolerance_percent, r.tolerance_percent);
    assert_eq!(a.smoothing_percent, r.smoothing_percent);
    assert_eq!(a.gain, r.gain);
    assert_eq!(a.min_window_samples, r.min_window_samples);
    assert_eq!(u128::from(a.probe_interval_ns), r.probe_interval.as_nanos());
    assert_eq!(a.probe_limit, r.probe_limit);
    assert_eq!(a.probe_samples, r.probe_samples);
    assert_eq!(u128::from(a.probe_timeout_ns), r.probe_timeout.as_nanos());
    // The documented values.
    assert_eq!((a.min_limit, a.max_limit, a.gain), (8, 10_000, 3));
    assert_eq!(a.update_interval_ns, 250 * MS);
    // Off unless pointed to.
    assert!(default_options().adaptive.is_null());
}

#[test]
fn off_by_default_reads_disabled_and_no_series() {
    let d = new_from_config(CONFIG, &tiny_options(true));
    let s = read(&d);
    assert!(!s.enabled);
    assert_eq!((s.limit, s.min_latency_ns, s.updates), (0, 0, 0));
    assert!(!metrics(&d).contains("adaptive_"));
}

#[test]
fn the_limit_adapts_under_load_and_shows_in_state_and_metrics() {
    let a = apf_adaptive_options {
        probe_limit: 5,
        probe_samples: 20,
        ..adaptive_default()
    };
    let d = new_from_config(CONFIG, &with_adaptive(&a));
    // It starts with a probe at the caller's probe_limit.
    let s = read(&d);
    assert!(s.enabled && s.probing, "{s:?}");
    assert_eq!(s.limit, 5, "{s:?}");
    assert_eq!(s.min_latency_ns, 0);
    // 40 clients, 20 ms each, for 4 s of manual time.
    let done = closed_loop(&d, 40, 20, 200);
    assert!(done > 500, "{done}");
    let s = read(&d);
    assert!(!s.probing, "{s:?}");
    assert!(s.probes >= 1 && s.updates >= 10, "{s:?}");
    // The probe measured the 20 ms execution time.
    assert_eq!(s.min_latency_ns, 20 * MS, "{s:?}");
    assert!(
        s.latency_ns > 0 && (0.5..=2.0).contains(&s.gradient),
        "{s:?}"
    );
    // The slow start took the total from min_limit (8) up: the backend
    // here never slows, so latency stays at its minimum.
    assert!(s.limit > a.min_limit, "{s:?}");
    let text = metrics(&d);
    assert_eq!(
        gauge(
            &text,
            "apiserver_flowcontrol_adaptive_server_concurrency_limit"
        ),
        f64::from(s.limit),
        "{text}"
    );
    let min = gauge(&text, "apiserver_flowcontrol_adaptive_min_latency_seconds");
    assert!((min * 1e9 - s.min_latency_ns as f64).abs() < 2.0, "{min}");
    assert_eq!(
        gauge(&text, "apiserver_flowcontrol_adaptive_gradient"),
        s.gradient
    );
}

#[test]
fn min_limit_and_max_limit_reach_the_controller() {
    // Pinned at 12: after the probe the total is 12 whatever the load.
    let a = apf_adaptive_options {
        min_limit: 12,
        max_limit: 12,
        probe_samples: 10,
        ..adaptive_default()
    };
    let d = new_from_config(CONFIG, &with_adaptive(&a));
    closed_loop(&d, 40, 20, 150);
    let s = read(&d);
    assert!(!s.probing, "{s:?}");
    assert_eq!(s.limit, 12, "{s:?}");
}

#[test]
fn out_of_range_fields_are_refused_by_name() {
    type Change = fn(&mut apf_adaptive_options);
    let cases: [(Change, &str); 14] = [
        (|a| a.min_limit = 0, "min_limit"),
        (|a| a.max_limit = 4, "max_limit"),
        (|a| a.max_limit = u32::MAX, "max_limit"),
        (|a| a.update_interval_ns = MS, "update_interval_ns"),
        (|a| a.tolerance_percent = 0, "tolerance_percent"),
        (|a| a.tolerance_percent = 1001, "tolerance_percent"),
        (|a| a.smoothing_percent = 101, "smoothing_percent"),
        (|a| a.gain = 0, "gain"),
        (|a| a.gain = 9, "gain"),
        (|a| a.probe_limit = 0, "probe_limit"),
        (|a| a.probe_samples = 0, "probe_samples"),
        (|a| a.probe_interval_ns = MS, "probe_interval_ns"),
        (|a| a.probe_timeout_ns = 0, "probe_timeout_ns"),
        (
            |a| a.struct_size = 0,
            "apf_adaptive_options.struct_size is 0",
        ),
    ];
    for (change, field) in cases {
        let mut a = adaptive_default();
        change(&mut a);
        let mut out = null_mut();
        // SAFETY: options and the adaptive struct readable, out writable.
        let st = unsafe { apf_dispatcher_new_builtin(&with_adaptive(&a), &mut out, err()) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER, "{field}");
        assert!(out.is_null());
        let e = last_error();
        // The C name: the struct, then the field.
        let named = if field.starts_with("apf_adaptive_options.") {
            field.to_owned()
        } else {
            format!("apf_adaptive_options.{field}")
        };
        assert!(e.contains(&named), "{named}: {e}");
        // The same through the other constructor.
        // SAFETY: as above, and the text readable for its length.
        let st = unsafe {
            apf_dispatcher_new_from_config(
                CONFIG.as_ptr().cast(),
                CONFIG.len(),
                &with_adaptive(&a),
                &mut out,
                err(),
            )
        };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER, "{field}");
        assert!(out.is_null());
        assert!(last_error().contains(&named), "{named}: {}", last_error());
    }
    // A bad fixed option is still reported first, with a good adaptive one.
    let a = adaptive_default();
    let o = apf_dispatcher_options {
        server_concurrency_limit: 0,
        ..with_adaptive(&a)
    };
    let mut out = null_mut();
    // SAFETY: as above.
    let st = unsafe { apf_dispatcher_new_builtin(&o, &mut out, err()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(last_error().contains("server_concurrency_limit"));
    // Without an out_error the status alone comes back.
    let mut a = adaptive_default();
    a.gain = 0;
    // SAFETY: as above; NULL out_error is allowed.
    let st = unsafe { apf_dispatcher_new_builtin(&with_adaptive(&a), &mut out, null_mut()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(out.is_null());
}

#[test]
fn null_pointers_are_errors() {
    let d = new_from_config(CONFIG, &tiny_options(true));
    let mut s = std::mem::MaybeUninit::uninit();
    // SAFETY: NULL where a pointer is required; the rest valid.
    unsafe {
        assert_eq!(
            apf_adaptive_options_default(null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_dispatcher_read_adaptive(null(), s.as_mut_ptr()),
            apf_status::APF_ERR_NULL_POINTER
        );
        assert_eq!(
            apf_dispatcher_read_adaptive(d.0, null_mut()),
            apf_status::APF_ERR_NULL_POINTER
        );
    }
}

/// `adaptive` is part of ABI 0.2's first `apf_dispatcher_options`: a
/// struct that stops before it is not a version this library published, and
/// is refused rather than silently run on the fixed limit.
#[test]
fn an_options_struct_without_adaptive_is_refused() {
    let a = adaptive_default();
    let o = apf_dispatcher_options {
        struct_size: std::mem::offset_of!(apf_dispatcher_options, adaptive),
        ..with_adaptive(&a)
    };
    let mut out = null_mut();
    // SAFETY: options readable for its struct_size, out writable.
    let st = unsafe { apf_dispatcher_new_builtin(&o, &mut out, err()) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(out.is_null());
    assert!(
        last_error().contains("apf_dispatcher_options.struct_size"),
        "{}",
        last_error()
    );
}
