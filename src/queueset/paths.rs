//! The hot path and the slow path of one level: the shared state both
//! work on (the admission word, the shards' budgets and ledgers, the level
//! lock) and every operation on it. The protocol between them is
//! documented at [`AdmissionWord`](super::admission::AdmissionWord), the
//! shards' at [`shards`](super::shards) and the ledger's at
//! [`ledger`](super::ledger); how a merge accounts the hot path's requests
//! at `Core::merge_ledgers` (src/queueset/core/epoch.rs).

use super::admission::AdmissionWord;
use super::config::{Fairness, QueueSetConfig, QueueSetConfigError};
use super::core::{Completed, Core, Entry, NO_QUEUE};
use super::held::Held;
use super::ledger::LedgerTicket;
use super::shards::{deferred_offset, Placement, Shards};
use super::standing::Standing;
use super::wait::{SlotState, WaitSlot};
use super::{decision_result, Execution, Joined, RawAdmission, RejectReason, Request, Waiting};
use crate::clock::{Clock, Instant, Timer};
use crate::stats::Phase;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use crossbeam_utils::CachePadded;
use std::collections::HashMap;

pub(super) struct Shared {
    pub(super) word: AdmissionWord,
    /// Kubernetes' `enqueues`: the rotating offset into a flow's hand.
    /// Level-wide, not per shard: queue choices, hot-path and slow-path
    /// ones, follow Kubernetes' one sequence (src/queueset/shards.rs).
    pub(super) enqueues: CachePadded<AtomicU64>,
    /// The per-thread budgets and ledgers.
    pub(super) shards: Shards,
    pub(super) locked: Mutex<Locked>,
    /// Set when a panic left the locked state half-updated (see the module
    /// documentation): the level then rejects every new request.
    pub(super) failed: AtomicBool,
    pub(super) clock: Clock,
}

pub(super) struct Locked {
    pub(super) core: Core,
    pub(super) timer: Option<Timer>,
    pub(super) next_seq: u64,
    /// The merge's scratch: the open entries folded (start, shard, start
    /// number on the shard, entry) and the shards' sums, kept between
    /// merges so a merge does not allocate.
    pub(super) folded: Vec<(Instant, u32, u64, Entry)>,
    pub(super) completed: Completed,
    /// What the shards are known to hold while the fence stands
    /// (src/queueset/standing.rs): a saturated level's merges and
    /// reclaims skip them.
    pub(super) standing: Standing,
    /// The cards dealt at a fold for hot starts under Kubernetes' policy
    /// still executing, by (shard, ticket): their finish or release
    /// through the core reads the queue here (the placement that dealt it
    /// may be gone since, with a reconfiguration), the finish removing it.
    pub(super) dealt: HashMap<(u32, LedgerTicket), u32, ahash::RandomState>,
}

impl Shared {
    /// The hot path: take seats from the shard's budget (or the word) if
    /// nothing waits and they fit, and open a slot in the shard's ledger.
    /// Returns the held request: its queue (under Kubernetes' policy the
    /// offset into its flow's hand, the card dealt at the fold:
    /// `shards::DEAL_LATER`; [`FLOW_QUEUE`](super::core::FLOW_QUEUE) under the flow policies,
    /// chosen at the fold), its flow's hash, its start time, and its shard
    /// and slot.
    #[inline]
    pub(super) fn try_fast_start(&self, request: &Request, tag: u32) -> Option<Held> {
        let estimate = request.estimate;
        if estimate.initial_seats == 0 {
            return None; // the slow path clamps and counts it
        }
        let seats = estimate.max_seats();
        let (shard_index, shard) = self.shards.mine();
        let took = shard.budget.take(&self.word, seats);
        if took.dispatch {
            // Parked seats went back while requests wait (a fence came).
            self.dispatch_waiting();
        }
        if !took.taken {
            return None;
        }
        let at = self.clock.now();
        // The ledger's invariant 2: the slot is pushed, then the word
        // re-read, under the shard's mutex; the entry is placed there too,
        // from the shard's copy of the level's policy and dealer.
        let flow_hash = request.flow_hash;
        let opened = shard.ledger.open_with(
            |placement| {
                let queue = placement.queue(&self.enqueues);
                let entry = Entry {
                    queue,
                    flow_hash,
                    tag,
                    estimate,
                    start: at,
                };
                (entry, queue)
            },
            || self.word.is_fenced(),
            |sums, _, e| sums.opened(e),
        );
        let Some((ticket, queue)) = opened else {
            // A decision fenced meanwhile: the seats go back (to the word,
            // the fence being up) and the request takes the slow path.
            if shard.budget.give(&self.word, seats) {
                self.dispatch_waiting();
            }
            return None;
        };
        Some(Held::hot(
            shard_index,
            ticket,
            queue,
            flow_hash,
            tag,
            estimate,
            at,
        ))
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
        self.clear_slow(st);
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

    /// Lock and merge every shard's ledger into the core at the current
    /// time (no fence: for observations, and for operations that decide
    /// nothing about requests that may start meanwhile; a start that
    /// slips past is folded by the next merge). On a failed level nothing
    /// is merged (its state is not trusted).
    ///
    /// The clock is read only when the merge folds: on a saturated level
    /// every merge is skipped (src/queueset/standing.rs), and an unused read
    /// there was a third clock read per saturated request, ~24 ns that an
    /// instruction count does not show (docs/scaling.md, "The saturated
    /// level (issue 21)").
    pub(super) fn lock_and_merge(&self) -> MutexGuard<'_, Locked> {
        let mut st = self.lock();
        if !self.is_failed() {
            self.merge(&mut st, || self.clock.now());
        }
        st
    }

