//! Per-flow order under `flow` and `flow-maxmin` (issue 22;
//! docs/flow-fairness.md, "Ordering waiting requests among many flows"):
//! the flow, not the queue, is the unit of fairness. Queues keep isolation
//! and length limits; waiting requests are served by least virtual finish
//! among *flows* (each flow's requests in arrival order), a front that
//! does not fit is backfilled within a bypass allowance of its seats × G
//! and then reserves, and R advances among the active flows.
//!
//! Touched only under the level lock, and only by decisions and by the
//! replay of flow-policy records: a level under Kubernetes' policy never
//! creates a state (its requests carry no flow), and the hot path never
//! touches one (its records are replayed under the lock).
//!
//! A flow's virtual start is `S_f = base + n_f × g_f`: `n_f` the initial
//! seats its executing requests (those a flow policy admitted) are still
//! charged for, `g_f` its service-time guess (its last request's time;
//! until one of its requests finishes, provisional: the level's last at
//! each of its dispatches). So a finish needs no per-request guess: it
//! moves the request's seats from the in-flight charge into `base` at
//! their actual time. The first finish of a flow with a provisional guess
//! may move it no further than where a new flow would start
//! (`order_forgive`): the error of a guess that was not its own is no debt.
//!
//! # Invariants (checked by `Core::check_order_invariants` in debug builds)
//! 1. A flow has a state exactly while it has a request waiting (while the
//!    order is on), an executing request a flow policy admitted, or seats
//!    of such a request lingering; `executing`, `seats`, `inflight` and
//!    `inflight_starts` are the sums over those requests and seats.
//! 2. While the order is on, every waiting request is in its flow's list,
//!    in arrival order, and `waiting_seats` sums their seats; every flow
//!    with waiting requests has a clock. Off, lists and clocks are empty.
//! 3. The ready index holds exactly the flows with waiting requests, each
//!    once, under `(S_f + head work at g_f, turn)` (`FlowState::key`).
//! 4. `active` counts the flows with a request waiting or executing; under
//!    `flow-maxmin` the demand index holds each active flow's seats in use
//!    and waiting under its slot, and nothing for the others.
//! 5. A waiting flow's `S_f` is at least its head's arrival R (the
//!    anti-windup bound, per flow).

use super::Core;
use crate::clock::{duration_nanos, Instant};
use crate::queueset::admission::AdmissionWord;
use crate::queueset::held::Held;
use crate::queueset::vtime::{r_increment, seats_times, seats_times_nanos, VTime, FRACTION_BITS};
use crate::queueset::wait::SlotState;
use crate::work_estimate::WorkEstimate;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// A waiting request as its flow's list keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowWaiter {
    seq: u64,
    queue: u32,
    estimate: WorkEstimate,
    arrival_r: VTime,
}

/// A flow's fair-queuing clock (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowClock {
    base: VTime,
    /// Ties between equal keys go to the flow that became ready or was
    /// served first.
    turn: u64,
    /// `g_f` in nanoseconds.
    guess: u64,
    /// `g_f` is the flow's own (a request of it finished since its clock
    /// began); until then it is provisional: the level's last service time
    /// at each of its dispatches (issue 22, "Thousands of flows").
    own: bool,
}

/// Where a waiting flow is found by the entry rule: the service it has
/// received is its `base` while nothing of it is in flight (a constant,
/// kept ordered), and moves with time otherwise (such flows hold seats, so
/// they are at most the seats in use: scanned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Settled(VTime),
    InFlight,
}

/// One active flow.
#[derive(Debug, PartialEq, Eq)]
struct FlowState {
    /// Its key in the demand index (`flow-maxmin`).
    slot: u32,
    waiting: VecDeque<FlowWaiter>,
    waiting_seats: u64,
    executing: u32,
    /// Seats held by its executing requests and lingering for it.
    seats: u64,
    /// `n_f`: initial seats its executing requests are charged for.
    inflight: u64,
    /// Σ of those seats × their start, in nanoseconds.
    inflight_starts: i128,
    clock: Option<FlowClock>,
    /// Its key in the ready index, while it waits.
    key: Option<(VTime, u64)>,
    /// Its place in the entry rule's indexes, while it waits (`Entry`).
    entry: Option<Entry>,
    /// Counted in `FlowOrder::active`.
    active: bool,
}

/// `seats × nanos` as virtual work, for seat counts beyond `u32`.
#[inline]
fn work(seats: u64, nanos: u64) -> VTime {
    (i128::from(seats) * i128::from(nanos)) << FRACTION_BITS
}

/// A request's work under per-flow order: initial seats × the flow's
/// guess, final seats × its additional latency.
#[inline]
fn flow_work(e: &WorkEstimate, guess: u64) -> VTime {
    seats_times_nanos(e.initial_seats, guess) + final_work(e)
}

