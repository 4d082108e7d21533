//! One shard of a queue's item table: the items whose hash picks it, their
//! phases (client-go's dirty and processing sets), their per-item metrics
//! and how many of them are processing, all under the shard's own lock.
//!
//! An item's whole state lives in one shard, so `add` and `done` of items
//! in different shards never wait for each other (the queue-wide lock and
//! how the two interact: the `core` module's protocol).
//!
//! Slot numbers outside this module are queue-wide: the shard's own slot
//! number shifted left by [`SHARD_BITS`], or'ed with the shard's index. So
//! they stay dense (the strategies and the delay heap index arrays by
//! them) and name their shard without a look-up.

use super::metrics::QueueMetrics;
use super::table::{ItemTable, Phase, NONE};
use crate::sync::{lock, Mutex, MutexGuard, SegQueue};
use crossbeam_utils::CachePadded;

/// log2 of the number of shards. 32 shards: with many more threads than
/// cores, a shard's holder that is descheduled stalls only the calls for
/// that shard's items (1/32 of them); more would cost memory for small
/// queues (each shard's arrays start small, see `ChunkVec`). Two under loom,
/// whose models then cover both the same-shard and the other-shard cases
/// without exploring 32 locks.
#[cfg(not(loom))]
pub(crate) const SHARD_BITS: u32 = 5;
#[cfg(loom)]
pub(crate) const SHARD_BITS: u32 = 1;

pub(crate) const SHARDS: usize = 1 << SHARD_BITS;
const SHARD_MASK: u32 = SHARDS as u32 - 1;

/// The shard an item whose short hash is `hash` lives in. Fibonacci
/// hashing of the whole hash: the index inside the shard reads the hash's
/// low and top bits, so the shard must not be a plain slice of them (all of
/// a shard's items would then share their index buckets' low bits).
#[inline]
pub(crate) fn shard_of_hash(hash: u32) -> usize {
    (hash.wrapping_mul(0x9E37_79B9) >> (32 - SHARD_BITS)) as usize
}

/// The shard of a queue-wide slot number.
#[inline]
pub(crate) fn shard_of_slot(slot: u32) -> usize {
    (slot & SHARD_MASK) as usize
}

#[inline]
fn local(slot: u32) -> u32 {
    slot >> SHARD_BITS
}

#[inline]
fn global(shard: usize, local: u32) -> u32 {
    (local << SHARD_BITS) | shard as u32
}

/// The most items one shard tracks at once: its slot numbers must fit in a
/// queue-wide one.
const SHARD_SLOTS: u32 = NONE >> SHARD_BITS;

/// A shard: its lock and state, and the gets made without any lock that
/// the next holder applies. Cache-padded so that two shards' locks never
/// share a line.
pub(crate) struct Shard<T, H> {
    state: Mutex<ShardState<T, H>>,
    /// Gets made without the lock (FIFO): the shard's slot and the time,
    /// applied by the next holder of `state` before anything else.
    taken: SegQueue<(u32, u64)>,
}

pub(crate) type Shards<T, H> = Box<[CachePadded<Shard<T, H>>]>;

pub(crate) fn new_shards<T: Eq, H: Copy>(capacity: usize, timed: bool) -> Shards<T, H> {
    // Hashing spreads items unevenly over the shards: give each a little
    // more than its share so that a queue sized for its items never grows.
    let each = capacity.div_ceil(SHARDS);
    let each = each + each / 8;
    (0..SHARDS)
        .map(|_| {
            CachePadded::new(Shard {
                state: Mutex::new(ShardState {
                    table: ItemTable::with_capacity(each, SHARD_SLOTS),
                    metrics: QueueMetrics::new(timed),
                    processing: 0,
                }),
                taken: SegQueue::new(),
            })
        })
        .collect()
}

pub(crate) struct ShardState<T, H> {
    /// Slots here are the shard's own numbers.
    table: ItemTable<T, H>,
    pub(crate) metrics: QueueMetrics,
    /// Items of this shard being processed.
    pub(crate) processing: usize,
}

/// A shard's state, locked, with its queue-wide identity.
pub(crate) struct Locked<'a, T, H> {
    pub(crate) index: usize,
    pub(crate) state: MutexGuard<'a, ShardState<T, H>>,
}

impl<T: Eq, H: Copy> Shard<T, H> {
    /// Hold the shard's lock, with every get made without it applied.
    #[inline]
    pub(crate) fn lock(&self, index: usize) -> Locked<'_, T, H> {
        let mut state = lock(&self.state);
        while let Some((local, now)) = self.taken.pop() {
            state.start(local, now);
        }
        Locked { index, state }
    }

    /// Record a get made without the shard's lock.
    #[inline]
    pub(crate) fn record_taken(&self, slot: u32, now: u64) {
        self.taken.push((local(slot), now));
    }
}

impl<T: Eq, H: Copy> ShardState<T, H> {
    /// A worker took the item in the shard's slot `local` at `now`.
    fn start(&mut self, local: u32, now: u64) {
        self.processing += 1;
        self.metrics.on_get(local, now);
        self.table.entry_mut(local).phase = Phase::Running;
    }

    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        self.table.len()
    }
}

/// An item's state as the queue-wide code sees it: its queue-wide slot and
/// what its entry holds.
impl<T: Eq, H: Copy> Locked<'_, T, H> {
    /// The queue-wide slot of `item`, whose short hash is `hash`.
    #[inline]
    pub(crate) fn find(&self, hash: u32, item: &T) -> Option<u32> {
        let local = self.state.table.find(hash, item)?;
        Some(global(self.index, local))
    }

    /// Track an absent item; `None` when the shard is full.
    #[inline]
    pub(crate) fn insert(&mut self, hash: u32, item: T, hint: H) -> Option<u32> {
        let local = self.state.table.insert(hash, item, Phase::Idle, hint)?;
        Some(global(self.index, local))
    }

    /// Forget the item in `slot`.
    pub(crate) fn remove(&mut self, slot: u32) {
        self.state.table.remove(local(slot));
    }

    #[inline]
    pub(crate) fn entry(&self, slot: u32) -> &super::table::Entry<T, H> {
        self.state.table.entry(local(slot))
    }

    #[inline]
    pub(crate) fn entry_mut(&mut self, slot: u32) -> &mut super::table::Entry<T, H> {
        self.state.table.entry_mut(local(slot))
    }

    /// A worker took the item in `slot` at `now` (under this lock).
    #[inline]
    pub(crate) fn start(&mut self, slot: u32, now: u64) {
        self.state.start(local(slot), now);
    }

    /// The item in `slot` became dirty at `now`.
    #[inline]
    pub(crate) fn on_add(&mut self, slot: u32, now: u64) {
        self.state.metrics.on_add(local(slot), now);
    }

    /// The item in `slot` was done at `now`: one fewer processing. Returns
    /// how many of the shard's items are still processing.
    #[inline]
    pub(crate) fn finish(&mut self, slot: u32, now: u64) -> usize {
        self.state.processing -= 1;
        self.state.metrics.on_done(local(slot), now);
        self.state.processing
    }

    pub(crate) fn on_reject(&mut self) {
        self.state.metrics.on_reject();
    }
}
