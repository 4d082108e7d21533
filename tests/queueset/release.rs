#![cfg(not(loom))]
//! Releasing seats early (issue 11 part 3): an executing request gives back
//! some or all of its seats and keeps executing; its finish gives back only
//! what it still holds, on every path (hot-path finish, slow-path finish,
//! seats lingering for additional latency). All on the manual clock.

use apf::clock::{Clock, ManualClock};
use apf::queueset::vtime::seats_times;
use apf::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig, ReleaseError, Request};
use apf::work_estimate::WorkEstimate;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);
const G: Duration = Duration::from_millis(3);

fn level(limit: u32, queues: u32) -> (QueueSet, ManualClock) {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "release".into(),
        concurrency_limit: limit,
        queues,
        hand_size: queues.min(1),
        queue_length_limit: 8,
        service_time_guess: G,
        wait_limit: Duration::from_secs(60),
        fairness: Fairness::Kubernetes,
    };
    (QueueSet::new(cfg, clock).expect("valid config"), manual)
}

fn req(flow: u64, seats: u32, final_seats: u32, latency: Duration) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(seats, final_seats, latency),
        deadline: None,
    }
}

fn execute(qs: &QueueSet, r: Request) -> Guard<'_> {
    match qs.start(&r) {
        Admission::Execute(g) => g,
        other => panic!("expected to execute, got {other:?}"),
    }
}

#[test]
fn a_release_dispatches_waiters_and_the_finish_gives_back_only_the_rest() {
    let (qs, manual) = level(4, 1);
    let mut watch = execute(&qs, req(1, 4, 0, Duration::ZERO));
    let mut ticket = match qs.start(&req(2, 2, 0, Duration::ZERO)) {
        Admission::Queued(t) => t,
        other => panic!("the level is full: {other:?}"),
    };
    manual.advance(MS);
    watch.release_seats(3).expect("holds 4");
    assert_eq!(watch.held_seats(), 1);
    let other = ticket.poll().expect("dispatched by the release").unwrap();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.requests_executing), (3, 2));
    watch.finish();
    assert_eq!(
        qs.stats().seats_in_use,
        2,
        "the watch gave back its last seat"
    );
    other.finish();
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.requests_executing), (0, 0));
}

#[test]
fn a_hot_path_finish_after_a_release_gives_back_only_what_is_held() {
    let (qs, _manual) = level(4, 2);
    let mut a = execute(&qs, req(1, 3, 0, Duration::ZERO));
    a.release_seats(2).unwrap();
    // Nothing waits: the finish takes the hot path (a ring record and one
    // atomic subtraction), which must subtract 1 seat, not 3.
    let b = execute(&qs, req(2, 3, 0, Duration::ZERO));
    a.finish();
    assert_eq!(qs.stats().seats_in_use, 3, "b's 3 seats remain");
    b.finish();
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0);
    let tagged: u64 = qs.tag_stats().iter().map(|(_, t)| t.seats_in_use).sum();
    assert_eq!(tagged, 0, "the tallies give every seat back once too");
}

#[test]
fn lingering_seats_are_only_those_still_held() {
    let (qs, manual) = level(4, 1);
    let mut a = execute(&qs, req(1, 2, 3, 10 * MS));
    assert_eq!(a.held_seats(), 3, "the most of initial and final seats");
    a.release_seats(1).unwrap();
    a.finish();
    assert_eq!(qs.stats().seats_in_use, 2, "two seats linger");
    manual.advance(10 * MS);
    assert_eq!(
        qs.stats().seats_in_use,
        0,
        "and come back after the latency"
    );
}

#[test]
fn a_request_that_released_everything_holds_nothing_at_its_finish() {
    let (qs, manual) = level(2, 1);
    let mut a = execute(&qs, req(1, 2, 2, 10 * MS));
    a.release_all_seats().unwrap();
    assert_eq!(a.held_seats(), 0);
    let stats = qs.stats();
    assert_eq!((stats.seats_in_use, stats.requests_executing), (0, 1));
    // A request wider than the limit runs only when no executing request
    // holds seats: one that released them all does not block it.
    let wide = execute(&qs, req(2, 5, 0, Duration::ZERO));
    a.finish();
    assert_eq!(qs.stats().seats_in_use, 5, "nothing lingers for a");
    wide.finish();
    manual.advance(20 * MS);
    assert_eq!(qs.stats().seats_in_use, 0);
}

#[test]
fn bad_releases_are_clear_errors_that_change_nothing() {
    let (qs, _manual) = level(4, 1);
    let mut a = execute(&qs, req(1, 2, 0, Duration::ZERO));
    assert_eq!(a.release_seats(0), Err(ReleaseError::ZeroSeats));
    assert_eq!(
        a.release_seats(3),
        Err(ReleaseError::MoreThanHeld {
            held: 2,
            requested: 3
        })
    );
    assert_eq!(qs.stats().seats_in_use, 2);
    a.release_all_seats().unwrap();
    assert_eq!(a.release_all_seats(), Err(ReleaseError::NothingHeld));
    assert_eq!(a.release_seats(1), Err(ReleaseError::NothingHeld));
    let msg = ReleaseError::MoreThanHeld {
        held: 2,
        requested: 3,
    }
    .to_string();
    assert!(
        msg.contains("seats") && msg.contains('3') && msg.contains('2'),
        "{msg}"
    );
    a.finish();
    assert_eq!(qs.stats().seats_in_use, 0);
}

#[test]
fn released_seats_are_charged_the_time_they_were_held() {
    // One queue: its next-dispatch R is the sum of its charges. A 2-seat
    // request is charged 2×G at dispatch; it releases both seats after 1 ms
    // and finishes after 100 ms: the charge becomes 2×1 ms, not 2×100 ms.
    let (qs, manual) = level(4, 1);
    let before = qs.queue_states()[0].0;
    let mut a = execute(&qs, req(1, 2, 0, Duration::ZERO));
    manual.advance(MS);
    a.release_all_seats().unwrap();
    manual.advance(99 * MS);
    a.finish();
    let after = qs.queue_states()[0].0;
    assert_eq!(after - before, seats_times(2, MS));
}