    /// Fold every shard's ledger into the core at the time `at` returns,
    /// called only if something is folded (the lock holder; see
    /// `Core::merge_ledgers`). A decision sets the fence first, so that no
    /// request executes unseen by it (the ledger's invariant 2). While the
    /// fence has stood since a fenced merge, every ledger is empty and none
    /// is touched (src/queueset/standing.rs, invariant 1).
    pub(super) fn merge(&self, st: &mut Locked, at: impl FnOnce() -> Instant) {
        let Locked {
            core,
            folded,
            completed,
            standing,
            dealt,
            ..
        } = st;
        if !standing.must_fold() {
            debug_assert!(
                self.shards
                    .iter()
                    .all(|shard| shard.ledger.is_settled(|sums| sums.requests == 0)),
                "a fold skipped while a ledger held a request (standing.rs, invariant 1)"
            );
            return;
        }
        let at = at();
        // Read before the first fold (standing.rs, invariant 1).
        let fenced = self.word.is_fenced();
        folded.clear();
        for (i, shard) in self.shards.iter().enumerate() {
            // Each card still to deal is dealt now, by the placement the
            // start read (the shard's context: see `shards::DEAL_LATER`).
            shard.ledger.fold_into(
                |placement, ticket, seq, mut e| {
                    if deferred_offset(e.queue).is_some() {
                        e.queue = placement.card(e.queue, e.flow_hash);
                        dealt.insert((i as u32, ticket), e.queue);
                    }
                    folded.push((e.start, i as u32, seq, e))
                },
                |placement, sums| {
                    sums.hand_over_last_start(
                        i as u32,
                        |queue, hash| placement.card(queue, hash),
                        completed,
                    );
                    completed.absorb(sums)
                },
            );
        }
        standing.folded(fenced);
        if core.merge_ledgers(at, folded, completed) {
            core.observe_demand();
        }
    }

