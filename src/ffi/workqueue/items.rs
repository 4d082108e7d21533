//! Item handles: what `apf_wq_get` hands out and `apf_wq_done` takes back.
//!
//! # Handle encoding
//! As the request handles (`super::super::slab`): the low 32 bits are a slot
//! index plus one (so 0 is never a handle), the high 32 bits the slot's
//! generation, XORed with a per-queue salt so that a handle of another queue
//! is very unlikely to name a live item here. The index interleaves
//! [`SHARDS`] shards, each thread inserting into its own, so workers on
//! different threads do not contend on one lock.
//!
//! A slot holds the item's key (an `Arc`) while the item is processing: the
//! key pointer `apf_wq_get` returns stays valid until `apf_wq_done` of that
//! handle, whatever the queue does with its own copy. Done bumps the slot's
//! generation, so a second done of the same handle is detected; a free slot
//! is reused first in, first out, so the "already done" diagnosis lasts as
//! long as possible.

use crate::ffi::slab::{home_shard, SHARDS};
use crate::sync::{lock, Arc, AtomicUsize, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;

/// A queue item: an arbitrary byte string.
pub(crate) type Key = Arc<[u8]>;

struct Slot {
    generation: u32,
    key: Option<Key>,
}

#[derive(Default)]
struct Shard {
    slots: Vec<Slot>,
    /// Local indexes of free slots, oldest first.
    free: VecDeque<u32>,
}

/// Why a handle names no processing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Zero, never issued here, or its slot was reused since.
    Unknown,
    /// Its item was already done with this handle.
    Done,
}

/// The handles of one queue's processing items.
pub(crate) struct ItemSlab {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    salt: u32,
}

/// A salt that differs between queues of one process (and between runs).
fn fresh_salt() -> u32 {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    ahash::RandomState::new().hash_one(n) as u32
}

impl ItemSlab {
    pub(crate) fn new() -> ItemSlab {
        ItemSlab {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
            salt: fresh_salt(),
        }
    }

    fn encode(&self, generation: u32, index: usize) -> u64 {
        u64::from(generation ^ self.salt) << 32 | (index as u64 + 1)
    }

    /// Store `key` under a new handle; `None` when the handle space (2^32
    /// items processing at once) is exhausted.
    pub(crate) fn insert(&self, key: Key) -> Option<u64> {
        let shard_index = home_shard();
        let mut shard = lock(&self.shards[shard_index]);
        let local = match shard.free.pop_front() {
            Some(local) => {
                shard.slots[local as usize].key = Some(key);
                local as usize
            }
            None => {
                let local = shard.slots.len();
                // The low half of a handle is index + 1: the largest index
                // is u32::MAX - 1.
                if local * SHARDS + shard_index > (u32::MAX - 1) as usize {
                    return None;
                }
                shard.slots.push(Slot {
                    generation: 0,
                    key: Some(key),
                });
                local
            }
        };
        let generation = shard.slots[local].generation;
        Some(self.encode(generation, local * SHARDS + shard_index))
    }

    /// Retire `handle`, giving back its key.
    pub(crate) fn remove(&self, handle: u64) -> Result<Key, Stale> {
        let index = (handle as u32).checked_sub(1).ok_or(Stale::Unknown)? as usize;
        let generation = (handle >> 32) as u32 ^ self.salt;
        let (shard_index, local) = (index % SHARDS, index / SHARDS);
        let mut shard = lock(&self.shards[shard_index]);
        let slot = shard.slots.get_mut(local).ok_or(Stale::Unknown)?;
        if slot.key.is_some() && slot.generation == generation {
            slot.generation = slot.generation.wrapping_add(1);
            let key = slot.key.take();
            shard.free.push_back(local as u32);
            return key.ok_or(Stale::Unknown);
        }
        if slot.key.is_none() && slot.generation == generation.wrapping_add(1) {
            return Err(Stale::Done);
        }
        Err(Stale::Unknown)
    }

    /// Handles live now (items processing through the C ABI).
    pub(crate) fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.slots.len() - s.free.len()
            })
            .sum()
    }

    /// Panic while holding the calling thread's shard lock (the
    /// panic-boundary test).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn panic_while_locked(&self) {
        let _shard = lock(&self.shards[home_shard()]);
        panic!("apf_wq_test_panic: deliberate panic while holding an item-handle lock");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_once() {
        let slab = ItemSlab::new();
        let key: Key = Arc::from(&b"a"[..]);
        let h = slab.insert(key.clone()).unwrap();
        assert_ne!(h, 0);
        assert_eq!(slab.live(), 1);
        assert_eq!(slab.remove(h).unwrap(), key);
        assert_eq!(slab.remove(h), Err(Stale::Done));
        assert_eq!(slab.remove(0), Err(Stale::Unknown));
        assert_eq!(slab.remove(h + 1), Err(Stale::Unknown));
        assert_eq!(slab.live(), 0);
        // The slot is reused with a new generation: the old handle stays
        // stale.
        let h2 = slab.insert(key).unwrap();
        assert_ne!(h2, h);
        assert_eq!(slab.remove(h), Err(Stale::Unknown));
        assert!(slab.remove(h2).is_ok());
    }

    #[test]
    fn another_slabs_handle_is_not_this_slabs() {
        let (a, b) = (ItemSlab::new(), ItemSlab::new());
        assert_ne!(a.salt, b.salt, "salts are drawn per slab");
        let ha = a.insert(Arc::from(&b"x"[..])).unwrap();
        b.insert(Arc::from(&b"y"[..])).unwrap();
        assert_eq!(b.remove(ha), Err(Stale::Unknown));
    }
}
