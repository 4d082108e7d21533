//! Runs the uncontended hot path in a loop, for profilers
//! (`valgrind --tool=callgrind target/release/examples/hotpath_profile
//! [ITERATIONS [kubernetes|flow|flow-maxmin]]`).
use apf::clock::Clock;
use apf::queueset::{Admission, Fairness, QueueSet, QueueSetConfig, Request};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let fairness = std::env::args()
        .nth(2)
        .map(|s| {
            Fairness::from_name(&s).unwrap_or_else(|| {
                eprintln!(
                    "hotpath_profile: fairness {s:?}: expected kubernetes, flow or flow-maxmin"
                );
                std::process::exit(2)
            })
        })
        .unwrap_or_default();
    let cfg = QueueSetConfig {
        concurrency_limit: 1000,
        fairness,
        ..QueueSetConfig::default()
    };
    let qs = QueueSet::new(cfg, Clock::real()).expect("valid config");
    let mut h = 1u64;
    for _ in 0..n {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        let r = Request {
            flow_hash: h,
            estimate: WorkEstimate::new(1, 0, Duration::ZERO),
            deadline: None,
        };
        match qs.start(&r) {
            Admission::Execute(g) => g.finish(),
            _ => unreachable!("free seats"),
        }
    }
    println!("{:?}", qs.stats());
}
