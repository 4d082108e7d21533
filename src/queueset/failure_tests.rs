//! A panic inside the level lock fails the level (see the module
//! documentation of `queueset`). The panic is provoked by poisoning the
//! lock directly: no code path of the core panics by design.

use super::*;
use crate::clock::Clock;
use std::time::Duration;

fn one_seat(flow: u64) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    }
}

#[test]
fn a_panic_inside_the_level_lock_fails_the_level_and_frees_everyone() {
    let (clock, _manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "doomed".into(),
        concurrency_limit: 1,
        queues: 2,
        hand_size: 1,
        queue_length_limit: 4,
        ..QueueSetConfig::default()
    };
    let qs = QueueSet::new(cfg, clock).expect("valid");
    let Admission::Execute(running) = qs.start(&one_seat(1)) else {
        panic!("room")
    };
    let Admission::Queued(mut waiting) = qs.start(&one_seat(1)) else {
        panic!("full: queued")
    };
    qs.poison_for_test();
    assert!(!qs.failed(), "noticed at the next lock, not before");
    // The next request takes the lock, finds it poisoned: the level fails,
    // the waiter is released, and the newcomer is refused with the reason.
    assert!(matches!(
        qs.start(&one_seat(2)),
        Admission::Rejected(RejectReason::LevelFailed)
    ));
    assert!(qs.failed());
    assert!(matches!(
        waiting.poll(),
        Some(Err(RejectReason::LevelFailed))
    ));
    // The executing request still gives its seat back, and the hot path
    // admits nothing although the seat is free.
    drop(running);
    assert_eq!(qs.stats().seats_in_use, 0);
    assert!(matches!(
        qs.start(&one_seat(3)),
        Admission::Rejected(RejectReason::LevelFailed)
    ));
    let err = qs.reconfigure(qs.config()).expect_err("refused");
    assert!(err.to_string().contains("doomed"), "{err}");
}

/// The dispatcher replaces a failed level with a new one at its next
/// reconfiguration; requests then classify to the new level and run.
#[test]
fn the_dispatcher_replaces_a_failed_level_when_it_reconfigures() {
    use crate::classification::RequestDigest;
    use crate::config::Config;
    use crate::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let digest = RequestDigest {
        user: "alice",
        groups: &["system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "pods",
        namespace: "default",
        path: "/api/v1/namespaces/default/pods",
        ..RequestDigest::default()
    };
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    let level = d.level("global-default").expect("built in");
    let qs = level.queueset().expect("limited");
    qs.poison_for_test();
    // Noticed by the next operation that takes the level lock.
    let _ = qs.stats();
    assert!(qs.failed());
    let refused = d.start_request(&digest, one, None);
    assert!(matches!(
        refused.outcome,
        Outcome::Rejected(RejectReason::LevelFailed)
    ));
    d.reconfigure(&Config::builtin()).expect("valid");
    let fresh = d.level("global-default").expect("built in");
    assert!(!Arc::ptr_eq(&level, &fresh), "replaced");
    let served = d.start_request(&digest, one, None);
    assert!(matches!(served.outcome, Outcome::Execute(_)));
}
