//! The item table: every item the queue tracks (dirty, processing or
//! waiting), stored once in entries that never move ([`Slots`]), and a hash
//! index from item to slot that holds only 4-byte slot numbers ([`Index`]).
//! Both are read without the shard's lock by a FIFO queue's `done` and
//! `add` ([`Table::claim`]); every change of the table's shape (occupying,
//! freeing, indexing a slot) is made under the lock, through the
//! [`TableWriter`] that lives inside it.

use super::index::{Index, IndexWriter};
use super::slots::{Claim, Entry, Slots, SlotsWriter, Sweep};

/// No slot: the end of a list, an absent position.
pub(crate) const NONE: u32 = u32::MAX;

/// Where an item stands with respect to client-go's dirty and processing
/// sets. Waiting for a ready time is tracked apart, by the delay heap.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Neither dirty nor processing: only waiting for its ready time.
    Idle,
    /// Dirty and in the strategy.
    Queued,
    /// Processing and not dirty.
    Running,
    /// Processing and dirty again: queued once `done` is called, with the
    /// entry's `hint`.
    RunningDirty,
    /// Done, neither dirty nor waiting, and not added since: client-go
    /// forgets such an item. Its entry is kept so that an add soon after
    /// (a controller's retry, a re-queued key) finds it instead of
    /// inserting it again, and swept in batches (the shard's `kept`
    /// list). An add or a delayed add turns it back into [`Phase::Idle`]
    /// first; a `done` sees it as not processing. Not counted as tracked.
    Kept,
}

/// Reduce a full hash to the 32 bits stored beside the item.
#[inline]
pub(crate) fn short_hash(full: u64) -> u32 {
    (full >> 32) as u32 ^ full as u32
}

/// The lock-free readable part of a shard's item table.
pub(crate) struct Table<T, H> {
    slots: Slots<T, H>,
    index: Index,
}

/// The part of a shard's item table under its lock: holding `&mut` of it
/// is what the table's changing methods ask for.
pub(crate) struct TableWriter<T, H> {
    slots: SlotsWriter<T, H>,
    index: IndexWriter,
    /// Freed slots, reused first (most recently freed first).
    free: Vec<u32>,
    /// Slots below this number have been handed out at least once.
    high_water: u32,
    /// Slot numbers stay below this.
    limit: u32,
    /// Occupied entries.
    len: usize,
}

impl<T: Eq, H: Copy + Default> Table<T, H> {
    /// A table whose index holds `capacity` items before it first grows,
    /// and whose slot numbers stay below `limit`.
    pub(crate) fn with_capacity(capacity: usize, limit: u32) -> (Self, TableWriter<T, H>) {
        (
            Table {
                slots: Slots::new(),
                index: Index::with_capacity(capacity),
            },
            TableWriter {
                slots: SlotsWriter::new(),
                index: IndexWriter::new(),
                free: Vec::new(),
                high_water: 0,
                limit,
                len: 0,
            },
        )
    }

    /// The entry of `item` (whose short hash is `hash`), claimed. Without
    /// the lock this may miss an item that is there (the index's module
    /// docs); under it, it is exact. A hit is validated: the claim is
    /// held and the item compared under it.
    #[inline]
    pub(crate) fn claim(&self, hash: u32, item: &T) -> Option<(u32, Claim<'_, T, H>)> {
        let mut got = None;
        let slot = self.index.find(hash, |slot| {
            let Some(entry) = self.slots.get(slot) else {
                return false;
            };
            if entry.hash() != hash {
                return false;
            }
            // The broken twin for the loom models compares the item before
            // the claim, racing a sweep that drops it.
            #[cfg(apf_broken_wqfree = "claim")]
            if !entry.peek_item_unclaimed(item) {
                return false;
            }
            match entry.try_claim() {
                Some(claim) if claim.item() == item => {
                    got = Some(claim);
                    true
                }
                // Another item (the slot was reused) or a free entry: the
                // claim, if any, is released unchanged.
                _ => false,
            }
        })?;
        got.map(|claim| (slot, claim))
    }

    /// The entry of an occupied slot (from a claim, the strategy, the
    /// delay heap or a ticket).
    #[inline]
    pub(crate) fn entry(&self, slot: u32) -> &Entry<T, H> {
        self.slots.at(slot)
    }

    /// Whether `insert` would find no slot (under the lock).
    pub(crate) fn is_full(&self, w: &TableWriter<T, H>) -> bool {
        w.free.is_empty() && w.high_water >= w.limit
    }

    /// Store an item known to be absent, claimed (under the lock); `None`
    /// once `limit` items are held at once.
    pub(crate) fn insert(
        &self,
        w: &mut TableWriter<T, H>,
        hash: u32,
        item: T,
        phase: Phase,
        hint: H,
    ) -> Option<(u32, Claim<'_, T, H>)> {
        let slot = if let Some(slot) = w.free.pop() {
            slot
        } else if w.high_water < w.limit {
            w.high_water += 1;
            w.high_water - 1
        } else {
            return None;
        };
        let claim = self
            .slots
            .occupy(&mut w.slots, slot, hash, item, phase, hint);
        let slots = &self.slots;
        self.index
            .insert(&mut w.index, hash, slot, |s| slots.at(s).hash());
        w.len += 1;
        Some((slot, claim))
    }

