//! Classify + start + finish through the dispatcher in a loop, on the
//! built-in configuration, for profilers
//! (`valgrind --tool=callgrind target/release/examples/dispatcher_hotpath_profile 100000`).
//! A second argument `adaptive` turns the adaptive server concurrency limit
//! on (its updates run on the clock's timer thread, counted too).
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
    let adaptive = std::env::args().nth(2).is_some_and(|a| a == "adaptive");
    let options = DispatcherOptions {
        adaptive: adaptive.then(apf::adaptive::AdaptiveOptions::default),
        ..DispatcherOptions::default()
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
