//! The epoch rule: how the core accounts the requests that started and
//! finished on the hot path while the level had seats to spare, from the
//! shards' ledgers (src/queueset/ledger.rs), without replaying them one by
//! one (docs/scaling.md, "The next core", part a).
//!
//! An *epoch* runs from one merge (the core's last sync, `T0`) to the next
//! (`T`). Nothing waits in it: a hot start needs `SLOW` clear, and any
//! operation that makes a request wait merges first. At `T` the core gets,
//! from every shard, the requests still open ([`Entry`], folded into the
//! core: they execute in their queue from now on, and finish through it)
//! and the sums of those that already finished ([`Completed`]). Then, with
//! `W` the seat-time the level served in the epoch (the finished requests',
//! the folded ones' since their start, the core's own requests' over the
//! epoch) and `A` the queues active at `T`:
//!
//! 1. `R(T) = R(T0) + min(limit × (T − T0), W) / max(1, A)`
//!    ([`epoch_increment`]);
//! 2. each queue `q` active at `T`, with `F_q` the sum over its folded
//!    requests of their charge less their initial seats × the time they
//!    already ran: `S_q = max(S_q, R(T)) + F_q` if the core held a request
//!    of `q` before the fold, else `S_q = R(T) + F_q`;
//! 3. the finished requests leave no trace in R or any S_q: service
//!    received while the level had free seats costs no virtual time.
//!
//! An epoch with no hot-path request (a saturated level, or one the hot
//! path did not use) is not one: the core syncs event by event as before,
//! so a saturated level is replayed exactly. The divergence from per-event
//! replay and why a user is better off: docs/differences-from-kubernetes.md.
//!
//! # Invariants
//! - Every hot-path request is counted once: folded (it then executes in
//!   the core) or in a shard's [`Completed`] (the ledger's invariant 1).
//! - The level's counts after a merge equal the admission word's seats
//!   less those parked in budgets: folded requests join `LevelSeats`,
//!   finished ones never left it.
//! - R never decreases (the increment is non-negative).
//!
//! The reference model applies the same rule at the same points
//! (`ReferenceQueueSet::with_accounting(Accounting::Epoch)`), so the
//! differential tests compare the two bit for bit.

use super::{Core, FLOW_QUEUE, NO_QUEUE};
use crate::clock::{duration_nanos, Instant};
use crate::queueset::vtime::{epoch_increment, seats_times_nanos};
use crate::stats::{Phase, Tallies, READ_ONLY_TAG};
use crate::work_estimate::WorkEstimate;

/// A request started on the hot path, as its shard's ledger holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its queue under Kubernetes' policy: the card is dealt at the fold
    /// (`shards::DEAL_LATER`: until then the offset into the flow's hand;
    /// the core sees only dealt cards); [`FLOW_QUEUE`] under the flow
    /// policies (chosen at the fold, from
    /// the flow table); [`NO_QUEUE`] at a level that does not queue.
    pub(crate) queue: u32,
    pub(crate) flow_hash: u64,
    pub(crate) tag: u32,
    pub(crate) estimate: WorkEstimate,
    pub(crate) start: Instant,
}

/// What the requests that finished on one shard's hot path add up to
/// (the same whatever the order they finished in).
#[derive(Debug)]
pub(crate) struct Completed {
    /// Requests.
    pub(crate) requests: u64,
    /// Their seat-time, `Σ seats × (end − start)`, nanoseconds.
    pub(crate) seat_nanos: u128,
    /// Their tallies (counts and histograms; gauges net zero).
    pub(crate) tallies: Tallies,
    /// Their execution time, `Σ (end − start)`, nanoseconds, of mutating
    /// and of read-only requests (the read-vs-write integrals).
    pub(crate) executed_nanos: [u128; 2],
    /// The latest-ending one's `(end, end − start)` (ties: the longest):
    /// the level's last service time under per-flow order, order-free.
    pub(crate) last: Option<(Instant, u64)>,
    /// The latest-starting request whose queue its start chose
    /// (Kubernetes' policy): its [`start_key`] (the fold's order), its
    /// queue ([`NO_QUEUE`]: none) and its flow's hash, so the merge finds
    /// the epoch's last dispatch (the round-robin position), order-free.
    /// Only the level's sums hold one: each shard's `last_open` goes
    /// over at the fold ([`Completed::hand_over_last_start`]).
    pub(crate) last_start: (u128, u32, u64),
    /// In a shard's sums: the latest start of this shard since its last
    /// fold whose queue its start chose, noted at the open
    /// ([`Completed::opened`]): its start, queue (its card still to deal,
    /// `shards::DEAL_LATER`) and flow's hash; [`NO_QUEUE`]: none. Every
    /// start since the last fold is finished (in these sums) or folded
    /// with them, so this is the latest of both. Noted at the open rather
    /// than the close: a shard's start numbers grow, so one compare of
    /// the start times orders a new start against the latest, where the
    /// close compared whole keys. Its start number is not kept: being the
    /// latest of its shard, it outranks every other start of the shard
    /// at the same time, which the key's largest start number says.
    pub(crate) last_open: (Instant, u32, u64),
}