    pub(super) fn slow_start(&self, request: &Request, tag: u32) -> RawAdmission {
        let mut st = self.lock();
        if self.is_failed() {
            return RawAdmission::Rejected(RejectReason::LevelFailed);
        }
        // Every decision below reads free seats from the word: none may
        // sit parked in a budget (src/queueset/budget.rs, invariant 3), and
        // it sees every executing request: the fence goes up before the
        // ledgers are folded (the ledger's invariant 2).
        self.reclaim(&mut st);
        let now = self.clock.now();
        self.merge(&mut st, || now);
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Start, now);
        st.core.sync(now);
        let estimate = st.core.clamp(request.estimate);
        let seats = estimate.max_seats();
        let Some(dealer) = st.core.dealer.clone() else {
            // A level that does not queue: the same one-CAS admission as
            // the hot path, with Kubernetes' rule for too-wide requests.
            let admitted = self.word.try_take(seats, seats, st.core.lingering_seats());
            self.unfence(&mut st);
            if !admitted {
                st.core
                    .reject_at_once(tag, RejectReason::ConcurrencyLimit, seats);
                return RawAdmission::Rejected(RejectReason::ConcurrencyLimit);
            }
            st.core.start_at_once(NO_QUEUE, tag, estimate, now);
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
                self.unfence(&mut st);
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
    /// bit of its own: src/queueset/budget.rs. While the fence has stood
    /// since the last sweep, the budgets hold nothing a decision must see
    /// and none is touched (src/queueset/standing.rs, invariant 2).
    pub(super) fn reclaim(&self, st: &mut Locked) {
        if !st.standing.must_sweep() {
            return;
        }
        self.word.set_slow();
        self.shards.sweep(&self.word);
        st.standing.swept();
    }

    /// Lift the fence (`SLOW`), and forget what it kept in the shards
    /// (src/queueset/standing.rs): the one way the lock holder clears it.
    pub(super) fn clear_slow(&self, st: &mut Locked) {
        self.word.clear_slow();
        st.standing.fence_lifted();
    }

    /// The end of a decision that does not settle: lift the reclaim fence
    /// if nothing waits (invariant 1 of the word keeps `SLOW` otherwise).
    pub(super) fn unfence(&self, st: &mut Locked) {
        if st.core.requests_waiting() == 0 {
            self.clear_slow(st);
        }
    }

    /// Finish a slow-path operation: settle the level, release the lock,
    /// then wake the async waiters it decided (wakers never run under the
    /// level lock).
    pub(super) fn settle_and_unlock(&self, mut st: MutexGuard<'_, Locked>) {
        self.settle(&mut st);
        let wakers = st.core.take_wakers();
        drop(st);
        wakers.wake_all();
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
            self.clear_slow(st);
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
    /// estimate's, less any it released early) are given back. A request
    /// whose slot is still open in its shard's ledger (and whose seats do
    /// not linger) closes it and gives its seats to that shard's budget
    /// (whose line the close just wrote, whichever thread finishes), with
    /// no level lock; any other finishes through the core.
    #[inline]
    pub(super) fn finish(&self, held: &Held, end: Instant) {
        if let Some(ticket) = held.ticket() {
            if !held.lingers() {
                let shard = self.shards.get(held.shard);
                let closed = shard.ledger.close(ticket, |sums, _, e| sums.add(e, end));
                if closed.is_ok() {
                    // Closed before the seats are free: a merge that sees
                    // them free (after a fence) sees the request finished.
                    if shard.budget.give(&self.word, held.seats()) {
                        self.dispatch_waiting();
                    }
                    return;
                }
            }
        }
        self.slow_finish(held, end);
    }

    #[cold]
    #[inline(never)]
    pub(super) fn slow_finish(&self, held: &Held, end: Instant) {
        let mut st = self.lock_and_merge();
        if self.is_failed() {
            // No accounting on a failed level: just free the seats.
            self.word.give_back(held.seats());
            return;
        }
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Finish, end);
        st.core.sync(end);
        let held = &Self::dealt(&mut st, held, true);
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
        let mut st = self.lock_and_merge();
        if self.is_failed() {
            self.word.give_back(seats);
            return;
        }
        let now = self.clock.now().max(before.start);
        st.core.sync(now);
        let before = &Self::dealt(&mut st, before, false);
        st.core.release_early(before, seats, now);
        self.word.give_back(seats);
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
    }

    /// `held` with its card, if its start deferred it: dealt at the fold
    /// that handed it to the core (after the merge of the caller's lock,
    /// every executing hot start is folded), `done` when it finishes.
    fn dealt(st: &mut Locked, held: &Held, done: bool) -> Held {
        if deferred_offset(held.queue).is_none() {
            return *held;
        }
        let ticket = held
            .ticket()
            .expect("only a hot start defers its card, and it has a ticket");
        let key = (held.shard, ticket);
        let queue = if done {
            st.dealt.remove(&key)
        } else {
            st.dealt.get(&key).copied()
        };
        held.in_queue(queue.expect("a folded hot start's card was dealt at its fold"))
    }

    /// The queue of an executing request (`Execution::queue`'s answer,
    /// with a card its start deferred dealt: by the placement the start
    /// read, from its shard's ledger while the slot is open, else from the
    /// cards dealt at the fold that took it). Reads, merges nothing.
    pub(super) fn queue_of(&self, held: &Held) -> Option<u32> {
        if deferred_offset(held.queue).is_none() {
            return held.known_queue();
        }
        let ticket = held.ticket()?;
        let shard = self.shards.get(held.shard);
        if let Some(q) = shard
            .ledger
            .with_open(ticket, |placement, e| placement.card(e.queue, e.flow_hash))
        {
            return Some(q);
        }
        // Folded: the fold that freed the slot ran under the level lock,
        // and dealt the card then.
        let st = self.lock();
        st.dealt.get(&(held.shard, ticket)).copied()
    }

    /// Seats were freed while requests wait: dispatch them.
    pub(super) fn dispatch_waiting(&self) {
        let mut st = self.lock_and_merge();
        if self.is_failed() {
            return;
        }
        let now = self.clock.now();
        st.core.sync(now);
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
    }

    pub(super) fn cancel(&self, slot: &Arc<WaitSlot>) {
        let mut st = self.lock_and_merge();
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
        let mut st = self.lock_and_merge();
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
        let mut st = self.lock();
        if self.is_failed() {
            return Err(QueueSetConfigError::LevelFailed {
                level: st.core.cfg.name.clone(),
            });
        }
        let now = self.clock.now();
        #[cfg(shuttle)]
        super::history::note(super::history::Site::Reconfigure, now);
        // A limit change with seats parked in budgets: they go back first,
        // so the new limit and batch apply to the seats requests hold; and
        // every executing request is folded into the core first.
        self.reclaim(&mut st);
        self.merge(&mut st, || now);
        st.core.sync(now);
        let limit = cfg.concurrency_limit;
        let fairness = cfg.fairness;
        st.core.reconfigure(cfg, dealer.clone());
        self.shards.set_placement(&Placement::of(&dealer, fairness));
        self.word.set_limit(limit);
        self.word
            .set_batch(super::budget::batch_for(limit, self.shards.len()));
        st.core.dispatch_as_much_as_possible(now, &self.word);
        self.settle_and_unlock(st);
        Ok(())
    }
}
