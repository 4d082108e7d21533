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
