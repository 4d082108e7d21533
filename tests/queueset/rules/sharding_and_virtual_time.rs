//! Shuffle sharding and virtual time (rules 1 and 2).

use super::*;

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

/// The same after a request that started last and finished on the hot path
/// (nothing waited then): in Kubernetes' queueset it was dispatched at
/// once, so its queue is the last one chosen, though the epoch rule
/// accounts it only in its shard's sums.
#[test]
fn equal_virtual_finishes_go_round_robin_after_a_request_that_finished_on_the_hot_path() {
    for last in 0..4u32 {
        let l = level(cfg(2, 4, 1, 10));
        let flow = |q| flow_to(4, 1, q);
        let busy = (last + 2) % 4;
        // The occupant starts first and holds its seat; the last request
        // to start finishes at once, on the hot path.
        let occupant = l.exec(flow(busy), est(1));
        drop(l.exec(flow(last), est(1)));
        // Two-seat requests wait behind the occupant, at R = 0 with equal
        // work: equal virtual finishes.
        let mut tickets: Vec<(u32, Ticket<'_>)> = (0..4)
            .rev()
            .filter(|&q| q != busy)
            .map(|q| (q, l.queue(flow(q), est(2))))
            .collect();
        drop(occupant);
        let mut order = Vec::new();
        while !tickets.is_empty() {
            let i = tickets
                .iter_mut()
                .position(|(_, t)| matches!(t.poll(), Some(Ok(_))))
                .expect("one ticket is dispatched per finish");
            order.push(tickets.remove(i).0);
        }
        let expected: Vec<u32> = (1..=4)
            .map(|i| (last + i) % 4)
            .filter(|&q| q != busy)
            .collect();
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

/// Kubernetes' per-event finish: the queue of a request its core holds is
/// corrected by the difference between the guess and the actual service
/// time. A request waiting elsewhere keeps the level saturated (`SLOW`),
/// so the request is folded into the core at its start's instant (charged
/// as Kubernetes' dispatch charged it) and finishes through the core.
#[test]
fn finishing_corrects_the_queue_by_the_actual_service_time() {
    let l = level(cfg(2, 4, 1, 10));
    let f = flow_to(4, 1, 1);
    let g = l.exec(f, est(2));
    let waiter = l.queue(flow_to(4, 1, 2), est(1));
    assert_eq!(l.ndr(1), seat_s(2, G));
    l.advance_ms(10);
    drop(g); // ran 10 ms: the 2 × 3 ms guess becomes 2 × 10 ms
    assert_eq!(l.ndr(1), seat_s(2, 10 * MS));
    drop(waiter);

    // finish_at: the correction uses the given end, not the clock.
    let l = level(cfg(3, 4, 1, 10));
    let g = l.exec(f, est(3));
    let waiter = l.queue(flow_to(4, 1, 2), est(1));
    l.advance_ms(10);
    g.finish_at(l.at(1));
    assert_eq!(l.ndr(1), seat_s(3, MS), "ran 1 ms, shorter than G");
    drop(waiter);
}

/// A request that starts and finishes on the hot path within one epoch
/// (nothing waits) leaves no trace in its queue's virtual time: the epoch
/// rule charges the service a level gives while it has free seats nothing
/// (docs/differences-from-kubernetes.md), so the queue's next request
/// starts level with R whatever the guess and the actual time; R advances
/// by the epoch's seat-time, measured to the end `finish_at` gives.
#[test]
fn a_hot_request_finished_within_its_epoch_costs_its_queue_nothing() {
    let l = level(cfg(4, 4, 1, 10));
    let f = flow_to(4, 1, 1);
    let g = l.exec(f, est(3));
    l.advance_ms(10);
    g.finish_at(l.at(1));
    // W = 3 seats × 1 ms (the given end), one queue at most: R = W.
    let r = l.r_now();
    assert_eq!(r, seat_s(3, MS));
    let _next = l.exec(f, est(1));
    assert_eq!(l.ndr(1), r + seat_s(1, G), "no debt, no credit");
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
    // Without lingering, a request the core holds (a request waiting
    // elsewhere saturates the level): the correction uses now (ran 2 ms),
    // not the future.
    let l = level(cfg(3, 4, 1, 10));
    let g = l.exec(f, est(3));
    let waiter = l.queue(flow_to(4, 1, 2), est(1));
    l.advance_ms(2);
    g.finish_at(Instant::from_nanos(u64::MAX));
    assert_eq!(l.ndr(1), seat_s(3, 2 * MS));
    drop(waiter);
    assert_eq!(l.qs.stats().seats_in_use, 0);
    // On the hot path (nothing waits), the seat-time the epoch rule
    // advances R by ends now too: 3 seats × 2 ms, not the limit's 4 × 2 ms
    // that a far end would claim.
    let l = level(cfg(4, 4, 1, 10));
    let g = l.exec(f, est(3));
    l.advance_ms(2);
    g.finish_at(Instant::from_nanos(u64::MAX));
    assert_eq!(l.r_now(), seat_s(3, 2 * MS));
    assert_eq!(l.qs.stats().seats_in_use, 0);
}

#[test]
fn a_request_at_an_idle_queue_restarts_it_at_the_current_r() {
    // A lagging queue: served little while another ran long. The level is
    // saturated throughout (a request waits, or every seat is taken and
    // the newcomer waits), so every step is Kubernetes' per-event one.
    let l = level(cfg(2, 4, 1, 10));
    let (fa, fb, fx) = (flow_to(4, 1, 0), flow_to(4, 1, 1), flow_to(4, 1, 2));
    let a = l.exec(fa, est(1));
    let x = l.exec(fx, est(1));
    let mut tb = l.queue(fb, est(2));
    l.advance_ms(1);
    drop(a);
    assert_eq!(l.ndr(0), seat_s(1, MS));
    drop(x);
    let b = dispatched(&mut tb);
    l.advance_ms(10_000);
    let r = l.r_now();
    assert!(r > seat_s(1, Duration::from_secs(9)));
    let mut ta = l.queue(fa, est(1));
    assert_eq!(l.ndr(0), r, "no credit for the idle time");
    drop(b);
    let _a = dispatched(&mut ta);
    assert_eq!(l.ndr(0), r + seat_s(1, G));

    // A leading queue: charged for additional latency, during which (idle,
    // nothing executing) R does not move. It forgets its lead when it
    // becomes active again, as Kubernetes does: its request arrives at a
    // saturated level (every seat taken), so the arrival is per event.
    let l = level(cfg(4, 4, 1, 10));
    let a = l.exec(fa, est_lat(1, 1, Duration::from_secs(1)));
    l.advance_ms(2);
    drop(a);
    l.advance_ms(2000);
    let r = l.r_now();
    assert!(l.ndr(0) > r + seat_s(1, Duration::from_millis(900)));
    let occupant = l.exec(fx, est(4));
    let mut ta = l.queue(fa, est(1));
    assert_eq!(l.ndr(0), r, "no debt for the lead either");
    drop(occupant);
    let _a = dispatched(&mut ta);
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
