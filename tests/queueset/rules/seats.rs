//! Work estimates and seats accumulating (rules 3 and 4).

use super::*;

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
