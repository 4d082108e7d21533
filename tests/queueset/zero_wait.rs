//! A zero wait limit: a request that cannot start at once times out at its
//! arrival (as Kubernetes' already-expired wait does), without a timer, so
//! a manual clock that is never advanced does not leave it waiting (the
//! shared middleware expectations rely on it).
#![cfg(not(loom))]

use apf::clock::Clock;
use apf::queueset::{Admission, QueueSet, QueueSetConfig, RejectReason, Request};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

#[test]
fn a_zero_wait_limit_times_out_at_once_what_cannot_start() {
    let (clock, _manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "zero-wait".into(),
        concurrency_limit: 1,
        queues: 1,
        hand_size: 1,
        queue_length_limit: 10,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::ZERO,
        fairness: apf::queueset::Fairness::Kubernetes,
    };
    let qs = QueueSet::new(cfg, clock).expect("valid config");
    let request = |flow_hash| Request {
        flow_hash,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    };
    let running = match qs.start(&request(1)) {
        Admission::Execute(g) => g,
        _ => panic!("the free seat"),
    };
    match qs.start(&request(2)) {
        Admission::Rejected(reason) => assert_eq!(reason, RejectReason::TimeOut),
        Admission::Queued(_) => panic!("left waiting for a timer"),
        Admission::Execute(_) => panic!("no seat was free"),
    }
    let stats = qs.tag_stats();
    assert_eq!(stats[0].1.rejected[RejectReason::TimeOut as usize], 1);
    assert_eq!(stats[0].1.waiting, 0);
    drop(running);
    // Nothing waits: the next request takes the free seat.
    assert!(matches!(qs.start(&request(3)), Admission::Execute(_)));
}
