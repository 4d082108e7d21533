//! One shard of a queue's item table: the items whose hash picks it, their
//! phases (client-go's dirty and processing sets), their per-item metrics
//! and how many of them are processing.
//!
//! An item's whole state lives in one shard, so `add` and `done` of items
//! in different shards never wait for each other (the queue-wide lock and
//! how the two interact: the `core` module's protocol).
//!
//! # What needs the shard's lock, and what does not
//!
//! The table's shape (which slots are occupied, the index, the free list)
//! changes only under the lock. An item's phase changes inside a *claim*
//! of its entry (its busy bit, src/workqueue/slots.rs), taken with or
//! without the lock: a FIFO queue's `get`, and the `done` and `add` that
//! find their item's entry, take no lock ([`Shards::claim`]); what misses
//! takes the lock ([`Locked`]). So a holder descheduled inside its section
//! delays only the calls for *its own item*, never the shard's others.
//!
//! **Metric events.** Every change a claim makes that the metrics count
//! (an item became dirty, was taken, was done; a kept entry was revived)
//! is pushed, inside the claim, onto the shard's event list, so one item's
//! events are in the list in the order of its claims. The events are
//! applied to the metrics (and the kept-entry bookkeeping) by the lock
//! holder: at every acquisition and release of the lock, and by a
//! lock-free caller that pushed the 128th event since the last such try,
//! through `try_lock` only (never waiting). A snapshot takes every shard's
//! lock, so it sees every event pushed before it: metrics stay exact.
//!
//! **Sweeps and late events.** A sweep frees kept entries by a CAS from
//! not-busy [`Phase::Kept`], so every event a claim on that entry pushed
//! is in the list by then (the claim's `Release` store, the CAS's
//! `Acquire`); the sweep applies the list *again* before it makes the
//! freed slots reusable, so no late event of an old item lands on the
//! slot's next item (whose per-slot metrics, the add time and the running
//! position, it would corrupt). A removal under the lock frees an entry it
//! holds claimed, after applying the list at the claim: no event of that
//! item can follow.
//!
//! **Processing counts** are per-shard atomics: `get` adds one inside its
//! claim, `done` takes one away, and a draining shutdown sums them (the
//! handshake is in the `core` module).
//!
//! Slot numbers outside this module are queue-wide: the shard's own slot
//! number shifted left by log2 of the shard count, or'ed with the shard's
//! index ([`Layout`]). So
//! they stay dense (the strategies and the delay heap index arrays by
//! them) and name their shard without a look-up.

use super::metrics::QueueMetrics;
use super::slots::{Claim, Sweep};
use super::table::{Phase, Table, TableWriter, NONE};
use crate::sync::{fence, lock, try_lock, AtomicU32, AtomicUsize, Mutex, MutexGuard, Ordering};
use crossbeam_utils::CachePadded;
use std::mem::ManuallyDrop;

/// How many shards a queue has and how queue-wide slot numbers name them.
///
/// The count follows [`QueueConfig::capacity`](super::Config::capacity): one
/// shard per 1,024 items the queue is sized for, at least 4 and at most
/// 1,024 (a power of two). With many more threads than cores, a shard's
/// holder that is descheduled stalls the calls for that shard's items until
/// the scheduler runs it again, so the more shards, the fewer calls stall:
/// at 1,000,000 items and 1,000 consumers, 256 shards had a quarter to a
/// ninth of 32 shards' slow `done`s, and 1,024 a third to a seventh of
/// 256's in two of three rounds (docs/benchmarks.md). Each shard costs
/// about 900 bytes even when empty (under 1 byte per item the queue is
/// sized for), so small queues get fewer. Two under
/// loom, whose models then cover both the same-shard and the other-shard
/// cases without exploring many locks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Layout {
    /// log2 of the number of shards.
    bits: u32,
}

impl Layout {
    pub(crate) fn for_capacity(capacity: usize) -> Self {
        if cfg!(loom) {
            return Layout { bits: 1 };
        }
        let shards = (capacity / 1024).clamp(4, 1024).next_power_of_two();
        Layout {
            bits: shards.trailing_zeros(),
        }
    }

    #[inline]
    pub(crate) fn shards(self) -> usize {
        1 << self.bits
    }

    /// The shard an item whose short hash is `hash` lives in. Fibonacci
    /// hashing of the whole hash: the index inside the shard reads the
    /// hash's low and top bits, so the shard must not be a plain slice of
    /// them (a shard's items would then share their buckets' low bits).
    #[inline]
    pub(crate) fn of_hash(self, hash: u32) -> usize {
        (hash.wrapping_mul(0x9E37_79B9) >> (32 - self.bits)) as usize
    }

