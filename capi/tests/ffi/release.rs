//! `apf_request_release_seats` (issue 11 part 3), called from Rust exactly
//! as C calls it: a release dispatches a waiter, the finish gives back only
//! what is still held, and every misuse (a second release of all seats,
//! more seats than held, a release after the finish, of a queued request,
//! a NULL dispatcher) is a clear error that changes nothing; and a release
//! racing the finish of the same request on another thread leaves no seat
//! behind on any queue (issue 22).
use crate::dumps;
use crate::support::{self, *};
use apf_capi::*;
use std::ptr::null_mut;

/// A watch of pods by `alice`, who has `tiny`'s one seat to herself.
fn start(d: &D) -> apf_decision {
    support::start(
        d,
        &Request {
            groups: &[],
            ..Request::resource("alice", "watch", "pods")
        },
    )
}

fn release(d: &D, h: u64, seats: u32) -> apf_status {
    // SAFETY: live dispatcher; any handle and count are allowed.
    unsafe { apf_request_release_seats(d.0, h, seats) }
}

#[test]
fn a_release_dispatches_the_waiter_and_misuse_is_a_clear_error() {
    let d = tiny().dispatcher();
    let watch = start(&d);
    assert_eq!(watch.outcome, EXECUTE);
    let other = start(&d);
    assert_eq!(other.outcome, QUEUED, "the only seat is held");
    assert_eq!(
        release(&d, other.request, 0),
        apf_status::APF_ERR_REQUEST_QUEUED
    );

    assert_eq!(
        release(&d, watch.request, 2),
        apf_status::APF_ERR_INVALID_PARAMETER
    );
    assert_eq!(
        outcome(&d, other.request),
        QUEUED,
        "a refused release changes nothing"
    );

    assert_eq!(
        release(&d, watch.request, 0),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    assert_eq!(
        outcome(&d, other.request),
        EXECUTE,
        "dispatched by the release"
    );
    assert_eq!(
        release(&d, watch.request, 0),
        apf_status::APF_ERR_INVALID_PARAMETER
    );

    assert_eq!(finish(&d, watch.request), apf_status::APF_OK);
    assert_eq!(
        release(&d, watch.request, 1),
        apf_status::APF_ERR_INVALID_HANDLE
    );
    // The watch's finish gave back nothing more: the other request still
    // holds the level's only seat, so a third one queues.
    let third = start(&d);
    assert_eq!(third.outcome, QUEUED);
    assert_eq!(finish(&d, other.request), apf_status::APF_OK);
    assert_eq!(outcome(&d, third.request), EXECUTE);
    assert_eq!(finish(&d, third.request), apf_status::APF_OK);
}

#[test]
fn a_null_dispatcher_names_no_owner() {
    // SAFETY: NULL names no dispatcher; handle 0 is never issued.
    let st = unsafe { apf_request_release_seats(null_mut(), 0, 0) };
    assert_eq!(st, apf_status::APF_ERR_INVALID_HANDLE);
    // A live request is released through NULL as through its dispatcher.
    let d = tiny().dispatcher();
    let a = start(&d);
    // SAFETY: as above.
    let st = unsafe { apf_request_release_seats(null_mut(), a.request, 0) };
    assert_eq!(st, apf_status::APF_OK);
    assert_eq!(finish(&d, a.request), apf_status::APF_OK);
}

#[test]
fn finish_with_cost_refuses_a_bad_cost_and_keeps_the_request() {
    let d = tiny().dispatcher();
    let a = start(&d);
    assert_eq!(a.outcome, EXECUTE);
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        // SAFETY: live dispatcher.
        let st = unsafe { apf_finish_with_cost(d.0, a.request, 0, bad) };
        assert_eq!(st, apf_status::APF_ERR_INVALID_PARAMETER);
    }
    let b = start(&d);
    assert_eq!(b.outcome, QUEUED, "a refused finish did not free the seat");
    // SAFETY: live dispatcher.
    let st = unsafe { apf_finish_with_cost(d.0, a.request, 0, 3.5) };
    assert_eq!(st, apf_status::APF_OK, "{}", last_error());
    assert_eq!(outcome(&d, b.request), EXECUTE);
    // SAFETY: live dispatcher.
    let again = unsafe { apf_finish_with_cost(d.0, a.request, 0, 1.0) };
    assert_eq!(again, apf_status::APF_ERR_INVALID_HANDLE, "a second finish");
    assert_eq!(finish(&d, b.request), apf_status::APF_OK);
}

// ----- issue 22: a release racing the finish of the same request -------------

