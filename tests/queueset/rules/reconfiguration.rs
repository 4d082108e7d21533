//! Reconfiguration while running (rule 6).

use super::*;

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

/// Under Kubernetes' policy a hot start's card is dealt when first needed
/// (at the fold, or when asked), not at the start: it must still be the
/// card of the dealer the request started under, through a
/// reconfiguration that changes the dealer, until the request finishes.
/// A card dealt by the level's current dealer instead puts the request in
/// another queue: `queue()` answers it, and its release and finish leave
/// its real queue counted executing for ever.
#[test]
fn a_new_dealer_leaves_the_queue_of_a_request_started_under_the_old() {
    let (old, new) = ((8, 4), (16, 3));
    // A flow whose first card differs between the two dealers.
    let flow = (0..1000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1234_5678)
        .find(|&h| hand_of(old.0, old.1, h)[0] != hand_of(new.0, new.1, h)[0])
        .expect("some flow is dealt differently");
    let card = hand_of(old.0, old.1, flow)[0];
    for ask_before in [false, true] {
        let l = level(cfg(10, old.0, old.1, 10));
        let mut g = l.exec(flow, est(2));
        if ask_before {
            // From the shard's ledger, before any fold.
            assert_eq!(g.queue(), Some(card));
        }
        // The reconfiguration folds the request, then changes the dealer.
        l.qs.reconfigure(cfg(10, new.0, new.1, 10)).unwrap();
        assert_eq!(g.queue(), Some(card), "the old dealer's card");
        assert_eq!(l.qs.queue_states()[card as usize].2, 1, "executing in it");
        g.release_seats(1).unwrap();
        assert_eq!(l.qs.queue_states()[card as usize].3, 1, "one seat left");
        drop(g);
        l.check(&[], 0, 0);
        for (q, s) in l.qs.queue_states().iter().enumerate() {
            assert_eq!((s.2, s.3), (0, 0), "queue {q} still counts the request");
        }
    }
}