    /// The shard of a queue-wide slot number.
    #[inline]
    pub(crate) fn of_slot(self, slot: u32) -> usize {
        (slot & ((1 << self.bits) - 1)) as usize
    }

    #[inline]
    pub(crate) fn local(self, slot: u32) -> u32 {
        slot >> self.bits
    }

    #[inline]
    fn global(self, shard: usize, local: u32) -> u32 {
        (local << self.bits) | shard as u32
    }

    /// The most items one shard tracks at once: its slot numbers must fit
    /// in a queue-wide one.
    fn slots(self) -> u32 {
        NONE >> self.bits
    }
}

/// A change the metrics count, made inside a claim (module docs).
#[derive(Copy, Clone, Debug)]
enum Event {
    /// The item became dirty at `now`; `revived`: it was kept before.
    Added { local: u32, now: u64, revived: bool },
    /// A kept entry became idle again without becoming dirty (a delayed add).
    Revived,
    /// A worker took the item at `now`.
    Started { local: u32, now: u64 },
    /// The item was done at `now`; `kept`: its entry is now kept.
    Finished { local: u32, now: u64, kept: bool },
}

/// How many events a lock-free caller pushes between its tries to apply
/// the list (through `try_lock`). The caller whose push crosses a multiple
/// applies about this many events (some microseconds), so the fraction of
/// calls that pay it is kept under 1% (at 64, 1 in 64 calls paid about
/// 3 µs: the p99 of every call on the 2-core machine). 8 under loom, whose
/// models are a few events long.
const APPLY_EVERY: u32 = if cfg!(loom) { 8 } else { 128 };

/// A shard: its lock and state, the table readable without the lock, the
/// events made by claims and the processing count. Cache-padded so that
/// two shards never share a line.
struct Shard<T, H> {
    state: Mutex<ShardState<T, H>>,
    table: Table<T, H>,
    /// crossbeam's `SegQueue` itself, under loom and shuttle too (not the
    /// mutex-guarded deque of `crate::sync::SegQueue`): nothing here relies
    /// on a push synchronising with a pop (events are plain data applied
    /// under the lock; what orders an item's claims is its state word),
    /// and the deque's mutex would order every lock-free caller after a
    /// lock holder's visit of the list, an order the real list does not
    /// give, which hid the drain handshake's missing fence from loom.
    events: crossbeam_queue::SegQueue<Event>,
    /// Events pushed without the lock (only its multiples of
    /// [`APPLY_EVERY`] matter).
    pushed: AtomicU32,
    /// Items of this shard being processed.
    processing: AtomicUsize,
}

/// A queue's shards.
pub(crate) struct Shards<T, H> {
    layout: Layout,
    shards: Box<[CachePadded<Shard<T, H>>]>,
}

impl<T: Eq, H: Copy + Default> Shards<T, H> {
    pub(crate) fn new(capacity: usize, timed: bool) -> Self {
        let layout = Layout::for_capacity(capacity);
        // Hashing spreads items unevenly over the shards: give each a
        // little more than its share so that a queue sized for its items
        // never grows.
        let each = capacity.div_ceil(layout.shards());
        let each = each + each / 8;
        let shards = (0..layout.shards())
            .map(|_| {
                let (table, writer) = Table::with_capacity(each, layout.slots());
                CachePadded::new(Shard {
                    state: Mutex::new(ShardState {
                        table: writer,
                        metrics: QueueMetrics::new(timed),
                        kept: 0,
                        kept_slots: Vec::new(),
                    }),
                    table,
                    events: crossbeam_queue::SegQueue::new(),
                    pushed: AtomicU32::new(0),
                    processing: AtomicUsize::new(0),
                })
            })
            .collect();
        Shards { layout, shards }
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.len()
    }

    /// The index of the shard of the item whose short hash is `hash`.
    #[cfg(test)]
    pub(crate) fn index_of_hash(&self, hash: u32) -> usize {
        self.layout.of_hash(hash)
    }

