//! A plain, single-threaded model of the queueset's semantics.
//!
//! This is the specification in executable form: every rule written the
//! obvious way (linear scans over all queues, a `VecDeque` per queue, a hash
//! map of executing requests), with no concern for speed. The optimised
//! [`QueueSet`](super::QueueSet) is checked against it by property tests and
//! a fuzz target, and `Mutex<ReferenceQueueSet>` is the baseline of the
//! benchmarks. Time is passed in explicitly; the caller drives timers with
//! [`ReferenceQueueSet::advance_to`].

use super::config::{Fairness, QueueSetConfig, QueueSetConfigError, MAX_CONCURRENCY_LIMIT};
use super::vtime::{
    epoch_increment, r_increment, seats_times, seats_times_nanos, total_work, VTime,
};
use super::waterlevel::water_level_by_sorting;
use super::{RejectReason, RequestId};
use crate::clock::{duration_nanos, Instant};
use crate::dealer::Dealer;
use crate::work_estimate::WorkEstimate;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// What `start` decided for the new request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Dispatched at once.
    Execute,
    /// Waiting in a queue.
    Queued,
    /// Refused.
    Rejected(RejectReason),
}

/// Something that happened to an earlier request as a consequence of an
/// operation: a waiting request dispatched or rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Dispatched(RequestId),
    Rejected(RequestId, RejectReason),
}

/// How waiting requests are ordered under `flow` and `flow-maxmin` (the
/// Kubernetes policy ignores it). The optimised core implements
/// [`WaitingOrder::Flows`], the default; [`WaitingOrder::Queues`] is the
/// order before issue 22, kept in the model only so that measurements can
/// show what per-flow order changed (docs/flow-fairness.md, "Ordering
/// waiting requests among many flows").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WaitingOrder {
    /// Before issue 22: least virtual finish among queues, each queue
    /// first come first served, the front request waiting until it fits.
    Queues,
    /// Issue 22's design: least virtual finish among flows (each flow's
    /// virtual start `S_f`, its requests in arrival order), queues keeping
    /// only isolation and length limits; a front that does not fit is
    /// backfilled within a bypass allowance of its seats × G, then
    /// reserves; a flow's state is forgotten when it is idle.
    #[default]
    Flows,
}

/// How the model accounts requests that start and finish while the level
/// has seats to spare and nothing waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Accounting {
    /// Kubernetes': every start and finish, in order, advances R and
    /// charges its queue.
    #[default]
    PerEvent,
    /// The optimised core's (docs/scaling.md, "The next core"; the
    /// divergence in docs/differences-from-kubernetes.md): a request that
    /// starts at once with nothing waiting (a *hot* start) is kept aside,
    /// in a ledger, until the next *merge*, and one that finishes from
    /// there with no additional latency leaves only its seat-time. A merge
    /// happens at every operation the optimised queueset takes its lock
    /// for (any start that is not hot, any finish that is not, a release,
    /// a cancel, a timer, a reconfiguration) and at every observation
    /// ([`ReferenceQueueSet::merge`]); it applies the epoch rule: R
    /// advances by `min(limit × dt, W) / max(1, active queues)`, W the
    /// seat-time served since the last sync, and every active queue's
    /// next-dispatch R becomes `max(S, R) + F` (`R + F` for a queue that
    /// only the merged requests made active), F its merged requests'
    /// charges less their initial seats × the time they already ran.
    Epoch,
}

/// A flow's fair-queuing state under [`WaitingOrder::Flows`], kept while
/// the flow is active (a request waiting, executing, or seats lingering
/// for it).
///
/// The flow's virtual start `S_f` is `base + n_f × guess`, where `n_f` is
/// the initial seats its executing requests (those a flow policy admitted)
/// are still charged for: each is charged the flow's *current* guess while
/// in flight, and its actual time once it ends (`base` takes it then).
#[derive(Debug, Clone, Copy)]
struct FlowClock {
    /// `S_f` less the in-flight requests' charge.
    base: VTime,
    /// When the flow last became ready or was dispatched from: ties
    /// between equal finish times go round robin in this order.
    turn: u64,
    /// The service time its requests are charged per initial seat at
    /// dispatch: its last request's, or (a new flow) the level's last.
    guess: Duration,
    /// Whether `guess` is the flow's own (one of its requests finished
    /// since the state began). Until then it is provisional: at each
    /// dispatch of the flow, the level's last service time (else G).
    own: bool,
}

#[derive(Debug, Clone)]
struct Waiting {
    id: RequestId,
    /// Its flow, when the flow policy queued it.
    flow: Option<u64>,
    /// Its flow hash, whatever the policy (per-flow order).
    hash: u64,
    /// Arrival order (per-flow order: a flow's requests go in it).
    seq: u64,
    /// Per-flow order: the guessed work that may still be backfilled past
    /// this request while it is the front and does not fit.
    bypass_left: VTime,
    estimate: WorkEstimate,
    work: VTime,
    arrival_r: VTime,
    deadline: Instant,
}

#[derive(Debug, Clone, Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    executing: u32,
    seats_in_use: u32,
    next_dispatch_r: VTime,
}

impl Queue {
    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }
    fn is_empty(&self) -> bool {
        self.is_idle() && self.seats_in_use == 0
    }
}

#[derive(Debug, Clone)]
struct Executing {
    queue: Option<usize>,
    flow: Option<u64>,
    /// Its flow hash (with `flow_pending`, the flow it joins when merged).
    hash: u64,
    estimate: WorkEstimate,
    start: Instant,
    /// Seats it still holds (fewer than its estimate's after a release).
    held: u32,
    /// [`Accounting::Epoch`]: started hot and not merged yet (its queue,
    /// if any, is the card its hot start dealt, not joined yet).
    in_ledger: bool,
    /// With `in_ledger`, under the flow policies: its queue is chosen
    /// when it is merged.
    flow_pending: bool,
    /// Start order among hot starts (the merge's order).
    seq: u64,
}

#[derive(Debug, Clone)]
struct Lingering {
    until: Instant,
    queue: Option<usize>,
    /// The flow of the request that left these seats, if a flow policy
    /// admitted it (its seats then
    /// count in the flow's state until they are free).
    flow: Option<u64>,
    seats: u32,
    /// Held for this flow's next request (flow policy's anticipation).
    for_flow: Option<u64>,
}

