//! Classify + start + finish through the dispatcher in a loop, on the
//! built-in configuration, for profilers
//! (`valgrind --tool=callgrind target/release/examples/dispatcher_hotpath_profile 100000`).
//! A second argument `adaptive` turns the adaptive server concurrency limit
//! on (its updates run on the clock's timer thread, counted too); a number
//! instead is the fixed server concurrency limit (default 600), to compare
//! with the small total the adaptive limit keeps for one request at a time.
use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mode = std::env::args().nth(2).unwrap_or_default();
    let defaults = DispatcherOptions::default();
    let options = DispatcherOptions {
        adaptive: (mode == "adaptive").then(apf::adaptive::AdaptiveOptions::default),
        server_concurrency_limit: mode.parse().unwrap_or(defaults.server_concurrency_limit),
        ..defaults
    };
    let d = Dispatcher::builtin(options, Clock::real());
    let digest = RequestDigest {
        user: "system:serviceaccount:shop:frontend",
        groups: &[
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            "system:authenticated",
        ],
        verb: "get",
        is_resource_request: true,
        resource: "configmaps",
        namespace: "shop",
        name: "settings",
        path: "/api/v1/namespaces/shop/configmaps/settings",
        ..RequestDigest::default()
    };
    let estimate = WorkEstimate::new(1, 0, Duration::ZERO);
    for _ in 0..n {
        match d.start_request(&digest, estimate, None).outcome {
            Outcome::Execute(g) => g.finish(),
            _ => unreachable!("free seats"),
        }
    }
    println!("{:?}", d.current_limits());
}