    /// Shard `index`, locked, with its events applied (and its kept
    /// entries swept once [`KEEP`] have gathered).
    #[inline]
    pub(crate) fn lock(&self, index: usize) -> Locked<'_, T, H> {
        let shard = &self.shards[index];
        let mut state = lock(&shard.state);
        state.settle(shard);
        Locked {
            index,
            layout: self.layout,
            shard,
            state,
        }
    }

    /// The shard of the item whose short hash is `hash`, locked.
    #[inline]
    pub(crate) fn lock_hash(&self, hash: u32) -> Locked<'_, T, H> {
        self.lock(self.layout.of_hash(hash))
    }

    /// The shard of a queue-wide slot, locked.
    #[inline]
    pub(crate) fn lock_slot(&self, slot: u32) -> Locked<'_, T, H> {
        self.lock(self.layout.of_slot(slot))
    }

    /// The entry of `item` claimed without any lock, if the index finds
    /// it (a miss says nothing: take the lock).
    #[inline]
    pub(crate) fn claim(&self, hash: u32, item: &T) -> Option<Held<'_, '_, T, H>> {
        let index = self.layout.of_hash(hash);
        let shard = &self.shards[index];
        let (local, claim) = shard.table.claim(hash, item)?;
        Some(Held::new(shard, self.layout, index, local, claim, None))
    }

    /// The entry of an occupied queue-wide slot (a popped ticket's),
    /// claimed without any lock.
    #[inline]
    pub(crate) fn claim_slot(&self, slot: u32) -> Held<'_, '_, T, H> {
        let index = self.layout.of_slot(slot);
        let shard = &self.shards[index];
        let local = self.layout.local(slot);
        let Some(claim) = shard.table.entry(local).try_claim() else {
            unreachable!("a ticket's slot is never freed while the ticket is out")
        };
        Held::new(shard, self.layout, index, local, claim, None)
    }

    /// Items processing in every shard. The `SeqCst` fence is the summing
    /// side of the drain handshake (the `core` module's docs).
    pub(crate) fn processing(&self) -> usize {
        fence(Ordering::SeqCst);
        self.shards
            .iter()
            .map(|s| s.processing.load(Ordering::Acquire))
            .sum()
    }

    /// Wait, holding shard `index`'s lock, until no claim is held on its
    /// entries (shutdown: every lock-free add that found the queue open
    /// has pushed its ticket).
    pub(crate) fn quiesce(&self, index: usize) {
        let locked = self.lock(index);
        locked.shard.table.wait_unclaimed(&locked.state.table);
    }
}

pub(crate) struct ShardState<T, H> {
    table: TableWriter<T, H>,
    pub(crate) metrics: QueueMetrics,
    /// Entries in [`Phase::Kept`], as far as the applied events say.
    kept: usize,
    /// The shard's slots that entered [`Phase::Kept`] since the last sweep
    /// (some may have left it since, or hold another item by now: the
    /// sweep checks). Swept when [`KEEP`] long, so about that many done
    /// items' entries are kept per shard.
    kept_slots: Vec<u32>,
}

/// How many done items' entries a shard keeps for a re-add before it
/// sweeps them. A done item is re-added at once in the common retry
/// pattern, so a short list catches it: a sweep lands between a `done` and
/// its re-add once in this many. Small under loom and in unit tests, whose
/// models then reach a sweep in a few operations.
pub(crate) const KEEP: usize = if cfg!(any(loom, test)) { 2 } else { 64 };

impl<T: Eq, H: Copy + Default> ShardState<T, H> {
    /// Apply one event (under the lock).
    fn apply(&mut self, event: Event) {
        match event {
            Event::Added {
                local,
                now,
                revived,
            } => {
                self.kept -= usize::from(revived);
                self.metrics.on_add(local, now);
            }
            Event::Revived => self.kept -= 1,
            Event::Started { local, now } => self.metrics.on_get(local, now),
            Event::Finished { local, now, kept } => {
                self.metrics.on_done(local, now);
                if kept {
                    self.kept += 1;
                    self.kept_slots.push(local);
                }
            }
        }
    }

    /// Apply every event in the shard's list (under the lock).
    fn apply_all(&mut self, shard: &Shard<T, H>) {
        while let Some(event) = shard.events.pop() {
            self.apply(event);
        }
    }

    /// Apply the events, then sweep if [`KEEP`] kept entries gathered.
    #[inline]
    fn settle(&mut self, shard: &Shard<T, H>) {
        self.apply_all(shard);
        shard.table.reclaim(&mut self.table);
        if self.kept_slots.len() >= KEEP {
            self.sweep(shard);
        }
    }