#[inline]
fn final_work(e: &WorkEstimate) -> VTime {
    seats_times(e.final_seats, e.additional_latency)
}

impl FlowState {
    fn new(slot: u32) -> FlowState {
        FlowState {
            slot,
            waiting: VecDeque::new(),
            waiting_seats: 0,
            executing: 0,
            seats: 0,
            inflight: 0,
            inflight_starts: 0,
            clock: None,
            key: None,
            entry: None,
            active: false,
        }
    }

    /// `S_f`, if the flow has a clock.
    fn start(&self) -> Option<VTime> {
        self.clock.map(|c| c.base + work(self.inflight, c.guess))
    }

    /// Its ready-index key: virtual finish of its head, and its turn.
    fn key(&self) -> Option<(VTime, u64)> {
        let c = self.clock?;
        let head = self.waiting.front()?;
        Some((
            c.base + work(self.inflight, c.guess) + flow_work(&head.estimate, c.guess),
            c.turn,
        ))
    }

    fn is_active(&self) -> bool {
        !self.waiting.is_empty() || self.executing > 0
    }

    fn is_idle(&self) -> bool {
        !self.is_active() && self.seats == 0
    }
}

/// Sizes and capacities of the per-flow state (tests).
#[cfg(all(test, not(loom)))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderMemory {
    /// Flows with a state.
    pub(crate) flows: usize,
    /// Entries the flow map has room for.
    pub(crate) map_capacity: usize,
    /// Flows in the ready index.
    pub(crate) ready: usize,
    /// Flows in the entry rule's indexes (32 bytes a key at most).
    pub(crate) entry_index: usize,
    /// Waiting requests in the flows' lists.
    pub(crate) listed: usize,
    /// Room in those lists.
    pub(crate) list_capacity: usize,
    /// Room in the free-slot list.
    pub(crate) free_capacity: usize,
    /// Bytes of one map entry (hash and state).
    pub(crate) entry_bytes: usize,
    /// Bytes of one ready-index key.
    pub(crate) ready_bytes: usize,
    /// Bytes of one listed waiting request.
    pub(crate) waiter_bytes: usize,
}

/// The per-flow state of a level (see the module documentation).
#[derive(Default)]
pub(crate) struct FlowOrder {
    /// Per-flow order applies (the level's policy is `flow` or
    /// `flow-maxmin`).
    on: bool,
    flows: HashMap<u64, FlowState>,
    /// Flows with waiting requests by (key, turn, flow hash).
    ready: BTreeSet<(VTime, u64, u64)>,
    /// Waiting flows with nothing in flight, by service received (`base`).
    settled: BTreeSet<(VTime, u64)>,
    /// Waiting flows with requests in flight.
    in_flight: BTreeSet<u64>,
    /// Flows with a request waiting or executing.
    active: u32,
    turns: u64,
    /// The last finished request's time (nanoseconds), under the order.
    last_service: Option<u64>,
    /// Demand-index slots of forgotten flows, for reuse.
    free: Vec<u32>,
    slots: u32,
}

impl std::fmt::Debug for FlowOrder {
    /// States by flow hash, so two equal orders print the same. Slots are
    /// left out: which slot a flow gets changes no decision.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut flows: Vec<_> = self
            .flows
            .iter()
            .map(|(h, s)| {
                (
                    h,
                    (
                        &s.waiting,
                        s.waiting_seats,
                        s.executing,
                        s.seats,
                        s.inflight,
                        s.inflight_starts,
                        s.clock,
                        s.key,
                    ),
                )
            })
            .collect();
        flows.sort_unstable_by_key(|&(h, _)| *h);
        f.debug_struct("FlowOrder")
            .field("on", &self.on)
            .field("flows", &flows)
            .field("active", &self.active)
            .field("turns", &self.turns)
            .field("last_service", &self.last_service)
            .finish()
    }
}