/// The reference queueset.
#[derive(Debug, Clone)]
pub struct ReferenceQueueSet {
    cfg: QueueSetConfig,
    dealer: Option<Dealer>,
    queues: Vec<Queue>,
    r: VTime,
    last_sync: Instant,
    /// The queue last dispatched from; the next scan starts after it.
    robin: Option<usize>,
    enqueues: u64,
    seats_in_use: u32,
    requests_executing: u32,
    requests_waiting: u32,
    executing: HashMap<RequestId, Executing>,
    lingering: Vec<Lingering>,
    events: Vec<Event>,
    clamped_estimates: u64,
    /// Flow policy: each busy flow's queue and its requests waiting or
    /// executing. A flow is busy from its first request's arrival until
    /// its last one finishes or is refused.
    flows: HashMap<u64, (usize, u32)>,
    order: WaitingOrder,
    /// Per-flow order: each active flow's state.
    flow_clocks: HashMap<u64, FlowClock>,
    arrivals: u64,
    turns: u64,
    /// Per-flow order: the last finished request's service time.
    last_service: Option<Duration>,
    accounting: Accounting,
    /// Epoch accounting: a hot start happened since the last merge.
    ledger_dirty: bool,
    /// Epoch accounting: the seat-time of hot requests that finished
    /// since the last merge, nanoseconds.
    ledger_seat_nanos: u128,
    /// [`Accounting::Epoch`]: the latest-ending hot finish since the last
    /// merge, `(end, its time)` (ties: the longest).
    hot_last: Option<(Instant, Duration)>,
    /// Epoch accounting: the hot starts' order.
    hot_seq: u64,
    /// [`Accounting::Epoch`]: the latest-starting hot finish since the
    /// last merge whose start dealt its queue (Kubernetes' policy),
    /// `(start order, queue)`.
    hot_last_start: Option<(u64, usize)>,
}

impl ReferenceQueueSet {
    /// A queueset with `cfg`, its virtual clock starting at `now`.
    pub fn new(cfg: QueueSetConfig, now: Instant) -> Result<Self, QueueSetConfigError> {
        let dealer = cfg.validate()?;
        let queues = vec![Queue::default(); cfg.queues as usize];
        Ok(ReferenceQueueSet {
            cfg,
            dealer,
            queues,
            r: 0,
            last_sync: now,
            robin: None,
            enqueues: 0,
            seats_in_use: 0,
            requests_executing: 0,
            requests_waiting: 0,
            executing: HashMap::new(),
            lingering: Vec::new(),
            events: Vec::new(),
            clamped_estimates: 0,
            flows: HashMap::new(),
            order: WaitingOrder::Flows,
            flow_clocks: HashMap::new(),
            arrivals: 0,
            turns: 0,
            last_service: None,
            accounting: Accounting::PerEvent,
            ledger_dirty: false,
            ledger_seat_nanos: 0,
            hot_last: None,
            hot_seq: 0,
            hot_last_start: None,
        })
    }

    /// The same queueset accounting by `accounting`.
    pub fn with_accounting(mut self, accounting: Accounting) -> Self {
        self.accounting = accounting;
        self
    }

    /// The same queueset ordering waiting requests by `order` under the
    /// flow policies.
    pub fn with_waiting_order(mut self, order: WaitingOrder) -> Self {
        self.order = order;
        self
    }

    /// Whether per-flow order applies now.
    fn by_flow(&self) -> bool {
        self.order == WaitingOrder::Flows && self.cfg.fairness.is_flow()
    }

