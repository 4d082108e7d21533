//! start+finish through the C ABI beside the same through the Rust API, on
//! the built-in configuration (issue 4's goal: the C figure within 2x of
//! the Rust one), and the same through `apf_start_request_ids` (names as
//! ids, what the Go binding calls). Calling the `extern "C"` functions from Rust costs what
//! calling them from C does; bindings/c/bench_apf.c measures from C too.
use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::work_estimate::WorkEstimate;
use apf_capi::*;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;

const GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:shop",
    "system:authenticated",
];
const USER: &str = "system:serviceaccount:shop:frontend";
const PATH: &str = "/api/v1/namespaces/shop/configmaps/settings";

fn rust_digest() -> RequestDigest<'static> {
    RequestDigest {
        user: USER,
        groups: GROUPS,
        verb: "get",
        is_resource_request: true,
        resource: "configmaps",
        namespace: "shop",
        name: "settings",
        path: PATH,
        ..RequestDigest::default()
    }
}

fn s(text: &str) -> (*const std::ffi::c_char, usize) {
    (text.as_ptr().cast(), text.len())
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("start_finish_uncontended");

    let rust = Dispatcher::builtin(DispatcherOptions::default(), Clock::real());
    let digest = rust_digest();
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    g.bench_function("rust", |b| {
        b.iter(
            || match rust.start_request(black_box(&digest), one, None).outcome {
                Outcome::Execute(guard) => guard.finish(),
                _ => unreachable!("free seats"),
            },
        )
    });

    let mut d = std::ptr::null_mut();
    // SAFETY: NULL options (defaults) and a writable out.
    assert_eq!(
        unsafe { apf_dispatcher_new_builtin(std::ptr::null(), &mut d, std::ptr::null_mut()) },
        apf_status::APF_OK
    );
    let groups: Vec<apf_str> = GROUPS
        .iter()
        .map(|g| apf_str {
            ptr: g.as_ptr().cast(),
            len: g.len(),
        })
        .collect();
    let none = (std::ptr::null(), 0);
    let c_digest = apf_request_digest {
        user: s(USER).0,
        user_len: USER.len(),
        verb: s("get").0,
        verb_len: 3,
        api_group: none.0,
        api_group_len: none.1,
        resource: s("configmaps").0,
        resource_len: 10,
        subresource: none.0,
        subresource_len: none.1,
        namespace_: s("shop").0,
        namespace_len: 4,
        name: s("settings").0,
        name_len: 8,
        path: s(PATH).0,
        path_len: PATH.len(),
        groups: groups.as_ptr(),
        n_groups: groups.len(),
        is_resource_request: true,
    };
    let est = apf_work_estimate {
        initial_seats: 1,
        final_seats: 0,
        additional_latency_nanos: 0,
    };
    g.bench_function("c_abi", |b| {
        b.iter(|| {
            let mut out = std::mem::MaybeUninit::uninit();
            // SAFETY: live dispatcher; digest strings and groups outlive
            // the call; writable out.
            let st =
                unsafe { apf_start_request(d, black_box(&c_digest), &est, 0, out.as_mut_ptr()) };
            debug_assert_eq!(st, apf_status::APF_OK);
            // SAFETY: written on APF_OK.
            let dec = unsafe { out.assume_init() };
            // SAFETY: live dispatcher.
            let st = unsafe { apf_finish(d, dec.request, 0) };
            debug_assert_eq!(st, apf_status::APF_OK);
        })
    });
    g.bench_function("c_abi_ids", |b| {
        b.iter(|| {
            let mut out = apf_decision_ids {
                struct_size: std::mem::size_of::<apf_decision_ids>(),
                outcome: 0,
                reject_reason: 0,
                request: 0,
                flow_schema_id: 0,
                priority_level_id: 0,
            };
            // SAFETY: live dispatcher; digest strings and groups outlive
            // the call; writable out with its struct_size set.
            let st = unsafe { apf_start_request_ids(d, black_box(&c_digest), &est, 0, &mut out) };
            debug_assert_eq!(st, apf_status::APF_OK);
            // SAFETY: live dispatcher.
            let st = unsafe { apf_finish(d, out.request, 0) };
            debug_assert_eq!(st, apf_status::APF_OK);
        })
    });
    g.finish();
    // SAFETY: nothing uses the dispatcher after this.
    unsafe { apf_dispatcher_free(d) };
}

criterion_group!(benches, bench);
criterion_main!(benches);
