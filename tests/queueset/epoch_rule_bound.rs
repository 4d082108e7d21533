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
//! epoch, and, for a queue the core held requests of,
//! `D_q = |S_q − R(T0)| + Σ |c_i × (G − ran_i)|`: the core's lead at the
//! epoch's start plus the size of each correction of its held requests
//! that finished in the epoch, refund or charge; their net is not enough,
//! since replay applies them around its own `max` with R). Plain f64
//! arithmetic in seat-nanoseconds: this checks the design's claim, not the
//! core's integers; the differential tests compare the core (wired to the
//! ledger) with the reference model under the rule event for event.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

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
    /// Per queue, the sizes of its held requests' corrections in the epoch
    /// (each one's `|c × (G − ran)|`, refund or charge).
    refunds: Vec<f64>,
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
        refunds: vec![0.0; sc.queues],
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
                    run.refunds[req.queue] += correction.abs();
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
        // The core's own lead for a queue it held requests of: its lead at
        // the epoch's start and each of its held requests' corrections in
        // the epoch, counted by size (replay applies them between its own
        // `max` with R and idle restarts, the rule to their net, so they do
        // not cancel in the divergence: a refund cut by a later start's
        // `max` and a later charge both count).
        let d_q = if held_at_start[q] {
            sc.leads[q].abs() + run.refunds[q]
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
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(4000),
        // The seeds beside this file (proptest's default place for a
        // module of a test binary is tests/proptest-regressions/).
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/queueset/epoch_rule_bound.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    /// The design's bound holds on random unsaturated epochs (with `D_q`
    /// counting each held request's correction by its size: the first
    /// statement, with their net, failed on the seed kept in
    /// epoch_rule_bound.proptest-regressions, CI 2026-11-27).
    #[test]
    fn the_epoch_rule_stays_within_its_bound(sc in scenario()) {
        check(&sc)?;
    }
}

/// The counterexample to the first statement of `D_q`, by hand: one queue,
/// two held requests, an epoch of zero length. A held request's refund
/// (3 ms) takes replay's lead below R; a start lifts it back with `max`;
/// the other held request's finish then charges 1.7 ms. Replay and the
/// rule differ by 1.7 ms, the net lead is 1.3 ms, the sizes sum to 4.7 ms.
#[test]
fn a_refund_and_a_later_charge_count_by_their_sizes() {
    let sc = Scenario {
        limit: 4,
        queues: 1,
        leads: vec![0.0],
        held: vec![(0, 1, 0), (0, 1, 4_700_000)],
        ops: vec![
            Op::Finish { pick: 0 },
            Op::Start { queue: 0, seats: 1 },
            Op::Finish { pick: 0 },
        ],
    };
    check(&sc).unwrap();
}
