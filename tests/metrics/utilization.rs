//! The Kubernetes APF metrics added for issue 13: `work_estimated_seats`,
//! `request_dispatch_no_accommodation_total` and the time-weighted
//! `priority_level_seat_utilization` / `priority_level_request_utilization`,
//! checked value by value on the manual clock.
#![cfg(not(loom))]

use apf::dispatcher::Outcome;
use apf::level::RequestGuard;
use std::time::Duration;

use crate::openmetrics;
use crate::two_levels;
use openmetrics::parse;
use two_levels::{digest, dispatcher, execute, seats, STRICT, TIGHT};

const P: &str = "apiserver_flowcontrol_";
const MS: f64 = 1e6;

#[test]
fn seats_accommodation_and_utilization_follow_a_scripted_workload() {
    // NominalCL = ceil(18 × 10 / 25) = 8 for tight and strict, and at most
    // ceil(8 × 0.15) = 2 seats a request.
    let (d, manual) = dispatcher();
    let idle = parse(&d.metrics_text());
    assert_eq!(
        idle.get(
            &format!("{P}current_limit_seats"),
            &[("priority_level", "tight")]
        ),
        8.0
    );
    for family in [
        "work_estimated_seats",
        "request_dispatch_no_accommodation",
        "priority_level_seat_utilization",
        "priority_level_request_utilization",
    ] {
        assert!(
            !idle.families.contains_key(&format!("{P}{family}")),
            "{family} has no series before anything happened"
        );
    }

    // t = 0: tight runs three two-seat requests and a one-seat one (7 of
    // 8 seats); a two-seat request cannot fit in the seat left, so it
    // queues, and the dispatch attempt at its arrival finds no
    // accommodation.
    let mut held: Vec<RequestGuard> = (0..3).map(|_| execute(&d, "tenants", 2)).collect();
    let one = execute(&d, "tenants", 1);
    let mut b = match d.start_request(&digest("tenants"), seats(2), None).outcome {
        Outcome::Queued(t) => t,
        other => panic!("expected to queue: {other:?}"),
    };
    // strict: four two-seat requests fill it, a fifth is rejected.
    held.extend((0..4).map(|_| execute(&d, "batch", 2)));
    let fifth = d.start_request(&digest("batch"), seats(2), None).outcome;
    assert!(matches!(fifth, Outcome::Rejected(_)), "{fifth:?}");

    // 100 ms at 7 of 8 seats, 4 of 8 requests executing and one waiting in
    // a queue of two places; then the one-seat request ends and the queued
    // one takes the two seats: 50 ms at 8 of 8.
    manual.advance(Duration::from_millis(100));
    drop(one);
    held.push(b.poll().expect("decided").expect("dispatched"));
    manual.advance(Duration::from_millis(50));

    let exp = parse(&d.metrics_text());
    let name = |n: &str| format!("{P}{n}");
    let work = name("work_estimated_seats");
    assert_eq!(exp.bucket(&work, &TIGHT, "1"), 1.0);
    assert_eq!(exp.bucket(&work, &TIGHT, "2"), 5.0);
    assert_eq!(exp.get(&format!("{work}_sum"), &TIGHT), 9.0);
    assert_eq!(
        exp.get(&format!("{work}_count"), &STRICT),
        5.0,
        "the rejected one too"
    );
    assert_eq!(exp.bucket(&work, &STRICT, "1"), 0.0);

    let no_room = name("request_dispatch_no_accommodation_total");
    assert_eq!(exp.get(&no_room, &TIGHT), 1.0);
    assert!(
        !exp.has(&no_room, &STRICT),
        "a level that does not queue never dispatches from a queue"
    );

    let seat_util = name("priority_level_seat_utilization");
    let tight = [("priority_level", "tight"), ("phase", "executing")];
    assert_eq!(exp.get(&format!("{seat_util}_count"), &tight), 150.0 * MS);
    assert_eq!(exp.bucket(&seat_util, &tight, "0.8"), 0.0);
    assert_eq!(
        exp.bucket(&seat_util, &tight, "0.9"),
        100.0 * MS,
        "7/8 for 100 ms"
    );
    assert_eq!(exp.bucket(&seat_util, &tight, "0.99"), 100.0 * MS);
    assert_eq!(
        exp.bucket(&seat_util, &tight, "1"),
        150.0 * MS,
        "full for 50 ms"
    );
    assert_eq!(
        exp.get(&format!("{seat_util}_sum"), &tight),
        0.875 * 100.0 * MS + 50.0 * MS
    );
    let strict = [("priority_level", "strict"), ("phase", "executing")];
    assert_eq!(exp.bucket(&seat_util, &strict, "0.99"), 0.0);
    assert_eq!(
        exp.bucket(&seat_util, &strict, "1"),
        150.0 * MS,
        "full throughout"
    );
    assert!(
        !exp.has(
            &format!("{seat_util}_count"),
            &[("priority_level", "exempt")]
        ),
        "exempt levels have no limit to be utilized"
    );

    let req_util = name("priority_level_request_utilization");
    let waiting = [("priority_level", "tight"), ("phase", "waiting")];
    assert_eq!(exp.bucket(&req_util, &waiting, "0"), 50.0 * MS);
    assert_eq!(exp.bucket(&req_util, &waiting, "0.25"), 50.0 * MS);
    assert_eq!(
        exp.bucket(&req_util, &waiting, "0.5"),
        150.0 * MS,
        "1 of 2 places"
    );
    let executing = [("priority_level", "tight"), ("phase", "executing")];
    assert_eq!(exp.bucket(&req_util, &executing, "0.25"), 0.0);
    assert_eq!(
        exp.bucket(&req_util, &executing, "0.5"),
        150.0 * MS,
        "4 of 8"
    );

    // A scrape observes up to now without changing what was observed.
    let again = parse(&d.metrics_text());
    assert_eq!(again.get(&format!("{seat_util}_count"), &tight), 150.0 * MS);
    drop(held);
}
