//! The fused replay of a start and a finish (`fused.rs`) against the
//! two-step replay, record by record: two cores get the same drains, one
//! replaying every record alone, the other pairing them as the level's
//! drain does; after every drain their whole state must be the same, and so
//! must what the demand observer was told in between. Between drains,
//! waiters join and leave queues, so both the fused path and its fallback
//! (a queue with waiters, the max-min policy's demand index) are exercised.

use super::{Core, NO_QUEUE};
use crate::clock::Instant;
use crate::queueset::config::{Fairness, QueueSetConfig};
use crate::queueset::paths::{Record, Shared};
use crate::queueset::wait::WaitSlot;
use crate::queueset::RejectReason;
use crate::sync::Arc;
use crate::work_estimate::WorkEstimate;
use proptest::prelude::*;
use std::time::Duration;

/// One step of a generated history.
#[derive(Debug, Clone)]
enum Step {
    /// A hot-path start: queue (or flow) choice, tag, initial and final
    /// seats, whether it has an additional latency, time advance.
    Start(u8, u8, u8, u8, bool, u16),
    /// The finish of the `n`-th executing request (modulo their number),
    /// time advance.
    Finish(u8, u16),
    /// The records so far are replayed (a drain).
    Drain,
    /// A request waits in queue `q` (slow path, under the lock).
    Enqueue(u8, u8),
    /// The oldest waiter leaves (cancelled).
    Cancel,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..8, 0u8..3, 1u8..4, 0u8..3, proptest::bool::weighted(0.1), 0u16..2000)
            .prop_map(|(q, t, i, f, l, d)| Step::Start(q, t, i, f, l, d)),
        6 => (any::<u8>(), 0u16..2000).prop_map(|(n, d)| Step::Finish(n, d)),
        3 => Just(Step::Drain),
        1 => (0u8..8, 0u8..3).prop_map(|(q, t)| Step::Enqueue(q, t)),
        1 => Just(Step::Cancel),
    ]
}

/// A request executing in the generated history: its finish record.
struct Running {
    key: u64,
    tag: u32,
    estimate: WorkEstimate,
    start: Instant,
    flow: bool,
}

/// The whole state of a core, for comparison (the flow table prints its
/// entries sorted, so two tables with the same entries print the same).
fn state(core: &Core) -> String {
    format!("{core:?}")
}

