#![cfg(not(loom))]
//! One deterministic test (or more) per rule of the queueset's semantics
//! (issue 2, "Semantics" 1-7 and "Bad input"), all on the manual clock.
//!
//! Queue indices are never hard-coded: a flow's hand comes from the public
//! [`Dealer`], so these tests stay right whatever the dealer's arithmetic.

use apf::clock::{Clock, Instant, ManualClock};
use apf::dealer::{Dealer, DealerError};
use apf::queueset::vtime::{seats_times, VTime};
use apf::queueset::{
    Admission, Guard, QueueSet, QueueSetConfig, QueueSetConfigError, RejectReason, Request, Ticket,
    MAX_CONCURRENCY_LIMIT,
};
use apf::work_estimate::WorkEstimate;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

// ----- fixtures ------------------------------------------------------------

const MS: Duration = Duration::from_millis(1);
const G: Duration = Duration::from_millis(3);

fn cfg(limit: u32, queues: u32, hand: u32, queue_length_limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "rules".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit,
        service_time_guess: G,
        wait_limit: Duration::from_secs(60),
        fairness: apf::queueset::Fairness::Kubernetes,
    }
}

struct Level {
    qs: QueueSet,
    clock: Clock,
    manual: ManualClock,
}

fn level(cfg: QueueSetConfig) -> Level {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
    Level { qs, clock, manual }
}