impl FlowOrder {
    /// Whether per-flow order applies.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// What the per-flow state holds, for the memory test.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn memory(&self) -> OrderMemory {
        OrderMemory {
            flows: self.flows.len(),
            map_capacity: self.flows.capacity(),
            ready: self.ready.len(),
            entry_index: self.settled.len() + self.in_flight.len(),
            listed: self.flows.values().map(|s| s.waiting.len()).sum(),
            list_capacity: self.flows.values().map(|s| s.waiting.capacity()).sum(),
            free_capacity: self.free.capacity(),
            entry_bytes: std::mem::size_of::<(u64, FlowState)>(),
            ready_bytes: std::mem::size_of::<(VTime, u64, u64)>(),
            waiter_bytes: std::mem::size_of::<FlowWaiter>(),
        }
    }

    /// A request of a queue ran `nanos`: the guess of flows new from now.
    pub(crate) fn note_service(&mut self, nanos: u64) {
        self.last_service = Some(nanos);
    }

    fn state(&mut self, hash: u64) -> &mut FlowState {
        let (free, slots) = (&mut self.free, &mut self.slots);
        self.flows.entry(hash).or_insert_with(|| {
            let slot = free.pop().unwrap_or_else(|| {
                *slots += 1;
                *slots - 1
            });
            FlowState::new(slot)
        })
    }

    /// Give memory back after a burst of distinct flows; with no flow
    /// left, slots start again from 0.
    fn shrink(&mut self) {
        if self.flows.is_empty() {
            self.free.clear();
            self.slots = 0;
        }
        if self.flows.capacity() > 64 && self.flows.len() * 4 < self.flows.capacity() {
            self.flows.shrink_to(self.flows.len() * 2);
        }
        if self.free.capacity() > 64 && self.free.len() * 4 < self.free.capacity() {
            self.free.shrink_to(self.free.len() * 2);
        }
    }
}

impl Core {
    // ----- the rate ------------------------------------------------------------

    /// How far R advances in `dt` nanoseconds under per-flow order: the
    /// seats in use (not the limit: seats a reserving front leaves idle
    /// serve no flow) divided equally among the active flows (`flow`), or
    /// at the water level of the active flows' demands (`flow-maxmin`).
    #[inline(never)]
    #[cold]
    pub(super) fn flow_increment(&self, dt: u64) -> VTime {
        let limit = self.cfg.concurrency_limit;
        let capacity = u64::from(limit).min(self.seats.in_use) as u32;
        match &self.water {
            Some(water) => {
                let increment = water.level(capacity).increment(dt);
                match self.least_waiting_start() {
                    Some(least) => increment.min((least - self.r()).max(0)),
                    None => increment,
                }
            }
            None => {
                let demand = self.queues.executing_seats() + self.queues.waiting_seats();
                r_increment(capacity, demand, self.order.active, dt)
            }
        }
    }

    /// The least virtual start `S_f` of a flow with requests waiting, if
    /// any: under `flow-maxmin`, R advances at the water level but never
    /// past it (as start-time fair queuing's virtual time is the least
    /// start tag of a backlogged flow). The water level is the rate of the
    /// flows above it, not where they are: after a transient (every flow
    /// arriving at once) R ran ahead of the backlogged flows' starts and
    /// kept pace with them, so a flow arriving at R (the entry rule's
    /// anti-windup floor) was placed behind them, and a light flow's
    /// request waited for most of a round of theirs (issue 22, "`flow-maxmin`
    /// against `flow`"). O(log flows + waiting flows with requests in
    /// flight, at most the seats in use), only while requests wait.
    fn least_waiting_start(&self) -> Option<VTime> {
        if self.order.ready.is_empty() {
            return None;
        }
        let settled = self.order.settled.first().map(|&(base, _)| base);
        self.order
            .in_flight
            .iter()
            .filter_map(|h| self.order.flows.get(h)?.start())
            .chain(settled)
            .min()
    }

    // ----- accounting (whatever the policy, for flow-admitted requests) --------

    /// A request of `flow` (admitted by a flow policy) starts executing at
    /// `start`, holding `estimate`'s seats.
    pub(super) fn order_begin(&mut self, flow: u64, estimate: &WorkEstimate, start: Instant) {
        let st = self.order.state(flow);
        let charged = u64::from(estimate.initial_seats);
        st.executing += 1;
        st.seats += u64::from(estimate.max_seats());
        st.inflight += charged;
        st.inflight_starts += i128::from(charged) * i128::from(start.as_nanos());
        self.order_refresh(flow);
    }

    /// A request of `flow` that started at `start`, still charged for
    /// `charged` initial seats, stops executing at `end` (its seats are
    /// released apart: they may linger).
    pub(crate) fn order_end(&mut self, flow: u64, charged: u32, start: Instant, end: Instant) {
        let Some(st) = self.order.flows.get_mut(&flow) else {
            debug_assert!(false, "flow {flow:#x} ended without a state");
            return;
        };
        let charged = u64::from(charged);
        let before = st.start();
        st.executing -= 1;
        st.inflight -= charged;
        st.inflight_starts -= i128::from(charged) * i128::from(start.as_nanos());
        let mut provisional = false;
        if let Some(c) = &mut st.clock {
            let actual = end.as_nanos().saturating_sub(start.as_nanos());
            c.base += work(charged, actual);
            provisional = !c.own;
            c.guess = actual;
            c.own = true;
        }
        if let (true, Some(before)) = (provisional, before) {
            self.order_forgive(flow, before);
        }
        self.order_refresh(flow);
        self.order_bound(flow);
    }

