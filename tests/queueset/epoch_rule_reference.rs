//! The epoch rule against per-event replay, both in the reference model
//! (`apf::queueset::reference`, which the optimised core is checked
//! against event for event by tests/queueset_differential.rs): random
//! unsaturated epochs (hot starts and finishes, time passing) are run
//! through the model under `Accounting::Epoch` and, from the same state at
//! the epoch's start, under `Accounting::PerEvent`. At the merge that ends
//! the epoch, every queue active in both must have leads `S_q − R` that
//! differ by at most `W_q + W + D_q` (docs/differences-from-kubernetes.md):
//! here `W_q ≤ W`, so the check is `2W + D_q`, with `W` the level's
//! seat-time in the epoch and `D_q = |S_q − R(T0)| + Σ |c_i × (G − ran_i)|`
//! (the queue's lead at the epoch's start, plus the size of each
//! correction of a request the core held that finished in the epoch). The
//! sum is empty here, as in the core: such a finish takes the level lock,
//! which merges first (`ReferenceQueueSet::finish` does the same), so it
//! ends the epoch and its correction is in the next epoch's lead at `T0`
//! (tests/queueset/epoch_rule_bound.rs checks the sum on a plain model
//! where held requests finish inside an epoch). And with no hot request in an
//! epoch the two stay identical (the rule applies only to epochs the hot
//! path served).
use apf::clock::Instant;
use apf::queueset::reference::{Accounting, Outcome, ReferenceQueueSet};
use apf::queueset::vtime::VTime;
use apf::queueset::{Fairness, QueueSetConfig};
use apf::work_estimate::WorkEstimate;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Advance(u32),
    Start {
        flow: u8,
        seats: u8,
    },
    Finish {
        pick: usize,
    },
    /// The `pick`-th request the core holds finishes: through the level
    /// lock, so a merge first.
    FinishHeld {
        pick: usize,
    },
    Merge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u32..2_000_000).prop_map(Op::Advance),
        3 => (0u8..6, 1u8..=3).prop_map(|(flow, seats)| Op::Start { flow, seats }),
        2 => (0usize..16).prop_map(|pick| Op::Finish { pick }),
        1 => (0usize..16).prop_map(|pick| Op::FinishHeld { pick }),
        1 => Just(Op::Merge),
    ]
}

fn config(limit: u32, queues: u32, fairness: Fairness) -> QueueSetConfig {
    QueueSetConfig {
        name: "epoch".into(),
        concurrency_limit: limit,
        queues,
        // Under the flow policies a hot request's queue is chosen at the
        // merge, by the loads then, where replay chooses it at its start:
        // with one card per flow both place it alike, so the leads compare
        // queue by queue (the placement itself is a documented difference).
        hand_size: if fairness.is_flow() { 1 } else { 2.min(queues) },
        queue_length_limit: 4,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_secs(10),
        fairness,
    }
}

/// In flight, as the test sees it: id, seats, start.
type InFlight = Vec<(u64, u32, Instant)>;