    /// Forget the claimed item in `slot` (under the lock); the slot is
    /// reusable at once (the caller applied the shard's events after
    /// taking the claim, and no event can follow a free entry).
    pub(crate) fn remove(&self, w: &mut TableWriter<T, H>, slot: u32, claim: Claim<'_, T, H>) {
        self.unindex(w, slot);
        self.slots.vacate(claim);
        w.free.push(slot);
    }

    fn unindex(&self, w: &mut TableWriter<T, H>, slot: u32) {
        let slots = &self.slots;
        let hash = slots.at(slot).hash();
        self.index
            .remove(&mut w.index, hash, slot, |s| slots.at(s).hash());
        w.len -= 1;
    }

    /// Free `slot` if it is kept and unclaimed (under the lock). A freed
    /// slot is not reusable until [`Table::recycle`]: the caller first
    /// applies the metric events that claims pushed before it was freed.
    pub(crate) fn sweep(&self, w: &mut TableWriter<T, H>, slot: u32) -> Sweep {
        let found = self.slots.sweep(slot);
        if found == Sweep::Freed {
            self.unindex(w, slot);
        }
        found
    }

    /// Make a swept slot reusable (under the lock).
    pub(crate) fn recycle(&self, w: &mut TableWriter<T, H>, slot: u32) {
        w.free.push(slot);
    }

    /// Free the index's replaced arrays if no probe is on them (under the
    /// lock).
    #[inline]
    pub(crate) fn reclaim(&self, w: &mut TableWriter<T, H>) {
        self.index.reclaim(&mut w.index);
    }

    /// Wait until no claim is held on any slot (under the lock: shutdown).
    pub(crate) fn wait_unclaimed(&self, w: &TableWriter<T, H>) {
        self.slots.wait_unclaimed(w.high_water);
    }
}

impl<T, H> TableWriter<T, H> {
    /// Occupied entries, kept ones included.
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::workqueue::slots::Sweep;

    #[test]
    fn insert_claim_remove_and_reuse() {
        let (t, mut w) = Table::<u64, ()>::with_capacity(0, NONE);
        let (a, c) = t.insert(&mut w, 1, 10, Phase::Queued, ()).unwrap();
        drop(c);
        let (b, c) = t.insert(&mut w, 2, 20, Phase::Queued, ()).unwrap();
        drop(c);
        assert_ne!(a, b);
        assert_eq!(t.claim(1, &10).map(|(s, _)| s), Some(a));
        assert_eq!(t.claim(2, &20).map(|(s, _)| s), Some(b));
        assert!(t.claim(1, &20).is_none(), "same item, other hash");
        let (_, c) = t.claim(1, &10).unwrap();
        t.remove(&mut w, a, c);
        assert!(t.claim(1, &10).is_none());
        assert_eq!(w.len(), 1);
        let (c, claim) = t.insert(&mut w, 3, 30, Phase::Running, ()).unwrap();
        assert_eq!(c, a, "freed slots are reused first");
        assert_eq!(claim.phase(), Phase::Running);
    }

    #[test]
    fn many_items_with_colliding_short_hashes() {
        let (t, mut w) = Table::<u64, ()>::with_capacity(0, NONE);
        for i in 0..5000u64 {
            t.insert(&mut w, (i % 7) as u32, i, Phase::Queued, ())
                .unwrap();
        }
        for i in 0..5000u64 {
            let (_, c) = t.claim((i % 7) as u32, &i).expect("present");
            assert_eq!(*c.item(), i);
        }
        for i in (0..5000u64).step_by(2) {
            let (s, c) = t.claim((i % 7) as u32, &i).unwrap();
            t.remove(&mut w, s, c);
        }
        assert_eq!(w.len(), 2500);
        assert!(t.claim(0, &0).is_none());
        assert!(t.claim((4999 % 7) as u32, &4999).is_some());
    }

    #[test]
    fn a_swept_slot_waits_for_recycle() {
        let (t, mut w) = Table::<u64, ()>::with_capacity(0, 2);
        let (a, c) = t.insert(&mut w, 1, 10, Phase::Kept, ()).unwrap();
        drop(c);
        drop(t.insert(&mut w, 2, 20, Phase::Queued, ()).unwrap());
        assert!(t.is_full(&w));
        assert_eq!(t.sweep(&mut w, a), Sweep::Freed);
        assert!(t.is_full(&w), "not reusable before recycle");
        assert!(t.claim(1, &10).is_none());
        t.recycle(&mut w, a);
        assert_eq!(
            t.insert(&mut w, 3, 30, Phase::Idle, ()).map(|(s, _)| s),
            Some(a)
        );
    }
}
