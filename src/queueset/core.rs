//! The fair-queuing state of one level, kept under the level's mutex.
//!
//! Same semantics as [`ReferenceQueueSet`](super::reference::ReferenceQueueSet),
//! built for speed: the virtual-time rate's inputs (seat demand, number of
//! active queues) and each queue's waiting work are kept as running totals,
//! and the queues with waiting requests are indexed by virtual finish time
//! in a B-tree, so a dispatch costs O(log queues) instead of a scan. Seat
//! availability is not decided here: it is the admission word's (see
//! `AdmissionWord`), which the hot path updates without this lock; this
//! state mirrors the seats for accounting.

use super::admission::{AdmissionWord, WordState};
use super::config::{QueueSetConfig, MAX_CONCURRENCY_LIMIT};
use super::flows::FlowTable;
use super::held::Held;
use super::vtime::{r_increment, total_work, VTime};
use super::wait::{SlotState, WaitSlot};
use super::waterlevel::DemandIndex;
use super::RejectReason;
use crate::clock::{duration_nanos, Instant};
use crate::dealer::Dealer;
use crate::stats::{Phase, SeatDemandHandle, Tallies, Utilization};
use crate::sync::Arc;
use crate::work_estimate::WorkEstimate;

mod checks;
mod deadlines;
pub(crate) mod dispatch_gauges;
mod epoch;
mod finish;
mod lingering;
mod order;
mod queues;
mod release;
mod vclock;
mod wakers;
mod water;

use self::deadlines::Deadlines;
pub(crate) use self::lingering::{Lingering, LingeringSeats};
pub(crate) use self::order::FlowOrder;
pub(crate) use self::queues::Queues;
use self::vclock::VirtualClock;
use self::wakers::Wakers;

pub(crate) use self::epoch::{Completed, Entry};

/// Marks a request that belongs to no queue (the level does not queue).
pub(crate) const NO_QUEUE: u32 = u32::MAX;

/// Marks a request admitted lock-free under the flow fairness policy: its
/// queue is chosen when its shard's ledger is folded into the core, and
/// found in the flow table when it finishes.
pub(crate) const FLOW_QUEUE: u32 = u32::MAX - 1;

/// A request waiting in a queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) slot: Arc<WaitSlot>,
    /// Its flow hash, whatever the policy (per-flow order adopts requests
    /// queued under Kubernetes' policy by it).
    pub(crate) hash: u64,
    pub(crate) estimate: WorkEstimate,
    pub(crate) work: VTime,
    pub(crate) arrival_r: VTime,
    /// Per-flow order: the guessed work that may still be backfilled past
    /// it while it is the front and does not fit (its seats × G at
    /// arrival).
    pub(crate) bypass_left: VTime,
    /// When it arrived (for its wait time and for dumps).
    pub(crate) arrival: Instant,
    pub(crate) deadline: Instant,
}

/// What the level holds, over every request (those of no queue included):
/// the mirror of the admission word's seats once the ledgers are merged
/// (less the seats parked in budgets).
#[derive(Debug, Default)]
pub(crate) struct LevelSeats {
    /// Requests executing.
    pub(crate) executing: u32,
    /// Seats held, by executing requests and lingering ones, for the
    /// seat-demand statistics.
    pub(crate) in_use: u64,
}

/// What the level counts for its metrics; they only grow.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) clamped_estimates: u64,
    pub(crate) dispatched: u64,
    /// Rejections by reason (`RejectReason as usize`).
    pub(crate) rejected: [u64; 4],
}

