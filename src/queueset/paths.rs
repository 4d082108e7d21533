//! The hot path and the slow path of one level: the shared state both
//! work on (the admission word, the sharded event rings, the level lock) and
//! every operation on it. The protocol between them is documented at
//! [`AdmissionWord`](super::admission::AdmissionWord), the rings' at
//! [`shards`](super::shards).

use super::admission::AdmissionWord;
use super::config::{Fairness, QueueSetConfig, QueueSetConfigError};
use super::core::{Core, Ended, FLOW_QUEUE, NO_QUEUE};
use super::held::Held;
use super::shards::{next_in_order, Busy, Shards};
use super::wait::{SlotState, WaitSlot};
use super::{decision_result, Execution, Joined, RawAdmission, RejectReason, Request, Waiting};
use crate::clock::{duration_nanos, Clock, Instant, Timer};
use crate::dealer::Dealer;
use crate::stats::Phase;
use crate::sync::{Arc, ArcCell, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use crate::work_estimate::WorkEstimate;
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;
use std::time::Duration;

// ----- the event ring --------------------------------------------------------

/// A hot-path event, replayed into the core in ring order. The tag rides
/// along so the replay can tally the request (see `tally`); to keep a
/// record at 40 bytes, a start carries its estimate's fields loose (a
/// `WorkEstimate` would pad them to 24 bytes).
#[derive(Debug, Clone, Copy)]
pub(super) enum Record {
    Start {
        queue: u32,
        tag: u32,
        initial_seats: u32,
        final_seats: u32,
        latency_secs: u64,
        latency_subsec_nanos: u32,
        at: Instant,
    },
    /// A start under the flow fairness policy: its queue is chosen at
    /// replay, from the flow table (the additional latency is in whole
    /// nanoseconds, saturated at 584 years, so the hash fits in the same 40
    /// bytes; only the replay's virtual-time charge reads it).
    StartFlow {
        flow_hash: u64,
        tag: u32,
        initial_seats: u32,
        final_seats: u32,
        latency_nanos: u64,
        at: Instant,
    },
    Finish {
        queue: u32,
        tag: u32,
        /// The initial seats still charged (fewer than the estimate's if
        /// the request released seats early).
        initial_seats: u32,
        seats: u32,
        start: Instant,
        at: Instant,
    },
    /// A finish under the flow fairness policy: the flow table knows its
    /// queue.
    FinishFlow {
        flow_hash: u64,
        tag: u32,
        initial_seats: u32,
        seats: u32,
        start: Instant,
        at: Instant,
    },
}

impl Record {
    /// The drain's merge order (see [`shards`](super::shards)): the
    /// record's time, then finishes before starts.
    #[inline]
    pub(super) fn order_key(&self) -> (Instant, bool) {
        match *self {
            Record::Start { at, .. } | Record::StartFlow { at, .. } => (at, true),
            Record::Finish { at, .. } | Record::FinishFlow { at, .. } => (at, false),
        }
    }
}

// A ring slot is a record plus crossbeam's 8-byte stamp: keep records small.
const _: () = assert!(std::mem::size_of::<Record>() <= 40);

pub(super) struct Shared {
    pub(super) word: AdmissionWord,
    /// Kubernetes' `enqueues`: the rotating offset into a flow's hand.
    /// Level-wide, not per shard: the slow path's choices, made in the
    /// lock's order, must follow Kubernetes' one sequence
    /// (src/queueset/shuttle_tests/paths.rs compares them with the reference model).
    pub(super) enqueues: CachePadded<AtomicU64>,
    /// The per-thread event rings.
    pub(super) shards: Shards,
    /// The current dealer and fairness policy, read by the hot path
    /// without the lock; replaced under the lock on reconfiguration.
    pub(super) routing: ArcCell<Routing>,
    pub(super) locked: Mutex<Locked>,
    /// Set when a panic left the locked state half-updated (see the module
    /// documentation): the level then rejects every new request.
    pub(super) failed: AtomicBool,
    pub(super) clock: Clock,
}

/// What the hot path needs to know to place a request.
pub(super) struct Routing {
    /// `None` when the level does not queue.
    pub(super) dealer: Option<Dealer>,
    pub(super) fairness: Fairness,
}

pub(super) struct Locked {
    pub(super) core: Core,
    pub(super) timer: Option<Timer>,
    pub(super) next_seq: u64,
    /// The drain's per-shard buffers, kept between drains so a drain does
    /// not allocate.
    pub(super) replay_buffers: Vec<VecDeque<Record>>,
}

impl Shared {
    /// The hot path: take seats with one CAS if nothing waits and they fit.
    /// Returns the held request: its queue ([`FLOW_QUEUE`] under the flow
    /// policy: chosen at replay), its flow under the flow policy, its start
    /// time and the shard whose ring holds its start record.
    #[inline]
    pub(super) fn try_fast_start(&self, request: &Request, tag: u32) -> Option<Held> {
        let estimate = request.estimate;
        if estimate.initial_seats == 0 {
            return None; // the slow path clamps and counts it
        }
        let (shard_index, shard) = self.shards.mine();
        let took = shard.budget.take(&self.word, estimate.max_seats());
        if took.dispatch {
            // Parked seats went back while requests wait (a fence came).
            self.dispatch_waiting();
        }
        if !took.taken {
            return None;
        }
        let queue = self.deal_queue(request.flow_hash);
        let at = self.clock.now();
        if queue == FLOW_QUEUE {
            // Whole nanoseconds, saturated (584 years): computed only under
            // the flow policy, so Kubernetes' hot path pays nothing for it.
            let latency_nanos = duration_nanos(estimate.additional_latency);
            self.record(
                shard_index,
                Record::StartFlow {
                    flow_hash: request.flow_hash,
                    tag,
                    initial_seats: estimate.initial_seats,
                    final_seats: estimate.final_seats,
                    latency_nanos,
                    at,
                },
            );
            return Some(Held {
                shard: shard_index,
                queue,
                flow: Some(request.flow_hash),
                tag,
                estimate,
                start: at,
                released: 0,
            });
        }
        self.record(
            shard_index,
            Record::Start {
                queue,
                tag,
                initial_seats: estimate.initial_seats,
                final_seats: estimate.final_seats,
                latency_secs: estimate.additional_latency.as_secs(),
                latency_subsec_nanos: estimate.additional_latency.subsec_nanos(),
                at,
            },
        );
        Some(Held {
            shard: shard_index,
            queue,
            flow: None,
            tag,
            estimate,
            start: at,
            released: 0,
        })
    }

    /// The queue Kubernetes picks when no queue has waiting work: the card
    /// at the rotating offset of the flow's hand. Under the flow policy,
    /// [`FLOW_QUEUE`]: with nothing waiting the choice only matters for
    /// accounting, so the replay makes it under the lock (flow table).
    #[inline]
    pub(super) fn deal_queue(&self, flow_hash: u64) -> u32 {
        self.routing.with(|routing| match &routing.dealer {
            None => NO_QUEUE,
            Some(_) if routing.fairness.is_flow() => FLOW_QUEUE,
            Some(dealer) => {
                let n = self.enqueues.fetch_add(1, Ordering::Relaxed);
                dealer.card_at(flow_hash, (n % dealer.hand_size() as u64) as u32)
            }
        })
    }

    /// Push a hot-path record to shard `shard`'s ring; if the ring is full,
    /// replay the rings (and this record) under the lock instead.
    #[inline]
    pub(super) fn record(&self, shard: u32, record: Record) {
        if let Err(record) = self.shards.get(shard).ring.push(record) {
            let mut st = self.lock_and_drain();
            Self::replay(&mut st.core, record);
        }
    }

    /// Take the level lock. A poisoned lock means a panic interrupted an
    /// update of the locked state: the level is marked failed (see the
    /// module documentation) and the state is handed out only so that
    /// seats can still be given back and waiters released.
    pub(super) fn lock(&self) -> MutexGuard<'_, Locked> {
        match self.locked.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let mut st = poisoned.into_inner();
                if !self.failed.swap(true, Ordering::AcqRel) {
                    self.fail(&mut st);
                }
                st
            }
        }
    }

    /// The first lock after a panic: stop the hot path and release every
    /// waiter with [`RejectReason::LevelFailed`]. Touches only the queues'
    /// lists of waiters, not the counts that may be half-updated.
    pub(super) fn fail(&self, st: &mut Locked) {
        self.word.set_failed();
        self.word.clear_slow();
        let waiters = st.core.queues.drain_waiting_of_failed_level();
        let now = self.clock.now();
        for w in waiters {
            st.core.tallies.note(Phase::Waiting, w.slot.tag, -1, now);
            if let Some(waker) = w
                .slot
                .decide(SlotState::Rejected(RejectReason::LevelFailed))
            {
                waker.wake();
            }
        }
        if let Some(timer) = &st.timer {
            timer.cancel();
        }
    }

    pub(super) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Lock and replay the ring; on a failed level the records are
    /// discarded instead (replaying into inconsistent state could panic
    /// again).
    pub(super) fn lock_and_drain(&self) -> MutexGuard<'_, Locked> {
        let mut st = self.lock();
        if self.is_failed() {
            self.shards.discard();
        } else {
            let Locked {
                core,
                replay_buffers,
                ..
            } = &mut *st;
            self.drain(core, replay_buffers);
        }
        st
    }

    /// Replay the records that were in the rings when the drain looked at
    /// them, merged in time order (see [`shards`](super::shards)).
    /// Bounded by that count, so producers that keep pushing cannot keep
    /// the lock holder replaying forever; what they push meanwhile is
    /// replayed by the next holder (every record is replayed before the
    /// core decides anything that depends on it, since the decision's own
    /// caller drained first, and later records belong to later events).
    pub(super) fn drain(&self, core: &mut Core, buffers: &mut Vec<VecDeque<Record>>) {
        match self.shards.busy() {
            Busy::None => {}
            // The common case (one thread, or threads that took turns):
            // replay straight from the ring, without the merge's copies.
            Busy::One(ring) => {
                let mut budget = ring.len();
                Self::replay_all(core, || {
                    if budget == 0 {
                        return None;
                    }
                    budget -= 1;
                    ring.pop()
                })
            }
            Busy::Several => {
                self.shards.take(buffers);
                Self::replay_all(core, || next_in_order(buffers))
            }
        }
    }

    /// Apply the records `next` yields, feeding the demand observer under
    /// one lock for the whole batch.
    fn replay_all(core: &mut Core, mut next: impl FnMut() -> Option<Record>) {
        let Some(first) = next() else { return };
        let Some(observer) = core.take_demand_observer() else {
            Self::replay_paired(core, first, next, |_| {});
            return;
        };
        observer.with(|demand| {
            Self::replay_paired(core, first, next, |core| {
                demand.set(core.demand(), core.last_sync())
            })
        });
        core.set_demand_observer_quietly(observer);
    }

    /// Apply `first` and the records `next` yields, calling `after` after
    /// each. A start followed at once by a finish of the same queue (or
    /// flow) and tag, the uncontended hot path's pattern, is replayed in
    /// one step that leaves the same state (`Core::replay_start_finish`).
    #[inline]
    pub(super) fn replay_paired(
        core: &mut Core,
        first: Record,
        mut next: impl FnMut() -> Option<Record>,
        mut after: impl FnMut(&Core),
    ) {
        let mut pending = Some(first);
        while let Some(record) = pending {
            pending = next();
            match (record, pending) {
                (
                    Record::Start {
                        queue,
                        tag,
                        initial_seats,
                        final_seats,
                        latency_secs,
                        latency_subsec_nanos,
                        at,
                    },
                    Some(Record::Finish {
                        queue: finish_queue,
                        tag: finish_tag,
                        initial_seats: charged,
                        seats,
                        start,
                        at: end,
                    }),
                ) if finish_queue == queue && finish_tag == tag => {
                    let estimate = WorkEstimate {
                        initial_seats,
                        final_seats,
                        additional_latency: Duration::new(latency_secs, latency_subsec_nanos),
                    };
                    let ended = Ended {
                        initial_seats: charged,
                        seats,
                        start,
                        at: end,
                    };
                    core.replay_start_finish(queue, tag, estimate, at, ended, &mut after);
                    pending = next();
                }
                (
                    Record::StartFlow {
                        flow_hash,
                        tag,
                        initial_seats,
                        final_seats,
                        latency_nanos,
                        at,
                    },
                    Some(Record::FinishFlow {
                        flow_hash: finish_flow,
                        tag: finish_tag,
                        initial_seats: charged,
                        seats,
                        start,
                        at: end,
                    }),
                ) if finish_flow == flow_hash && finish_tag == tag => {
                    let estimate = WorkEstimate {
                        initial_seats,
                        final_seats,
                        additional_latency: Duration::from_nanos(latency_nanos),
                    };
                    let ended = Ended {
                        initial_seats: charged,
                        seats,
                        start,
                        at: end,
                    };
                    core.replay_start_finish_flow(flow_hash, tag, estimate, at, ended, &mut after);
                    pending = next();
                }
                _ => Self::apply(core, record),
            }
            after(core);
        }
    }

    pub(super) fn replay(core: &mut Core, record: Record) {
        Self::apply(core, record);
        core.observe_demand();
    }

    pub(super) fn apply(core: &mut Core, record: Record) {
        match record {
            Record::Start {
                queue,
                tag,
                initial_seats,
                final_seats,
                latency_secs,
                latency_subsec_nanos,
                at,
            } => {
                let estimate = WorkEstimate {
                    initial_seats,
                    final_seats,
                    additional_latency: Duration::new(latency_secs, latency_subsec_nanos),
                };
                core.replay_start(queue, tag, estimate, at)
            }
            Record::StartFlow {
                flow_hash,
                tag,
                initial_seats,
                final_seats,
                latency_nanos,
                at,
            } => {
                let estimate = WorkEstimate {
                    initial_seats,
                    final_seats,
                    additional_latency: Duration::from_nanos(latency_nanos),
                };
                core.replay_start_flow(flow_hash, tag, estimate, at)
            }
            Record::Finish {
                queue,
                tag,
                initial_seats,
                seats,
                start,
                at,
            } => core.replay_finish(queue, tag, initial_seats, seats, start, at),
            Record::FinishFlow {
                flow_hash,
                tag,
                initial_seats,
                seats,
                start,
                at,
            } => core.replay_finish_flow(flow_hash, tag, initial_seats, seats, start, at),
        }
    }

    pub(super) fn slow_start(&self, request: &Request, tag: u32) -> RawAdmission {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            return RawAdmission::Rejected(RejectReason::LevelFailed);
        }
        // Every decision below reads free seats from the word: none may
        // sit parked in a budget (src/queueset/budget.rs, invariant 3).
        self.reclaim();
        let now = self.clock.now();
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Start, now);
        st.core.sync(now);
        let estimate = st.core.clamp(request.estimate);
        let seats = estimate.max_seats();
        let Some(dealer) = st.core.dealer.clone() else {
            // A level that does not queue: the same one-CAS admission as
            // the hot path, with Kubernetes' rule for too-wide requests.
            let admitted = self.word.try_take(seats, seats, st.core.lingering_seats());
            self.unfence(&st);
            if !admitted {
                st.core
                    .reject_at_once(tag, RejectReason::ConcurrencyLimit, seats);
                return RawAdmission::Rejected(RejectReason::ConcurrencyLimit);
            }
            st.core.replay_start(NO_QUEUE, tag, estimate, now);
            st.core.observe_demand();
            return RawAdmission::Execute(Execution {
                held: Held::dispatched(NO_QUEUE, None, tag, estimate, now),
            });
        };
        let mut held = 0;
        let (q, flow) = match st.core.cfg.fairness {
            Fairness::Kubernetes => {
                let n = self.enqueues.fetch_add(1, Ordering::Relaxed);
                (st.core.choose_queue(&dealer, request.flow_hash, n), None)
            }
            Fairness::Flow | Fairness::FlowMaxMin => {
                // Seats held for this flow go back first (anticipation):
                // its request then competes for them like any other.
                held = st.core.claim_hold(request.flow_hash);
                if held > 0 {
                    self.word.give_back(held);
                }
                (
                    st.core.flow_queue(&dealer, request.flow_hash),
                    Some(request.flow_hash),
                )
            }
        };
        if st.core.must_reject(q, self.word.load()) {
            st.core.reject_at_once(tag, RejectReason::QueueFull, seats);
            if held > 0 {
                // The claimed hold kept its flow's state; the flow may be
                // idle now.
                st.core.order_forget_if_idle(request.flow_hash);
                // The seats given back still serve the waiting requests.
                st.core.dispatch_as_much_as_possible(now, &self.word);
                self.settle_and_unlock(st);
            } else {
                // A full queue: requests wait, so SLOW stays set.
                self.unfence(&st);
            }
            return RawAdmission::Rejected(RejectReason::QueueFull);
        }
        let wait_deadline = now.saturating_add(st.core.cfg.wait_limit);
        let deadline = request
            .deadline
            .map_or(wait_deadline, |d| d.min(wait_deadline));
        st.next_seq += 1;
        let slot = Arc::new(WaitSlot::new(st.next_seq, q as u32, flow, tag));
        st.core
            .enqueue(q, request.flow_hash, slot.clone(), estimate, now, deadline);
        // What Kubernetes' metrics observe on arrival (ObserveQueueLength,
        // SetCurrentR), taken while the lock is held.
        let joined = Joined {
            queue_length: st.core.queues[q].waiting.len() as u32,
            queue: q as u32,
            current_r: st.core.r(),
        };
        // Invariant 1 of the admission word: set before anyone can see the
        // waiter (the lock is held), so no hot path overtakes it from now.
        self.word.set_slow();
        st.core.dispatch_as_much_as_possible(now, &self.word);
        if st.core.cfg.wait_limit.is_zero()
            && st.core.remove_waiting(&slot, RejectReason::TimeOut, now)
        {
            // A zero wait limit: a request that could not be dispatched
            // at once times out now, as Kubernetes' already-expired wait
            // would, rather than at a timer (which a manual clock fires
            // only when advanced). Its leaving may let the next head fit.
            st.core.dispatch_as_much_as_possible(now, &self.word);
        }
        self.settle_and_unlock(st);
        match slot.try_take(None) {
            Some(decision) => match decision_result(decision) {
                Ok(exec) => RawAdmission::Execute(exec),
                Err(reason) => RawAdmission::Rejected(reason),
            },
            None => RawAdmission::Queued(Waiting { slot, joined }),
        }
    }

    /// The reclaim fence (lock holder, before a decision that reads free
    /// seats while nothing may wait): set `SLOW`, so no budget keeps or
    /// draws seats from now on, then sweep every budget back to the word.
    /// `SLOW` is cleared again when the holder settles with nothing waiting
    /// ([`Shared::settle`] or [`Shared::unfence`]). Why `SLOW` and not a
    /// bit of its own: src/queueset/budget.rs.
    pub(super) fn reclaim(&self) {
        self.word.set_slow();
        self.shards.sweep(&self.word);
    }

    /// The end of a decision that does not settle: lift the reclaim fence
    /// if nothing waits (invariant 1 of the word keeps `SLOW` otherwise).
    pub(super) fn unfence(&self, st: &Locked) {
        if st.core.requests_waiting() == 0 {
            self.word.clear_slow();
        }
    }

    /// Finish a slow-path operation: settle the level, release the lock,
    /// then wake the async waiters it decided (wakers never run under the
    /// level lock).
    pub(super) fn settle_and_unlock(&self, mut st: MutexGuard<'_, Locked>) {
        self.settle(&mut st);
        let wakers = st.core.take_wakers();
        drop(st);
        for waker in wakers {
            waker.wake();
        }
    }

    /// After a slow-path operation: clear `SLOW` if nothing waits any more,
    /// and arm the timer for the next deadline or lingering release.
    pub(super) fn settle(&self, st: &mut Locked) {
        let unheld = st.core.release_holds_if_idle();
        if unheld > 0 {
            self.word.give_back(unheld);
        }
        st.core.observe_demand();
        if st.core.requests_waiting() == 0 {
            self.word.clear_slow();
        }
        let next = st.core.next_timer();
        if let Some(timer) = &st.timer {
            match next {
                Some(at) => timer.set(at),
                None => timer.cancel(),
            }
        }
        st.core.check_invariants();
    }

    /// Finish a held request at `end`: only the seats it still holds (its
    /// estimate's, less any it released early) are given back.
    pub(super) fn finish(&self, held: Held, end: Instant) {
        let fast = held.estimate.additional_latency.is_zero() && !self.word.load().slow;
        if fast {
            let seats = held.seats();
            let initial_seats = held.charged_seats();
            let (tag, start) = (held.tag, held.start);
            let record = match held.flow {
                None => Record::Finish {
                    queue: held.queue,
                    tag,
                    initial_seats,
                    seats,
                    start,
                    at: end,
                },
                Some(flow_hash) => Record::FinishFlow {
                    flow_hash,
                    tag,
                    initial_seats,
                    seats,
                    start,
                    at: end,
                },
            };
            let ring = &self.shards.for_finish(held.shard).ring;
            if ring.push(record).is_ok() {
                // The record is in the ring before the seats are free, so a
                // start that takes these seats is recorded after this finish
                // (see the admission word's protocol).
                if self.shards.mine().1.budget.give(&self.word, seats) {
                    self.dispatch_waiting();
                }
                return;
            }
        }
        self.slow_finish(&held, end);
    }

    pub(super) fn slow_finish(&self, held: &Held, end: Instant) {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            // No accounting on a failed level: just free the seats.
            self.word.give_back(held.seats());
            return;
        }
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Finish, end);
        st.core.sync(end);
        let freed = st.core.finish(held, end);
        self.word.give_back(freed);
        st.core.dispatch_as_much_as_possible(end, &self.word);
        self.settle_and_unlock(st);
    }

    /// An executing request (`before`, as it was before this release) gives
    /// `seats` of its seats back now and keeps executing. Always under the
    /// level lock (a release happens once per long request, not per
    /// request): the core learns of it before the seats are free in the
    /// word, and dispatches waiters that now fit.
    pub(super) fn release_early(&self, before: &Held, seats: u32) {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            self.word.give_back(seats);
            return;
        }
        let now = self.clock.now().max(before.start);
        st.core.sync(now);
        st.core.release_early(before, seats, now);
        self.word.give_back(seats);
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
    }

    /// Seats were freed while requests wait: dispatch them.
    pub(super) fn dispatch_waiting(&self) {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            return;
        }
        let now = self.clock.now();
        st.core.sync(now);
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
    }

    pub(super) fn cancel(&self, slot: &Arc<WaitSlot>) {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            return; // every waiter was already rejected
        }
        let now = self.clock.now();
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Cancel, now);
        st.core.sync(now);
        if st.core.remove_waiting(slot, RejectReason::Cancelled, now) {
            st.core.dispatch_as_much_as_possible(now, &self.word);
            self.settle_and_unlock(st);
        }
    }

    pub(super) fn on_timer(&self, at: Instant) {
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            return;
        }
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Timer, at);
        while let Some(due) = st.core.next_timer().filter(|&t| t <= at) {
            st.core.sync(due);
            let (freed, _expired) = st.core.expire(due);
            self.word.give_back(freed);
            st.core.dispatch_as_much_as_possible(due, &self.word);
            // Holds end at the instant nothing waits any more, as in the
            // reference model, however many timers this call covers.
            let unheld = st.core.release_holds_if_idle();
            if unheld > 0 {
                self.word.give_back(unheld);
            }
        }
        self.settle_and_unlock(st);
    }

    pub(super) fn reconfigure(&self, cfg: QueueSetConfig) -> Result<(), QueueSetConfigError> {
        let dealer = cfg.validate()?;
        let mut st = self.lock_and_drain();
        if self.is_failed() {
            return Err(QueueSetConfigError::LevelFailed {
                level: st.core.cfg.name.clone(),
            });
        }
        let now = self.clock.now();
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Reconfigure, now);
        st.core.sync(now);
        // A limit change with seats parked in budgets: they go back first,
        // so the new limit and batch apply to the seats requests hold.
        self.reclaim();
        let limit = cfg.concurrency_limit;
        let fairness = cfg.fairness;
        st.core.reconfigure(cfg, dealer.clone());
        self.routing.store(Arc::new(Routing { dealer, fairness }));
        self.word.set_limit(limit);
        self.word
            .set_batch(super::budget::batch_for(limit, self.shards.len()));
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
        Ok(())
    }
}