fn run(fairness: Fairness, queues: u32, limit: u32, steps: &[Step]) -> Result<(), TestCaseError> {
    let cfg = QueueSetConfig {
        concurrency_limit: limit,
        queues,
        hand_size: 2.min(queues),
        fairness,
        ..QueueSetConfig::default()
    };
    let dealer = cfg.validate().expect("valid config");
    let mut two_step = Core::new(cfg.clone(), dealer.clone(), Instant::ZERO);
    let mut fused = Core::new(cfg.clone(), dealer, Instant::ZERO);
    let flow = fairness.is_flow();
    let mut now = 0u64;
    let mut pending: Vec<Record> = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut waiters: Vec<(Arc<WaitSlot>, Arc<WaitSlot>)> = Vec::new();
    let mut seq = 0;
    for (i, step) in steps.iter().chain([&Step::Drain]).enumerate() {
        match *step {
            Step::Start(q, tag, initial, final_seats, latency, dt) => {
                now += u64::from(dt);
                let at = Instant::from_nanos(now);
                let estimate = WorkEstimate {
                    initial_seats: u32::from(initial),
                    final_seats: u32::from(final_seats),
                    additional_latency: Duration::from_nanos(u64::from(latency) * 5000),
                };
                let tag = u32::from(tag);
                let key = u64::from(q % queues.max(1) as u8);
                pending.push(if flow {
                    Record::StartFlow {
                        flow_hash: key,
                        tag,
                        initial_seats: estimate.initial_seats,
                        final_seats: estimate.final_seats,
                        latency_nanos: estimate.additional_latency.as_nanos() as u64,
                        at,
                    }
                } else {
                    Record::Start {
                        queue: if queues == 0 { NO_QUEUE } else { key as u32 },
                        tag,
                        initial_seats: estimate.initial_seats,
                        final_seats: estimate.final_seats,
                        latency_secs: 0,
                        latency_subsec_nanos: estimate.additional_latency.subsec_nanos(),
                        at,
                    }
                });
                // A request with an additional latency finishes on the slow
                // path: it keeps executing here.
                if !latency {
                    let queued_key = if flow || queues > 0 { key } else { u64::MAX };
                    running.push(Running {
                        key: queued_key,
                        tag,
                        estimate,
                        start: at,
                        flow,
                    });
                }
            }
            Step::Finish(n, dt) => {
                if running.is_empty() {
                    continue;
                }
                now += u64::from(dt);
                let r = running.remove(usize::from(n) % running.len());
                let seats = r.estimate.max_seats();
                let at = Instant::from_nanos(now);
                pending.push(if r.flow {
                    Record::FinishFlow {
                        flow_hash: r.key,
                        tag: r.tag,
                        initial_seats: r.estimate.initial_seats,
                        seats,
                        start: r.start,
                        at,
                    }
                } else {
                    Record::Finish {
                        queue: if r.key == u64::MAX {
                            NO_QUEUE
                        } else {
                            r.key as u32
                        },
                        tag: r.tag,
                        initial_seats: r.estimate.initial_seats,
                        seats,
                        start: r.start,
                        at,
                    }
                });
            }
            Step::Drain | Step::Enqueue(..) | Step::Cancel => {
                // Every slow-path operation drains first.
                let mut told_two_step = Vec::new();
                for &record in &pending {
                    Shared::apply(&mut two_step, record);
                    told_two_step.push((two_step.demand(), two_step.last_sync()));
                }
                let mut told_fused = Vec::new();
                if let Some((&first, rest)) = pending.split_first() {
                    let mut rest = rest.iter().copied();
                    Shared::replay_paired(
                        &mut fused,
                        first,
                        || rest.next(),
                        |core| told_fused.push((core.demand(), core.last_sync())),
                    );
                }
                pending.clear();
                prop_assert_eq!(told_fused, told_two_step, "demand told at step {}", i);
                prop_assert_eq!(state(&fused), state(&two_step), "state after step {}", i);
                let at = Instant::from_nanos(now);
                match *step {
                    Step::Enqueue(q, tag) if queues > 0 => {
                        seq += 1;
                        let flow = flow.then_some(u64::from(q % queues as u8));
                        // A busy flow's waiter joins the flow's queue.
                        let q = flow
                            .and_then(|f| two_step.flows.queue_of(f))
                            .unwrap_or(usize::from(q) % queues as usize);
                        let estimate = WorkEstimate::new(1, 0, Duration::ZERO);
                        let slot = || Arc::new(WaitSlot::new(seq, q as u32, flow, u32::from(tag)));
                        let (a, b) = (slot(), slot());
                        for (core, slot) in [(&mut two_step, &a), (&mut fused, &b)] {
                            core.sync(at);
                            core.enqueue(q, flow.unwrap_or(0), slot.clone(), estimate, at, at);
                        }
                        waiters.push((a, b));
                    }
                    Step::Cancel if !waiters.is_empty() => {
                        let (a, b) = waiters.remove(0);
                        two_step.sync(at);
                        fused.sync(at);
                        let gone_a = two_step.remove_waiting(&a, RejectReason::Cancelled, at);
                        let gone_b = fused.remove_waiting(&b, RejectReason::Cancelled, at);
                        prop_assert_eq!(gone_a, gone_b);
                    }
                    _ => {}
                }
                prop_assert_eq!(state(&fused), state(&two_step), "state after step {}", i);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The fused replay leaves the state the two-step replay leaves, after
    /// every drain, under every fairness policy, with and without queues.
    #[test]
    fn fused_replay_equals_two_step(
        fairness in prop_oneof![
            Just(Fairness::Kubernetes),
            Just(Fairness::Flow),
            Just(Fairness::FlowMaxMin),
        ],
        queues in prop_oneof![Just(0u32), 1u32..8],
        limit in 1u32..12,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let queues = if fairness.is_flow() { queues.max(1) } else { queues };
        run(fairness, queues, limit, &steps)?;
    }
}

/// The precomputed per-seat charge follows the service-time guess of the
/// configuration in force: the charge and the finish's correction are
/// `vtime`'s, to the last bit, before and after G changes.
#[test]
fn the_charge_follows_a_new_service_time_guess() {
    use crate::queueset::vtime::{seats_times, total_work};
    let cfg = |g_micros| QueueSetConfig {
        concurrency_limit: 10,
        queues: 4,
        hand_size: 2,
        service_time_guess: Duration::from_micros(g_micros),
        ..QueueSetConfig::default()
    };
    let first = cfg(3000);
    let mut core = Core::new(first.clone(), first.validate().unwrap(), Instant::ZERO);
    for g_micros in [3000, 17, 250_000] {
        let c = cfg(g_micros);
        core.reconfigure(c.clone(), c.validate().unwrap());
        let g = c.service_time_guess;
        for (initial, final_seats, latency_ns) in [(1, 0, 0), (3, 2, 999), (7, 1, 0), (2, 0, 5)] {
            let e = WorkEstimate {
                initial_seats: initial,
                final_seats,
                additional_latency: Duration::from_nanos(latency_ns),
            };
            assert_eq!(
                core.charge(&e),
                total_work(initial, final_seats, e.additional_latency, g),
                "G {g:?}, {e:?}"
            );
            let (start, end) = (Instant::from_nanos(40), Instant::from_nanos(12_345));
            assert_eq!(
                core.finish_correction(initial, start, end),
                seats_times(initial, g) - seats_times(initial, end.saturating_since(start)),
                "G {g:?}, {initial} seats"
            );
        }
    }
}
