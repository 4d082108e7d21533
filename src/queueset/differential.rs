//! Differential check of [`QueueSet`] against [`ReferenceQueueSet`]: one
//! sequence of operations, run single-threaded on a manual clock through
//! both, must give the same decision for every request and the same
//! fair-queuing state after every operation. Used by the property tests and
//! the `queueset` fuzz target. The reference accounts by the optimised
//! core's rule ([`Accounting::Epoch`]): hot-path requests kept in a ledger
//! and merged at each operation that takes the level lock and at each
//! observation (the comparison after every operation is one).

use super::reference::{Accounting, Event, Outcome, ReferenceQueueSet};
use super::{
    Admission, Fairness, Guard, QueueSet, QueueSetConfig, RejectReason, Request, RequestId, Ticket,
};
use crate::clock::{Clock, Instant};
use crate::work_estimate::WorkEstimate;
use std::collections::BTreeMap;
use std::time::Duration;

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A request of flow `flow` (one of a few flows) arrives.
    Start {
        flow: u8,
        initial: u8,
        final_seats: u8,
        latency_ms: u8,
        deadline_ms: Option<u8>,
    },
    /// The `pick`-th executing request (mod count) finishes.
    Finish { pick: u8 },
    /// A request of flow `flow` without final seats arrives and, if it
    /// executes at once, finishes `micros` × 10 µs later with nothing in
    /// between: on the hot path both its records then reach the ring before
    /// anything replays it, and the next drain replays them together.
    Burst { flow: u8, initial: u8, micros: u16 },
    /// The `pick`-th waiting request (mod count) is cancelled.
    Cancel { pick: u8 },
    /// The `pick`-th executing request (mod count) releases `seats` of its
    /// seats (0: all it holds) and keeps executing.
    Release { pick: u8, seats: u8 },
    /// Time passes.
    Advance { micros: u16 },
    /// A new configuration.
    Reconfigure {
        limit: u8,
        queues: u8,
        hand: u8,
        queue_length_limit: u8,
        /// Under the flow fairness policy (else Kubernetes').
        flow: bool,
        /// With `flow`: `flow-maxmin` (max-min allocation among queues).
        max_min: bool,
    },
}

impl Op {
    /// Decode one op from fuzzer bytes (returns None when out of bytes).
    pub fn decode(bytes: &mut &[u8]) -> Option<Op> {
        let mut take = || -> Option<u8> {
            let (&b, rest) = bytes.split_first()?;
            *bytes = rest;
            Some(b)
        };
        let tag = take()?;
        Some(match tag % 10 {
            0..=2 => Op::Start {
                flow: take()? % 8,
                initial: take()? % 5,
                final_seats: take()? % 5,
                latency_ms: take().map(|b| if b < 200 { 0 } else { b % 8 })?,
                deadline_ms: take().map(|b| (b >= 200).then_some(b % 50))?,
            },
            3 => Op::Finish { pick: take()? },
            4 => Op::Burst {
                flow: take()? % 8,
                initial: take()? % 5,
                micros: u16::from_le_bytes([take()?, take()?]),
            },
            5 => Op::Cancel { pick: take()? },
            6 => Op::Advance {
                micros: u16::from_le_bytes([take()?, take()?]),
            },
            8 | 9 => Op::Release {
                pick: take()?,
                seats: take()? % 4,
            },
            _ => {
                let (limit, queues, hand, qll) = (take()?, take()?, take()?, take()?);
                Op::Reconfigure {
                    limit: limit % 8,
                    queues: queues % 10,
                    hand: hand % 4 + 1,
                    queue_length_limit: qll % 4 + 1,
                    flow: qll & 0x80 != 0,
                    max_min: qll & 0x40 != 0,
                }
            }
        })
    }
}

fn config(
    limit: u32,
    queues: u32,
    hand: u32,
    qll: u32,
    flow: bool,
    max_min: bool,
) -> QueueSetConfig {
    QueueSetConfig {
        name: "differential".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand.min(queues.max(1)),
        queue_length_limit: qll,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_millis(40),
        fairness: if flow && max_min {
            Fairness::FlowMaxMin
        } else if flow {
            Fairness::Flow
        } else {
            Fairness::Kubernetes
        },
    }
}

const FLOW_HASHES: [u64; 8] = [
    0x9e37_79b9_7f4a_7c15,
    0x0123_4567_89ab_cdef,
    0xfedc_ba98_7654_3210,
    42,
    0xdead_beef_cafe_f00d,
    7,
    0x5555_5555_5555_5555,
    u64::MAX,
];

/// Run `ops` through both implementations; Err describes the first
/// difference. The initial configuration is (limit, queues, hand, queue
/// length limit), each taken modulo its range; the hand's high bit selects
/// the flow fairness policy, and with it the next bit `flow-maxmin`.
pub fn check(initial: (u8, u8, u8, u8), ops: &[Op]) -> Result<(), String> {
    check_observing(initial, ops, true)
}

