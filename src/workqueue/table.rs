//! The item table: every item the queue tracks (dirty, processing or
//! waiting), stored once in a slab of slots, and a hash index from item to
//! slot that holds only 4-byte slot numbers.

use super::chunk::ChunkVec;
use hashbrown::HashTable;

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

pub(crate) struct Entry<T, H> {
    pub(crate) item: T,
    /// The item's hash, kept so that growing the index never hashes items
    /// again and lookups compare hashes before items.
    hash: u32,
    pub(crate) phase: Phase,
    /// The hint to queue the item with once `done` is called
    /// ([`Phase::RunningDirty`]).
    pub(crate) hint: H,
    /// Whether the item is in the delay heap (kept here so that `done`
    /// can tell, under the item's shard lock alone, whether to forget it).
    pub(crate) delayed: bool,
}

enum SlotEntry<T, H> {
    Vacant { next_free: u32 },
    Occupied(Entry<T, H>),
}

impl<T, H> Default for SlotEntry<T, H> {
    fn default() -> Self {
        SlotEntry::Vacant { next_free: NONE }
    }
}

pub(crate) struct ItemTable<T, H> {
    slots: ChunkVec<SlotEntry<T, H>>,
    index: HashTable<u32>,
    free_head: u32,
    /// Slots below this number have been handed out at least once.
    high_water: u32,
    /// Slot numbers stay below this.
    limit: u32,
    len: usize,
}

/// Spread a 32-bit hash over the 64 bits the index reads: its low bits pick
/// the bucket and its top 7 bits are the bucket's tag.
#[inline]
fn spread(h: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(h)
}

/// Reduce a full hash to the 32 bits stored beside the item.
#[inline]
pub(crate) fn short_hash(full: u64) -> u32 {
    (full >> 32) as u32 ^ full as u32
}

impl<T: Eq, H: Copy> ItemTable<T, H> {
    /// A table whose index holds `capacity` items before it first grows,
    /// and whose slot numbers stay below `limit`.
    pub(crate) fn with_capacity(capacity: usize, limit: u32) -> Self {
        ItemTable {
            slots: ChunkVec::new(),
            index: HashTable::with_capacity(capacity),
            free_head: NONE,
            high_water: 0,
            limit,
            len: 0,
        }
    }

    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot holding `item`, whose short hash is `hash`.
    pub(crate) fn find(&self, hash: u32, item: &T) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(spread(hash), |&s| match slots.get(s as usize) {
                Some(SlotEntry::Occupied(e)) => e.hash == hash && e.item == *item,
                _ => false,
            })
            .copied()
    }

    /// Whether `insert` would find no slot.
    pub(crate) fn is_full(&self) -> bool {
        self.free_head == NONE && self.high_water >= self.limit
    }

    /// Store an item known to be absent; `None` once `limit` items are
    /// tracked at once.
    pub(crate) fn insert(&mut self, hash: u32, item: T, phase: Phase, hint: H) -> Option<u32> {
        let slot = if self.free_head != NONE {
            let slot = self.free_head;
            if let SlotEntry::Vacant { next_free } = *self.slots.at(slot as usize) {
                self.free_head = next_free;
            }
            slot
        } else if self.high_water < self.limit {
            self.high_water += 1;
            self.high_water - 1
        } else {
            return None;
        };
        *self.slots.at(slot as usize) = SlotEntry::Occupied(Entry {
            item,
            hash,
            phase,
            hint,
            delayed: false,
        });
        let slots = &self.slots;
        self.index
            .insert_unique(spread(hash), slot, |&s| match slots.get(s as usize) {
                Some(SlotEntry::Occupied(e)) => spread(e.hash),
                _ => 0,
            });
        self.len += 1;
        Some(slot)
    }

    /// Forget the item in `slot`.
    pub(crate) fn remove(&mut self, slot: u32) {
        let hash = match self.slots.get(slot as usize) {
            Some(SlotEntry::Occupied(e)) => e.hash,
            _ => return,
        };
        if let Ok(found) = self.index.find_entry(spread(hash), |&s| s == slot) {
            found.remove();
        }
        *self.slots.at(slot as usize) = SlotEntry::Vacant {
            next_free: self.free_head,
        };
        self.free_head = slot;
        self.len -= 1;
    }

    /// The entry in `slot`, if the slot is occupied.
    #[inline]
    pub(crate) fn get(&self, slot: u32) -> Option<&Entry<T, H>> {
        match self.slots.get(slot as usize) {
            Some(SlotEntry::Occupied(e)) => Some(e),
            _ => None,
        }
    }

    /// The entry in an occupied slot.
    ///
    /// Slots come from `find`, `insert` or a structure that only holds
    /// occupied slots (strategy, delay heap), so a vacant slot here is a bug
    /// in this module, not bad input.
    #[inline]
    pub(crate) fn entry(&self, slot: u32) -> &Entry<T, H> {
        match self.slots.get(slot as usize) {
            Some(SlotEntry::Occupied(e)) => e,
            _ => unreachable!("slot {slot} is not occupied"),
        }
    }

    #[inline]
    pub(crate) fn entry_mut(&mut self, slot: u32) -> &mut Entry<T, H> {
        match self.slots.at(slot as usize) {
            SlotEntry::Occupied(e) => e,
            SlotEntry::Vacant { .. } => unreachable!("slot {slot} is not occupied"),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_and_reuse() {
        let mut t: ItemTable<u64, ()> = ItemTable::with_capacity(0, NONE);
        let a = t.insert(1, 10, Phase::Queued, ()).unwrap();
        let b = t.insert(2, 20, Phase::Queued, ()).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.find(1, &10), Some(a));
        assert_eq!(t.find(2, &20), Some(b));
        assert_eq!(t.find(1, &20), None, "same item, other hash");
        t.remove(a);
        assert_eq!(t.find(1, &10), None);
        assert_eq!(t.len(), 1);
        let c = t.insert(3, 30, Phase::Running, ()).unwrap();
        assert_eq!(c, a, "freed slots are reused first");
        assert_eq!(t.entry(c).phase, Phase::Running);
    }

    #[test]
    fn many_items_with_colliding_short_hashes() {
        let mut t: ItemTable<u64, ()> = ItemTable::with_capacity(0, NONE);
        for i in 0..5000u64 {
            t.insert((i % 7) as u32, i, Phase::Queued, ()).unwrap();
        }
        for i in 0..5000u64 {
            let s = t.find((i % 7) as u32, &i).expect("present");
            assert_eq!(t.entry(s).item, i);
        }
        for i in (0..5000u64).step_by(2) {
            let s = t.find((i % 7) as u32, &i).unwrap();
            t.remove(s);
        }
        assert_eq!(t.len(), 2500);
        assert_eq!(t.find(0, &0), None);
        assert!(t.find((4999 % 7) as u32, &4999).is_some());
    }

    #[test]
    fn the_slot_entry_costs_no_tag_beyond_the_entry() {
        // The vacant variant's free link fits around the phase byte's niche,
        // so a slot is no bigger than the entry it holds.
        assert_eq!(
            std::mem::size_of::<SlotEntry<u64, ()>>(),
            std::mem::size_of::<Entry<u64, ()>>()
        );
    }
}
