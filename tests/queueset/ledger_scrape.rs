//! Metrics and dumps are exact at a scrape although the hot path writes
//! only its shard's ledger: every observation merges the ledgers first
//! (src/queueset/paths.rs, `lock_and_merge`), so requests that started and
//! finished lock-free are counted, and those still executing are seen
//! executing, in their queue.
use apf::clock::Clock;
use apf::queueset::{Admission, Fairness, QueueSet, QueueSetConfig, Request};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

fn level(fairness: Fairness) -> (QueueSet, apf::clock::ManualClock) {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        concurrency_limit: 10,
        queues: 4,
        hand_size: 2,
        fairness,
        ..QueueSetConfig::default()
    };
    (QueueSet::new(cfg, clock).unwrap(), manual)
}

fn request(flow: u64, seats: u32) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(seats, 0, Duration::ZERO),
        deadline: None,
    }
}

#[test]
fn a_scrape_counts_every_hot_request_exactly() {
    for fairness in [Fairness::Kubernetes, Fairness::Flow, Fairness::FlowMaxMin] {
        let (qs, manual) = level(fairness);
        let mut guards = Vec::new();
        for (flow, seats) in [(1, 1), (2, 2), (3, 3)] {
            match qs.start(&request(flow, seats)) {
                Admission::Execute(g) => guards.push(g),
                other => panic!("{fairness:?}: free seats, got {other:?}"),
            }
        }
        manual.advance(Duration::from_millis(1));
        guards.remove(0).finish(); // 1 seat, 1 ms
        manual.advance(Duration::from_millis(1));
        guards.remove(0).finish(); // 2 seats, 2 ms

        let stats = qs.stats();
        assert_eq!(stats.requests_executing, 1, "{fairness:?}");
        assert_eq!(stats.seats_in_use, 3, "{fairness:?}");
        let tags = qs.tag_stats();
        let (_, t) = &tags[0];
        assert_eq!(t.dispatched, 3, "{fairness:?}");
        assert_eq!((t.executing, t.seats_in_use), (1, 3), "{fairness:?}");
        assert_eq!(t.execution.count(), 2, "{fairness:?}");
        assert_eq!(t.execution.sum(), 3_000_000, "{fairness:?}: 1 ms + 2 ms");
        assert_eq!(t.wait_dispatched.count(), 3, "{fairness:?}: zero waits");
        assert_eq!(t.queue_length.count(), 3, "{fairness:?}: a queue of one");
        assert_eq!(t.work_estimated_seats.count(), 3, "{fairness:?}");
        assert_eq!(t.work_estimated_seats.sum(), 6, "{fairness:?}");
        // The one still executing is in its queue, in the dump too.
        let executing: u32 = qs.queue_states().iter().map(|q| q.2).sum();
        assert_eq!(executing, 1, "{fairness:?}");
        let seats: u32 = qs.queue_states().iter().map(|q| q.3).sum();
        assert_eq!(seats, 3, "{fairness:?}");
        let dump = qs.dump();
        assert_eq!(
            dump.queues.iter().map(|q| q.executing).sum::<u32>(),
            1,
            "{fairness:?}"
        );

        // It finishes through the core now (it was merged).
        manual.advance(Duration::from_millis(1));
        guards.remove(0).finish();
        let tags = qs.tag_stats();
        let (_, t) = &tags[0];
        assert_eq!((t.executing, t.seats_in_use), (0, 0), "{fairness:?}");
        assert_eq!(t.execution.count(), 3, "{fairness:?}");
        assert_eq!(t.execution.sum(), 6_000_000, "{fairness:?}");
        let stats = qs.stats();
        assert_eq!((stats.requests_executing, stats.seats_in_use), (0, 0));
    }
}
