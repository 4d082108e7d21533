//! The epoch rule's divergence bound (docs/scaling.md, "The next core",
//! part a), checked on a plain model before the core implements the rule.
//!
//! One unsaturated epoch (nothing waits, seats within the limit) is run
//! two ways from the same state: per-event replay, as Kubernetes' queueset
//! and today's core account it (R integrated at `min(limit, demand) /
//! active queues` between events, each start charged from `max(S, R)`, an
//! idle queue restarting at R, each finish corrected by the real
//! duration), and the epoch rule applied once at the epoch's end `T`. For
//! every queue active at `T` the two leads `S_q − R` must differ by at
//! most `W_q + W + D_q` (the queue's and the level's seat-time in the
//! epoch, and, for a queue the core held requests of, the core's own lead
//! `|S_q^core − R(T0)|`: its lead at the epoch's start less the refunds of
//! those requests' finishes). Plain f64 arithmetic in seat-nanoseconds: this
//! checks the design's claim, not the core's integers; when the core is
//! wired to the ledger, the differential tests compare it with the
//! reference model under the rule event for event.

use proptest::prelude::*;

const G: f64 = 3_000_000.0; // the service-time guess, 3 ms in ns

#[derive(Debug, Clone)]
enum Op {
    Advance(u32),
    Start { queue: usize, seats: u32 },
    Finish { pick: usize },
}

#[derive(Debug, Clone, Copy)]
struct Request {
    queue: usize,
    seats: u32,
    start: f64,
    /// Held by the core since before the epoch (dispatched under contention).
    held_by_core: bool,
}

#[derive(Debug, Clone)]
struct Scenario {
    limit: u32,
    queues: usize,
    /// Each queue's lead `S_q − R` at the epoch's start (R = 0 then).
    leads: Vec<f64>,
    /// Requests the core holds at the epoch's start: (queue, seats, start ≤ 0).
    held: Vec<(usize, u32, u32)>,
    ops: Vec<Op>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (1u32..=8, 1usize..=4).prop_flat_map(|(limit, queues)| {
        (
            Just(limit),
            Just(queues),
            prop::collection::vec(0.0f64..3.0 * G, queues),
            prop::collection::vec((0..queues, 1u32..=2, 0u32..5_000_000), 0..3),
            prop::collection::vec(
                prop_oneof![
                    (1u32..2_000_000).prop_map(Op::Advance),
                    (0..queues, 1u32..=3).prop_map(|(queue, seats)| Op::Start { queue, seats }),
                    (0usize..8).prop_map(|pick| Op::Finish { pick }),
                ],
                1..40,
            ),
        )
            .prop_map(|(limit, queues, leads, held, ops)| Scenario {
                limit,
                queues,
                leads,
                held,
                ops,
            })
    })
}

/// What per-event replay and the rule need to know at the epoch's end.
struct Run {
    now: f64,
    in_flight: Vec<Request>,
    /// Per-event replay.
    r: f64,
    s: Vec<f64>,
    /// The core's own S for its held requests (their corrections only).
    s_core: Vec<f64>,
    /// Seat-time in the epoch, the level's and each queue's.
    w: f64,
    w_q: Vec<f64>,
}

impl Run {
    fn executing(&self, q: usize) -> usize {
        self.in_flight.iter().filter(|r| r.queue == q).count()
    }

    fn advance(&mut self, limit: u32, queues: usize, dt: f64) {
        let demand: f64 = self.in_flight.iter().map(|r| f64::from(r.seats)).sum();
        let active = (0..queues).filter(|&q| self.executing(q) > 0).count();
        if active > 0 {
            self.r += demand.min(f64::from(limit)) * dt / active as f64;
        }
        self.w += demand * dt;
        for r in &self.in_flight {
            self.w_q[r.queue] += f64::from(r.seats) * dt;
        }
        self.now += dt;
    }
}