impl Level {
    fn start(&self, flow: u64, estimate: WorkEstimate) -> Admission<'_> {
        self.start_with_deadline(flow, estimate, None)
    }

    fn start_with_deadline(
        &self,
        flow: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> Admission<'_> {
        self.qs.start(&Request {
            flow_hash: flow,
            estimate,
            deadline,
        })
    }

    fn exec(&self, flow: u64, estimate: WorkEstimate) -> Guard<'_> {
        executes(self.start(flow, estimate))
    }

    fn queue(&self, flow: u64, estimate: WorkEstimate) -> Ticket<'_> {
        queued(self.start(flow, estimate))
    }

    fn at(&self, ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn advance_ms(&self, ms: u64) {
        self.manual.advance(Duration::from_millis(ms));
    }

    /// R as of now. `current_r()` reports R as of the level's last event
    /// (as Kubernetes' dump does); re-applying the same configuration is an
    /// event that changes nothing else.
    fn r_now(&self) -> VTime {
        self.qs.reconfigure(self.qs.config()).expect("same config");
        self.qs.current_r()
    }

    /// Next-dispatch R of queue `q`.
    fn ndr(&self, q: u32) -> VTime {
        self.qs.queue_states()[q as usize].0
    }

    fn waiting_in(&self, q: u32) -> usize {
        self.qs.queue_states()[q as usize].1
    }

    /// Check the seat and request counts against what the test holds:
    /// executing guards, plus seats the test knows are lingering.
    fn check(&self, executing: &[&Guard<'_>], lingering_seats: u32, waiting: u32) {
        let st = self.qs.stats();
        let held: u32 = executing.iter().map(|g| g.estimate().max_seats()).sum();
        assert_eq!(
            st.seats_in_use,
            held + lingering_seats,
            "seats in use = executing + lingering"
        );
        assert_eq!(st.requests_executing as usize, executing.len(), "executing");
        assert_eq!(st.requests_waiting, waiting, "waiting");
    }
}

fn est(initial: u32) -> WorkEstimate {
    WorkEstimate::new(initial, 0, Duration::ZERO)
}

fn est_lat(initial: u32, final_seats: u32, latency: Duration) -> WorkEstimate {
    WorkEstimate::new(initial, final_seats, latency)
}

#[track_caller]
fn executes(a: Admission<'_>) -> Guard<'_> {
    match a {
        Admission::Execute(g) => g,
        other => panic!("expected Execute, got {other:?}"),
    }
}

#[track_caller]
fn queued(a: Admission<'_>) -> Ticket<'_> {
    match a {
        Admission::Queued(t) => t,
        other => panic!("expected Queued, got {other:?}"),
    }
}

#[track_caller]
fn rejected(a: Admission<'_>) -> RejectReason {
    match a {
        Admission::Rejected(r) => r,
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[track_caller]
fn pending(t: &mut Ticket<'_>) {
    assert!(t.poll().is_none(), "ticket should still be waiting");
}

#[track_caller]
fn dispatched<'q>(t: &mut Ticket<'q>) -> Guard<'q> {
    match t.poll() {
        Some(Ok(g)) => g,
        other => panic!("expected a dispatch, got {other:?}"),
    }
}

#[track_caller]
fn refused(t: &mut Ticket<'_>) -> RejectReason {
    match t.poll() {
        Some(Err(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// A flow hash whose hand (of the level's dealer) starts with queue `q`:
/// with hand size 1, the flow's only queue.
fn flow_to(queues: u32, hand: u32, q: u32) -> u64 {
    let dealer = Dealer::new(queues, hand).expect("valid dealer");
    (0..100_000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995)
        .find(|&h| dealer.deal_into_hand(h)[0] == q)
        .expect("some hash lands on every queue")
}

fn hand_of(queues: u32, hand: u32, flow: u64) -> Vec<u32> {
    Dealer::new(queues, hand)
        .expect("valid dealer")
        .deal_into_hand(flow)
        .to_vec()
}

/// The nanosecond before `t`.
fn before(t: Instant) -> Instant {
    Instant::from_nanos(t.as_nanos() - 1)
}

fn seat_s(seats: u32, d: Duration) -> VTime {
    seats_times(seats, d)
}

// ----- 1. shuffle sharding -------------------------------------------------

#[test]
fn hot_path_requests_take_the_hand_card_at_a_rotating_offset() {
    let l = level(cfg(100, 16, 4, 10));
    let flow = 0x1234_5678_9abc_def0;
    let other = 0x0fed_cba9_8765_4321;
    let hand = hand_of(16, 4, flow);
    let mut guards = Vec::new();
    // The offset counts every request of the level, whatever its flow.
    for n in 0..10u32 {
        if n % 3 == 2 {
            guards.push(l.exec(other, est(1)));
            continue;
        }
        let g = l.exec(flow, est(1));
        assert_eq!(g.queue(), Some(hand[(n % 4) as usize]), "request {n}");
        guards.push(g);
    }
}

#[test]
fn a_queued_request_goes_to_the_least_waiting_work_scanning_from_the_offset() {
    let l = level(cfg(1, 16, 4, 10));
    let flow = 0x1234_5678_9abc_def0;
    let hand = hand_of(16, 4, flow);
    let occupant = l.exec(flow_to(16, 1, 0), est(1)); // enqueue number 0
    let mut tickets = Vec::new();
    // Enqueue numbers 1..=8: the first four find every hand queue empty and
    // take the card at the offset; the next four find equal work everywhere
    // and again take the card at the offset.
    let mut expected_waiting = [0usize; 16];
    for n in 1..=8u32 {
        tickets.push(l.queue(flow, est(1)));
        expected_waiting[hand[(n % 4) as usize] as usize] += 1;
        let got: Vec<usize> = l.qs.queue_states().iter().map(|s| s.1).collect();
        assert_eq!(got, expected_waiting, "after enqueue {n}");
    }
    drop(tickets);
    drop(occupant);
}

#[test]
fn queue_choice_weighs_waiting_work_not_request_count() {
    // Hand of two queues. One holds a single request whose additional
    // latency makes it heavy; the other holds two light requests. The newcomer
    // goes where less work waits, whatever the offset.
    let l = level(cfg(1, 8, 2, 10));
    let flow = 0x0bad_cafe_dead_beef;
    let hand = hand_of(8, 2, flow);
    let _occupant = l.exec(flow_to(8, 1, 7), est(1));
    let heavy = est_lat(1, 1, 50 * MS); // work G + 50 ms
    let light = est(1); // work G

    // Enqueue numbers 1, 2, 3: offsets 1, 0, 1.
    let _t1 = l.queue(flow, heavy); // offset 1, both empty: hand[1]
    let _t2 = l.queue(flow, light); // offset 0: hand[0] has 0 work
    let _t3 = l.queue(flow, light); // offset 1: hand[1] 53 ms vs hand[0] 3 ms
    assert_eq!(l.waiting_in(hand[1]), 1);
    assert_eq!(l.waiting_in(hand[0]), 2);
    let mut more = Vec::new();
    for _ in 0..2 {
        // 6 and 9 ms of light work are still less than 53 ms of heavy work.
        more.push(l.queue(flow, light));
        assert_eq!(l.waiting_in(hand[1]), 1, "the heavy queue gets nothing");
    }
    assert_eq!(l.waiting_in(hand[0]), 4);
}

// ----- 2. virtual time -----------------------------------------------------

#[test]
fn r_advances_at_min_of_limit_and_demand_over_active_queues() {
    let l = level(cfg(4, 8, 1, 10));
    let (fa, fb) = (flow_to(8, 1, 0), flow_to(8, 1, 1));
    let sec = Duration::from_secs(1);

    l.advance_ms(1000);
    assert_eq!(l.r_now(), 0, "no demand: R stands still");

    let _a = l.exec(fa, est(1));
    l.advance_ms(1000);
    // 1 seat demanded in 1 queue: rate 1.
    assert_eq!(l.r_now(), seat_s(1, sec));

    let _b = l.exec(fb, est(2));
    l.advance_ms(1000);
    // 3 seats in 2 queues: rate 3/2.
    assert_eq!(l.r_now(), seat_s(1, sec) + seat_s(3, sec) / 2);

    let _w = l.queue(fb, est(2));
    l.advance_ms(1000);
    // 5 seats demanded (3 executing, 2 waiting), capped at the limit 4; still
    // 2 active queues: rate 2.
    assert_eq!(
        l.r_now(),
        seat_s(1, sec) + seat_s(3, sec) / 2 + seat_s(2, sec)
    );
}

#[test]
fn dispatch_picks_the_least_virtual_finish_not_the_oldest_arrival() {
    let l = level(cfg(1, 4, 1, 10));
    let (fa, fb, fc) = (flow_to(4, 1, 0), flow_to(4, 1, 1), flow_to(4, 1, 2));
    let occupant = l.exec(fc, est(1));
    // Same seats, but A's additional latency makes its virtual finish later.
    let mut ta = l.queue(fa, est_lat(1, 1, 10 * MS));
    let mut tb = l.queue(fb, est(1));
    drop(occupant);
    pending(&mut ta);
    let gb = dispatched(&mut tb);
    drop(gb);
    let _ga = dispatched(&mut ta);
}

#[test]
fn equal_virtual_finishes_are_served_round_robin_after_the_last_chosen_queue() {
    for last in 0..4u32 {
        let l = level(cfg(1, 4, 1, 10));
        let flow = |q| flow_to(4, 1, q);
        // The occupant's queue becomes the last one chosen.
        let occupant = l.exec(flow(last), est(1));
        // The others arrive in descending order at R = 0 with equal work:
        // equal virtual finishes.
        let mut tickets: Vec<(u32, Ticket<'_>)> = (0..4)
            .rev()
            .filter(|&q| q != last)
            .map(|q| (q, l.queue(flow(q), est(1))))
            .collect();
        drop(occupant);
        let mut order = Vec::new();
        while !tickets.is_empty() {
            let i = tickets
                .iter_mut()
                .position(|(_, t)| matches!(t.poll(), Some(Ok(_))))
                .expect("one ticket is dispatched per finish");
            order.push(tickets.remove(i).0);
            // Dropping the polled guard above finished it: the next goes.
        }
        let expected: Vec<u32> = (1..4).map(|i| (last + i) % 4).collect();
        assert_eq!(order, expected, "after queue {last}");
    }
}

#[test]
fn the_service_time_guess_is_charged_at_dispatch_and_is_configurable() {
    assert_eq!(QueueSetConfig::default().service_time_guess, 3 * MS);
    for g in [3 * MS, 7 * MS, Duration::from_micros(250)] {
        let mut c = cfg(2, 4, 1, 10);
        c.service_time_guess = g;
        let l = level(c);
        let f = flow_to(4, 1, 2);
        // Hot path: charged 2 seats × G at R = 0.
        let a = l.exec(f, est(2));
        assert_eq!(l.ndr(2), seat_s(2, g));
        // Queued then dispatched: charged again when it leaves the queue.
        let mut t = l.queue(f, est(1));
        assert_eq!(l.ndr(2), seat_s(2, g), "not charged while waiting");
        l.manual.advance(g);
        a.finish_at(Instant::ZERO.saturating_add(g)); // ran exactly G: no correction
        let _b = dispatched(&mut t);
        assert_eq!(l.ndr(2), seat_s(2, g) + seat_s(1, g));
    }
}

#[test]
fn finishing_corrects_the_queue_by_the_actual_service_time() {
    let l = level(cfg(4, 4, 1, 10));
    let f = flow_to(4, 1, 1);
    let g = l.exec(f, est(2));
    assert_eq!(l.ndr(1), seat_s(2, G));
    l.advance_ms(10);
    drop(g); // ran 10 ms: the 2 × 3 ms guess becomes 2 × 10 ms
    assert_eq!(l.ndr(1), seat_s(2, 10 * MS));

    // finish_at: the correction uses the given end, not the clock.
    let l = level(cfg(4, 4, 1, 10));
    let g = l.exec(f, est(3));
    l.advance_ms(10);
    g.finish_at(l.at(1));
    assert_eq!(l.ndr(1), seat_s(3, MS), "ran 1 ms, shorter than G");
}

/// An end time after now (a caller passing another clock's time, or a bogus
/// one) counts as now: the final seats linger for their latency from now,
/// not from the future (`u64::MAX` used to hold them for good, and a
/// 1-seat level never served again).
#[test]
fn an_end_time_in_the_future_counts_as_now() {
    let l = level(cfg(1, 4, 1, 10));
    let f = flow_to(4, 1, 1);
    let g = l.exec(f, est_lat(1, 1, 10 * MS));
    l.advance_ms(2);
    g.finish_at(Instant::FAR_FUTURE);
    let mut t = l.queue(f, est(1));
    l.advance_ms(9);
    pending(&mut t);
    l.advance_ms(1);
    let _served = dispatched(&mut t);
    // Without lingering: the correction uses now (ran 2 ms), not the future.
    let l = level(cfg(4, 4, 1, 10));
    let g = l.exec(f, est(3));
    l.advance_ms(2);
    g.finish_at(Instant::from_nanos(u64::MAX));
    assert_eq!(l.ndr(1), seat_s(3, 2 * MS));
    assert_eq!(l.qs.stats().seats_in_use, 0);
}

#[test]
fn a_request_at_an_idle_queue_restarts_it_at_the_current_r() {
    // A lagging queue: served little while another ran long.
    let l = level(cfg(4, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let a = l.exec(fa, est(1));
    l.advance_ms(1);
    drop(a);
    assert_eq!(l.ndr(0), seat_s(1, MS));
    let b = l.exec(fb, est(1));
    l.advance_ms(10_000);
    let r = l.r_now();
    assert!(r > seat_s(1, Duration::from_secs(9)));
    let _a = l.exec(fa, est(1));
    assert_eq!(l.ndr(0), r + seat_s(1, G), "no credit for the idle time");
    drop(b);

    // A leading queue: charged for additional latency, during which (idle,
    // nothing executing) R does not move. It forgets its lead when it
    // becomes active again, as Kubernetes does.
    let l = level(cfg(4, 4, 1, 10));
    let a = l.exec(fa, est_lat(1, 1, Duration::from_secs(1)));
    l.advance_ms(2);
    drop(a);
    l.advance_ms(2000);
    let r = l.r_now();
    assert!(l.ndr(0) > r + seat_s(1, Duration::from_millis(900)));
    let _a = l.exec(fa, est(1));
    assert_eq!(l.ndr(0), r + seat_s(1, G));
}

#[test]
fn next_dispatch_never_precedes_the_oldest_waiting_arrival() {
    let l = level(cfg(1, 4, 1, 10));
    let f = flow_to(4, 1, 3);
    let first = l.exec(f, est(1)); // R 0, queue charged G
    assert_eq!(l.ndr(3), seat_s(1, G));
    l.advance_ms(5000);
    // The queue is active (a request executes), so no restart; but the
    // newcomer arrived at R = 5 s, far after the queue's G: the bound lifts
    // the queue to the arrival R.
    let arrival_r = l.r_now();
    assert_eq!(arrival_r, seat_s(1, Duration::from_secs(5)));
    let mut second = l.queue(f, est(1));
    assert_eq!(l.ndr(3), arrival_r);
    // The first finishes having run "0 s" (explicit end): the correction
    // would take the queue to arrival - G; the bound keeps it at arrival.
    first.finish_at(Instant::ZERO);
    let _g = dispatched(&mut second);
    assert_eq!(l.ndr(3), arrival_r + seat_s(1, G));
}

// ----- 3. work estimates ---------------------------------------------------

#[test]
fn final_seats_stay_occupied_for_the_additional_latency() {
    let l = level(cfg(4, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let a = l.exec(fa, est_lat(1, 3, 20 * MS));
    l.check(&[&a], 0, 0);
    assert_eq!(l.qs.stats().seats_in_use, 3, "max(initial, final) held");
    let mut wide = l.queue(fb, est(4));
    l.advance_ms(5);
    drop(a);
    l.check(&[], 3, 1);
    pending(&mut wide);
    l.manual.advance(20 * MS - Duration::from_nanos(1));
    l.check(&[], 3, 1);
    pending(&mut wide);
    // The lingering seats are released by the clock alone, exactly at
    // finish + latency, and the waiting request is dispatched then.
    l.manual.advance(Duration::from_nanos(1));
    let w = dispatched(&mut wide);
    assert_eq!(w.start_time(), l.at(25));
    l.check(&[&w], 0, 0);
}

#[test]
fn zero_seats_are_clamped_and_wide_requests_run_alone_at_their_width() {
    let l = level(cfg(4, 4, 1, 10));
    let f = flow_to(4, 1, 0);
    let zero = l.exec(f, est(0));
    assert_eq!(zero.estimate().initial_seats, 1);
    assert_eq!(l.qs.stats().clamped_estimates, 1);
    // Wider than the limit while a request executes: it waits (Kubernetes'
    // canAccommodateSeats), and is not capped to the limit.
    let mut wide = l.queue(f, est(1000));
    pending(&mut wide);
    drop(zero);
    let huge = dispatched(&mut wide);
    assert_eq!(huge.estimate().initial_seats, 1000, "not capped");
    assert_eq!(l.qs.stats().clamped_estimates, 1);
    l.check(&[&huge], 0, 0);
    // Nothing else runs beside it, not even one seat.
    let mut narrow = l.queue(f, est(1));
    pending(&mut narrow);
    drop(huge);
    let one = dispatched(&mut narrow);
    drop(one);
    let fine = l.exec(f, est(4));
    assert_eq!(l.qs.stats().clamped_estimates, 1, "in range: not counted");
    drop(fine);

    // Final seats over the limit are reduced to it at dispatch, the
    // additional latency stretched to keep the same final work.
    let g = l.exec(f, est_lat(1, 8, 10 * MS));
    assert_eq!(g.estimate().final_seats, 4);
    assert_eq!(g.estimate().additional_latency, 20 * MS);
    l.check(&[&g], 0, 0);
}

#[test]
fn zero_queue_levels_clamp_zero_and_run_wide_requests_alone() {
    let l = level(cfg(3, 0, 0, 0));
    let g = l.exec(1, est(0));
    assert_eq!(g.estimate().initial_seats, 1);
    // Too wide while one executes: refused (the level does not queue).
    assert_eq!(rejected(l.start(1, est(7))), RejectReason::ConcurrencyLimit);
    drop(g);
    let g = l.exec(1, est(7));
    assert_eq!(g.estimate().initial_seats, 7, "alone, at its width");
    assert_eq!(rejected(l.start(1, est(1))), RejectReason::ConcurrencyLimit);
    assert_eq!(l.qs.stats().clamped_estimates, 1);
    drop(g);
    let _g = l.exec(1, est(1));
}

#[test]
fn a_stretched_additional_latency_saturates_instead_of_wrapping() {
    // Final seats 2 over a limit of 1 double the latency: 2^63 ns doubled
    // does not fit in 64 bits and must saturate, not wrap to zero (which
    // would release the final seats at once).
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(1, est_lat(1, 2, Duration::from_nanos(1 << 63)));
    assert_eq!(g.estimate().final_seats, 1);
    assert_eq!(
        g.estimate().additional_latency,
        Duration::from_nanos(u64::MAX)
    );
}

// ----- 4. seats accumulate --------------------------------------------------

#[test]
fn a_wide_request_chosen_next_holds_back_narrower_later_ones() {
    let l = level(cfg(4, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    // B's first request is charged G + 1 s (its additional latency), so B's
    // next virtual finish (≈ 1 s) is later than the wide request's 4 G.
    let b1 = l.exec(fb, est_lat(1, 1, Duration::from_secs(1)));
    let mut wide = l.queue(fa, est(4));
    let mut narrow = l.queue(fb, est(1));
    // Three seats are free and the narrow request would fit, but the wide
    // one is next: nothing is dispatched until four seats are free.
    l.check(&[&b1], 0, 2);
    pending(&mut narrow);
    l.advance_ms(10);
    drop(b1); // its seat lingers for 1 s
    l.advance_ms(999);
    pending(&mut narrow);
    pending(&mut wide);
    l.advance_ms(1);
    let w = dispatched(&mut wide);
    pending(&mut narrow);
    l.check(&[&w], 0, 1);
    drop(w);
    let n = dispatched(&mut narrow);
    l.check(&[&n], 0, 0);
}

#[test]
fn a_request_wider_than_the_limit_runs_alone_once_nothing_executes() {
    let l = level(cfg(4, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let narrow = l.exec(fb, est(1));
    let mut wide = l.queue(fa, est(4));
    // The limit drops below the wide request's seats while it waits.
    l.qs.set_concurrency_limit(2).unwrap();
    pending(&mut wide);
    drop(narrow);
    let w = dispatched(&mut wide);
    assert_eq!(w.estimate().initial_seats, 4);
    let st = l.qs.stats();
    assert_eq!((st.seats_in_use, st.concurrency_limit), (4, 2));
    // While it runs, nothing else does: no deadlock, no overcommit beyond it.
    let mut later = l.queue(fb, est(1));
    pending(&mut later);
    drop(w);
    let _n = dispatched(&mut later);
    l.check(&[&_n], 0, 0);
}

#[test]
fn final_seats_wider_than_the_limit_wait_for_an_empty_level() {
    let l = level(cfg(2, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let narrow = l.exec(fb, est(1));
    // Max seats 5 > limit 2 although one seat is free: it waits.
    let mut wide = l.queue(fa, est_lat(1, 5, 10 * MS));
    pending(&mut wide);
    drop(narrow);
    let w = dispatched(&mut wide);
    assert_eq!(w.estimate().final_seats, 2);
    assert_eq!(w.estimate().additional_latency, 25 * MS);
    l.check(&[&w], 0, 0);

    // Without queues: the same request runs at once on an empty level and
    // is refused on a busy one.
    let l = level(cfg(2, 0, 0, 0));
    let w = l.exec(fa, est_lat(1, 5, 10 * MS));
    assert_eq!(
        rejected(l.start(fa, est_lat(1, 5, 10 * MS))),
        RejectReason::ConcurrencyLimit
    );
    drop(w);
}

// ----- 5. rejection ---------------------------------------------------------

#[test]
fn a_full_queue_rejects_the_newest_request_when_no_seat_is_free() {
    let l = level(cfg(1, 4, 1, 2));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let g = l.exec(fb, est(1));
    let _t1 = l.queue(fa, est(1));
    let _t2 = l.queue(fa, est(1));
    assert_eq!(rejected(l.start(fa, est(1))), RejectReason::QueueFull);
    let st = l.qs.stats();
    assert_eq!(st.rejected[RejectReason::QueueFull as usize], 1);
    l.check(&[&g], 0, 2);
    // Another queue still has room.
    let _t3 = l.queue(fb, est(1));
    l.check(&[&g], 0, 3);
}

#[test]
fn a_full_queue_still_takes_requests_while_seats_are_free() {
    // Kubernetes rejects only when the queue is full *and* the level has no
    // free seat: a wide head waiting for seats does not make it reject.
    let l = level(cfg(4, 4, 1, 1));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let b = l.exec(fb, est_lat(1, 1, Duration::from_secs(1)));
    let _wide = l.queue(fa, est(4));
    let _second = l.queue(fa, est(1));
    assert_eq!(l.waiting_in(0), 2, "over the queue length limit of 1");
    l.check(&[&b], 0, 2);
}

#[test]
fn a_waiting_request_times_out_at_the_wait_limit_by_the_clock_alone() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 100 * MS;
    let l = level(c);
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let mut t = l.queue(flow_to(4, 1, 1), est(1));
    l.manual.advance(100 * MS - Duration::from_nanos(1));
    pending(&mut t);
    l.manual.advance(Duration::from_nanos(1));
    assert_eq!(refused(&mut t), RejectReason::TimeOut);
    let st = l.qs.stats();
    assert_eq!(st.rejected[RejectReason::TimeOut as usize], 1);
    l.check(&[&g], 0, 0);
    // It never executes: finishing the occupant dispatches nothing.
    drop(g);
    l.check(&[], 0, 0);
    assert_eq!(l.qs.stats().dispatched_from_queues, 0);
}

#[test]
fn a_waiting_request_times_out_at_its_own_earlier_deadline() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 100 * MS;
    let l = level(c);
    let g = l.exec(flow_to(4, 1, 0), est(1));
    l.advance_ms(5);
    let f = flow_to(4, 1, 1);
    let mut early = queued(l.start_with_deadline(f, est(1), Some(l.at(35))));
    let mut late = queued(l.start_with_deadline(f, est(1), Some(l.at(500))));
    l.manual.advance(30 * MS - Duration::from_nanos(1));
    pending(&mut early);
    l.manual.advance(Duration::from_nanos(1));
    assert_eq!(refused(&mut early), RejectReason::TimeOut);
    // The later deadline is beyond the wait limit: the wait limit applies.
    l.manual.advance_to(before(l.at(105)));
    pending(&mut late);
    l.manual.advance(Duration::from_nanos(1));
    assert_eq!(refused(&mut late), RejectReason::TimeOut);
    l.check(&[&g], 0, 0);
}

#[test]
fn a_cancelled_request_never_executes_and_holds_no_seat() {
    let l = level(cfg(1, 4, 1, 10));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let g = l.exec(fa, est(1));
    let t = l.queue(fb, est(1));
    let mut after = l.queue(fb, est(1));
    l.check(&[&g], 0, 2);
    assert!(t.cancel(), "it was still waiting");
    l.check(&[&g], 0, 1);
    assert_eq!(l.qs.stats().rejected[RejectReason::Cancelled as usize], 1);
    // Dropping a ticket cancels too.
    drop(l.queue(fb, est(1)));
    assert_eq!(l.qs.stats().rejected[RejectReason::Cancelled as usize], 2);
    l.check(&[&g], 0, 1);
    // The seat goes to the request behind the cancelled ones.
    drop(g);
    let n = dispatched(&mut after);
    l.check(&[&n], 0, 0);
    assert_eq!(l.qs.stats().dispatched_from_queues, 1);
}

#[test]
fn cancelling_a_dispatched_request_finishes_it() {
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let t = l.queue(flow_to(4, 1, 1), est(1));
    drop(g); // dispatches the ticket's request
    assert_eq!(l.qs.stats().requests_executing, 1);
    assert!(!t.cancel(), "too late to cancel");
    l.check(&[], 0, 0);
    assert_eq!(l.qs.stats().rejected, [0; 4]);
}

#[test]
fn without_queues_a_request_that_does_not_fit_is_rejected_at_once() {
    let l = level(cfg(2, 0, 0, 0));
    let a = l.exec(1, est(1));
    assert_eq!(a.queue(), None);
    let b = l.exec(2, est(1));
    assert_eq!(rejected(l.start(3, est(1))), RejectReason::ConcurrencyLimit);
    let st = l.qs.stats();
    assert_eq!(st.rejected[RejectReason::ConcurrencyLimit as usize], 1);
    assert_eq!(st.queues, 0);
    l.check(&[&a, &b], 0, 0);
    drop(a);
    assert_eq!(rejected(l.start(3, est(2))), RejectReason::ConcurrencyLimit);
    let c = l.exec(3, est(1));
    l.check(&[&b, &c], 0, 0);
}

// ----- 6. reconfiguration while running -------------------------------------

#[test]
fn raising_the_limit_dispatches_waiting_requests_at_once() {
    let l = level(cfg(1, 8, 2, 10));
    let g = l.exec(11, est(1));
    let mut tickets: Vec<Ticket<'_>> = (0..4).map(|i| l.queue(20 + i, est(1))).collect();
    l.check(&[&g], 0, 4);
    l.qs.set_concurrency_limit(3).unwrap();
    let got: Vec<Guard<'_>> = tickets
        .iter_mut()
        .filter_map(|t| t.poll().map(|r| r.expect("dispatched")))
        .collect();
    assert_eq!(got.len(), 2);
    let mut all: Vec<&Guard<'_>> = got.iter().collect();
    all.push(&g);
    l.check(&all, 0, 2);
    assert_eq!(l.qs.stats().concurrency_limit, 3);
}

#[test]
fn lowering_the_limit_aborts_nothing() {
    let l = level(cfg(3, 8, 2, 10));
    let gs: Vec<Guard<'_>> = (0..3).map(|i| l.exec(i, est(1))).collect();
    l.qs.set_concurrency_limit(1).unwrap();
    let refs: Vec<&Guard<'_>> = gs.iter().collect();
    l.check(&refs, 0, 0);
    let mut t = l.queue(99, est(1));
    let mut gs = gs.into_iter();
    drop(gs.next());
    pending(&mut t);
    drop(gs.next());
    pending(&mut t); // one seat in use, limit 1: still full
    drop(gs.next());
    let n = dispatched(&mut t);
    l.check(&[&n], 0, 0);
}

#[test]
fn fewer_queues_drain_the_undesired_ones_and_take_no_new_requests() {
    let l = level(cfg(1, 8, 1, 10));
    let occupant = l.exec(flow_to(8, 1, 7), est(1));
    let mut in6 = l.queue(flow_to(8, 1, 6), est(1));
    let mut in1 = l.queue(flow_to(8, 1, 1), est(1));
    let mut c = cfg(1, 2, 1, 10);
    l.qs.reconfigure(c.clone()).unwrap();
    // Queues 2..=7 are undesired; 6 and 7 still hold requests, so 8 remain.
    assert_eq!(l.qs.stats().queues, 8);
    // New requests go to the two desired queues only, whatever their flow.
    let fresh: Vec<Ticket<'_>> = (0..6)
        .map(|q| l.queue(flow_to(8, 1, q + 2), est(1)))
        .collect();
    let states = l.qs.queue_states();
    let new_waiting: usize = states[..2].iter().map(|s| s.1).sum();
    assert_eq!(
        new_waiting,
        1 + 6,
        "the old request in queue 1 plus the six"
    );
    assert_eq!(states[6].1, 1, "the old request of queue 6 still waits");
    // Drain: both old requests are served, the one in the undesired queue
    // too, and each undesired queue disappears once it and those after it
    // are empty.
    drop(fresh);
    drop(occupant);
    // Round robin after the occupant's queue 7 starts at queue 0: queue 1.
    let g1 = dispatched(&mut in1);
    pending(&mut in6);
    assert_eq!(l.qs.stats().queues, 7, "queue 7 emptied; queue 6 holds one");
    drop(g1);
    let g6 = dispatched(&mut in6);
    assert_eq!(l.qs.stats().queues, 7, "queue 6's request still executes");
    drop(g6);
    l.check(&[], 0, 0);
    assert_eq!(l.qs.stats().queues, 2);
    c.queues = 0;
    c.hand_size = 0;
    l.qs.reconfigure(c).unwrap();
    assert_eq!(l.qs.stats().queues, 0);
    let g = l.exec(5, est(1));
    assert_eq!(g.queue(), None);
}

#[test]
fn more_queues_and_a_larger_hand_take_effect_for_new_requests() {
    let l = level(cfg(100, 2, 1, 10));
    let flow = 0x7777_1234_abcd_0001;
    l.qs.reconfigure(cfg(100, 16, 4, 10)).unwrap();
    assert_eq!(l.qs.stats().queues, 16);
    let hand = hand_of(16, 4, flow);
    let gs: Vec<Guard<'_>> = (0..8).map(|_| l.exec(flow, est(1))).collect();
    for (n, g) in gs.iter().enumerate() {
        assert_eq!(g.queue(), Some(hand[n % 4]));
    }
}

#[test]
fn a_lower_queue_length_limit_applies_to_arrivals_not_to_waiting_requests() {
    let l = level(cfg(1, 4, 1, 5));
    let (fa, fb) = (flow_to(4, 1, 0), flow_to(4, 1, 1));
    let g = l.exec(fb, est(1));
    let waiting: Vec<Ticket<'_>> = (0..3).map(|_| l.queue(fa, est(1))).collect();
    l.qs.reconfigure(cfg(1, 4, 1, 1)).unwrap();
    l.check(&[&g], 0, 3);
    assert_eq!(rejected(l.start(fa, est(1))), RejectReason::QueueFull);
    let _b = l.queue(fb, est(1));
    assert_eq!(rejected(l.start(fb, est(1))), RejectReason::QueueFull);
    l.check(&[&g], 0, 4);
    drop(waiting);
}

#[test]
fn an_invalid_reconfiguration_leaves_the_old_one_in_force() {
    let l = level(cfg(2, 8, 2, 10));
    let before = l.qs.config();
    let mut bad = cfg(5, 4, 6, 10);
    assert!(matches!(
        l.qs.reconfigure(bad.clone()),
        Err(QueueSetConfigError::Dealer { .. })
    ));
    bad.hand_size = 2;
    bad.queue_length_limit = 0;
    assert!(matches!(
        l.qs.reconfigure(bad),
        Err(QueueSetConfigError::QueueLengthLimit { .. })
    ));
    assert!(matches!(
        l.qs.set_concurrency_limit(MAX_CONCURRENCY_LIMIT + 1),
        Err(QueueSetConfigError::ConcurrencyLimit { .. })
    ));
    assert_eq!(l.qs.config(), before);
    assert_eq!(l.qs.stats().concurrency_limit, 2);
}

// ----- 7. invariants ---------------------------------------------------------

/// A small deterministic generator (SplitMix64), so the mixed-operation test
/// is the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Poll every waiting ticket: move dispatched ones to `executing` (checking
/// they started within `[since, now]`), drop refused ones. Returns the number
/// of refusals.
fn collect<'q>(
    waiting: &mut Vec<Ticket<'q>>,
    executing: &mut Vec<Guard<'q>>,
    since: Instant,
    now: Instant,
) -> u64 {
    let mut refusals = 0;
    let mut i = 0;
    while i < waiting.len() {
        match waiting[i].poll() {
            Some(Ok(g)) => {
                assert!(
                    since <= g.start_time() && g.start_time() <= now,
                    "dispatched at {:?}, outside [{since:?}, {now:?}]",
                    g.start_time()
                );
                executing.push(g);
                drop(waiting.swap_remove(i)); // decided: dropping it is a no-op
            }
            Some(Err(_)) => {
                refusals += 1;
                drop(waiting.swap_remove(i)); // decided: dropping it is a no-op
            }
            None => i += 1,
        }
    }
    refusals
}

#[test]
fn seats_and_counts_match_the_requests_held_after_every_step() {
    const LIMIT: u32 = 6;
    for seed in 0..6 {
        let mut c = cfg(LIMIT, 8, 3, 3);
        c.wait_limit = 20 * MS;
        let l = level(c);
        let mut rng = Rng(seed);
        let mut executing: Vec<Guard<'_>> = Vec::new();
        let mut waiting: Vec<Ticket<'_>> = Vec::new();
        // (release time, seats) of finished requests holding final seats.
        let mut lingering: Vec<(Instant, u32)> = Vec::new();
        let mut refusals = 0u64;
        let mut since = Instant::ZERO;
        for _step in 0..400 {
            match rng.below(10) {
                0..=3 => {
                    let initial = rng.below(4) as u32; // 0 is clamped to 1
                    let final_seats = rng.below(4) as u32;
                    let latency = MS * rng.below(3) as u32;
                    match l.start(rng.below(5), est_lat(initial, final_seats, latency)) {
                        Admission::Execute(g) => executing.push(g),
                        Admission::Queued(t) => waiting.push(t),
                        Admission::Rejected(_) => refusals += 1,
                    }
                }
                4..=6 if !executing.is_empty() => {
                    let g = executing.swap_remove(rng.below(executing.len() as u64) as usize);
                    let e = g.estimate();
                    if !e.additional_latency.is_zero() {
                        let until = l.clock.now().saturating_add(e.additional_latency);
                        lingering.push((until, e.max_seats()));
                    }
                    drop(g);
                }
                7 if !waiting.is_empty() => {
                    let t = waiting.swap_remove(rng.below(waiting.len() as u64) as usize);
                    // Every decision so far was collected: it still waits.
                    assert!(t.cancel(), "an undecided request is cancelled");
                    refusals += 1;
                }
                _ => l.manual.advance(Duration::from_micros(rng.below(4000))),
            }
            // Decisions taken by dispatches and timers during this step.
            let now = l.clock.now();
            refusals += collect(&mut waiting, &mut executing, since, now);
            since = now;
            lingering.retain(|&(until, _)| until > now);
            let lingering_seats: u32 = lingering.iter().map(|&(_, s)| s).sum();
            // If a finish were lost or counted twice, the executing count or
            // the seats would be off from here on.
            let refs: Vec<&Guard<'_>> = executing.iter().collect();
            l.check(&refs, lingering_seats, waiting.len() as u32);
            let st = l.qs.stats();
            assert!(
                st.seats_in_use <= LIMIT,
                "seats {} over the limit with no request wider than it",
                st.seats_in_use
            );
            assert_eq!(
                st.rejected.iter().sum::<u64>(),
                refusals,
                "every refusal counted once"
            );
        }
        drop(waiting);
        drop(executing);
        l.manual.advance(Duration::from_secs(1));
        l.check(&[], 0, 0);
    }
}

// ----- bad input -------------------------------------------------------------

#[test]
fn invalid_configurations_are_typed_errors() {
    let (clock, _manual) = Clock::manual();
    let try_new = |c: QueueSetConfig| QueueSet::new(c, clock.clone()).map(|_| ());
    let dealer_err = |c: QueueSetConfig| match try_new(c) {
        Err(QueueSetConfigError::Dealer { level, error }) => {
            assert_eq!(level, "rules");
            error
        }
        other => panic!("expected a dealer error, got {other:?}"),
    };
    assert!(matches!(
        dealer_err(cfg(4, 8, 9, 10)),
        DealerError::HandLargerThanDeck { .. }
    ));
    assert!(matches!(
        dealer_err(cfg(4, 8, 0, 10)),
        DealerError::NotPositive { .. }
    ));
    assert!(matches!(
        dealer_err(cfg(4, 1 << 20, 8, 10)),
        DealerError::TooMuchEntropy { .. }
    ));
    assert!(matches!(
        try_new(cfg(4, 8, 2, 0)),
        Err(QueueSetConfigError::QueueLengthLimit { .. })
    ));
    for limit in [MAX_CONCURRENCY_LIMIT + 1, u32::MAX] {
        assert!(matches!(
            try_new(cfg(limit, 8, 2, 10)),
            Err(QueueSetConfigError::ConcurrencyLimit { .. })
        ));
    }
    let mut no_g = cfg(4, 8, 2, 10);
    no_g.service_time_guess = Duration::ZERO;
    assert!(matches!(
        try_new(no_g),
        Err(QueueSetConfigError::ServiceTimeGuess { .. })
    ));
    // Errors name the level.
    let e = try_new(cfg(4, 8, 9, 10)).unwrap_err();
    assert!(e.to_string().contains("rules"), "{e}");
    // The extremes that are valid are accepted.
    try_new(cfg(MAX_CONCURRENCY_LIMIT, 8, 2, 10)).unwrap();
    try_new(cfg(0, 0, 0, 0)).unwrap();
}

#[test]
fn absurd_but_valid_values_do_not_panic_or_hang() {
    let mut c = cfg(MAX_CONCURRENCY_LIMIT, 8, 2, u32::MAX);
    c.wait_limit = Duration::MAX;
    c.service_time_guess = Duration::MAX;
    let l = level(c);
    let huge = WorkEstimate::new(u32::MAX, u32::MAX, Duration::MAX);
    let g = l.exec(1, huge);
    assert_eq!(g.estimate().initial_seats, MAX_CONCURRENCY_LIMIT);
    assert_eq!(g.estimate().final_seats, MAX_CONCURRENCY_LIMIT);
    let mut t = queued(l.start_with_deadline(2, huge, Some(Instant::FAR_FUTURE)));
    // To the end of time: the saturated deadline never fires (this used to
    // re-fire for ever inside `advance`).
    l.manual.advance(Duration::MAX);
    assert_eq!(l.clock.now(), Instant::FAR_FUTURE);
    pending(&mut t);
    drop(g); // its final seats linger "for ever": the other never runs
    l.manual.advance(Duration::MAX);
    pending(&mut t);
    let st = l.qs.stats();
    assert_eq!(
        (st.seats_in_use, st.requests_executing, st.requests_waiting),
        (MAX_CONCURRENCY_LIMIT, 0, 1)
    );
    assert!(t.cancel());

    // A limit of 0 (a level that lent all its seats). Queuing: one request
    // at a time runs when nothing executes (Kubernetes would serve nothing
    // until the limit rises: see docs), the next waits and may time out.
    // Without queues: the same (Kubernetes' rule for requests wider than
    // the limit).
    let mut c = cfg(0, 4, 1, 2);
    c.wait_limit = 10 * MS;
    let l = level(c);
    let running = l.exec(1, est(1));
    let mut t = l.queue(1, est(1));
    l.advance_ms(10);
    assert_eq!(refused(&mut t), RejectReason::TimeOut);
    let mut t = l.queue(1, est(1));
    drop(running);
    drop(dispatched(&mut t));
    let l = level(cfg(0, 0, 0, 0));
    let g = l.exec(1, est(1));
    assert_eq!(rejected(l.start(1, est(1))), RejectReason::ConcurrencyLimit);
    drop(g);
    let _g = l.exec(1, est(1));
}

// ----- waiting: async and blocking --------------------------------------------

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn the_future_is_woken_and_ready_when_its_request_is_dispatched() {
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let mut t = l.queue(flow_to(4, 1, 1), est(1));
    let wakes = Arc::new(CountingWaker::default());
    let waker = Waker::from(wakes.clone());
    assert!(poll_once(&mut t, &waker).is_pending());
    assert!(poll_once(&mut t, &waker).is_pending(), "polled again");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    l.advance_ms(3);
    drop(g);
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "woken once, by the finish"
    );
    match poll_once(&mut t, &waker) {
        Poll::Ready(Ok(guard)) => {
            assert_eq!(guard.start_time(), l.at(3));
            l.check(&[&guard], 0, 0);
        }
        other => panic!("expected a dispatch, got {other:?}"),
    };
}

#[test]
fn the_future_is_woken_by_a_manual_clock_advance_when_it_times_out() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 50 * MS;
    let l = level(c);
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let mut t = l.queue(flow_to(4, 1, 1), est(1));
    let first = Arc::new(CountingWaker::default());
    let second = Arc::new(CountingWaker::default());
    assert!(poll_once(&mut t, &Waker::from(first.clone())).is_pending());
    // A later poll with another waker replaces the first.
    assert!(poll_once(&mut t, &Waker::from(second.clone())).is_pending());
    l.advance_ms(50);
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    assert!(matches!(
        poll_once(&mut t, &Waker::from(second.clone())),
        Poll::Ready(Err(RejectReason::TimeOut))
    ));
    l.check(&[&g], 0, 0);
}

#[test]
fn a_blocking_wait_is_woken_by_a_finish_on_another_thread() {
    let l = level(cfg(1, 4, 1, 10));
    let g = l.exec(flow_to(4, 1, 0), est(1));
    let t = l.queue(flow_to(4, 1, 1), est(1));
    let (tx, rx) = mpsc::channel();
    let gate = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            gate.wait();
            let got = t.wait().map(|g| g.start_time());
            tx.send(got).unwrap();
        });
        gate.wait();
        l.advance_ms(7);
        assert!(rx.try_recv().is_err(), "still waiting before the finish");
        drop(g);
        assert_eq!(rx.recv().unwrap(), Ok(l.at(7)));
    });
    l.check(&[], 0, 0);
}

#[test]
fn a_blocking_wait_is_woken_by_a_manual_clock_advance_on_another_thread() {
    let mut c = cfg(1, 4, 1, 10);
    c.wait_limit = 40 * MS;
    let l = level(c);
    let _g = l.exec(flow_to(4, 1, 0), est(1));
    let t = l.queue(flow_to(4, 1, 1), est(1));
    let (tx, rx) = mpsc::channel();
    let gate = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            gate.wait();
            tx.send(t.wait().map(|g| g.start_time())).unwrap();
        });
        gate.wait();
        l.advance_ms(39);
        assert!(
            rx.try_recv().is_err(),
            "still waiting before the wait limit"
        );
        l.advance_ms(1);
        assert_eq!(rx.recv().unwrap(), Err(RejectReason::TimeOut));
    });
}

/// Requests of one queue that time out at the same instant leave it
/// together, and the queue is bounded once, by the head that remains: not
/// after each removal, which lifted the queue's next-dispatch R to the
/// arrival R of a head about to time out as well (found by the shuttle
/// history check against the reference model). Observable while the queue
/// still executes a request.
#[test]
fn requests_timing_out_together_leave_their_queue_unbounded_by_each_other() {
    let l = level(cfg(1, 1, 1, 10));
    let running = l.exec(1, est(1));
    assert_eq!(l.ndr(0), seat_s(1, G));
    let deadline = Some(l.at(10));
    let mut first = queued(l.start_with_deadline(1, est(1), deadline));
    l.advance_ms(5); // R = 5 seat-ms: the second arrives far past the queue's R
    let mut second = queued(l.start_with_deadline(1, est(1), deadline));
    l.advance_ms(5);
    assert_eq!(refused(&mut first), RejectReason::TimeOut);
    assert_eq!(refused(&mut second), RejectReason::TimeOut);
    assert_eq!(l.ndr(0), seat_s(1, G), "no waiter left to bound the queue");
    drop(running);
}