    /// Events since the last call, in the order they happened.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    pub fn seats_in_use(&self) -> u32 {
        self.seats_in_use
    }
    /// Seats held idle for flows' next requests (flow policy).
    pub fn held_seats(&self) -> u32 {
        self.lingering
            .iter()
            .filter(|l| l.for_flow.is_some())
            .map(|l| l.seats)
            .sum()
    }
    pub fn requests_waiting(&self) -> u32 {
        self.requests_waiting
    }
    pub fn requests_executing(&self) -> u32 {
        self.requests_executing
    }
    pub fn clamped_estimates(&self) -> u64 {
        self.clamped_estimates
    }
    pub fn current_r(&self) -> VTime {
        self.r
    }
    /// Per-flow order: `flow_hash`'s virtual start, while it is active.
    pub fn flow_virtual_start(&self, flow_hash: u64) -> Option<VTime> {
        self.flow_clocks
            .get(&flow_hash)
            .map(|c| self.flow_start(flow_hash, c))
    }
    /// Queues currently held (desired ones and undesired ones still draining).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }
    /// Each queue's next-dispatch R, waiting count and executing count.
    pub fn queue_states(&self) -> Vec<(VTime, usize, u32, u32)> {
        self.queues
            .iter()
            .map(|q| {
                (
                    q.next_dispatch_r,
                    q.waiting.len(),
                    q.executing,
                    q.seats_in_use,
                )
            })
            .collect()
    }

    /// A new request arrives at `now`. `deadline` is the caller's own
    /// deadline, if any; the wait limit applies as well.
    pub fn start(
        &mut self,
        now: Instant,
        id: RequestId,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> Outcome {
        if self.hot_start(now, id, flow_hash, estimate) {
            return Outcome::Execute;
        }
        self.merge(now);
        let outcome = self.start_op(now, id, flow_hash, estimate, deadline);
        self.end_of_operation();
        outcome
    }

    /// An executing request finishes at `now`.
    pub fn finish(&mut self, now: Instant, id: RequestId) {
        if self.hot_finish(now, id) {
            return;
        }
        self.merge(now);
        self.finish_op(now, id);
        self.end_of_operation();
    }

    /// The caller gives up on a waiting request. Returns whether it was
    /// still waiting.
    pub fn cancel(&mut self, now: Instant, id: RequestId) -> bool {
        self.merge(now);
        let found = self.cancel_op(now, id);
        self.end_of_operation();
        found
    }

    /// Run every timer due up to `t` (wait limits, deadlines, seats held for
    /// additional latency), each at its own instant, in order.
    pub fn advance_to(&mut self, t: Instant) {
        self.advance_to_op(t);
        self.end_of_operation();
    }

    /// Apply a new configuration at `now`.
    pub fn reconfigure(
        &mut self,
        now: Instant,
        cfg: QueueSetConfig,
    ) -> Result<(), QueueSetConfigError> {
        let result = self.reconfigure_op(now, cfg);
        self.end_of_operation();
        result
    }

    /// Seats held for flows' next requests serve only while requests wait:
    /// once nothing waits, they are free again (a new request then takes
    /// free seats directly).
    fn end_of_operation(&mut self) {
        self.release_holds_if_nothing_waits();
        self.forget_idle_flows();
    }

    fn release_holds_if_nothing_waits(&mut self) {
        if self.requests_waiting > 0 {
            return;
        }
        let held: Vec<Lingering> = self
            .lingering
            .iter()
            .filter(|l| l.for_flow.is_some())
            .cloned()
            .collect();
        self.lingering.retain(|l| l.for_flow.is_none());
        for l in held {
            self.give_back(l.queue, l.seats);
        }
    }

    fn start_op(
        &mut self,
        now: Instant,
        id: RequestId,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> Outcome {
        self.sync(now);
        let estimate = self.clamp(estimate);
        let Some(dealer) = &self.dealer else {
            if !self.can_accommodate(estimate.max_seats()) {
                return Outcome::Rejected(RejectReason::ConcurrencyLimit);
            }
            self.begin_executing(id, None, None, estimate, now);
            return Outcome::Execute;
        };
        let dealer = dealer.clone();
        let mut claimed = false;
        let (q, flow) = match self.cfg.fairness {
            Fairness::Kubernetes => (self.shuffle_shard(dealer, flow_hash), None),
            Fairness::Flow | Fairness::FlowMaxMin => {
                claimed = self.claim_hold(flow_hash);
                (self.flow_queue(dealer, flow_hash), Some(flow_hash))
            }
        };
        if self.seats_in_use >= self.cfg.concurrency_limit
            && self.queues[q].waiting.len() >= self.cfg.queue_length_limit as usize
        {
            if claimed {
                self.dispatch_as_much_as_possible(now);
            }
            return Outcome::Rejected(RejectReason::QueueFull);
        }
        if self.queues[q].is_idle() {
            self.queues[q].next_dispatch_r = self.r;
        }
        let wait_deadline = now.saturating_add(self.cfg.wait_limit);
        let deadline = deadline.map_or(wait_deadline, |d| d.min(wait_deadline));
        let work = total_work(
            estimate.initial_seats,
            estimate.final_seats,
            estimate.additional_latency,
            self.cfg.service_time_guess,
        );
        if let Some(f) = flow {
            self.flows.entry(f).or_insert((q, 0)).1 += 1;
        }
        if self.by_flow() {
            // A flow without a state starts level with the service the
            // waiting flows have had (or R): no credit, no debt.
            if !self.flow_clocks.contains_key(&flow_hash) {
                let entry = self.entry_start();
                self.new_clock(flow_hash, entry);
            }
            if !self.flow_waits(flow_hash) {
                let turn = self.turns;
                self.turns += 1;
                if let Some(clock) = self.flow_clocks.get_mut(&flow_hash) {
                    clock.turn = turn;
                }
            }
        }
        self.arrivals += 1;
        self.queues[q].waiting.push_back(Waiting {
            id,
            flow,
            hash: flow_hash,
            seq: self.arrivals,
            bypass_left: seats_times(estimate.max_seats(), self.cfg.service_time_guess),
            estimate,
            work,
            arrival_r: self.r,
            deadline,
        });
        self.requests_waiting += 1;
        self.bound_next_dispatch(q);
        let seen = self.events.len();
        self.dispatch_as_much_as_possible(now);
        let dispatched = self.events[seen..]
            .iter()
            .position(|e| *e == Event::Dispatched(id));
        match dispatched {
            Some(i) => {
                self.events.remove(seen + i);
                Outcome::Execute
            }
            // A zero wait limit: what could not start times out at once.
            None if self.cfg.wait_limit.is_zero() => {
                self.remove_waiting(|w| w.id == id, RejectReason::TimeOut);
                self.events.pop();
                self.dispatch_as_much_as_possible(now);
                Outcome::Rejected(RejectReason::TimeOut)
            }
            None => Outcome::Queued,
        }
    }

    /// An executing request finishes at `now`.
    fn finish_op(&mut self, now: Instant, id: RequestId) {
        self.sync(now);
        let Some(ex) = self.executing.remove(&id) else {
            return;
        };
        if let Some(f) = ex.flow {
            self.flow_leaves(f);
        }
        self.requests_executing -= 1;
        if let Some(q) = ex.queue {
            let actual = now.saturating_since(ex.start);
            // Charged for the initial seats it still holds; those it
            // released were charged at the release.
            let charged = ex.estimate.initial_seats.min(ex.held);
            let correction =
                seats_times(charged, self.cfg.service_time_guess) - seats_times(charged, actual);
            if self.by_flow() {
                self.last_service = Some(actual);
                // Out of the in-flight charge (it no longer executes),
                // into the base at its actual time; the flow's guess
                // becomes its time. (Before any bound: the bound applies
                // to the corrected start.)
                if let Some(f) = ex.flow {
                    self.end_in_flow(f, charged, actual);
                }
            }
            let queue = &mut self.queues[q];
            queue.executing -= 1;
            queue.next_dispatch_r -= correction;
            self.bound_next_dispatch(q);
        }
        // Only the seats still held are given back or held: those released
        // early went back at their release (never held for the flow), and a
        // request that gave every seat back early has none to hold.
        let seats = ex.held;
        if ex.estimate.additional_latency.is_zero() || seats == 0 {
            if let (Some(flow), Some(q), true) = (ex.flow, ex.queue, seats > 0) {
                let anticipate = if self.by_flow() {
                    self.anticipate_for_flow(flow)
                } else {
                    self.anticipate(q, seats)
                };
                if anticipate {
                    self.lingering.push(Lingering {
                        until: now.saturating_add(self.cfg.anticipation().unwrap_or_default()),
                        queue: Some(q),
                        flow: ex.flow,
                        seats,
                        for_flow: Some(flow),
                    });
                    self.dispatch_as_much_as_possible(now);
                    return;
                }
            }
            self.give_back(ex.queue, seats);
        } else {
            let until = now.saturating_add(ex.estimate.additional_latency);
            self.lingering.push(Lingering {
                until,
                queue: ex.queue,
                flow: ex.flow,
                seats,
                for_flow: None,
            });
        }
        self.dispatch_as_much_as_possible(now);
    }

    /// An executing request gives back `seats` of the seats it holds at
    /// `now` and keeps executing (`seats` 0: all of them). Returns false,
    /// changing nothing, if it is not executing, holds no seat, or holds
    /// fewer than `seats`. Under the flow policy the request stays in its
    /// flow's queue, and the seats go back to the level: they are never
    /// held for the flow (anticipation holds only what a finish frees).
    pub fn release(&mut self, now: Instant, id: RequestId, seats: u32) -> bool {
        let released = self.release_op(now, id, seats);
        self.end_of_operation();
        released
    }

    fn release_op(&mut self, now: Instant, id: RequestId, seats: u32) -> bool {
        let Some(ex) = self.executing.get(&id) else {
            return false;
        };
        let seats = if seats == 0 { ex.held } else { seats };
        if seats == 0 || seats > ex.held {
            return false; // refused before anything happens, R included
        }
        self.merge(now);
        self.sync(now);
        let Some(ex) = self.executing.get_mut(&id) else {
            return false;
        };
        // The initial seats given up are charged the time they were held
        // instead of the service-time guess.
        let before = ex.estimate.initial_seats.min(ex.held);
        ex.held -= seats;
        let refunded = before - ex.estimate.initial_seats.min(ex.held);
        let (queue, start, flow) = (ex.queue, ex.start, ex.flow);
        if let Some(q) = queue {
            let held_for = now.saturating_since(start);
            let correction = seats_times(refunded, self.cfg.service_time_guess)
                - seats_times(refunded, held_for);
            // The refunded seats leave the in-flight charge (the request
            // holds fewer) for the time they were held.
            if let Some(clock) = flow
                .filter(|_| self.by_flow())
                .and_then(|f| self.flow_clocks.get_mut(&f))
            {
                clock.base += seats_times(refunded, held_for);
            }
            self.queues[q].next_dispatch_r -= correction;
            self.bound_next_dispatch(q);
        }
        self.give_back(queue, seats);
        self.dispatch_as_much_as_possible(now);
        true
    }

    /// The caller gives up on a waiting request. Returns whether it was
    /// still waiting.
    fn cancel_op(&mut self, now: Instant, id: RequestId) -> bool {
        self.sync(now);
        let found = self.remove_waiting(|w| w.id == id, RejectReason::Cancelled);
        if found {
            self.dispatch_as_much_as_possible(now);
        }
        found
    }

    /// Run every timer due up to `t` (wait limits, deadlines, seats held for
    /// additional latency), each at its own instant, in order.
    fn advance_to_op(&mut self, t: Instant) {
        while let Some(at) = self.next_timer().filter(|&at| at <= t) {
            self.merge(at);
            self.sync(at);
            let due: Vec<Lingering> = self
                .lingering
                .iter()
                .filter(|l| l.until <= at)
                .cloned()
                .collect();
            self.lingering.retain(|l| l.until > at);
            for l in due {
                self.give_back(l.queue, l.seats);
            }
            self.remove_waiting(|w| w.deadline <= at, RejectReason::TimeOut);
            self.dispatch_as_much_as_possible(at);
            self.end_of_operation();
        }
    }

    /// The earliest pending timer.
    pub fn next_timer(&self) -> Option<Instant> {
        let linger = self.lingering.iter().map(|l| l.until);
        let deadlines = self
            .queues
            .iter()
            .flat_map(|q| q.waiting.iter().map(|w| w.deadline));
        linger.chain(deadlines).min()
    }

    /// Apply a new configuration at `now`.
    fn reconfigure_op(
        &mut self,
        now: Instant,
        cfg: QueueSetConfig,
    ) -> Result<(), QueueSetConfigError> {
        let dealer = cfg.validate()?;
        self.merge(now);
        self.sync(now);
        if self.queues.len() < cfg.queues as usize {
            self.queues.resize_with(cfg.queues as usize, Queue::default);
        }
        self.cfg = cfg;
        self.dealer = dealer;
        self.drop_undesired_empty_queues();
        self.adopt_waiting_flows();
        self.dispatch_as_much_as_possible(now);
        Ok(())
    }

    /// At least one seat; at most MAX_CONCURRENCY_LIMIT, initial and
    /// final. Not capped at the level's limit: a wider request waits until
    /// nothing executes, then runs alone (Kubernetes' rule).
    fn clamp(&mut self, mut e: WorkEstimate) -> WorkEstimate {
        let clamped = WorkEstimate {
            initial_seats: e.initial_seats.clamp(1, MAX_CONCURRENCY_LIMIT),
            final_seats: e.final_seats.min(MAX_CONCURRENCY_LIMIT),
            ..e
        };
        if clamped != e {
            self.clamped_estimates += 1;
            e = clamped;
        }
        e
    }

    fn sync(&mut self, now: Instant) {
        if now <= self.last_sync {
            return;
        }
        let dt = duration_nanos(now.saturating_since(self.last_sync));
        self.last_sync = now;
        let demand_of = |q: &Queue| {
            q.seats_in_use as u64
                + q.waiting
                    .iter()
                    .map(|w| w.estimate.max_seats() as u64)
                    .sum::<u64>()
        };
        if self.by_flow() {
            self.sync_by_flow(dt);
            return;
        }
        if self.cfg.fairness.is_max_min() {
            // The water level of the active queues' demands (waterlevel.rs).
            let mut demands: Vec<u64> = self
                .queues
                .iter()
                .filter(|q| !q.is_idle())
                .map(demand_of)
                .collect();
            let level = water_level_by_sorting(self.cfg.concurrency_limit, &mut demands);
            self.r += level.increment(dt);
            return;
        }
        let demand: u64 = self.queues.iter().map(demand_of).sum();
        let active = self.queues.iter().filter(|q| !q.is_idle()).count() as u32;
        self.r += r_increment(self.cfg.concurrency_limit, demand, active, dt);
    }

    fn shuffle_shard(&mut self, dealer: Dealer, hash: u64) -> usize {
        let hand = dealer.deal_into_hand(hash);
        let offset = (self.enqueues % hand.len() as u64) as usize;
        self.enqueues += 1;
        let mut best = hand[offset] as usize;
        let mut best_work = VTime::MAX;
        for i in 0..hand.len() {
            let q = hand[(offset + i) % hand.len()] as usize;
            let work: VTime = self.queues[q].waiting.iter().map(|w| w.work).sum();
            if work < best_work {
                best_work = work;
                best = q;
            }
        }
        best
    }

    /// The flow policy's queue for `flow`: its own while busy, else the
    /// queue of its hand with the fewest seats waiting or held (the first
    /// such card).
    fn flow_queue(&self, dealer: Dealer, flow: u64) -> usize {
        if let Some(&(q, _)) = self.flows.get(&flow) {
            return q;
        }
        let mut best = None;
        for &card in dealer.deal_into_hand(flow).iter() {
            let q = card as usize;
            let queue = &self.queues[q];
            let seats = queue.seats_in_use as u64
                + queue
                    .waiting
                    .iter()
                    .map(|w| w.estimate.max_seats() as u64)
                    .sum::<u64>();
            if best.is_none_or(|(_, b)| seats < b) {
                best = Some((q, seats));
            }
        }
        best.map_or(0, |(q, _)| q)
    }

    /// The flow policy's anticipation: a request of queue `q` just ended
    /// (no longer executing) and would free `seats`; hold them for its
    /// flow's next request when requests wait, none of them in `q`, and
    /// `q` without these seats is below an equal share of the limit among
    /// the active queues (counting `q`).
    fn anticipate(&self, q: usize, seats: u32) -> bool {
        if !self.cfg.fairness.is_flow() || self.requests_waiting == 0 {
            return false;
        }
        let queue = &self.queues[q];
        if !queue.waiting.is_empty() {
            return false;
        }
        let others = (0..self.queues.len())
            .filter(|&i| i != q && !self.queues[i].is_idle())
            .count() as u64;
        let kept = (queue.seats_in_use - seats) as u64;
        kept * (others + 1) < self.cfg.concurrency_limit as u64
    }

    /// Release the seats held for `flow` that would be released first.
    /// Returns whether there were any.
    fn claim_hold(&mut self, flow: u64) -> bool {
        let mut first: Option<usize> = None;
        for (i, l) in self.lingering.iter().enumerate() {
            if l.for_flow == Some(flow) && first.is_none_or(|f| l.until < self.lingering[f].until) {
                first = Some(i);
            }
        }
        let Some(i) = first else { return false };
        let l = self.lingering.remove(i);
        self.give_back(l.queue, l.seats);
        true
    }

    fn flow_leaves(&mut self, flow: u64) {
        if let Some(entry) = self.flows.get_mut(&flow) {
            entry.1 -= 1;
            if entry.1 == 0 {
                self.flows.remove(&flow);
            }
        }
    }

    fn bound_next_dispatch(&mut self, q: usize) {
        let queue = &mut self.queues[q];
        if let Some(head) = queue.waiting.front() {
            queue.next_dispatch_r = queue.next_dispatch_r.max(head.arrival_r);
        }
        self.bound_flows();
    }

    // ----- per-flow order (WaitingOrder::Flows) -----------------------------

    /// Each flow's oldest waiting request: hash → (queue, index in it).
    fn flow_heads(&self) -> HashMap<u64, (usize, usize)> {
        let mut heads: HashMap<u64, (u64, usize, usize)> = HashMap::new();
        for (q, queue) in self.queues.iter().enumerate() {
            for (i, w) in queue.waiting.iter().enumerate() {
                let e = heads.entry(w.hash).or_insert((w.seq, q, i));
                if w.seq < e.0 {
                    *e = (w.seq, q, i);
                }
            }
        }
        heads
            .into_iter()
            .map(|(h, (_, q, i))| (h, (q, i)))
            .collect()
    }

    fn flow_waits(&self, hash: u64) -> bool {
        self.queues
            .iter()
            .any(|q| q.waiting.iter().any(|w| w.hash == hash))
    }

    /// Whether `hash` has a request executing (that a flow policy
    /// admitted: only those count in a flow's state).
    fn flow_executes(&self, hash: u64) -> bool {
        self.executing.values().any(|ex| ex.flow == Some(hash))
    }

    /// Seats in use by `hash`'s executing requests and lingering for it
    /// (those a flow policy admitted).
    fn flow_seats(&self, hash: u64) -> u64 {
        let executing: u64 = self
            .executing
            .values()
            .filter(|ex| ex.flow == Some(hash))
            .map(|ex| ex.held as u64)
            .sum();
        let lingering: u64 = self
            .lingering
            .iter()
            .filter(|l| l.flow == Some(hash))
            .map(|l| l.seats as u64)
            .sum();
        executing + lingering
    }

    /// The initial seats `hash`'s executing requests are still charged
    /// for (`n_f`, see [`FlowClock`]).
    fn flow_inflight_seats(&self, hash: u64) -> u64 {
        self.executing
            .values()
            .filter(|ex| ex.flow == Some(hash))
            .map(|ex| ex.estimate.initial_seats.min(ex.held) as u64)
            .sum()
    }

    /// `S_f` of `hash` with `clock`: its base plus its in-flight charge.
    fn flow_start(&self, hash: u64, clock: &FlowClock) -> VTime {
        clock.base + work_of(self.flow_inflight_seats(hash), clock.guess)
    }

    /// A request of `hash` charged for `charged` initial seats ran
    /// `actual` (it no longer executes): out of the in-flight charge, into
    /// the base at its actual time, and its time becomes the flow's guess.
    /// If the guess was provisional, the correction never places the flow
    /// behind where a new flow would start now (`entry_start`), nor moves
    /// it forward: the error of a guess that was not its own is forgiven.
    fn end_in_flow(&mut self, hash: u64, charged: u32, actual: Duration) {
        let Some(clock) = self.flow_clocks.get(&hash).copied() else {
            return;
        };
        // The request is out of `executing` already: add it back.
        let before = self.flow_start(hash, &clock) + seats_times(charged, clock.guess);
        let updated = FlowClock {
            base: clock.base + seats_times(charged, actual),
            guess: actual,
            own: true,
            ..clock
        };
        self.flow_clocks.insert(hash, updated);
        if clock.own {
            return;
        }
        let after = self.flow_start(hash, &updated);
        let bound = before.max(self.entry_start());
        if after > bound {
            if let Some(c) = self.flow_clocks.get_mut(&hash) {
                c.base -= after - bound;
            }
        }
    }

    /// A state for `hash` whose virtual start is `start` now.
    fn new_clock(&mut self, hash: u64, start: VTime) {
        let guess = self.last_service.unwrap_or(self.cfg.service_time_guess);
        let base = start - work_of(self.flow_inflight_seats(hash), guess);
        let turn = self.turns;
        self.turns += 1;
        self.flow_clocks.insert(
            hash,
            FlowClock {
                base,
                turn,
                guess,
                own: false,
            },
        );
    }

    /// Per-flow order starts (a reconfiguration from the Kubernetes
    /// policy, or into queuing): the flows with requests waiting get a
    /// state at R, in the order of their oldest waiting request.
    fn adopt_waiting_flows(&mut self) {
        if !self.by_flow() {
            return;
        }
        let mut heads: Vec<(u64, u64)> = self
            .flow_heads()
            .into_iter()
            .filter(|(h, _)| !self.flow_clocks.contains_key(h))
            .map(|(h, (q, i))| (self.queues[q].waiting[i].seq, h))
            .collect();
        heads.sort_unstable();
        for (_, hash) in heads {
            self.new_clock(hash, self.r);
        }
        self.bound_flows();
    }

    /// The anti-windup bound, per flow: a flow's virtual start never
    /// precedes the R at which its oldest waiting request arrived.
    fn bound_flows(&mut self) {
        if !self.by_flow() {
            return;
        }
        for (hash, (q, i)) in self.flow_heads() {
            let arrival = self.queues[q].waiting[i].arrival_r;
            let Some(clock) = self.flow_clocks.get(&hash).copied() else {
                continue;
            };
            let start = self.flow_start(hash, &clock);
            if start < arrival {
                if let Some(c) = self.flow_clocks.get_mut(&hash) {
                    c.base += arrival - start;
                }
            }
        }
    }

    /// Where a flow that was not active starts: level with R, or with the
    /// least service a flow with requests waiting has received if that is
    /// later (those flows then got seats that R credited to flows using
    /// less; a newcomer starting behind them would be served ahead of them
    /// until it caught up, the credit issue 22 forbids). A flow's service
    /// received is its virtual start less its in-flight charge plus the
    /// time its in-flight requests have run: `base + Σ charged × run`.
    fn entry_start(&self) -> VTime {
        let waiting_min = self
            .flow_heads()
            .keys()
            .filter_map(|h| {
                let clock = self.flow_clocks.get(h)?;
                let run: VTime = self
                    .executing
                    .values()
                    .filter(|ex| ex.flow == Some(*h))
                    .map(|ex| {
                        let seats = ex.estimate.initial_seats.min(ex.held);
                        work_of(seats as u64, self.last_sync.saturating_since(ex.start))
                    })
                    .sum();
                Some(clock.base + run)
            })
            .min();
        waiting_min.map_or(self.r, |m| m.max(self.r))
    }

    /// A flow's state lives while it is active: something waiting,
    /// executing or lingering for it. Once idle it is forgotten, so a
    /// returning flow starts level with R (no credit for its idle time).
    fn forget_idle_flows(&mut self) {
        if !self.by_flow() {
            self.flow_clocks.clear();
            return;
        }
        let mut active: std::collections::HashSet<u64> = std::collections::HashSet::new();
        active.extend(self.executing.values().filter_map(|ex| ex.flow));
        active.extend(self.lingering.iter().filter_map(|l| l.flow));
        for q in &self.queues {
            active.extend(q.waiting.iter().map(|w| w.hash));
        }
        self.flow_clocks.retain(|h, _| active.contains(h));
    }

    /// Flows with a request waiting or executing (those R divides among),
    /// each with its demand: seats executing or lingering, and waiting.
    fn active_flow_demands(&self) -> Vec<u64> {
        let mut waiting: HashMap<u64, u64> = HashMap::new();
        for q in &self.queues {
            for w in &q.waiting {
                *waiting.entry(w.hash).or_default() += w.estimate.max_seats() as u64;
            }
        }
        let mut active: Vec<u64> = waiting.keys().copied().collect();
        for ex in self.executing.values() {
            if let Some(f) = ex.flow.filter(|f| !active.contains(f)) {
                active.push(f);
            }
        }
        active
            .into_iter()
            .map(|h| self.flow_seats(h) + waiting.get(&h).copied().unwrap_or(0))
            .collect()
    }

    /// R's advance over `dt` nanoseconds under per-flow order: the same
    /// rates as among queues (equal division under `flow`, the water level
    /// under `flow-maxmin`), among active flows instead.
    fn sync_by_flow(&mut self, dt: u64) {
        let mut demands = self.active_flow_demands();
        // R advances by the seats actually in use, not the limit: seats a
        // reserving front leaves idle serve no flow, and crediting them
        // would push R past every flow, the anti-windup bound then taking
        // the most from the flow whose requests are the newest.
        let capacity = self.cfg.concurrency_limit.min(self.seats_in_use);
        if self.cfg.fairness.is_max_min() {
            let level = water_level_by_sorting(capacity, &mut demands);
            // Never past the least virtual start of a flow with requests
            // waiting: R is where the backlogged flows are, the water
            // level only how fast they move.
            let least = self
                .flow_heads()
                .keys()
                .filter_map(|h| Some(self.flow_start(*h, self.flow_clocks.get(h)?)))
                .min();
            let increment = level.increment(dt);
            self.r += match least {
                Some(least) => increment.min((least - self.r).max(0)),
                None => increment,
            };
            return;
        }
        // Every seat counts in the demand, lingering in an idle flow too
        // (Kubernetes' formula: the same total as summed over queues).
        let demand: u64 = self
            .queues
            .iter()
            .map(|q| {
                q.seats_in_use as u64
                    + q.waiting
                        .iter()
                        .map(|w| w.estimate.max_seats() as u64)
                        .sum::<u64>()
            })
            .sum();
        self.r += r_increment(capacity, demand, demands.len() as u32, dt);
    }

    /// Anticipation per flow: hold a finished request's seats for its
    /// flow's next request when requests wait, none of them the flow's,
    /// and the flow without these seats is below an equal share of the
    /// limit among the active flows (counting itself).
    fn anticipate_for_flow(&self, hash: u64) -> bool {
        if self.requests_waiting == 0 || self.flow_waits(hash) {
            return false;
        }
        let demands = self.active_flow_demands();
        let others = demands.len() as u64 - u64::from(self.flow_executes(hash));
        self.flow_seats(hash) * (others + 1) < self.cfg.concurrency_limit as u64
    }

    /// Dispatch under per-flow order: the front (the head of the flow with
    /// the least virtual finish, ties round robin) if it fits; else the
    /// least-finish head that fits, while the front's bypass allowance
    /// covers its guessed work; else nothing (the front reserves).
    fn dispatch_one_by_flow(&mut self, now: Instant) -> bool {
        let heads = self.flow_heads();
        // Every waiting flow has a state (adopt_waiting_flows, start_op).
        let mut order: Vec<(VTime, u64, usize, usize)> = heads
            .iter()
            .map(|(hash, &(q, i))| {
                let clock = self.flow_clocks[hash];
                let w = &self.queues[q].waiting[i];
                let start = self.flow_start(*hash, &clock);
                (start + flow_work(w, clock.guess), clock.turn, q, i)
            })
            .collect();
        order.sort_unstable();
        let Some(&(_, _, fq, fi)) = order.first() else {
            return false;
        };
        let front = &self.queues[fq].waiting[fi];
        if self.can_accommodate(front.estimate.max_seats()) {
            self.dispatch_waiting(fq, fi, now);
            return true;
        }
        let allowance = front.bypass_left;
        let fitting = order[1..].iter().find(|&&(_, _, q, i)| {
            self.can_accommodate(self.queues[q].waiting[i].estimate.max_seats())
        });
        let Some(&(_, _, q, i)) = fitting else {
            return false;
        };
        let cost = seats_times(
            self.queues[q].waiting[i].estimate.initial_seats,
            self.cfg.service_time_guess,
        );
        if cost > allowance {
            return false; // the front reserves
        }
        self.queues[fq].waiting[fi].bypass_left -= cost;
        self.dispatch_waiting(q, i, now);
        true
    }

    /// Dispatch the `i`-th waiting request of queue `q` (per-flow order).
    fn dispatch_waiting(&mut self, q: usize, i: usize, now: Instant) {
        let Some(mut w) = self.queues[q].waiting.remove(i) else {
            return;
        };
        self.requests_waiting -= 1;
        self.robin = Some(q);
        if cap_final_seats(&mut w.estimate, self.cfg.concurrency_limit) {
            self.clamped_estimates += 1;
        }
        self.queues[q].next_dispatch_r += w.work;
        let provisional = self.last_service.unwrap_or(self.cfg.service_time_guess);
        if let Some(clock) = self.flow_clocks.get_mut(&w.hash) {
            // A flow none of whose requests has finished is charged the
            // level's latest service time, not the one when its state
            // began (issue 22: G, at an idle level's start, let a flow of
            // 16 threads take 16 seats in a row).
            if !clock.own {
                clock.guess = provisional;
            }
            // S_f advances by the request's work: its initial seats join
            // the in-flight charge if a flow policy admitted it (it counts
            // in its flow's state); a request queued under Kubernetes'
            // policy is charged its whole work at once.
            clock.base += match w.flow {
                Some(_) => seats_times(w.estimate.final_seats, w.estimate.additional_latency),
                None => flow_work(&w, clock.guess),
            };
            clock.turn = self.turns;
            self.turns += 1;
        }
        self.begin_executing(w.id, Some(q), w.flow, w.estimate, now);
        self.bound_next_dispatch(q);
        self.events.push(Event::Dispatched(w.id));
    }

    fn can_accommodate(&self, seats: u32) -> bool {
        let limit = self.cfg.concurrency_limit;
        if seats > limit {
            // Kubernetes: nothing executes. A request that released all its
            // seats early no longer counts: it holds none (the point of
            // releasing them is that it cannot pin the level).
            return self.executing.values().all(|ex| ex.held == 0);
        }
        self.seats_in_use + seats <= limit
    }

    fn dispatch_as_much_as_possible(&mut self, now: Instant) {
        // Kubernetes stops once the seats in use reach the limit; at a
        // limit of 0 libapf still serves one request when nothing executes.
        while self.requests_waiting > 0
            && (self.seats_in_use < self.cfg.concurrency_limit || self.cfg.concurrency_limit == 0)
            && self.dispatch_one(now)
        {}
    }

    fn dispatch_one(&mut self, now: Instant) -> bool {
        if self.by_flow() {
            return self.dispatch_one_by_flow(now);
        }
        let n = self.queues.len();
        let start = self.robin.map_or(0, |r| r + 1);
        let mut best: Option<(usize, VTime)> = None;
        for i in 0..n {
            let q = (start + i) % n;
            if let Some(head) = self.queues[q].waiting.front() {
                let vf = self.queues[q].next_dispatch_r + head.work;
                if best.is_none_or(|(_, b)| vf < b) {
                    best = Some((q, vf));
                }
            }
        }
        let Some((q, _)) = best else { return false };
        let head_seats = self.queues[q]
            .waiting
            .front()
            .map_or(0, |w| w.estimate.max_seats());
        if !self.can_accommodate(head_seats) {
            return false;
        }
        let Some(mut w) = self.queues[q].waiting.pop_front() else {
            return false;
        };
        self.requests_waiting -= 1;
        self.robin = Some(q);
        if cap_final_seats(&mut w.estimate, self.cfg.concurrency_limit) {
            self.clamped_estimates += 1;
        }
        self.queues[q].next_dispatch_r += w.work;
        self.begin_executing(w.id, Some(q), w.flow, w.estimate, now);
        self.bound_next_dispatch(q);
        self.events.push(Event::Dispatched(w.id));
        true
    }

    fn begin_executing(
        &mut self,
        id: RequestId,
        queue: Option<usize>,
        flow: Option<u64>,
        estimate: WorkEstimate,
        now: Instant,
    ) {
        let seats = estimate.max_seats();
        self.seats_in_use += seats;
        self.requests_executing += 1;
        if let Some(q) = queue {
            self.queues[q].executing += 1;
            self.queues[q].seats_in_use += seats;
        }
        self.executing.insert(
            id,
            Executing {
                queue,
                flow,
                hash: flow.unwrap_or(0),
                estimate,
                start: now,
                held: seats,
                in_ledger: false,
                flow_pending: false,
                seq: 0,
            },
        );
    }

    // ----- epoch accounting (Accounting::Epoch) ----------------------------

    /// A start the optimised queueset admits on its hot path: nothing
    /// waits, the request needs no clamping and fits. Kept in the ledger.
    fn hot_start(
        &mut self,
        now: Instant,
        id: RequestId,
        hash: u64,
        estimate: WorkEstimate,
    ) -> bool {
        let seats = estimate.max_seats();
        if self.accounting != Accounting::Epoch
            || estimate.initial_seats == 0
            || self.requests_waiting > 0
            || u64::from(self.seats_in_use) + u64::from(seats)
                > u64::from(self.cfg.concurrency_limit)
        {
            return false;
        }
        let flow_pending = self.dealer.is_some() && self.cfg.fairness.is_flow();
        let queue = match &self.dealer {
            Some(dealer) if !flow_pending => {
                let hand = dealer.deal_into_hand(hash);
                let q = hand[(self.enqueues % hand.len() as u64) as usize] as usize;
                self.enqueues += 1;
                Some(q)
            }
            _ => None,
        };
        self.hot_seq += 1;
        self.seats_in_use += seats;
        self.requests_executing += 1;
        self.ledger_dirty = true;
        self.executing.insert(
            id,
            Executing {
                queue,
                flow: None,
                hash,
                estimate,
                start: now,
                held: seats,
                in_ledger: true,
                flow_pending,
                seq: self.hot_seq,
            },
        );
        true
    }

    /// A finish the optimised queueset takes on its hot path: a request
    /// still in the ledger, without additional latency. It leaves its
    /// seat-time only.
    fn hot_finish(&mut self, now: Instant, id: RequestId) -> bool {
        let hot = self
            .executing
            .get(&id)
            .is_some_and(|ex| ex.in_ledger && ex.estimate.additional_latency.is_zero());
        if !hot {
            return false;
        }
        let Some(ex) = self.executing.remove(&id) else {
            return false;
        };
        let ran = duration_nanos(now.saturating_since(ex.start));
        self.ledger_seat_nanos += u128::from(ex.held) * u128::from(ran);
        self.hot_last = self
            .hot_last
            .max(Some((now, now.saturating_since(ex.start))));
        if let Some(q) = ex.queue {
            self.hot_last_start = self.hot_last_start.max(Some((ex.seq, q)));
        }
        self.seats_in_use -= ex.held;
        self.requests_executing -= 1;
        true
    }

    /// Merge the ledger at `now` under [`Accounting::Epoch`] (nothing
    /// otherwise, or when no hot start happened since the last merge):
    /// the optimised queueset does it whenever it takes its lock, and at
    /// every observation (stats, dumps, R, the queues' states), so a
    /// comparison calls this first.
    pub fn merge(&mut self, now: Instant) {
        if self.accounting != Accounting::Epoch || !self.ledger_dirty {
            return;
        }
        self.ledger_dirty = false;
        let t0 = self.last_sync;
        let t = now.max(t0);
        let dt = duration_nanos(t.saturating_since(t0));
        self.last_sync = t;
        let mut ids: Vec<(u64, RequestId)> = self
            .executing
            .iter()
            .filter(|(_, ex)| ex.in_ledger)
            .map(|(&id, ex)| (ex.seq, id))
            .collect();
        ids.sort_unstable();
        // Per-flow order: the flows active before the fold, and the
        // folded requests of flows (in start order).
        let by_flow = self.by_flow();
        let active_before: Vec<u64> = if by_flow {
            let mut a: Vec<u64> = self.executing.values().filter_map(|ex| ex.flow).collect();
            a.extend(
                self.queues
                    .iter()
                    .flat_map(|q| q.waiting.iter().map(|w| w.hash)),
            );
            a.sort_unstable();
            a.dedup();
            a
        } else {
            Vec::new()
        };
        let mut folded_flows: Vec<(u64, WorkEstimate, Instant)> = Vec::new();
        // W: the finished hot requests' seat-time, the open ones' since
        // the epoch began (or their start), the queues' own seats over it.
        let mut w = std::mem::take(&mut self.ledger_seat_nanos);
        w += self
            .queues
            .iter()
            .map(|q| u128::from(q.seats_in_use) * u128::from(dt))
            .sum::<u128>();
        for (_, id) in &ids {
            let ex = &self.executing[id];
            let since = duration_nanos(t.saturating_since(ex.start.max(t0)));
            w += u128::from(ex.held) * u128::from(since);
        }
        // Fold each open request into its queue; F_q and whether the
        // queue was active before, per queue touched.
        let mut lead: Vec<(usize, bool, VTime)> = Vec::new();
        // The epoch's last dispatch: every hot start was one (at once).
        let mut last_start = self.hot_last_start.take();
        for (seq, id) in ids {
            let mut ex = self.executing[&id].clone();
            ex.in_ledger = false;
            if ex.flow_pending {
                let q = match &self.dealer {
                    Some(dealer) => self.flow_queue(dealer.clone(), ex.hash),
                    None => self.flows.get(&ex.hash).map_or(0, |&(q, _)| q),
                };
                self.flows.entry(ex.hash).or_insert((q, 0)).1 += 1;
                ex.queue = Some(q);
                ex.flow = Some(ex.hash);
                ex.flow_pending = false;
                folded_flows.push((ex.hash, ex.estimate, ex.start));
            }
            if let Some(q) = ex.queue {
                if q >= self.queues.len() {
                    self.queues.resize_with(q + 1, Queue::default);
                }
                let f = total_work(
                    ex.estimate.initial_seats,
                    ex.estimate.final_seats,
                    ex.estimate.additional_latency,
                    self.cfg.service_time_guess,
                ) - seats_times_nanos(
                    ex.estimate.initial_seats,
                    duration_nanos(t.saturating_since(ex.start)),
                );
                match lead.iter_mut().find(|(lq, _, _)| *lq == q) {
                    Some(entry) => entry.2 += f,
                    None => lead.push((q, !self.queues[q].is_idle(), f)),
                }
                self.queues[q].executing += 1;
                self.queues[q].seats_in_use += ex.held;
                last_start = last_start.max(Some((seq, q)));
            }
            self.executing.insert(id, ex);
        }
        if let Some((_, q)) = last_start {
            if q >= self.queues.len() {
                self.queues.resize_with(q + 1, Queue::default);
            }
            self.robin = Some(q);
        }
        let active = if by_flow {
            let mut a = active_before.clone();
            a.extend(folded_flows.iter().map(|&(h, _, _)| h));
            a.sort_unstable();
            a.dedup();
            a.len() as u32
        } else {
            self.queues.iter().filter(|q| !q.is_idle()).count() as u32
        };
        self.r += epoch_increment(self.cfg.concurrency_limit, w, active, dt);
        let r = self.r;
        for (q, queue) in self.queues.iter_mut().enumerate() {
            if queue.is_idle() {
                continue;
            }
            let (held_before, f) = lead
                .iter()
                .find(|(lq, _, _)| *lq == q)
                .map_or((true, 0), |&(_, h, f)| (h, f));
            queue.next_dispatch_r = if held_before {
                queue.next_dispatch_r.max(r) + f
            } else {
                r + f
            };
        }
        let last = self.hot_last.take();
        if by_flow {
            self.merge_flow_clocks(t, last, &active_before, &folded_flows);
        }
    }

    /// The epoch rule for flows at a merge at `t` (nothing waits): the
    /// finished hot requests' last time becomes the level's last service
    /// time; every flow active before the fold keeps a debt, not a credit
    /// (`S_f = max(S_f, R)`); then each folded request, in start order, is
    /// as if it arrived and was dispatched at once (a flow without a clock
    /// starts at R and takes a turn; an arrival and a dispatch take one
    /// each), charged its work less its initial seats × the time it
    /// already ran.
    fn merge_flow_clocks(
        &mut self,
        t: Instant,
        last: Option<(Instant, Duration)>,
        active_before: &[u64],
        folded: &[(u64, WorkEstimate, Instant)],
    ) {
        if let Some((_, d)) = last {
            self.last_service = Some(d);
        }
        let r = self.r;
        // n_f before the fold: the folded requests are in `executing`.
        let mut inflight: HashMap<u64, u64> = HashMap::new();
        for ex in self.executing.values() {
            if let Some(f) = ex.flow {
                *inflight.entry(f).or_default() +=
                    u64::from(ex.estimate.initial_seats.min(ex.held));
            }
        }
        for &(h, e, _) in folded {
            *inflight.entry(h).or_default() -= u64::from(e.initial_seats);
        }
        for h in active_before {
            let n = inflight.get(h).copied().unwrap_or(0);
            if let Some(c) = self.flow_clocks.get_mut(h) {
                c.base = c.base.max(r - work_of(n, c.guess));
            }
        }
        for &(h, e, start) in folded {
            let n = inflight.get(&h).copied().unwrap_or(0);
            if !self.flow_clocks.contains_key(&h) {
                let guess = self.last_service.unwrap_or(self.cfg.service_time_guess);
                let base = r - work_of(n, guess);
                self.flow_clocks.insert(
                    h,
                    FlowClock {
                        base,
                        turn: 0,
                        guess,
                        own: false,
                    },
                );
                self.turns += 1;
            }
            self.turns += 2;
            let turn = self.turns - 1;
            // A flow none of whose requests has finished is charged the
            // level's latest service time at each dispatch (issue 22), the
            // fold's included.
            let provisional = self.last_service.unwrap_or(self.cfg.service_time_guess);
            if let Some(c) = self.flow_clocks.get_mut(&h) {
                c.base = c.base.max(r - work_of(n, c.guess))
                    + seats_times(e.final_seats, e.additional_latency)
                    - work_of(u64::from(e.initial_seats), t.saturating_since(start));
                if !c.own {
                    c.guess = provisional;
                }
                c.turn = turn;
            }
            *inflight.entry(h).or_default() += u64::from(e.initial_seats);
        }
    }

    fn give_back(&mut self, queue: Option<usize>, seats: u32) {
        self.seats_in_use -= seats;
        if let Some(q) = queue {
            self.queues[q].seats_in_use -= seats;
            self.drop_undesired_empty_queues();
        }
    }

    /// Remove waiting requests matching `pred` with `reason`; returns whether
    /// any was removed.
    fn remove_waiting(&mut self, pred: impl Fn(&Waiting) -> bool, reason: RejectReason) -> bool {
        let mut removed = Vec::new();
        let mut left = Vec::new();
        for q in 0..self.queues.len() {
            let before = self.queues[q].waiting.len();
            let mut kept = VecDeque::with_capacity(before);
            for w in self.queues[q].waiting.drain(..) {
                if pred(&w) {
                    removed.push(w.id);
                    left.extend(w.flow);
                } else {
                    kept.push_back(w);
                }
            }
            self.queues[q].waiting = kept;
            if self.queues[q].waiting.len() != before {
                self.bound_next_dispatch(q);
            }
        }
        self.bound_flows();
        for flow in left {
            self.flow_leaves(flow);
        }
        removed.sort_unstable();
        self.requests_waiting -= removed.len() as u32;
        let any = !removed.is_empty();
        self.events
            .extend(removed.into_iter().map(|id| Event::Rejected(id, reason)));
        if any {
            self.drop_undesired_empty_queues();
        }
        any
    }

    /// Queues past the desired count take no new requests; once the trailing
    /// ones hold nothing they are dropped.
    fn drop_undesired_empty_queues(&mut self) {
        let desired = self.cfg.queues as usize;
        while self.queues.len() > desired && self.queues.last().is_some_and(Queue::is_empty) {
            self.queues.pop();
        }
        if let Some(r) = self.robin {
            if r >= self.queues.len() {
                self.robin = self.queues.len().checked_sub(1);
            }
        }
    }
}

/// `seats × d` as virtual work, for a seat count that may pass `u32`.
fn work_of(seats: u64, d: Duration) -> VTime {
    ((seats as i128) * (duration_nanos(d) as i128)) << super::vtime::FRACTION_BITS
}

/// A waiting request's work under per-flow order: its initial seats for
/// its flow's service-time guess, its final seats for its additional
/// latency.
fn flow_work(w: &Waiting, guess: Duration) -> VTime {
    total_work(
        w.estimate.initial_seats,
        w.estimate.final_seats,
        w.estimate.additional_latency,
        guess,
    )
}

/// Kubernetes' rule: final seats above the limit are reduced to it, with the
/// additional latency stretched to keep the same final work.
/// Returns whether it capped anything (counted as a clamped estimate).
fn cap_final_seats(e: &mut WorkEstimate, limit: u32) -> bool {
    if e.final_seats > limit && limit > 0 {
        let final_work = e.final_seats as u128 * duration_nanos(e.additional_latency) as u128;
        let stretched = u64::try_from(final_work / limit as u128).unwrap_or(u64::MAX);
        e.additional_latency = Duration::from_nanos(stretched);
        e.final_seats = limit;
        return true;
    }
    false
}