fn check(sc: &Scenario) -> Result<(), TestCaseError> {
    let mut run = Run {
        now: 0.0,
        in_flight: Vec::new(),
        r: 0.0,
        s: sc.leads.clone(),
        s_core: sc.leads.clone(),
        w: 0.0,
        w_q: vec![0.0; sc.queues],
    };
    let mut seats: u32 = 0;
    for &(queue, n, ago) in &sc.held {
        if seats + n <= sc.limit {
            seats += n;
            run.in_flight.push(Request {
                queue,
                seats: n,
                start: -f64::from(ago),
                held_by_core: true,
            });
        }
    }
    let held_at_start: Vec<bool> = (0..sc.queues)
        .map(|q| run.in_flight.iter().any(|r| r.queue == q))
        .collect();
    for op in &sc.ops {
        match *op {
            Op::Advance(dt) => run.advance(sc.limit, sc.queues, f64::from(dt)),
            Op::Start { queue, seats: n } => {
                if seats + n > sc.limit {
                    continue; // it would wait: not an unsaturated epoch
                }
                seats += n;
                if run.executing(queue) == 0 {
                    run.s[queue] = run.r;
                }
                run.s[queue] = run.s[queue].max(run.r) + f64::from(n) * G;
                run.in_flight.push(Request {
                    queue,
                    seats: n,
                    start: run.now,
                    held_by_core: false,
                });
            }
            Op::Finish { pick } => {
                if run.in_flight.is_empty() {
                    continue;
                }
                let req = run.in_flight.remove(pick % run.in_flight.len());
                seats -= req.seats;
                let correction = f64::from(req.seats) * (G - (run.now - req.start));
                run.s[req.queue] -= correction;
                if req.held_by_core {
                    run.s_core[req.queue] -= correction;
                }
            }
        }
    }
    // The epoch rule at T = now.
    let t = run.now;
    let active: Vec<usize> = (0..sc.queues).filter(|&q| run.executing(q) > 0).collect();
    let r_rule = (f64::from(sc.limit) * t).min(run.w) / active.len().max(1) as f64;
    for &q in &active {
        let f_q: f64 = run
            .in_flight
            .iter()
            .filter(|r| r.queue == q && !r.held_by_core)
            .map(|r| f64::from(r.seats) * (G - (t - r.start)))
            .sum();
        let core_holds = run.in_flight.iter().any(|r| r.queue == q && r.held_by_core);
        let s_rule = if core_holds {
            run.s_core[q].max(r_rule) + f_q
        } else {
            r_rule + f_q
        };
        // The core's own lead for a queue it held requests of: debt or
        // credit (the refunds of its held requests' finishes), which the
        // rule cuts (`max` with R, or the idle restart) where replay keeps
        // it through an overlap.
        let d_q = if held_at_start[q] {
            run.s_core[q].abs()
        } else {
            0.0
        };
        let divergence = ((s_rule - r_rule) - (run.s[q] - run.r)).abs();
        let bound = run.w_q[q] + run.w + d_q;
        prop_assert!(
            divergence <= bound + 1e-6 * (1.0 + bound),
            "queue {q}: leads differ by {divergence}, bound {bound} (W_q {}, W {}, D_q {d_q})",
            run.w_q[q],
            run.w
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The design's bound holds on random unsaturated epochs.
    ///
    /// Ignored since 2026-11-27: CI found a counterexample after 915
    /// cases (seed in epoch_rule_bound.proptest-regressions; docs/scaling.md
    /// "The next core"): in an epoch of zero length, a held request's
    /// refund and a later finish partly cancel in the core's lead, so
    /// `D_q` taken at the end (1.30 ms) is smaller than the divergence
    /// (1.70 ms; their sum is one `G`). `D_q` must count each refund's
    /// size, not their net. The core on main does not use the rule yet
    /// (branch `ledger-int` does, with its own bound checked against the
    /// reference model); run on demand until the bound is restated.
    #[test]
    #[ignore = "counterexample found 2026-11-27: D_q must count refunds, not their net (issue 21)"]
    fn the_epoch_rule_stays_within_its_bound(sc in scenario()) {
        check(&sc)?;
    }
}
