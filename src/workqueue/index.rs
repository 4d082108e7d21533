//! A shard's hash index from item to slot, written under the shard's lock
//! and probed without it: an open-addressed array (linear probing) of
//! `AtomicU32` slot numbers.
//!
//! Without the lock a probe may **miss** an item that is there (a removal
//! shifting entries back, a growth publishing a new array) or **find a
//! slot that holds another item by now** (freed and reused since). Both are
//! safe for its callers: a miss sends the caller to the locked path, and
//! every lock-free hit is validated by a claim on the entry and an item
//! comparison (src/workqueue/slots.rs). Under the lock the index is exact.
//!
//! Invariants:
//! 1. Only the lock holder stores into an array or replaces it.
//! 2. An array, once published, is freed only when no probe can be on it:
//!    a replaced one goes to the writer's `retired` list, and the lock
//!    holder frees that list ([`Index::reclaim`]) only when it reads the
//!    index's reader count as zero *after* the replacement. A probe counts
//!    itself before it loads the array and uncounts after its last read of
//!    it. Every access to the count is a read-modify-write (the reclaim's
//!    read is a `fetch_add` of zero), so the count's modification order
//!    decides, with no `SeqCst`: if the reclaim's RMW comes before a
//!    probe's count, the count reads from it (`AcqRel`), so the swap that
//!    published the new array happens before the probe's load, which sees
//!    the new array; if after, the reclaim reads the count (non-zero, or
//!    zero from the probe's `Release` uncount, after its last read) and
//!    frees only in the second case. A reclaim that keeps
//!    finding readers keeps the list (growth doubles, so the retired
//!    arrays together are smaller than the current one) and tries again at
//!    the next lock acquisition. The broken twin for the loom models
//!    (`--cfg apf_broken_wqfree="reclaim"`) frees without reading the
//!    count.
//! 3. A slot number is stored (`Release`) after its entry was occupied, so
//!    a reader that loads it (`Acquire`) finds the entry's chunk.
//! 4. No tombstones: a removal shifts later entries of its run back
//!    (backward-shift deletion), so the load factor counts live entries
//!    only and nothing rehashes at the same size (which would retire an
//!    array per rehash).

use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::ptr;

/// An empty bucket.
const EMPTY: u32 = u32::MAX;

struct Buckets {
    mask: usize,
    slots: Box<[AtomicU32]>,
    /// Set when reclaimed. Under loom and shuttle a reclaimed array is kept, marked,
    /// and a probe asserts it never reads one (invariant 2); otherwise it
    /// is freed and the flag is never read.
    reclaimed: AtomicBool,
}

impl Buckets {
    fn with_len(len: usize) -> Box<Self> {
        Box::new(Buckets {
            mask: len - 1,
            slots: (0..len).map(|_| AtomicU32::new(EMPTY)).collect(),
            reclaimed: AtomicBool::new(false),
        })
    }

    #[inline]
    fn home(&self, hash: u32) -> usize {
        hash as usize & self.mask
    }
}

pub(crate) struct Index {
    current: AtomicPtr<Buckets>,
    /// Probes under way (invariant 2).
    readers: AtomicUsize,
}

/// The parts of [`Index`] only the shard's lock holder touches.
pub(crate) struct IndexWriter {
    live: usize,
    /// Arrays replaced by a bigger one (invariant 2). Boxed: probes hold
    /// `&Buckets`, which must not move.
    #[allow(clippy::vec_box)]
    retired: Vec<Box<Buckets>>,
    /// Under loom and shuttle: reclaimed arrays, marked and kept (see `Buckets`).
    #[allow(clippy::vec_box)]
    kept_for_models: Vec<Box<Buckets>>,
}

impl IndexWriter {
    pub(crate) fn new() -> Self {
        IndexWriter {
            live: 0,
            retired: Vec::new(),
            kept_for_models: Vec::new(),
        }
    }
}

/// Buckets for `items` entries at the maximum load of 3/4.
fn buckets_for(items: usize) -> usize {
    (items + items / 3 + 1).next_power_of_two().max(8)
}