impl Default for Completed {
    fn default() -> Completed {
        Completed {
            requests: 0,
            seat_nanos: 0,
            tallies: Tallies::default(),
            executed_nanos: [0; 2],
            last: None,
            last_start: (0, NO_QUEUE, 0),
            last_open: (Instant::ZERO, NO_QUEUE, 0),
        }
    }
}

/// A hot start's place in the fold's order, `(start, shard, start number
/// on the shard)`, as one integer (one compare on the hot finish): the
/// start's nanoseconds, then the shard (16 bits; at most 16 shards), then
/// the start number's low 48 bits (they wrap after 2.8 × 10^14 starts of
/// one shard, which can misorder only two starts of that shard at the
/// same nanosecond across the wrap).
#[inline]
pub(crate) fn start_key(start: Instant, shard: u32, seq: u64) -> u128 {
    (u128::from(start.as_nanos()) << 64)
        | (u128::from(shard & 0xffff) << 48)
        | u128::from(seq & 0xffff_ffff_ffff)
}

impl Completed {
    /// A hot-path start of `e`: the latest so far, if its queue was
    /// chosen at the start (Kubernetes' policy) and it started no earlier
    /// than the latest noted (its later start number breaks the tie, as
    /// in [`start_key`]).
    #[inline]
    pub(crate) fn opened(&mut self, e: &Entry) {
        if e.queue < FLOW_QUEUE && e.start >= self.last_open.0 {
            self.last_open = (e.start, e.queue, e.flow_hash);
        }
    }

    /// A hot-path request `e` finished at `end`.
    #[inline]
    pub(crate) fn add(&mut self, e: &Entry, end: Instant) {
        let seats = e.estimate.max_seats();
        let ran = end.as_nanos().saturating_sub(e.start.as_nanos());
        self.requests += 1;
        self.seat_nanos += u128::from(seats) * u128::from(ran);
        self.executed_nanos[usize::from(e.tag & READ_ONLY_TAG != 0)] += u128::from(ran);
        // `max` of the options, with one compare on the hot finish.
        if self.last.is_none_or(|last| (end, ran) >= last) {
            self.last = Some((end, ran));
        }
        self.tallies
            .get(e.tag)
            .began_and_ended_at_once(seats, e.queue != NO_QUEUE, ran);
    }

    /// The latest start of shard `shard` since its last fold, with its
    /// card dealt (at the fold, by the placement its requests started
    /// under: `card` of the deferred queue and the flow's hash), goes to
    /// the level's sums `level` if it is their latest so far; the note
    /// restarts. A shard where no such start happened costs one compare.
    #[inline]
    pub(crate) fn hand_over_last_start(
        &mut self,
        shard: u32,
        card: impl FnOnce(u32, u64) -> u32,
        level: &mut Completed,
    ) {
        if self.last_open.1 == NO_QUEUE {
            return;
        }
        let (start, queue, hash) =
            std::mem::replace(&mut self.last_open, (Instant::ZERO, NO_QUEUE, 0));
        // The shard's latest start: the largest start number.
        let key = start_key(start, shard, u64::MAX);
        if level.last_start.1 == NO_QUEUE || key > level.last_start.0 {
            level.last_start = (key, card(queue, hash), hash);
        }
    }