/// Level `race` (fairness `policy`, `queues` queues, hand size 2 or 1) takes
/// every request of users `u0`..`u7` (each user a flow), with most of the
/// server's 200 seats.
fn race_yaml(policy: &str, queues: u32) -> String {
    let hand = queues.min(2);
    format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: race
  annotations: {{apf.libapf.io/fairness: {policy}}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 100
    lendablePercent: 0
    limitResponse: {{type: Queue, queuing: {{queues: {queues}, handSize: {hand}, queueLengthLimit: 50}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: race-schema}}
spec:
  priorityLevelConfiguration: {{name: race}}
  matchingPrecedence: 100
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: Group, group: {{name: system:authenticated}}}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}}]
"#
    )
}

/// The `race` level's rows of the queue dump: (index, seats in use).
fn race_queues(d: &D) -> Vec<(u64, u64)> {
    // SAFETY: live dispatcher, writable apf_text.
    let text = text_of(|t| unsafe { apf_dispatcher_dump_queues(d.0, t) });
    let (header, rows) = dumps::table(&text);
    let seats = header
        .iter()
        .position(|c| c == "SeatsInUse")
        .expect("column");
    rows.iter()
        .filter(|r| r[0] == "race")
        .map(|r| (r[1].parse().unwrap(), r[seats].parse().unwrap()))
        .collect()
}

/// The `race` level's row of the priority-level dump: whether it is idle.
fn race_is_idle(d: &D) -> bool {
    // SAFETY: live dispatcher, writable apf_text.
    let text = text_of(|t| unsafe { apf_dispatcher_dump_priority_levels(d.0, t) });
    let (header, rows) = dumps::table(&text);
    let idle = header.iter().position(|c| c == "IsIdle").expect("column");
    let row = rows.iter().find(|r| r[0] == "race").expect("level race");
    row[idle] == "true"
}

/// 8 handlers, each with a helper thread that releases one of its
/// request's two seats just as the handler finishes it (a watch that gives
/// back its burst's seat while its handler returns), 300 times. Every
/// release either lands before the finish or finds the request finished,
/// and afterwards the idle level has no seat on any queue; reconfigured to
/// one queue, it lists one. Before the fix a release could reach the level
/// after the finish and leave a phantom seat on its queue (debug builds:
/// the level's invariant check panics at that step).
fn release_racing_finish(policy: &str) {
    use std::sync::{Arc, Barrier};
    const PAIRS: usize = 8;
    const ROUNDS: usize = 300;
    let options = apf_dispatcher_options {
        server_concurrency_limit: 200,
        ..default_options()
    };
    let d = Arc::new(new_from_config(&race_yaml(policy, 8), &options));
    let two_seats = apf_work_estimate {
        initial_seats: 2,
        final_seats: 0,
        additional_latency_nanos: 0,
    };
    let mut threads = Vec::new();
    for pair in 0..PAIRS {
        let barrier = Arc::new(Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        let (d1, b1) = (d.clone(), barrier.clone());
        threads.push(std::thread::spawn(move || {
            let user = format!("u{pair}");
            for _ in 0..ROUNDS {
                let request = Request::resource(&user, "watch", "pods");
                let started = try_start(&d1, &request, Some(two_seats))
                    .unwrap_or_else(|e| panic!("start: {e:?} {}", last_error()));
                assert_eq!(started.outcome, EXECUTE, "room for every pair");
                tx.send(started.request).unwrap();
                b1.wait();
                assert_eq!(
                    finish(&d1, started.request),
                    apf_status::APF_OK,
                    "{}",
                    last_error()
                );
                b1.wait();
            }
            0
        }));
        let d2 = d.clone();
        threads.push(std::thread::spawn(move || {
            let mut landed = 0;
            for handle in rx.iter() {
                barrier.wait();
                match release(&d2, handle, 1) {
                    apf_status::APF_OK => landed += 1,
                    apf_status::APF_ERR_INVALID_HANDLE => {}
                    other => panic!("release: {other:?} {}", last_error()),
                }
                barrier.wait();
            }
            landed
        }));
    }
    let landed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(landed > 0, "some releases came before their finish");
    assert!(race_is_idle(&d), "every request finished");
    let queues = race_queues(&d);
    assert_eq!(queues.len(), 8);
    assert!(
        queues.iter().all(|&(_, seats)| seats == 0),
        "no seat on a queue of an idle level: {queues:?}"
    );
    assert_eq!(
        reconfigure(&d, &race_yaml(policy, 1)),
        apf_status::APF_OK,
        "{}",
        last_error()
    );
    assert_eq!(
        race_queues(&d),
        [(0, 0)],
        "the queues beyond the first dropped"
    );
}

#[test]
fn a_release_racing_the_finish_leaves_no_seat_under_flow() {
    release_racing_finish("flow");
}

#[test]
fn a_release_racing_the_finish_leaves_no_seat_under_flow_maxmin() {
    release_racing_finish("flow-maxmin");
}
