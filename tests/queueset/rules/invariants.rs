//! Invariants after every step of a mixed history (rule 7), and bad input.

use super::*;

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