    /// The first finish of a flow whose guess was provisional (the
    /// level's service time, or G) replaced it with its own, and its start
    /// moved from `before` accordingly: a guess not its own may have
    /// charged its in-flight requests far too little (a flow of 16 threads
    /// arriving first at an idle level takes 16 seats at G = 3 ms each,
    /// then runs 0.1 s each). That correction never places the flow behind
    /// where a flow without a state would start now (the entry rule), so
    /// the error of a guess that was not its own is not a debt the flow
    /// repays by waiting while thousands of flows catch up (issue 22,
    /// "Thousands of flows active at once"); it never moves the flow
    /// forward either.
    fn order_forgive(&mut self, flow: u64, before: VTime) {
        let entry = self.entry_start();
        let Some(st) = self.order.flows.get_mut(&flow) else {
            return;
        };
        let Some(after) = st.start() else {
            return;
        };
        let bound = before.max(entry);
        if after > bound {
            if let Some(c) = &mut st.clock {
                c.base -= after - bound;
            }
        }
    }

    /// A request of `flow` that started at `start` releases `seats` early
    /// at `now`, `refunded` of them initial seats it was charged for.
    pub(super) fn order_release_early(
        &mut self,
        flow: u64,
        refunded: u32,
        seats: u32,
        start: Instant,
        now: Instant,
    ) {
        if let Some(st) = self.order.flows.get_mut(&flow) {
            let refunded = u64::from(refunded);
            st.inflight -= refunded;
            st.inflight_starts -= i128::from(refunded) * i128::from(start.as_nanos());
            if let Some(c) = &mut st.clock {
                c.base += work(refunded, now.as_nanos().saturating_sub(start.as_nanos()));
            }
        }
        self.order_release_seats(flow, seats);
        self.order_bound(flow);
    }

    /// `seats` of `flow` (executing or lingering) are free.
    pub(crate) fn order_release_seats(&mut self, flow: u64, seats: u32) {
        if let Some(st) = self.order.flows.get_mut(&flow) {
            st.seats -= u64::from(seats);
            self.order_refresh(flow);
        }
    }

    /// Forget `flow`'s state if it is idle: a flow returning later starts
    /// afresh (no credit for its idle time).
    pub(crate) fn order_forget_if_idle(&mut self, flow: u64) {
        if !self.order.flows.get(&flow).is_some_and(FlowState::is_idle) {
            return;
        }
        if let Some(st) = self.order.flows.remove(&flow) {
            debug_assert!(
                !st.active && st.key.is_none() && st.entry.is_none(),
                "an idle flow is not indexed"
            );
            self.order.free.push(st.slot);
            self.order.shrink();
        }
    }

    /// Keep `flow`'s activity count and demand-index entry in step.
    fn order_refresh(&mut self, flow: u64) {
        let Some(st) = self.order.flows.get_mut(&flow) else {
            return;
        };
        let active = st.is_active();
        if active != st.active {
            st.active = active;
            if active {
                self.order.active += 1;
            } else {
                self.order.active -= 1;
            }
        }
        if let Some(water) = &mut self.water {
            water.set(
                st.slot as usize,
                active.then(|| st.seats + st.waiting_seats),
            );
        }
    }

    /// The anti-windup bound for `flow` (invariant 5), then its place in
    /// the ready index (invariant 3).
    pub(super) fn order_bound(&mut self, flow: u64) {
        let Some(st) = self.order.flows.get_mut(&flow) else {
            return;
        };
        if let (Some(head), Some(start)) = (st.waiting.front(), st.start()) {
            if start < head.arrival_r {
                let lift = head.arrival_r - start;
                if let Some(c) = &mut st.clock {
                    c.base += lift;
                }
            }
        }
        let key = st.key();
        if key != st.key {
            if let Some((k, t)) = st.key {
                self.order.ready.remove(&(k, t, flow));
            }
            if let Some((k, t)) = key {
                self.order.ready.insert((k, t, flow));
            }
            st.key = key;
        }
        let entry = match (key, st.clock) {
            (Some(_), Some(c)) if st.inflight == 0 => Some(Entry::Settled(c.base)),
            (Some(_), Some(_)) => Some(Entry::InFlight),
            _ => None,
        };
        if entry != st.entry {
            match st.entry {
                Some(Entry::Settled(base)) => self.order.settled.remove(&(base, flow)),
                Some(Entry::InFlight) => self.order.in_flight.remove(&flow),
                None => false,
            };
            match entry {
                Some(Entry::Settled(base)) => self.order.settled.insert((base, flow)),
                Some(Entry::InFlight) => self.order.in_flight.insert(flow),
                None => false,
            };
            st.entry = entry;
        }
    }

