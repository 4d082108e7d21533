//! Rejection, time-outs and cancellation (rule 5).

use super::*;

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