    /// Add a shard's sums to these (the shard keeps its tallies' index).
    /// Sums of no request are all zero (every [`Completed::add`] counts
    /// one, and this restarts them; a shard's latest start goes over
    /// before, [`Completed::hand_over_last_start`]): nothing to add, so a
    /// shard the hot path did not use costs a merge one compare.
    pub(crate) fn absorb(&mut self, other: &mut Completed) {
        if other.requests == 0 {
            return;
        }
        self.requests += other.requests;
        self.seat_nanos += other.seat_nanos;
        self.tallies.absorb(&mut other.tallies);
        for (a, b) in self
            .executed_nanos
            .iter_mut()
            .zip(other.executed_nanos.iter_mut())
        {
            *a += std::mem::take(b);
        }
        self.last = self.last.max(other.last.take());
        other.requests = 0;
        other.seat_nanos = 0;
    }
}

impl Core {
    /// Merge the shards' ledgers at `at` (the lock holder, before the
    /// operation it took the lock for): `folded` holds every open entry
    /// (sorted here into start order), `completed` the finished requests'
    /// sums. Applies the epoch rule (module documentation); does nothing
    /// when the hot path served nothing since the last merge. Returns
    /// whether it merged anything.
    pub(crate) fn merge_ledgers(
        &mut self,
        at: Instant,
        folded: &mut [(Instant, u32, u64, Entry)],
        completed: &mut Completed,
    ) -> bool {
        if folded.is_empty() && completed.requests == 0 {
            return false;
        }
        folded.sort_unstable_by_key(|&(start, shard, seq, _)| (start, shard, seq));
        let t0 = self.vclock.last_sync();
        let t = at.max(t0);
        let dt = duration_nanos(t.saturating_since(t0));
        let since = |start: Instant| duration_nanos(t.saturating_since(start.max(t0)));
        // The level's seat-time in the epoch: the core's own requests held
        // their seats throughout (nothing of the core changed in it).
        let mut w =
            completed.seat_nanos + u128::from(self.queues.executing_seats()) * u128::from(dt);
        let mut all_seats = completed.seat_nanos + u128::from(self.seats.in_use) * u128::from(dt);
        for (_, _, _, e) in folded.iter() {
            let part = u128::from(e.estimate.max_seats()) * u128::from(since(e.start));
            w += part;
            all_seats += part;
        }
        if dt > 0 {
            // The mean occupancy over the epoch (its seat-time is exact; the
            // ratio histogram sees the epoch at its mean).
            let mut o = self.occupancy();
            o.seats_in_use = u64::try_from(all_seats / u128::from(dt)).unwrap_or(u64::MAX);
            self.utilization.observe(o, dt);
        }
        self.vclock.tick(t);
        // Each open request's queue, and per queue touched whether the
        // core held a request of it before the fold (it was active).
        let mut held_before: Vec<(usize, bool)> = Vec::new();
        // Per-flow order: the flows active at T (R divides among them).
        let by_flow = self.order.is_on();
        let mut newly_active_flows: Vec<u64> = Vec::new();
        // Which folded requests a flow policy admitted: each enters its
        // flow's state, whatever the policy now (a start that read the
        // flow policy can slip past a switch to Kubernetes' policy, whose
        // merge folds it later; its finish leaves its flow's state, which
        // must exist: the shuttle history
        // `mixed_paths_keep_invariants_under_flow` found it missing).
        let mut of_flow: Vec<bool> = Vec::with_capacity(folded.len());
        for (_, _, _, e) in folded.iter_mut() {
            of_flow.push(e.queue == FLOW_QUEUE);
            if by_flow
                && e.queue == FLOW_QUEUE
                && !self.flow_is_active(e.flow_hash)
                && !newly_active_flows.contains(&e.flow_hash)
            {
                newly_active_flows.push(e.flow_hash);
            }
            e.queue = self.fold_queue(e);
            if e.queue != NO_QUEUE {
                let q = self.queues.ensure(e.queue as usize);
                if !held_before.iter().any(|&(hq, _)| hq == q) {
                    held_before.push((q, self.queues[q].is_active()));
                }
            }
            // It executes in its queue from now on: the next flow's choice
            // of queue sees its seats.
            self.begin_executing(e.queue, e.estimate.max_seats());
        }
        // The epoch rule: R, with the queues (flows, under per-flow order)
        // active at T, the folded requests' included.
        let active = if by_flow {
            self.active_flows() + newly_active_flows.len() as u32
        } else {
            self.queues.active()
        };
        let increment = epoch_increment(self.cfg.concurrency_limit, w, active, dt);
        self.vclock.advance(increment);
        let r = self.r();
        // Every queue active before the fold keeps a debt, not a credit
        // (those the fold made active are set to R just below).
        for q in 0..self.queues.len() {
            if self.queues[q].is_active() {
                let s = self.queues[q].next_dispatch_r;
                self.queues[q].next_dispatch_r = s.max(r);
                self.queues.bound_and_reindex(q);
            }
        }
        for &(q, before) in &held_before {
            if !before {
                self.queues[q].next_dispatch_r = r;
            }
        }
        if by_flow {
            // The finished requests' last service time is the guess of the
            // flows new from now on; then every active flow keeps a debt,
            // not a credit (`S_f = max(S_f, R(T))`).
            if let Some((_, nanos)) = completed.last {
                self.order.note_service(nanos);
            }
            self.order_epoch_floor();
        }
        // Fold: each open request is dispatched in start order, as if it
        // had started now having run since its start: its queue is charged
        // its work less its initial seats × the time it already ran
        // (Kubernetes' dispatch gauges note each dispatch).
        for (i, &(_, _, _, e)) in folded.iter().enumerate() {
            let seats = e.estimate.max_seats();
            let tally = self.tallies.get(e.tag);
            tally.begin_at_once(seats, e.queue != NO_QUEUE);
            tally.stats.work_estimated_seats.observe(seats.into());
            self.tallies.note(Phase::Executing, e.tag, 1, e.start);
            if e.queue != NO_QUEUE {
                let q = e.queue as usize;
                let f = self.charge(&e.estimate)
                    - seats_times_nanos(
                        e.estimate.initial_seats,
                        duration_nanos(t.saturating_since(e.start)),
                    );
                self.note_dispatch(q);
                self.queues[q].next_dispatch_r += f;
            }
            if of_flow[i] {
                self.order_fold(e.flow_hash, &e.estimate, e.start, t);
            }
        }
        for &(q, _) in &held_before {
            self.queues.bound_and_reindex(q);
        }
        // Every hot start was a dispatch at once in Kubernetes' queueset,
        // so the round-robin position is the queue of the epoch's last
        // start whose queue is known (folded, or finished under Kubernetes'
        // policy, which dealt its card at the start): ties between equal
        // virtual finishes are then broken as per-event replay breaks them.
        let mut last = std::mem::replace(&mut completed.last_start, (0, NO_QUEUE, 0));
        if let Some(&(start, shard, seq, e)) = folded
            .iter()
            .rev()
            .find(|&&(_, _, _, e)| e.queue != NO_QUEUE)
        {
            let key = start_key(start, shard, seq);
            if last.1 == NO_QUEUE || key > last.0 {
                last = (key, e.queue, e.flow_hash);
            }
        }
        if last.1 != NO_QUEUE {
            let q = self.queues.ensure(last.1 as usize);
            self.queues.set_robin(q);
        }
        self.tallies.absorb(&mut completed.tallies);
        let [mutating, read_only] = std::mem::take(&mut completed.executed_nanos);
        self.tallies.note_executed(0, mutating);
        self.tallies.note_executed(READ_ONLY_TAG, read_only);
        completed.requests = 0;
        completed.seat_nanos = 0;
        completed.last = None;
        true
    }

    /// The queue a folded request joins: its dealt card under Kubernetes'
    /// policy; under the flow policies its flow's queue, chosen now from
    /// the flow table (the request joins it).
    fn fold_queue(&mut self, e: &Entry) -> u32 {
        debug_assert!(
            crate::queueset::shards::deferred_offset(e.queue).is_none(),
            "a folded entry's card is dealt at the fold"
        );
        if e.queue != FLOW_QUEUE {
            return e.queue;
        }
        let q = match &self.dealer {
            Some(dealer) => self.flow_queue(dealer, e.flow_hash),
            // The level stopped queuing since the start: keep the flow's
            // queue if busy, else queue 0, which drains away.
            None => self.flows.queue_of(e.flow_hash).unwrap_or(0),
        };
        self.flows.join(e.flow_hash, q);
        q as u32
    }
}