    // ----- ordering (only while the order is on) ------------------------------

    /// Where a flow without a state starts: level with the least service a
    /// waiting flow has received (its `base` plus the time its in-flight
    /// requests have run), or R if that is later. The least of the waiting
    /// flows with nothing in flight is the first of an ordered index; those
    /// with requests in flight hold seats, so there are at most as many as
    /// seats in use: O(log flows + min(seats in use, waiting flows)), only
    /// when a flow without a state arrives while requests wait.
    fn entry_start(&self) -> VTime {
        let now = i128::from(self.last_sync().as_nanos());
        let settled = self.order.settled.first().map(|&(base, _)| base);
        let in_flight = self
            .order
            .in_flight
            .iter()
            .filter_map(|h| {
                let st = self.order.flows.get(h)?;
                let c = st.clock?;
                let run = i128::from(st.inflight) * now - st.inflight_starts;
                Some(c.base + (run << FRACTION_BITS))
            })
            .min();
        let least = match (settled, in_flight) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        least.map_or(self.r(), |m| m.max(self.r()))
    }

    /// The guess of a flow none of whose requests has finished yet: the
    /// level's last service time, else G.
    fn provisional_guess(&self) -> u64 {
        self.order
            .last_service
            .unwrap_or_else(|| duration_nanos(self.cfg.service_time_guess))
    }

    /// Give `flow` a clock starting at `start` (consumes a turn).
    fn new_clock(&mut self, flow: u64, start: VTime) {
        let guess = self.provisional_guess();
        let turn = self.order.turns;
        self.order.turns += 1;
        let st = self.order.state(flow);
        st.clock = Some(FlowClock {
            base: start - work(st.inflight, guess),
            turn,
            guess,
            own: false,
        });
    }

    /// A flow's clock for a new arrival: kept if it has one, else started
    /// by the entry rule; a flow not waiting takes the next turn.
    fn order_arrive(&mut self, flow: u64) {
        if self
            .order
            .flows
            .get(&flow)
            .is_none_or(|st| st.clock.is_none())
        {
            let entry = self.entry_start();
            self.new_clock(flow, entry);
        }
        let turn = self.order.turns;
        let st = self.order.state(flow);
        if st.waiting.is_empty() {
            if let Some(c) = &mut st.clock {
                c.turn = turn;
            }
            self.order.turns += 1;
        }
    }

    /// A request (`seq`, of `flow`, in queue `q`) starts waiting.
    pub(super) fn order_enqueue(
        &mut self,
        flow: u64,
        seq: u64,
        q: usize,
        estimate: WorkEstimate,
        arrival_r: VTime,
    ) {
        self.order_arrive(flow);
        let st = self.order.state(flow);
        if st.waiting.capacity() == 0 {
            // Most flows wait with one request: no room for four.
            st.waiting.reserve_exact(1);
        }
        st.waiting.push_back(FlowWaiter {
            seq,
            queue: q as u32,
            estimate,
            arrival_r,
        });
        st.waiting_seats += u64::from(estimate.max_seats());
        self.order_refresh(flow);
        self.order_bound(flow);
    }

    /// A request of `flow` admitted on the hot path (nothing waited) is
    /// replayed at `at`: as if it arrived and was dispatched at once.
    pub(crate) fn order_start_at_once(&mut self, flow: u64, estimate: &WorkEstimate, at: Instant) {
        if self.order.on {
            self.order_arrive(flow);
            let r = self.r();
            let turn = self.order.turns;
            self.order.turns += 1;
            let inflight = self.order.flows.get(&flow).map_or(0, |st| st.inflight);
            let provisional = self.provisional_guess();
            let st = self.order.state(flow);
            let waits = !st.waiting.is_empty();
            if let Some(c) = &mut st.clock {
                // Its arrival R (now) bounds the flow as its head would.
                if !waits {
                    c.base = c.base.max(r - work(inflight, c.guess));
                }
                if !c.own {
                    c.guess = provisional;
                }
                c.base += final_work(estimate);
                c.turn = turn;
            }
        }
        self.order_begin(flow, estimate, at);
        self.order_bound(flow);
    }

    /// Whether `flow` has a request waiting or executing (it counts for R).
    pub(crate) fn flow_is_active(&self, flow: u64) -> bool {
        self.order.flows.get(&flow).is_some_and(|st| st.active)
    }

    /// The flows with a request waiting or executing.
    pub(crate) fn active_flows(&self) -> u32 {
        self.order.active
    }