    /// Items tracked: queued, processing or waiting (kept entries are
    /// not: client-go has forgotten them).
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        self.table.len() - self.kept
    }

    /// Entries held, kept ones included (tests of the sweep).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn held(&self) -> usize {
        self.table.len()
    }

    /// Forget every kept entry still kept and unclaimed (module docs:
    /// sweeps and late events).
    fn sweep(&mut self, shard: &Shard<T, H>) {
        let mut freed = Vec::new();
        for local in std::mem::take(&mut self.kept_slots) {
            match shard.table.sweep(&mut self.table, local) {
                Sweep::Freed => freed.push(local),
                // Claimed now: it may still be kept after the claim.
                Sweep::Busy => self.kept_slots.push(local),
                Sweep::NotKept => {}
            }
        }
        if freed.is_empty() {
            return;
        }
        // Every event a claim on a freed entry pushed is in the list now:
        // apply them before the slots are reused. (A claim under the lock
        // applies the list too, `Locked::held`; this keeps the rule local
        // to the sweep.)
        self.apply_all(shard);
        for local in freed {
            self.kept -= 1;
            shard.table.recycle(&mut self.table, local);
        }
    }
}

/// A shard's state, locked, with its queue-wide identity. Dropping it
/// applies the events that claims pushed meanwhile.
pub(crate) struct Locked<'a, T: Eq, H: Copy + Default> {
    index: usize,
    layout: Layout,
    shard: &'a Shard<T, H>,
    pub(crate) state: MutexGuard<'a, ShardState<T, H>>,
}

impl<T: Eq, H: Copy + Default> Drop for Locked<'_, T, H> {
    fn drop(&mut self) {
        self.state.apply_all(self.shard);
    }
}

impl<'a, T: Eq, H: Copy + Default> Locked<'a, T, H> {
    /// A claim made under this lock: the events claims pushed before it
    /// (this item's among them) are applied first, so that this claim's
    /// own changes, applied directly, follow them.
    fn held(&mut self, local: u32, claim: Claim<'a, T, H>) -> Held<'a, '_, T, H> {
        self.state.apply_all(self.shard);
        Held::new(
            self.shard,
            self.layout,
            self.index,
            local,
            claim,
            Some(&mut *self.state),
        )
    }

    /// The entry of `item` (whose short hash is `hash`), claimed: exact
    /// under the lock.
    #[inline]
    pub(crate) fn find(&mut self, hash: u32, item: &T) -> Option<Held<'a, '_, T, H>> {
        let shard = self.shard;
        let (local, claim) = shard.table.claim(hash, item)?;
        Some(self.held(local, claim))
    }

    /// The entry of an occupied queue-wide slot, claimed.
    #[inline]
    pub(crate) fn claim_slot(&mut self, slot: u32) -> Held<'a, '_, T, H> {
        let shard = self.shard;
        let local = self.layout.local(slot);
        let Some(claim) = shard.table.entry(local).try_claim() else {
            unreachable!("slot {slot} is not occupied")
        };
        self.held(local, claim)
    }

    /// The entry of `item`, claimed, tracking the item ([`Phase::Idle`])
    /// if it is not; `None` (counted as rejected) when the shard is full
    /// even after forgetting its kept entries.
    #[inline]
    pub(crate) fn track(&mut self, hash: u32, item: T, hint: H) -> Option<Held<'a, '_, T, H>> {
        let shard = self.shard;
        if let Some((local, claim)) = shard.table.claim(hash, &item) {
            return Some(self.held(local, claim));
        }
        let state = &mut *self.state;
        if state.kept > 0 && shard.table.is_full(&state.table) {
            state.sweep(shard);
        }
        match shard
            .table
            .insert(&mut state.table, hash, item, Phase::Idle, hint)
        {
            Some((local, claim)) => Some(self.held(local, claim)),
            None => {
                self.state.metrics.on_reject();
                None
            }
        }
    }
}

/// A claimed entry (with or without its shard's lock): its item, phase,
/// hint and delayed bit, and the metric events of what the claim does.
/// Without the lock the events go onto the shard's list; under it they
/// are applied at once. Dropping it releases the claim; a lock-free
/// holder then tries to apply the shard's events once [`APPLY_EVERY`]
/// have gathered.
pub(crate) struct Held<'a, 'b, T: Eq, H: Copy + Default> {
    shard: &'a Shard<T, H>,
    slot: u32,
    local: u32,
    claim: ManuallyDrop<Claim<'a, T, H>>,
    /// A kept entry made idle by this claim, not yet reported.
    revived: bool,
    /// The shard's state, when the claim is made under its lock.
    locked: Option<&'b mut ShardState<T, H>>,
    /// Events this claim pushed onto the list.
    pushed: u32,
}