/// The largest divergence seen, relative to its bound (for the report).
fn check(limit: u32, queues: u32, fairness: Fairness, ops: &[Op]) -> Result<f64, TestCaseError> {
    let cfg = config(limit, queues, fairness);
    let mut rule = ReferenceQueueSet::new(cfg, Instant::ZERO)
        .unwrap()
        .with_accounting(Accounting::Epoch);
    let mut replay = rule.clone().with_accounting(Accounting::PerEvent);
    let mut now = Instant::ZERO;
    let mut in_flight: InFlight = Vec::new();
    let mut epoch_first_id = 0u64;
    let mut w: u128 = 0; // the level's seat-time in the epoch, ns
    let mut hot = false;
    let mut leads: Vec<VTime> = vec![0; queues as usize];
    let mut worst: f64 = 0.0;
    let mut next_id = 0u64;
    // A held request's finish takes the lock: the merge, then the finish
    // (accounted per event by both).
    let mut ops: Vec<Op> = ops
        .iter()
        .flat_map(|op| match op {
            Op::FinishHeld { .. } => vec![Op::Merge, op.clone()],
            _ => vec![op.clone()],
        })
        .collect();
    ops.push(Op::Merge);
    for op in ops {
        match op {
            Op::Advance(ns) => {
                let seats: u64 = in_flight.iter().map(|&(_, s, _)| u64::from(s)).sum();
                w += u128::from(seats) * u128::from(ns);
                now = now.saturating_add(Duration::from_nanos(u64::from(ns)));
            }
            Op::Start { flow, seats } => {
                if rule.seats_in_use() + u32::from(seats) > limit {
                    continue; // it would wait: not an unsaturated epoch
                }
                let id = next_id;
                next_id += 1;
                let e = WorkEstimate::new(u32::from(seats), 0, Duration::ZERO);
                let hash = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(u64::from(flow) + 1);
                let a = rule.start(now, id, hash, e, None);
                let b = replay.start(now, id, hash, e, None);
                prop_assert_eq!(a, Outcome::Execute);
                prop_assert_eq!(b, Outcome::Execute);
                in_flight.push((id, u32::from(seats), now));
                hot = true;
            }
            Op::Finish { pick } => {
                if in_flight.is_empty() {
                    continue;
                }
                let i = pick % in_flight.len();
                // Only requests started in this epoch finish inside it (a
                // request the core holds finishes through the lock: a merge).
                if in_flight[i].0 < epoch_first_id {
                    continue;
                }
                let (id, _, _) = in_flight.remove(i);
                rule.finish(now, id);
                replay.finish(now, id);
            }
            Op::FinishHeld { pick } => {
                let held: Vec<usize> = (0..in_flight.len())
                    .filter(|&i| in_flight[i].0 < epoch_first_id)
                    .collect();
                if held.is_empty() {
                    continue;
                }
                let (id, _, _) = in_flight.remove(held[pick % held.len()]);
                rule.finish(now, id);
                replay.finish(now, id);
                prop_assert_eq!(rule.queue_states(), replay.queue_states());
                // Its refund is part of the queue's lead from here.
                let r = rule.current_r();
                leads = rule
                    .queue_states()
                    .iter()
                    .map(|s| if s.2 > 0 { s.0 - r } else { 0 })
                    .collect();
            }
            Op::Merge => {
                rule.merge(now);
                let (r_rule, r_replay) = (rule.current_r(), replay.current_r());
                let (a, b) = (rule.queue_states(), replay.queue_states());
                let w_v = (w as i128) << 20;
                for q in 0..a.len().min(b.len()) {
                    let active = |s: &(VTime, usize, u32, u32)| s.1 > 0 || s.2 > 0;
                    if !hot {
                        prop_assert_eq!(a[q], b[q], "no hot request: identical");
                        continue;
                    }
                    if !(active(&a[q]) && active(&b[q])) {
                        continue;
                    }
                    let d_q = leads[q].abs();
                    let divergence = ((a[q].0 - r_rule) - (b[q].0 - r_replay)).abs();
                    let bound = 2 * w_v + d_q;
                    prop_assert!(
                        divergence <= bound,
                        "queue {}: leads differ by {}, bound {} (W {}, D_q {})",
                        q,
                        divergence,
                        bound,
                        w_v,
                        d_q
                    );
                    if bound > 0 {
                        worst = worst.max(divergence as f64 / bound as f64);
                    }
                }
                if !hot {
                    // Nothing merged: the epoch goes on (R is synced
                    // lazily, at the next operation that takes the lock).
                    prop_assert_eq!(r_rule, r_replay);
                    continue;
                }
                // The next epoch starts from the rule's state.
                replay = rule.clone().with_accounting(Accounting::PerEvent);
                leads = a
                    .iter()
                    .map(|s| if s.2 > 0 { s.0 - r_rule } else { 0 })
                    .collect();
                epoch_first_id = next_id;
                w = 0;
                hot = false;
            }
        }
    }
    Ok(worst)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000),
        // The seeds beside this file (proptest's default for a module of a
        // test binary is tests/proptest-regressions/, where none are kept).
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/queueset/epoch_rule_reference.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    })]

    /// Every policy: the rule's leads stay within the bound of replay's.
    #[test]
    fn the_reference_under_the_epoch_rule_stays_within_the_bound(
        limit in 1u32..=8,
        queues in 1u32..=4,
        fairness in prop_oneof![Just(Fairness::Kubernetes), Just(Fairness::Flow), Just(Fairness::FlowMaxMin)],
        ops in prop::collection::vec(op(), 1..60),
    ) {
        check(limit, queues, fairness, &ops)?;
    }
}

/// A broken rule (leads doubled) is caught: the check can fail.
#[test]
fn replay_and_rule_differ_on_an_overlap() {
    // Two flows overlap with free seats: replay charges each at R's equal
    // division, the rule charges neither for the service before the merge.
    let worst = check(
        4,
        2,
        Fairness::Kubernetes,
        &[
            Op::Start { flow: 0, seats: 2 },
            Op::Start { flow: 1, seats: 1 },
            Op::Advance(1_000_000),
            Op::Finish { pick: 1 },
            Op::Advance(500_000),
            Op::Merge,
        ],
    )
    .unwrap();
    assert!(worst > 0.0, "the two accountings differ here: {worst}");
}