    /// The epoch rule for flows (src/queueset/core/epoch.rs, at a merge
    /// with hot-path requests; nothing waits then): every active flow
    /// keeps a debt, not a credit, `S_f = max(S_f, R(T))`.
    pub(super) fn order_epoch_floor(&mut self) {
        let r = self.r();
        for st in self.order.flows.values_mut() {
            debug_assert!(st.waiting.is_empty(), "nothing waits at a merge");
            if !st.active {
                continue;
            }
            if let Some(c) = &mut st.clock {
                c.base = c.base.max(r - work(st.inflight, c.guess));
            }
        }
    }

    /// A request of `flow` that started on the hot path at `start` is
    /// folded at `t` (the epoch rule): as if it arrived and was dispatched
    /// at once at the fold, charged its work less its initial seats × the
    /// time it already ran (that service cost no virtual time); its finish
    /// then adds its whole time (`order_end`), so the flow pays for what it
    /// runs after the fold only.
    pub(super) fn order_fold(
        &mut self,
        flow: u64,
        estimate: &WorkEstimate,
        start: Instant,
        t: Instant,
    ) {
        self.order_start_at_once(flow, estimate, start);
        if let Some(c) = self
            .order
            .flows
            .get_mut(&flow)
            .and_then(|st| st.clock.as_mut())
        {
            c.base -= work(
                u64::from(estimate.initial_seats),
                t.as_nanos().saturating_sub(start.as_nanos()),
            );
        }
        self.order_bound(flow);
    }

    /// A waiting request (`seq` of `flow`) left without being dispatched
    /// (cancelled, timed out). The caller bounds the flow afterwards
    /// (`order_bound`), once for every request it removes.
    pub(super) fn order_remove_waiter(&mut self, flow: u64, seq: u64) {
        let Some(st) = self.order.flows.get_mut(&flow) else {
            return;
        };
        if let Some(pos) = st.waiting.iter().position(|w| w.seq == seq) {
            let w = st.waiting.remove(pos).expect("found");
            st.waiting_seats -= u64::from(w.estimate.max_seats());
            if st.waiting.is_empty() {
                st.waiting = VecDeque::new();
            }
        }
        self.order_refresh(flow);
    }

    /// Whether the word has room for a request `width` seats wide now
    /// (Kubernetes' rule, as `AdmissionWord::try_take` decides it).
    fn fits(&self, word: &AdmissionWord, width: u32) -> bool {
        let w = word.load();
        if width > w.limit {
            return u64::from(w.seats_in_use) == self.lingering.seats();
        }
        u64::from(w.seats_in_use) + u64::from(width) <= u64::from(w.limit)
    }

    /// Dispatch under per-flow order: the front (the head of the flow with
    /// the least virtual finish, ties by turn) if it fits; else the
    /// least-finish head that fits, while the front's bypass allowance
    /// covers its guessed work; else nothing (the front reserves).
    pub(super) fn dispatch_one_by_flow(&mut self, now: Instant, word: &AdmissionWord) -> bool {
        let Some(&(_, _, front)) = self.order.ready.first() else {
            return false;
        };
        let Some(head) = self
            .order
            .flows
            .get(&front)
            .and_then(|st| st.waiting.front().copied())
        else {
            return false;
        };
        if self.fits(word, head.estimate.max_seats()) {
            return self.dispatch_flow_head(front, now, word);
        }
        // O(waiting flows) at worst, only while the front does not fit.
        let fitting = self.order.ready.iter().skip(1).find_map(|&(_, _, h)| {
            let w = self.order.flows.get(&h)?.waiting.front()?;
            self.fits(word, w.estimate.max_seats())
                .then_some((h, w.estimate.initial_seats))
        });
        let cost = fitting.map(|(_, initial)| self.vclock.seat_g() * VTime::from(initial));
        // The front's allowance lives with the request in its queue, so it
        // outlasts a switch of policy and back (as in the reference).
        let fq = head.queue as usize;
        let Some(front_waiter) = (fq < self.queues.len())
            .then(|| &mut self.queues[fq])
            .and_then(|q| q.waiting.iter_mut().find(|w| w.slot.seq == head.seq))
        else {
            debug_assert!(false, "flow {front:#x}'s head is in its queue");
            return false;
        };
        match (fitting, cost) {
            (Some((h, _)), Some(cost)) if cost <= front_waiter.bypass_left => {
                front_waiter.bypass_left -= cost;
                self.dispatch_flow_head(h, now, word)
            }
            _ => {
                // The front reserves: Kubernetes counts a dispatch attempt
                // whose chosen request does not fit.
                let tag = front_waiter.slot.tag;
                self.tallies.get(tag).stats.no_accommodation += 1;
                false
            }
        }
    }