impl Index {
    /// An index that holds `capacity` items before it first grows.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Index {
            current: AtomicPtr::new(Box::into_raw(Buckets::with_len(buckets_for(capacity)))),
            readers: AtomicUsize::new(0),
        }
    }

    /// The current array, for the lock holder (who alone replaces and
    /// frees arrays).
    #[inline]
    fn buckets(&self) -> &Buckets {
        // SAFETY: invariant 1: only the lock holder, the caller, replaces
        // or frees an array, so the current one lives while it holds `&self`.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The first slot of `hash`'s run that `hit` accepts. Without the lock:
    /// may miss (module docs), and `hit` must validate what it is given.
    #[inline]
    pub(crate) fn find(&self, hash: u32, hit: impl FnMut(u32) -> bool) -> Option<u32> {
        self.readers.fetch_add(1, Ordering::Acquire);
        // SAFETY: counted before the load (invariant 2): the array is not
        // freed until this probe is uncounted below.
        let b = unsafe { &*self.current.load(Ordering::Acquire) };
        let found = probe(b, hash, hit);
        self.readers.fetch_sub(1, Ordering::Release);
        found
    }

    /// Add `slot`, whose item hashes to `hash` (under the lock).
    /// `hash_of` gives the hash of a slot already in the index.
    pub(crate) fn insert(
        &self,
        w: &mut IndexWriter,
        hash: u32,
        slot: u32,
        hash_of: impl Fn(u32) -> u32,
    ) {
        let mut b = self.buckets();
        if (w.live + 1) * 4 > b.slots.len() * 3 {
            self.grow(w, &hash_of);
            b = self.buckets();
        }
        place(b, hash, slot);
        w.live += 1;
    }

    /// Double the array and publish it (under the lock).
    #[cold]
    fn grow(&self, w: &mut IndexWriter, hash_of: &impl Fn(u32) -> u32) {
        let old = self.buckets();
        let new = Buckets::with_len(old.slots.len() * 2);
        for s in old.slots.iter() {
            let slot = s.load(Ordering::Relaxed);
            if slot != EMPTY {
                place(&new, hash_of(slot), slot);
            }
        }
        let old = self.current.swap(Box::into_raw(new), Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw` and is unpublished now;
        // probes may still be on it, so it waits for `reclaim`.
        w.retired.push(unsafe { Box::from_raw(old) });
    }

    /// Free the replaced arrays if no probe can be on them (under the
    /// lock; invariant 2).
    #[inline]
    pub(crate) fn reclaim(&self, w: &mut IndexWriter) {
        if w.retired.is_empty() {
            return;
        }
        // A read-modify-write, ordered after the swaps that retired the
        // arrays (invariant 2); the broken twin reads nothing.
        if !cfg!(apf_broken_wqfree = "reclaim") && self.readers.fetch_add(0, Ordering::AcqRel) != 0
        {
            return;
        }
        if cfg!(any(loom, shuttle)) {
            for b in &w.retired {
                b.reclaimed.store(true, Ordering::Relaxed);
            }
            // Kept (marked) so that a probe that should not be on it is
            // caught rather than reading freed memory.
            w.kept_for_models.append(&mut w.retired);
        } else {
            w.retired.clear();
        }
    }

    /// Remove `slot`, whose item hashes to `hash` (under the lock).
    pub(crate) fn remove(
        &self,
        w: &mut IndexWriter,
        hash: u32,
        slot: u32,
        hash_of: impl Fn(u32) -> u32,
    ) {
        let b = self.buckets();
        let mut i = b.home(hash);
        loop {
            match b.slots[i].load(Ordering::Relaxed) {
                EMPTY => return,
                s if s == slot => break,
                _ => i = (i + 1) & b.mask,
            }
        }
        w.live -= 1;
        // Backward shift: move later entries of the run into the hole
        // unless that would put one before its home.
        let mut j = i;
        loop {
            j = (j + 1) & b.mask;
            let s = b.slots[j].load(Ordering::Relaxed);
            if s == EMPTY {
                break;
            }
            let k = b.home(hash_of(s));
            let stays = if i <= j {
                i < k && k <= j
            } else {
                i < k || k <= j
            };
            if !stays {
                b.slots[i].store(s, Ordering::Release);
                i = j;
            }
        }
        b.slots[i].store(EMPTY, Ordering::Release);
    }
}

/// The first slot of `hash`'s run in `b` that `hit` accepts.
#[inline]
fn probe(b: &Buckets, hash: u32, mut hit: impl FnMut(u32) -> bool) -> Option<u32> {
    let mut i = b.home(hash);
    let mut found = None;
    for _ in 0..=b.mask {
        let slot = b.slots[i].load(Ordering::Acquire);
        if slot == EMPTY {
            break;
        }
        if hit(slot) {
            found = Some(slot);
            break;
        }
        i = (i + 1) & b.mask;
    }
    if cfg!(any(loom, shuttle)) {
        // After the probe's last read of the array (invariant 2).
        assert!(
            !b.reclaimed.load(Ordering::Relaxed),
            "a probe read a reclaimed index array"
        );
    }
    found
}

/// Store `slot` in the first empty bucket of its run (under the lock).
fn place(b: &Buckets, hash: u32, slot: u32) {
    let mut i = b.home(hash);
    while b.slots[i].load(Ordering::Relaxed) != EMPTY {
        i = (i + 1) & b.mask;
    }
    b.slots[i].store(slot, Ordering::Release);
}

impl Drop for Index {
    fn drop(&mut self) {
        let current = self.current.load(Ordering::Relaxed);
        if !current.is_null() {
            // SAFETY: `&mut self`: no reader remains; from `Box::into_raw`.
            drop(unsafe { Box::from_raw(current) });
            self.current.store(ptr::null_mut(), Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_with_collisions_and_growth() {
        let idx = Index::with_capacity(0);
        let mut w = IndexWriter::new();
        let hash_of = |s: u32| s % 7;
        for s in 0..3000u32 {
            idx.insert(&mut w, hash_of(s), s, hash_of);
        }
        for s in 0..3000u32 {
            assert_eq!(idx.find(hash_of(s), |x| x == s), Some(s));
        }
        for s in (0..3000u32).step_by(2) {
            idx.remove(&mut w, hash_of(s), s, hash_of);
        }
        for s in 0..3000u32 {
            let found = idx.find(hash_of(s), |x| x == s);
            assert_eq!(found.is_some(), s % 2 == 1, "slot {s}");
        }
        assert_eq!(w.live, 1500);
        assert!(!w.retired.is_empty());
        idx.reclaim(&mut w);
        assert!(w.retired.is_empty(), "no probe under way: freed");
        assert_eq!(idx.find(hash_of(1), |x| x == 1), Some(1));
    }

    #[test]
    fn removal_keeps_runs_that_wrap_around() {
        let idx = Index::with_capacity(0); // 8 buckets
        let mut w = IndexWriter::new();
        let hash_of = |s: u32| if s < 3 { 6 } else { 7 };
        for s in 0..5 {
            idx.insert(&mut w, hash_of(s), s, hash_of);
        }
        idx.remove(&mut w, 6, 0, hash_of);
        idx.remove(&mut w, 7, 3, hash_of);
        for s in [1, 2, 4] {
            assert_eq!(idx.find(hash_of(s), |x| x == s), Some(s));
        }
        assert_eq!(idx.find(6, |x| x == 0), None);
    }
}