/// The fair-queuing state of one level, one part per concern (each type
/// owns its fields and states its invariants): the queues and their order,
/// the virtual clock, the seats held, seats lingering past their request,
/// waiting requests' deadlines, and the metrics.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) cfg: QueueSetConfig,
    pub(crate) dealer: Option<Dealer>,
    /// The queues, their waiting requests and the dispatch order.
    pub(crate) queues: Queues,
    /// R and the charging arithmetic.
    pub(crate) vclock: VirtualClock,
    /// Every request's seats, queued or not.
    pub(crate) seats: LevelSeats,
    /// Seats held past a request's end (additional latency, holds).
    pub(crate) lingering: LingeringSeats,
    /// Deadlines of waiting requests.
    deadlines: Deadlines,
    pub(crate) counters: Counters,
    /// Fed with seats in use + seats waiting after every change, at the
    /// change's time, for borrowing.
    demand_observer: Option<SeatDemandHandle>,
    /// Async waiters to wake after the lock is released.
    wakers: Wakers,
    /// What each tag's requests did (metrics only: no decision reads it).
    pub(crate) tallies: Tallies,
    /// Time-weighted utilization up to the last sync (metrics only; see
    /// `utilization.rs`).
    pub(super) utilization: Utilization,
    /// Busy flows' queues under the flow fairness policy (`flows`).
    pub(crate) flows: FlowTable,
    /// Per-flow state and order under `flow` and `flow-maxmin` (`order`).
    pub(crate) order: FlowOrder,
    /// Active flows' demands for the max-min water level, under
    /// `flow-maxmin` only (`water`, `waterlevel`).
    water: Option<DemandIndex>,
    /// The last dispatch from a queue (metrics only; `dispatch_gauges`).
    last_dispatch: Option<dispatch_gauges::DispatchNote>,
}

impl Core {
    pub(crate) fn new(cfg: QueueSetConfig, dealer: Option<Dealer>, now: Instant) -> Core {
        let mut core = Core {
            queues: Queues::new(cfg.queues as usize),
            vclock: VirtualClock::new(cfg.service_time_guess, now),
            cfg,
            dealer,
            seats: LevelSeats::default(),
            lingering: LingeringSeats::default(),
            deadlines: Deadlines::default(),
            counters: Counters::default(),
            demand_observer: None,
            wakers: Wakers::default(),
            tallies: Tallies::default(),
            utilization: Utilization::default(),
            flows: FlowTable::default(),
            order: FlowOrder::default(),
            water: None,
            last_dispatch: None,
        };
        core.follow_fairness();
        core
    }

    /// R now (as of the last sync).
    #[inline]
    pub(crate) fn r(&self) -> VTime {
        self.vclock.r()
    }

    /// Requests waiting in the queues.
    #[inline]
    pub(crate) fn requests_waiting(&self) -> u32 {
        self.queues.waiting()
    }

    /// Requests executing.
    #[inline]
    pub(crate) fn requests_executing(&self) -> u32 {
        self.seats.executing
    }

    /// Report seat demand (seats in use plus seats waiting) as of the last
    /// sync to the observer, if any.
    pub(crate) fn observe_demand(&self) {
        if let Some(observer) = &self.demand_observer {
            observer.set(self.demand(), self.last_sync());
        }
    }

    /// Seats in use plus seats waiting.
    pub(crate) fn demand(&self) -> u32 {
        (self.seats.in_use + self.queues.waiting_seats()).min(u32::MAX as u64) as u32
    }

    /// The instant of the last sync.
    pub(crate) fn last_sync(&self) -> Instant {
        self.vclock.last_sync()
    }

    pub(crate) fn set_demand_observer(&mut self, observer: Option<SeatDemandHandle>) {
        self.demand_observer = observer;
        self.observe_demand();
    }

    /// Advance R to `now`.
    #[inline]
    pub(crate) fn sync(&mut self, now: Instant) {
        let Some(dt) = self.vclock.tick(now) else {
            return;
        };
        self.utilization.observe(self.occupancy(), dt);
        let increment = if !self.order.is_on() {
            let demand = self.queues.executing_seats() + self.queues.waiting_seats();
            r_increment(self.cfg.concurrency_limit, demand, self.queues.active(), dt)
        } else {
            self.flow_increment(dt)
        };
        self.vclock.advance(increment);
    }