/// As [`check`], but the two are observed (an observation merges the
/// ledgers) only after operations that take the level lock: time passes
/// and hot-path starts and finishes accumulate in the ledgers over
/// several operations, so the epoch rule meets requests that ran before
/// the merge (a comparison after every operation merges each hot start at
/// its own instant).
pub fn check_with_epochs(initial: (u8, u8, u8, u8), ops: &[Op]) -> Result<(), String> {
    check_observing(initial, ops, false)
}

fn check_observing(initial: (u8, u8, u8, u8), ops: &[Op], every_op: bool) -> Result<(), String> {
    let (l, q, h, qll) = initial;
    let cfg = config(
        l as u32 % 8,
        q as u32 % 10,
        h as u32 % 4 + 1,
        qll as u32 % 4 + 1,
        h & 0x80 != 0,
        h & 0x40 != 0,
    );
    let (clock, manual) = Clock::manual();
    let (Ok(qs), Ok(model)) = (
        QueueSet::new(cfg.clone(), clock.clone()),
        ReferenceQueueSet::new(cfg, Instant::ZERO),
    ) else {
        return Ok(()); // both refuse the same invalid configs (checked below)
    };
    let mut model = model.with_accounting(Accounting::Epoch);
    let mut run = Run {
        qs: &qs,
        executing: BTreeMap::new(),
        waiting: BTreeMap::new(),
        next_id: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        // The queueset runs its timers at its next lock operation or
        // observation, the model at once: time that reaches a timer is
        // observed.
        let next_timer = model.next_timer();
        run.apply(step, op, &mut model, &clock, &manual)?;
        let timer_due = next_timer.is_some_and(|t| t <= clock.now());
        let quiet =
            !timer_due && matches!(op, Op::Advance { .. } | Op::Start { .. } | Op::Burst { .. });
        if every_op || !quiet {
            run.compare(step, op, &mut model, clock.now())?;
        } else {
            // Decisions are collected at once all the same (polling takes
            // no lock): a cancel must meet a dispatched request as such.
            run.collect_events(step, &mut model)?;
        }
    }
    // Drain everything: finish all, run out all timers; both must end empty.
    let ids: Vec<RequestId> = run.executing.keys().copied().collect();
    for id in ids {
        if let Some(g) = run.executing.remove(&id) {
            g.finish();
        }
        model.finish(clock.now(), id);
    }
    manual.advance(Duration::from_secs(3600));
    model.advance_to(clock.now());
    run.compare(
        usize::MAX,
        &Op::Advance { micros: 0 },
        &mut model,
        clock.now(),
    )?;
    let stats = qs.stats();
    if stats.seats_in_use != model.seats_in_use()
        || stats.seats_in_use != 0 && run.executing.is_empty()
    {
        return Err(format!(
            "at the end: seats {} vs model {}",
            stats.seats_in_use,
            model.seats_in_use()
        ));
    }
    Ok(())
}

struct Run<'q> {
    qs: &'q QueueSet,
    executing: BTreeMap<RequestId, Guard<'q>>,
    waiting: BTreeMap<RequestId, Ticket<'q>>,
    next_id: RequestId,
}