impl<'a, 'b, T: Eq, H: Copy + Default> Held<'a, 'b, T, H> {
    fn new(
        shard: &'a Shard<T, H>,
        layout: Layout,
        index: usize,
        local: u32,
        claim: Claim<'a, T, H>,
        locked: Option<&'b mut ShardState<T, H>>,
    ) -> Self {
        Held {
            shard,
            slot: layout.global(index, local),
            local,
            claim: ManuallyDrop::new(claim),
            revived: false,
            locked,
            pushed: 0,
        }
    }

    /// The queue-wide slot.
    #[inline]
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    #[inline]
    pub(crate) fn phase(&self) -> Phase {
        self.claim.phase()
    }

    #[inline]
    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.claim.set_phase(phase);
    }

    #[inline]
    pub(crate) fn delayed(&self) -> bool {
        self.claim.delayed()
    }

    #[inline]
    pub(crate) fn set_delayed(&mut self, delayed: bool) {
        self.claim.set_delayed(delayed);
    }

    #[inline]
    pub(crate) fn item(&self) -> &'a T {
        self.claim.item()
    }

    #[inline]
    pub(crate) fn hint(&self) -> H {
        self.claim.hint()
    }

    #[inline]
    pub(crate) fn set_hint(&mut self, hint: H) {
        self.claim.set_hint(hint);
    }

    #[inline]
    fn push(&mut self, event: Event) {
        match &mut self.locked {
            Some(state) => state.apply(event),
            None => {
                self.shard.events.push(event);
                self.pushed += 1;
            }
        }
    }

    /// Forget the item (under the lock: a claim made without it cannot
    /// free its entry). The events claims pushed before this one were
    /// applied when it was made, and none can follow a free entry, so the
    /// slot is reusable at once.
    pub(crate) fn remove(mut self) {
        debug_assert!(!self.revived && self.pushed == 0);
        let Some(state) = self.locked.take() else {
            unreachable!("only a lock holder removes an item")
        };
        // SAFETY: the claim is taken out once, and `self` is forgotten so
        // its drop does not release it again.
        let claim = unsafe { ManuallyDrop::take(&mut self.claim) };
        let (shard, local) = (self.shard, self.local);
        std::mem::forget(self);
        shard.table.remove(&mut state.table, local, claim);
    }

    /// An add or a delayed add: a kept entry becomes an idle one again
    /// (tracked, neither dirty nor processing).
    #[inline]
    pub(crate) fn revive(&mut self) {
        if self.phase() == Phase::Kept {
            self.set_phase(Phase::Idle);
            self.revived = true;
        }
    }

    /// The item became dirty at `now`.
    #[inline]
    pub(crate) fn on_add(&mut self, now: u64) {
        let revived = std::mem::take(&mut self.revived);
        self.push(Event::Added {
            local: self.local,
            now,
            revived,
        });
    }

    /// A worker took the (queued) item at `now`: it is processing.
    #[inline]
    pub(crate) fn start(&mut self, now: u64) {
        self.set_phase(Phase::Running);
        self.shard.processing.fetch_add(1, Ordering::Relaxed);
        self.push(Event::Started {
            local: self.local,
            now,
        });
    }

    /// The item was done at `now`, and its entry is `kept` or not (the
    /// caller set its phase): one fewer processing. Returns how many of
    /// the shard's items are still processing; the caller then does its
    /// half of the drain handshake.
    #[inline]
    pub(crate) fn finish(&mut self, now: u64, kept: bool) -> usize {
        self.push(Event::Finished {
            local: self.local,
            now,
            kept,
        });
        self.shard.processing.fetch_sub(1, Ordering::AcqRel) - 1
    }
}

impl<T: Eq, H: Copy + Default> Drop for Held<'_, '_, T, H> {
    #[inline]
    fn drop(&mut self) {
        if self.revived {
            self.push(Event::Revived);
        }
        // SAFETY: taken once, here; `self` is not used after.
        drop(unsafe { ManuallyDrop::take(&mut self.claim) });
        if self.locked.is_some() || self.pushed == 0 {
            return;
        }
        // Without the lock: every APPLY_EVERY events, try to apply them
        // (never waiting for the lock: its holder applies them anyway).
        let before = self.shard.pushed.fetch_add(self.pushed, Ordering::Relaxed);
        if before / APPLY_EVERY != (before + self.pushed) / APPLY_EVERY {
            if let Some(mut state) = try_lock(&self.shard.state) {
                state.settle(self.shard);
                state.apply_all(self.shard);
            }
        }
    }
}