    /// Dispatch the head of `flow`'s waiting requests if the word takes
    /// its seats.
    fn dispatch_flow_head(&mut self, flow: u64, now: Instant, word: &AdmissionWord) -> bool {
        let Some(fw) = self
            .order
            .flows
            .get(&flow)
            .and_then(|st| st.waiting.front().copied())
        else {
            return false;
        };
        let q = fw.queue as usize;
        let Some(pos) = self
            .queues
            .get(q)
            .and_then(|queue| queue.waiting.iter().position(|w| w.slot.seq == fw.seq))
        else {
            debug_assert!(false, "flow {flow:#x}'s head is in its queue");
            return false;
        };
        let mut estimate = self.queues[q].waiting[pos].estimate;
        let capped = self.fit_final_seats(&mut estimate);
        if !word.try_take(
            fw.estimate.max_seats(),
            estimate.max_seats(),
            self.lingering.seats(),
        ) {
            return false;
        }
        if capped {
            self.counters.clamped_estimates += 1;
        }
        let w = self.take_waiting(q, pos, now);
        self.queues.set_robin(q);
        self.note_dispatch(q);
        self.queues[q].next_dispatch_r += w.work;
        let waited = crate::clock::duration_nanos(now.saturating_since(w.arrival));
        self.tallies
            .get(w.slot.tag)
            .begin_after_wait(estimate.max_seats(), waited);
        self.tallies
            .note(crate::stats::Phase::Executing, w.slot.tag, 1, now);
        // The flow's side: its head leaves its list, S_f advances by the
        // request's work (its initial seats joining the in-flight charge
        // when a flow policy admitted it, else charged at once).
        let turn = self.order.turns;
        self.order.turns += 1;
        let provisional = self.provisional_guess();
        if let Some(st) = self.order.flows.get_mut(&flow) {
            st.waiting.pop_front();
            if st.waiting.is_empty() {
                st.waiting = VecDeque::new();
            }
            st.waiting_seats -= u64::from(fw.estimate.max_seats());
            if let Some(c) = &mut st.clock {
                if !c.own {
                    c.guess = provisional;
                }
                c.base += match w.slot.flow {
                    Some(_) => final_work(&estimate),
                    None => flow_work(&estimate, c.guess),
                };
                c.turn = turn;
            }
        }
        if let Some(f) = w.slot.flow {
            self.order_begin(f, &estimate, now);
        }
        self.order_refresh(flow);
        self.order_bound(flow);
        // A request queued under Kubernetes' policy does not count in its
        // flow's state once it executes: its flow may be idle now.
        self.order_forget_if_idle(flow);
        self.begin_executing(q as u32, estimate.max_seats());
        self.queues.bound_and_reindex(q);
        self.counters.dispatched += 1;
        let waker = w.slot.decide(SlotState::Dispatched(Held::dispatched(
            q as u32,
            w.slot.flow,
            w.slot.tag,
            estimate,
            now,
        )));
        self.wakers.add(waker);
        true
    }

    /// Anticipation per flow: whether a request of `flow` that just ended
    /// (no longer executing) should hold its `seats` for the flow's next
    /// request: requests wait, none of them the flow's, and the flow
    /// without these seats is below an equal share of the limit among the
    /// active flows (counting itself).
    pub(crate) fn anticipates(&self, flow: u64, seats: u32) -> bool {
        if !self.order.on || self.requests_waiting() == 0 {
            return false;
        }
        let Some(st) = self.order.flows.get(&flow) else {
            return false;
        };
        if !st.waiting.is_empty() {
            return false;
        }
        let others = u64::from(self.order.active) - u64::from(st.executing > 0);
        let kept = st.seats.saturating_sub(u64::from(seats));
        kept * (others + 1) < u64::from(self.cfg.concurrency_limit)
    }

    // ----- the policy changes --------------------------------------------------

    /// Follow the configured policy: per-flow order on under `flow` and
    /// `flow-maxmin`, the demand index under `flow-maxmin` only.
    pub(super) fn order_follow(&mut self) {
        let on = self.cfg.fairness.is_flow();
        if on != self.order.on {
            self.order.on = on;
            if on {
                self.adopt_waiting_flows();
            } else {
                self.drop_flow_order();
            }
        }
    }

