//! One shard of a queue's item table: the items whose hash picks it, their
//! phases (client-go's dirty and processing sets), their per-item metrics
//! and how many of them are processing, all under the shard's own lock.
//!
//! An item's whole state lives in one shard, so `add` and `done` of items
//! in different shards never wait for each other (the queue-wide lock and
//! how the two interact: the `core` module's protocol).
//!
//! Slot numbers outside this module are queue-wide: the shard's own slot
//! number shifted left by log2 of the shard count, or'ed with the shard's
//! index ([`Layout`]). So
//! they stay dense (the strategies and the delay heap index arrays by
//! them) and name their shard without a look-up.

use super::metrics::QueueMetrics;
use super::table::{ItemTable, Phase, NONE};
use crate::sync::{lock, Mutex, MutexGuard, SegQueue};
use crossbeam_utils::CachePadded;

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
    fn local(self, slot: u32) -> u32 {
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

/// A shard: its lock and state, and the gets made without any lock that
/// the next holder applies. Cache-padded so that two shards' locks never
/// share a line.
struct Shard<T, H> {
    state: Mutex<ShardState<T, H>>,
    /// Gets made without the lock (FIFO): the shard's slot and the time,
    /// applied by the next holder of `state` before anything else.
    taken: SegQueue<(u32, u64)>,
}

/// A queue's shards.
pub(crate) struct Shards<T, H> {
    layout: Layout,
    shards: Box<[CachePadded<Shard<T, H>>]>,
}

impl<T: Eq, H: Copy> Shards<T, H> {
    pub(crate) fn new(capacity: usize, timed: bool) -> Self {
        let layout = Layout::for_capacity(capacity);
        // Hashing spreads items unevenly over the shards: give each a
        // little more than its share so that a queue sized for its items
        // never grows.
        let each = capacity.div_ceil(layout.shards());
        let each = each + each / 8;
        let shards = (0..layout.shards())
            .map(|_| {
                CachePadded::new(Shard {
                    state: Mutex::new(ShardState {
                        table: ItemTable::with_capacity(each, layout.slots()),
                        metrics: QueueMetrics::new(timed),
                        processing: 0,
                        kept: 0,
                        kept_slots: Vec::new(),
                    }),
                    taken: SegQueue::new(),
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

    /// Shard `index`, locked, with every get made without its lock applied.
    #[inline]
    pub(crate) fn lock(&self, index: usize) -> Locked<'_, T, H> {
        let shard = &self.shards[index];
        let mut state = lock(&shard.state);
        while let Some((local, now)) = shard.taken.pop() {
            state.start(local, now);
        }
        Locked {
            index,
            layout: self.layout,
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

    /// Record a get of `slot` made without its shard's lock.
    #[inline]
    pub(crate) fn record_taken(&self, slot: u32, now: u64) {
        let shard = &self.shards[self.layout.of_slot(slot)];
        shard.taken.push((self.layout.local(slot), now));
    }
}

pub(crate) struct ShardState<T, H> {
    /// Slots here are the shard's own numbers.
    table: ItemTable<T, H>,
    pub(crate) metrics: QueueMetrics,
    /// Items of this shard being processed.
    pub(crate) processing: usize,
    /// Entries in [`Phase::Kept`].
    kept: usize,
    /// The shard's slots that entered [`Phase::Kept`] since the last sweep
    /// (some may have left it since, or hold another item by now: the
    /// sweep checks). Swept when [`KEEP`] long, so at most that many done
    /// items' entries are kept per shard.
    kept_slots: Vec<u32>,
}

/// How many done items' entries a shard keeps for a re-add before it
/// sweeps them. A done item is re-added at once in the common retry
/// pattern, so a short list catches it: a sweep lands between a `done` and
/// its re-add once in this many. Small under loom and in unit tests, whose
/// models then reach a sweep in a few operations.
pub(crate) const KEEP: usize = if cfg!(any(loom, test)) { 2 } else { 64 };

/// A shard's state, locked, with its queue-wide identity.
pub(crate) struct Locked<'a, T, H> {
    index: usize,
    layout: Layout,
    pub(crate) state: MutexGuard<'a, ShardState<T, H>>,
}

impl<T: Eq, H: Copy> ShardState<T, H> {
    /// A worker took the item in the shard's slot `local` at `now`.
    fn start(&mut self, local: u32, now: u64) {
        self.processing += 1;
        self.metrics.on_get(local, now);
        self.table.entry_mut(local).phase = Phase::Running;
    }

    /// Items tracked: queued, processing or waiting (kept entries are
    /// not: client-go has forgotten them).
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        self.table.len() - self.kept
    }

    /// Entries held, kept ones included (tests of the sweep).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn held(&self) -> usize {
        self.table.len()
    }

    /// Forget every kept entry still kept.
    fn sweep(&mut self) {
        for local in std::mem::take(&mut self.kept_slots) {
            if self
                .table
                .get(local)
                .is_some_and(|e| e.phase == Phase::Kept)
            {
                self.table.remove(local);
                self.kept -= 1;
            }
        }
    }
}

/// An item's state as the queue-wide code sees it: its queue-wide slot and
/// what its entry holds.
impl<T: Eq, H: Copy> Locked<'_, T, H> {
    /// The queue-wide slot of `item`, whose short hash is `hash`.
    #[inline]
    pub(crate) fn find(&self, hash: u32, item: &T) -> Option<u32> {
        let local = self.state.table.find(hash, item)?;
        Some(self.layout.global(self.index, local))
    }

    /// Track an absent item; `None` when the shard is full (after
    /// forgetting its kept entries).
    #[inline]
    pub(crate) fn insert(&mut self, hash: u32, item: T, hint: H) -> Option<u32> {
        let state = &mut *self.state;
        if state.kept > 0 && state.table.is_full() {
            state.sweep();
        }
        let local = state.table.insert(hash, item, Phase::Idle, hint)?;
        Some(self.layout.global(self.index, local))
    }

    /// An item that is done and neither dirty nor waiting: keep its entry
    /// for a re-add ([`Phase::Kept`]), sweeping the shard's kept entries
    /// when [`KEEP`] have gathered.
    pub(crate) fn keep(&mut self, slot: u32) {
        let local = self.layout.local(slot);
        let state = &mut *self.state;
        state.table.entry_mut(local).phase = Phase::Kept;
        state.kept += 1;
        state.kept_slots.push(local);
        if state.kept_slots.len() >= KEEP {
            state.sweep();
        }
    }

    /// An add or a delayed add of a tracked item: a kept entry becomes an
    /// idle one again (tracked, neither dirty nor processing).
    #[inline]
    pub(crate) fn revive(&mut self, slot: u32) {
        let local = self.layout.local(slot);
        let state = &mut *self.state;
        let entry = state.table.entry_mut(local);
        if entry.phase == Phase::Kept {
            entry.phase = Phase::Idle;
            state.kept -= 1;
        }
    }

    /// Forget the item in `slot`.
    pub(crate) fn remove(&mut self, slot: u32) {
        self.state.table.remove(self.layout.local(slot));
    }

    #[inline]
    pub(crate) fn entry(&self, slot: u32) -> &super::table::Entry<T, H> {
        self.state.table.entry(self.layout.local(slot))
    }

    #[inline]
    pub(crate) fn entry_mut(&mut self, slot: u32) -> &mut super::table::Entry<T, H> {
        self.state.table.entry_mut(self.layout.local(slot))
    }

    /// A worker took the item in `slot` at `now` (under this lock).
    #[inline]
    pub(crate) fn start(&mut self, slot: u32, now: u64) {
        self.state.start(self.layout.local(slot), now);
    }

    /// The item in `slot` became dirty at `now`.
    #[inline]
    pub(crate) fn on_add(&mut self, slot: u32, now: u64) {
        self.state.metrics.on_add(self.layout.local(slot), now);
    }

    /// The item in `slot` was done at `now`: one fewer processing. Returns
    /// how many of the shard's items are still processing.
    #[inline]
    pub(crate) fn finish(&mut self, slot: u32, now: u64) -> usize {
        self.state.processing -= 1;
        self.state.metrics.on_done(self.layout.local(slot), now);
        self.state.processing
    }

    pub(crate) fn on_reject(&mut self) {
        self.state.metrics.on_reject();
    }
}