    /// The demand index's live nodes and room for keys (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn demand_index_memory(&self) -> Option<(usize, usize)> {
        self.water
            .as_ref()
            .map(|w| (w.live_nodes(), w.key_capacity()))
    }

    /// A request holds at least one seat, and at most
    /// [`MAX_CONCURRENCY_LIMIT`] (so the admission word cannot overflow).
    /// Seats above the level's limit are *not* capped: such a request waits
    /// until nothing executes and then runs alone, as in Kubernetes.
    pub(crate) fn clamp(&mut self, e: WorkEstimate) -> WorkEstimate {
        let initial = e.initial_seats.clamp(1, MAX_CONCURRENCY_LIMIT);
        let final_seats = e.final_seats.min(MAX_CONCURRENCY_LIMIT);
        if initial != e.initial_seats || final_seats != e.final_seats {
            self.counters.clamped_estimates += 1;
        }
        WorkEstimate {
            initial_seats: initial,
            final_seats,
            ..e
        }
    }

    /// Seats held by requests that finished but linger for their
    /// additional latency.
    pub(crate) fn lingering_seats(&self) -> u64 {
        self.lingering.seats()
    }

    // ----- requests admitted at once under the lock -----------------------

    /// A request admitted at once into `queue` at `at` by the slow path
    /// (a level that does not queue, or a test).
    pub(crate) fn start_at_once(
        &mut self,
        queue: u32,
        tag: u32,
        estimate: WorkEstimate,
        at: Instant,
    ) {
        self.sync(at);
        // Nothing waited in any queue: if the level queues, the request's
        // queue held just itself.
        let tally = self.tallies.get(tag);
        tally.begin_at_once(estimate.max_seats(), queue != NO_QUEUE);
        tally
            .stats
            .work_estimated_seats
            .observe(estimate.max_seats().into());
        self.tallies.note(Phase::Executing, tag, 1, at);
        if queue != NO_QUEUE {
            let q = self.queues.ensure(queue as usize);
            self.note_arrival_at(q);
            // It was the queue's only waiting request for an instant: the
            // anti-windup bound applies with its arrival R, the current R.
            let bounded = self.queues[q].next_dispatch_r.max(self.r());
            self.queues[q].next_dispatch_r = bounded;
            self.note_dispatch(q);
            self.queues[q].next_dispatch_r = bounded + self.charge(&estimate);
            self.queues.set_robin(q);
        }
        self.begin_executing(queue, estimate.max_seats());
        if queue != NO_QUEUE {
            self.queues.bound_and_reindex(queue as usize);
        }
    }

    /// A request rejected on arrival (queue full, or no room at a level
    /// that does not queue): it waited for nothing.
    pub(crate) fn reject_at_once(&mut self, tag: u32, reason: RejectReason, seats: u32) {
        self.counters.rejected[reason as usize] += 1;
        let tally = &mut self.tallies.get(tag).stats;
        tally.work_estimated_seats.observe(seats.into());
        tally.rejected[reason as usize] += 1;
        tally.wait_rejected.observe(0);
    }

    // ----- slow-path operations --------------------------------------------

    /// Shuffle-shard a new request of flow `hash` into a queue, the
    /// `enqueue_number`-th such choice of this level.
    pub(crate) fn choose_queue(&self, dealer: &Dealer, hash: u64, enqueue_number: u64) -> usize {
        let hand = dealer.deal_into_hand(hash);
        let offset = (enqueue_number % hand.len() as u64) as usize;
        let mut best = hand[offset] as usize;
        let mut best_work = VTime::MAX;
        for i in 0..hand.len() {
            let q = hand[(offset + i) % hand.len()] as usize;
            let work = self.queues.get(q).map_or(0, |queue| queue.waiting_work);
            if work < best_work {
                best_work = work;
                best = q;
            }
        }
        best
    }

    /// Whether queue `q` is full while the level has no free seat.
    pub(crate) fn must_reject(&self, q: usize, word: WordState) -> bool {
        word.seats_in_use >= word.limit
            && self.queues.get(q).map_or(0, |queue| queue.waiting.len())
                >= self.cfg.queue_length_limit as usize
    }

    /// Put a request of flow `hash` that arrived at `arrival` in queue `q`.
    pub(crate) fn enqueue(
        &mut self,
        q: usize,
        hash: u64,
        slot: Arc<WaitSlot>,
        estimate: WorkEstimate,
        arrival: Instant,
        deadline: Instant,
    ) {
        let q = self.queues.ensure(q);
        self.note_arrival_at(q);
        let work = total_work(
            estimate.initial_seats,
            estimate.final_seats,
            estimate.additional_latency,
            self.cfg.service_time_guess,
        );
        let seq = slot.seq;
        let tag = slot.tag;
        if let Some(flow) = slot.flow {
            self.flows.join(flow, q);
        }
        let arrival_r = self.r();
        if self.order.is_on() {
            self.order_enqueue(hash, seq, q, estimate, arrival_r);
        }
        let waiter = Waiter {
            slot,
            hash,
            estimate,
            work,
            arrival_r,
            bypass_left: self.vclock.seat_g() * VTime::from(estimate.max_seats()),
            arrival,
            deadline,
        };
        let length = self.queues.push_waiting(q, waiter) as u64;
        let tally = &mut self.tallies.get(tag).stats;
        tally.waiting += 1;
        tally.waiting_seats += estimate.max_seats() as u64;
        tally.queue_length.observe(length);
        tally
            .work_estimated_seats
            .observe(estimate.max_seats().into());
        self.tallies.note(Phase::Waiting, tag, 1, arrival);
        self.deadlines.push(deadline, seq, q);
        self.queues.bound_and_reindex(q);
    }

    /// Dispatch as many waiting requests as fit; each dispatched slot is
    /// decided (its waiter woken) before this returns. As in Kubernetes,
    /// dispatching stops once the seats in use reach the limit — except at a
    /// limit of 0 (a level that lent all its seats), which still serves one
    /// request at a time when nothing executes, where Kubernetes would serve
    /// nothing until the next borrowing adjustment (docs/differences.md).
    pub(crate) fn dispatch_as_much_as_possible(&mut self, now: Instant, word: &AdmissionWord) {
        while self.queues.waiting() > 0 {
            let w = word.load();
            if w.seats_in_use >= w.limit && w.limit > 0 {
                break;
            }
            if !self.dispatch_one(now, word) {
                break;
            }
        }
    }

    fn dispatch_one(&mut self, now: Instant, word: &AdmissionWord) -> bool {
        if self.order.is_on() {
            return self.dispatch_one_by_flow(now, word);
        }
        let Some(q) = self.queues.next() else {
            return false;
        };
        let Some(head) = self.queues[q].waiting.front() else {
            return false;
        };
        // Kubernetes decides on the request's full width, then caps its
        // final seats at the limit, and the capped width is what it holds.
        // Both happen in the one CAS that checks the room: nothing can take
        // the seats between the check and the take.
        let mut estimate = head.estimate;
        let capped = self.fit_final_seats(&mut estimate);
        if !word.try_take(
            head.estimate.max_seats(),
            estimate.max_seats(),
            self.lingering.seats(),
        ) {
            // Kubernetes counts each dispatch attempt whose chosen head
            // does not fit in the free seats.
            let tag = head.slot.tag;
            self.tallies.get(tag).stats.no_accommodation += 1;
            return false;
        }
        if capped {
            self.counters.clamped_estimates += 1;
        }
        let w = self.take_waiting(q, 0, now);
        self.queues.set_robin(q);
        self.note_dispatch(q);
        self.queues[q].next_dispatch_r += w.work;
        let waited = duration_nanos(now.saturating_since(w.arrival));
        self.tallies
            .get(w.slot.tag)
            .begin_after_wait(estimate.max_seats(), waited);
        self.tallies.note(Phase::Executing, w.slot.tag, 1, now);
        if let Some(flow) = w.slot.flow {
            // Queued under a flow policy, dispatched after a switch to
            // Kubernetes': it counts in its flow's state until it ends.
            self.order_begin(flow, &estimate, now);
        }
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

    /// Kubernetes' rule at dispatch: final seats above the limit come down
    /// to the limit, and the additional latency stretches so that the final
    /// work (seats × latency) stays the same. Returns whether it changed
    /// anything. (Written apart from the reference model's version on
    /// purpose: the differential tests compare two implementations.)
    fn fit_final_seats(&self, e: &mut WorkEstimate) -> bool {
        let limit = self.cfg.concurrency_limit;
        if limit == 0 || e.final_seats <= limit {
            return false;
        }
        let work_ns = u128::from(e.final_seats) * e.additional_latency.as_nanos();
        let per_seat = work_ns / u128::from(limit);
        e.additional_latency =
            std::time::Duration::from_nanos(u64::try_from(per_seat).unwrap_or(u64::MAX));
        e.final_seats = limit;
        true
    }

    /// Wakers of async waiters decided since the last call, to be woken
    /// once the level lock is released.
    pub(crate) fn take_wakers(&mut self) -> Wakers {
        std::mem::take(&mut self.wakers)
    }

    /// Remove the `pos`-th waiting request of queue `q`, keeping every
    /// running total (queue and level) in step; it leaves at `at`.
    fn take_waiting(&mut self, q: usize, pos: usize, at: Instant) -> Waiter {
        let w = self.queues.remove_waiting(q, pos);
        self.untally_waiting(&w, at);
        w
    }

    fn untally_waiting(&mut self, w: &Waiter, at: Instant) {
        self.tallies.note(Phase::Waiting, w.slot.tag, -1, at);
        let tally = &mut self.tallies.get(w.slot.tag).stats;
        tally.waiting -= 1;
        tally.waiting_seats -= w.estimate.max_seats() as u64;
    }

    /// Remove a waiting request (cancelled or timed out at `at`). Returns
    /// whether it was still waiting.
    pub(crate) fn remove_waiting(
        &mut self,
        slot: &Arc<WaitSlot>,
        reason: RejectReason,
        at: Instant,
    ) -> bool {
        let Some((q, hash)) = self.take_rejected(slot, reason, at) else {
            return false;
        };
        self.queues.bound_and_reindex(q);
        self.order_bound(hash);
        self.order_forget_if_idle(hash);
        self.drop_undesired_empty_queues();
        true
    }

    /// Remove a waiting request and decide it rejected, without bounding
    /// its queue or re-keying it in the ready index (the caller does, once
    /// for every request it removes). Returns its queue and flow hash if it
    /// was waiting.
    fn take_rejected(
        &mut self,
        slot: &Arc<WaitSlot>,
        reason: RejectReason,
        at: Instant,
    ) -> Option<(usize, u64)> {
        let q = slot.queue as usize;
        let pos = self.queues.get(q).and_then(|queue| {
            queue
                .waiting
                .iter()
                .position(|w| Arc::ptr_eq(&w.slot, slot))
        })?;
        let w = self.take_waiting(q, pos, at);
        if self.order.is_on() {
            self.order_remove_waiter(w.hash, w.slot.seq);
        }
        if let Some(flow) = w.slot.flow {
            self.flows.leave(flow);
        }
        self.counters.rejected[reason as usize] += 1;
        let tally = &mut self.tallies.get(slot.tag).stats;
        tally.rejected[reason as usize] += 1;
        tally
            .wait_rejected
            .observe(duration_nanos(at.saturating_since(w.arrival)));
        let waker = w.slot.decide(SlotState::Rejected(reason));
        self.wakers.add(waker);
        Some((q, w.hash))
    }

    /// The earliest pending timer: a lingering release or a deadline.
    pub(crate) fn next_timer(&mut self) -> Option<Instant> {
        self.discard_stale_deadlines();
        let linger = self.lingering.next_end();
        let deadline = self.deadlines.peek().map(|(at, _, _)| at);
        linger.into_iter().chain(deadline).min()
    }

    /// Release seats whose additional latency is over and reject requests
    /// past their deadline, as of `at`. Returns seats to give back.
    pub(crate) fn expire(&mut self, at: Instant) -> (u32, Vec<Arc<WaitSlot>>) {
        let mut freed = 0;
        while let Some(l) = self.lingering.pop_due(at) {
            freed += self.end_lingering(&l);
            if let Some(flow) = l.flow {
                self.order_forget_if_idle(flow);
            }
        }
        let mut expired = Vec::new();
        while let Some((_, seq, q)) = self.deadlines.pop_due(at) {
            let waiting = self
                .queues
                .get(q)
                .and_then(|queue| queue.waiting.iter().find(|w| w.slot.seq == seq));
            if let Some(w) = waiting {
                expired.push(w.slot.clone());
            }
        }
        expired.sort_by_key(|s| s.seq);
        // All of this instant's time-outs leave their queues first, then
        // each queue is bounded once by the head that remains, as the
        // reference model does: bounding after each removal would lift a
        // queue to the arrival R of a head about to time out too.
        let taken: Vec<(usize, u64)> = expired
            .iter()
            .filter_map(|slot| self.take_rejected(slot, RejectReason::TimeOut, at))
            .collect();
        let mut touched: Vec<usize> = taken.iter().map(|&(q, _)| q).collect();
        touched.sort_unstable();
        touched.dedup();
        for &q in &touched {
            self.queues.bound_and_reindex(q);
        }
        // The same for the flows: bounded once, by the heads that remain.
        for &(_, hash) in &taken {
            self.order_bound(hash);
        }
        for &(_, hash) in &taken {
            self.order_forget_if_idle(hash);
        }
        if !touched.is_empty() {
            self.drop_undesired_empty_queues();
        }
        (freed, expired)
    }

    /// Apply a validated new configuration.
    pub(crate) fn reconfigure(&mut self, cfg: QueueSetConfig, dealer: Option<Dealer>) {
        self.queues.grow_to(cfg.queues as usize);
        self.vclock.set_guess(cfg.service_time_guess);
        self.cfg = cfg;
        self.dealer = dealer;
        self.drop_undesired_empty_queues();
        self.follow_fairness();
    }

    // ----- bookkeeping -----------------------------------------------------

    /// A request arrives at queue `q`: an idle queue restarts at the current
    /// R (no credit for its idle time).
    fn note_arrival_at(&mut self, q: usize) {
        if !self.queues[q].is_active() {
            self.queues[q].next_dispatch_r = self.r();
        }
    }

    #[inline]
    fn begin_executing(&mut self, queue: u32, seats: u32) {
        self.seats.executing += 1;
        self.seats.in_use += seats as u64;
        if queue != NO_QUEUE {
            let q = self.queues.ensure(queue as usize);
            self.queues.begin_executing(q, seats);
        }
    }

    #[inline]
    fn end_executing(&mut self, queue: u32, initial_seats: u32, start: Instant, now: Instant) {
        self.seats.executing -= 1;
        if queue == NO_QUEUE {
            return;
        }
        let q = queue as usize;
        let correction = self.finish_correction(initial_seats, start, now);
        self.queues.end_executing(q);
        self.queues[q].next_dispatch_r -= correction;
        self.queues.bound_and_reindex(q);
        if self.order.is_on() {
            self.note_service(start, now);
        }
    }

    /// Per-flow order: a request of a queue ran from `start` to `end`, the
    /// guess of a flow new from now on.
    #[cold]
    fn note_service(&mut self, start: Instant, end: Instant) {
        self.order
            .note_service(end.as_nanos().saturating_sub(start.as_nanos()));
    }

    #[inline]
    fn release(&mut self, queue: u32, seats: u32) {
        self.seats.in_use -= seats as u64;
        if queue == NO_QUEUE {
            return;
        }
        let q = queue as usize;
        self.queues.release(q, seats);
        self.drop_undesired_empty_queues();
    }

    fn drop_undesired_empty_queues(&mut self) {
        self.queues.drop_undesired_empty(self.cfg.queues as usize);
    }

    fn discard_stale_deadlines(&mut self) {
        let queues = &self.queues;
        self.deadlines.discard_stale(
            queues.waiting(),
            |seq, q| {
                queues
                    .get(q)
                    .is_some_and(|queue| queue.waiting.iter().any(|w| w.slot.seq == seq))
            },
            || {
                queues.iter().enumerate().flat_map(|(q, queue)| {
                    queue
                        .waiting
                        .iter()
                        .map(move |w| (w.deadline, w.slot.seq, q))
                })
            },
        );
    }
}