    /// Per-flow order starts: every waiting request joins its flow's list
    /// (in arrival order), and each waiting flow gets a clock at R, in the
    /// order of its oldest waiting request.
    fn adopt_waiting_flows(&mut self) {
        let mut waiting: Vec<(u64, u64, usize, WorkEstimate, VTime)> = self
            .queues
            .iter()
            .enumerate()
            .flat_map(|(q, queue)| {
                queue
                    .waiting
                    .iter()
                    .map(move |w| (w.slot.seq, w.hash, q, w.estimate, w.arrival_r))
            })
            .collect();
        waiting.sort_unstable_by_key(|w| w.0);
        let mut heads = Vec::new();
        for (seq, hash, q, estimate, arrival_r) in waiting {
            let st = self.order.state(hash);
            if st.waiting.is_empty() {
                heads.push(hash);
            }
            st.waiting.push_back(FlowWaiter {
                seq,
                queue: q as u32,
                estimate,
                arrival_r,
            });
            st.waiting_seats += u64::from(estimate.max_seats());
        }
        let r = self.r();
        for hash in heads {
            self.new_clock(hash, r);
            self.order_refresh(hash);
            self.order_bound(hash);
        }
    }

    /// Per-flow order stops: lists, clocks and the ready index go; what
    /// flow-admitted requests hold stays counted until they end.
    fn drop_flow_order(&mut self) {
        self.order.ready.clear();
        self.order.settled.clear();
        self.order.in_flight.clear();
        let hashes: Vec<u64> = self.order.flows.keys().copied().collect();
        for h in hashes {
            if let Some(st) = self.order.flows.get_mut(&h) {
                st.waiting.clear();
                st.waiting_seats = 0;
                st.clock = None;
                st.key = None;
                st.entry = None;
            }
            self.order_refresh(h);
            self.order_forget_if_idle(h);
        }
    }

    /// Build the demand index from the flows (a switch to `flow-maxmin`).
    pub(super) fn index_flow_demands(&mut self) {
        let hashes: Vec<u64> = self.order.flows.keys().copied().collect();
        for h in hashes {
            self.order_refresh(h);
        }
    }

    // ----- checks ------------------------------------------------------------

    /// Debug-build checks of the invariants in the module documentation.
    pub(super) fn check_order_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let order = &self.order;
        let mut active = 0;
        for (h, st) in &order.flows {
            debug_assert!(!st.is_idle(), "flow {h:#x}: an idle flow has no state");
            debug_assert_eq!(st.active, st.is_active(), "flow {h:#x}: active");
            active += u32::from(st.active);
            debug_assert_eq!(st.key, st.key(), "flow {h:#x}: ready key");
            let entry = match (st.key, st.clock) {
                (Some(_), Some(c)) if st.inflight == 0 => Some(Entry::Settled(c.base)),
                (Some(_), Some(_)) => Some(Entry::InFlight),
                _ => None,
            };
            debug_assert_eq!(st.entry, entry, "flow {h:#x}: entry index");
            match entry {
                Some(Entry::Settled(b)) => debug_assert!(order.settled.contains(&(b, *h))),
                Some(Entry::InFlight) => debug_assert!(order.in_flight.contains(h)),
                None => {}
            }
            if let Some((k, t)) = st.key {
                debug_assert!(order.ready.contains(&(k, t, *h)), "flow {h:#x} indexed");
            }
            let seats: u64 = st
                .waiting
                .iter()
                .map(|w| u64::from(w.estimate.max_seats()))
                .sum();
            debug_assert_eq!(seats, st.waiting_seats, "flow {h:#x}: waiting seats");
            if !order.on {
                debug_assert!(st.waiting.is_empty() && st.clock.is_none(), "order off");
            } else if let (Some(head), Some(s)) = (st.waiting.front(), st.start()) {
                debug_assert!(s >= head.arrival_r, "flow {h:#x}: bounded");
            }
            if let Some(water) = &self.water {
                let demand = st.active.then(|| water.key(st.seats + st.waiting_seats));
                debug_assert_eq!(
                    water.demand_of(st.slot as usize),
                    demand,
                    "flow {h:#x}: demand"
                );
            }
        }
        debug_assert_eq!(active, order.active, "active flows");
        debug_assert_eq!(
            order.settled.len() + order.in_flight.len(),
            order.ready.len(),
            "entry indexes"
        );
        debug_assert_eq!(
            order.ready.len(),
            order.flows.values().filter(|s| s.key.is_some()).count(),
            "ready index"
        );
        if order.on {
            let listed: usize = order.flows.values().map(|s| s.waiting.len()).sum();
            debug_assert_eq!(listed, self.requests_waiting() as usize, "listed waiters");
            for (q, queue) in self.queues.iter().enumerate() {
                for w in &queue.waiting {
                    let st = order.flows.get(&w.hash);
                    debug_assert!(
                        st.is_some_and(|st| st
                            .waiting
                            .iter()
                            .any(|fw| fw.seq == w.slot.seq && fw.queue as usize == q)),
                        "waiter {} in its flow's list",
                        w.slot.seq
                    );
                }
            }
        }
    }
}
