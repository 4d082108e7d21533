//! The reference model's per-flow order (issue 22's design,
//! [`WaitingOrder::Flows`]) in plain cases. Each case runs under both
//! orders and checks that today's order (the mechanism off) does not pass
//! it, so the test cannot pass without the mechanism.

use super::config::{Fairness, QueueSetConfig};
use super::reference::{Event, Outcome, ReferenceQueueSet, WaitingOrder};
use super::RequestId;
use crate::clock::Instant;
use crate::work_estimate::WorkEstimate;
use std::time::Duration;

const SEC: u64 = 1_000_000_000;

fn cfg(limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "order".into(),
        concurrency_limit: limit,
        queues: 1,
        hand_size: 1,
        queue_length_limit: 100,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_secs(600),
        fairness: Fairness::Flow,
    }
}

fn seats(n: u32) -> WorkEstimate {
    WorkEstimate::new(n, 0, Duration::ZERO)
}

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// Requests dispatched since the last call.
fn dispatched(q: &mut ReferenceQueueSet) -> Vec<RequestId> {
    q.take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Dispatched(id) => Some(id),
            Event::Rejected(..) => None,
        })
        .collect()
}

/// Finish `id` at `t`; past seats held for its flow's next request (10 ms
/// at most), what was dispatched.
fn finish_and_collect(q: &mut ReferenceQueueSet, t: u64, id: RequestId) -> Vec<RequestId> {
    q.finish(at(t), id);
    let mut out = dispatched(q);
    if out.is_empty() {
        q.advance_to(at(t + 10_000_000));
        out = dispatched(q);
    }
    out
}

/// Two flows in one queue (limit 1, 1 s requests): flow A's four
/// requests arrive before flow B's two. Returns the dispatch order.
fn two_flows_one_queue(order: WaitingOrder) -> Vec<RequestId> {
    let mut q = ReferenceQueueSet::new(cfg(1), at(0))
        .unwrap()
        .with_waiting_order(order);
    let mut served = Vec::new();
    for id in 0..6u64 {
        let flow = if id < 4 { 0xA } else { 0xB };
        if q.start(at(id + 1), id, flow, seats(1), None) == Outcome::Execute {
            served.push(id);
        }
    }
    let mut t = served.len() as u64 * SEC;
    while let Some(&running) = served.last() {
        let next = finish_and_collect(&mut q, t, running);
        if next.is_empty() {
            break;
        }
        served.extend(next);
        t += SEC;
    }
    served
}

#[test]
fn two_flows_sharing_a_queue_alternate() {
    let want = vec![0, 4, 1, 5, 2, 3];
    assert_eq!(two_flows_one_queue(WaitingOrder::Flows), want);
    // The mechanism off: the queue serves first come first served.
    assert_eq!(
        two_flows_one_queue(WaitingOrder::Queues),
        vec![0, 1, 2, 3, 4, 5]
    );
}

/// Limit 4, one queue: narrow flow N fills 3 seats, wide flow W (3 seats)
/// arrives, then N sends 1 s requests one after another as seats free.
/// Returns (narrow requests dispatched while W waited, whether a seat was
/// seen idle while a narrow request waited before W ran, W dispatched).
fn wide_front(order: WaitingOrder) -> (usize, bool, bool) {
    let mut q = ReferenceQueueSet::new(cfg(4), at(0))
        .unwrap()
        .with_waiting_order(order);
    let (n, w) = (0x11, 0x22);
    let mut running: Vec<(u64, RequestId)> = Vec::new(); // (end, id)
    for id in 0..3u64 {
        assert_eq!(q.start(at(id), id, n, seats(1), None), Outcome::Execute);
        running.push((SEC + id * SEC / 4, id));
    }
    let wide = 100;
    assert_eq!(q.start(at(3), wide, w, seats(3), None), Outcome::Queued);
    let mut next = 3u64;
    let (mut backfilled, mut idle_seen, mut wide_ran) = (0, false, false);
    let mut now = 4;
    // Keep two narrow requests waiting behind the wide one.
    for _ in 0..2 {
        if q.start(at(now), next, n, seats(1), None) == Outcome::Execute {
            backfilled += 1;
            running.push((now + SEC, next));
        }
        next += 1;
        now += 1;
    }
    for _ in 0..40 {
        for id in dispatched(&mut q) {
            if id == wide {
                wide_ran = true;
            } else if !wide_ran {
                backfilled += 1;
            }
            running.push((now + SEC, id));
        }
        if wide_ran {
            break;
        }
        if q.requests_waiting() > 1 && q.seats_in_use() < 4 {
            idle_seen = true; // a narrow request would fit
        }
        running.sort_unstable();
        let (end, id) = running.remove(0);
        now = end.max(now);
        q.advance_to(at(now));
        q.finish(at(now), id);
        // N keeps a request waiting.
        if q.start(at(now), next, n, seats(1), None) == Outcome::Execute {
            if !wide_ran {
                backfilled += 1;
            }
            running.push((now + SEC, next));
        }
        next += 1;
    }
    (backfilled, idle_seen, wide_ran)
}

#[test]
fn a_wide_front_is_backfilled_then_reserves() {
    // Allowance 3 seats × G; each one-seat backfill spends 1 × G: three
    // narrow requests pass the wide one, then it reserves (seats idle while
    // a narrow request waits) until it fits, and runs.
    assert_eq!(wide_front(WaitingOrder::Flows), (3, true, true));
    // The mechanism off: the wide request at the head reserves at once.
    assert_eq!(wide_front(WaitingOrder::Queues), (0, true, true));
}

/// Limit 1: flow P runs one 10 s request while flow F waits, goes idle,
/// and returns at 12 s. Returns P's virtual start once idle and at its
/// return, and R at its return.
fn returning_flow(order: WaitingOrder) -> (Option<i128>, Option<i128>, i128) {
    let mut q = ReferenceQueueSet::new(cfg(1), at(0))
        .unwrap()
        .with_waiting_order(order);
    let (p, f) = (0x9, 0xF);
    assert_eq!(q.start(at(0), 0, p, seats(1), None), Outcome::Execute);
    for id in 1..20 {
        assert_eq!(q.start(at(id), id, f, seats(1), None), Outcome::Queued);
    }
    let running = finish_and_collect(&mut q, 10 * SEC, 0);
    assert_eq!(running.len(), 1, "F's first request runs");
    let idle = q.flow_virtual_start(p);
    assert_eq!(
        q.start(at(12 * SEC), 50, p, seats(1), None),
        Outcome::Queued
    );
    let back = q.flow_virtual_start(p);
    (idle, back, q.current_r())
}

#[test]
fn a_returning_flow_restarts_without_credit_or_debt() {
    let (idle, back, r) = returning_flow(WaitingOrder::Flows);
    // P ran 10 s of a 1-seat request: 10 seat-s ahead of R had it been
    // kept. Its state is gone once idle, and it returns level with the
    // waiting flow F's service, which is behind R here: so at R.
    assert_eq!(idle, None, "an idle flow keeps no state");
    assert_eq!(back, Some(r), "a returning flow starts at R");
    // The mechanism off: no per-flow state at all.
    assert_eq!(returning_flow(WaitingOrder::Queues).1, None);
}