impl<'q> Run<'q> {
    fn apply(
        &mut self,
        step: usize,
        op: &Op,
        model: &mut ReferenceQueueSet,
        clock: &Clock,
        manual: &crate::clock::ManualClock,
    ) -> Result<(), String> {
        let now = clock.now();
        match *op {
            Op::Start {
                flow,
                initial,
                final_seats,
                latency_ms,
                deadline_ms,
            } => {
                let id = self.next_id;
                self.next_id += 1;
                let estimate = WorkEstimate::new(
                    initial as u32,
                    final_seats as u32,
                    Duration::from_millis(latency_ms as u64),
                );
                let deadline =
                    deadline_ms.map(|ms| now.saturating_add(Duration::from_millis(ms as u64)));
                let request = Request {
                    flow_hash: FLOW_HASHES[flow as usize % 8],
                    estimate,
                    deadline,
                };
                let expected = model.start(now, id, request.flow_hash, estimate, deadline);
                let got = match self.qs.start(&request) {
                    Admission::Execute(g) => {
                        self.executing.insert(id, g);
                        Outcome::Execute
                    }
                    Admission::Queued(t) => {
                        self.waiting.insert(id, t);
                        Outcome::Queued
                    }
                    Admission::Rejected(r) => Outcome::Rejected(r),
                };
                if got != expected {
                    return Err(format!(
                        "step {step} {op:?}: queueset {got:?}, model {expected:?}"
                    ));
                }
            }
            Op::Finish { pick } => {
                if let Some(&id) = self
                    .executing
                    .keys()
                    .nth(pick as usize % self.executing.len().max(1))
                {
                    if let Some(g) = self.executing.remove(&id) {
                        g.finish();
                    }
                    model.finish(now, id);
                }
            }
            Op::Burst {
                flow,
                initial,
                micros,
            } => {
                let start = Op::Start {
                    flow,
                    initial,
                    final_seats: 0,
                    latency_ms: 0,
                    deadline_ms: None,
                };
                self.apply(step, &start, model, clock, manual)?;
                let id = self.next_id - 1;
                if let Some(g) = self.executing.remove(&id) {
                    manual.advance(Duration::from_micros(micros as u64 * 10));
                    model.advance_to(clock.now());
                    g.finish();
                    model.finish(clock.now(), id);
                }
            }
            Op::Release { pick, seats } => {
                if let Some(&id) = self
                    .executing
                    .keys()
                    .nth(pick as usize % self.executing.len().max(1))
                {
                    let guard = self.executing.get_mut(&id).expect("picked");
                    let got = if seats == 0 {
                        guard.release_all_seats()
                    } else {
                        guard.release_seats(seats as u32)
                    };
                    let expected = model.release(now, id, seats as u32);
                    if got.is_ok() != expected {
                        return Err(format!(
                            "step {step} {op:?}: release {got:?}, model {expected}"
                        ));
                    }
                }
            }
            Op::Cancel { pick } => {
                if let Some(&id) = self
                    .waiting
                    .keys()
                    .nth(pick as usize % self.waiting.len().max(1))
                {
                    let cancelled = self.waiting.remove(&id).is_some_and(Ticket::cancel);
                    let expected = model.cancel(now, id);
                    if cancelled != expected {
                        return Err(format!(
                            "step {step} {op:?}: cancel {cancelled} vs model {expected}"
                        ));
                    }
                }
            }
            Op::Advance { micros } => {
                manual.advance(Duration::from_micros(micros as u64 * 10));
                model.advance_to(clock.now());
            }
            Op::Reconfigure {
                limit,
                queues,
                hand,
                queue_length_limit,
                flow,
                max_min,
            } => {
                let cfg = config(
                    limit as u32,
                    queues as u32,
                    hand as u32,
                    queue_length_limit as u32,
                    flow,
                    max_min,
                );
                let got = self.qs.reconfigure(cfg.clone()).is_ok();
                let expected = model.reconfigure(now, cfg).is_ok();
                if got != expected {
                    return Err(format!(
                        "step {step} {op:?}: reconfigure ok={got}, model ok={expected}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Poll every ticket and match the decisions with the model's events.
    fn collect_events(&mut self, step: usize, model: &mut ReferenceQueueSet) -> Result<(), String> {
        let mut got = Vec::new();
        let ids: Vec<RequestId> = self.waiting.keys().copied().collect();
        for id in ids {
            let Some(ticket) = self.waiting.get_mut(&id) else {
                continue;
            };
            match ticket.poll() {
                Some(Ok(guard)) => {
                    self.waiting.remove(&id);
                    self.executing.insert(id, guard);
                    got.push(Event::Dispatched(id));
                }
                Some(Err(reason)) => {
                    self.waiting.remove(&id);
                    got.push(Event::Rejected(id, reason));
                }
                None => {}
            }
        }
        let mut expected = model.take_events();
        expected.retain(|e| !matches!(e, Event::Rejected(_, RejectReason::Cancelled)));
        got.sort_by_key(event_key);
        expected.sort_by_key(event_key);
        if got != expected {
            return Err(format!("step {step}: events {got:?}, model {expected:?}"));
        }
        Ok(())
    }

    fn compare(
        &mut self,
        step: usize,
        op: &Op,
        model: &mut ReferenceQueueSet,
        now: Instant,
    ) -> Result<(), String> {
        self.collect_events(step, model)?;
        // The queueset's observations merge its ledgers: so does the model.
        model.merge(now);
        let stats = self.qs.stats();
        let ours = (
            stats.seats_in_use,
            stats.requests_waiting,
            stats.requests_executing,
            self.qs.current_r(),
        );
        let theirs = (
            model.seats_in_use(),
            model.requests_waiting(),
            model.requests_executing(),
            model.current_r(),
        );
        if ours != theirs {
            return Err(format!(
                "step {step} {op:?}: (seats, waiting, executing, R) {ours:?} vs model {theirs:?}"
            ));
        }
        if stats.clamped_estimates != model.clamped_estimates() {
            return Err(format!(
                "step {step} {op:?}: clamped estimates {} vs model {}",
                stats.clamped_estimates,
                model.clamped_estimates()
            ));
        }
        let (qa, qb) = (self.qs.queue_states(), model.queue_states());
        if qa != qb {
            return Err(format!(
                "step {step} {op:?}: queues\n  {qa:?}\nvs model\n  {qb:?}"
            ));
        }
        Ok(())
    }
}

fn event_key(e: &Event) -> (RequestId, u8) {
    match *e {
        Event::Dispatched(id) => (id, 0),
        Event::Rejected(id, r) => (id, 1 + r as u8),
    }
}
