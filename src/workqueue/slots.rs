//! A shard's item slots: entries that never move, each with an atomic
//! state word, so that a FIFO queue's `done` and `add` can reach an entry
//! without the shard's lock (docs/scaling.md, "Done and add that never wait
//! for a descheduled thread").
//!
//! # The state word and what it guards
//!
//! Each [`Entry`] holds its item, hint, hash and a 32-bit state word: the
//! [`Phase`] (or free), a *delayed* bit (the item is in the delay heap) and
//! a *busy* bit. Busy is a per-item lock, taken by compare-and-swap from a
//! state that is neither free nor busy ([`Entry::try_claim`]) and released
//! by one store of the new state ([`Claim`]'s drop, `Release`).
//!
//! Invariants:
//! 1. **An entry leaves the free state only under its shard's lock**
//!    (`Slots::occupy`, which writes the item, hash and hint first and
//!    publishes the state with the busy bit set), and **enters it only
//!    under the shard's lock**, either from a claim the lock holder holds
//!    ([`Claim::free`]) or by a compare-and-swap from not-busy
//!    [`Phase::Kept`] ([`Entry::free_if_kept`]). So a claimed entry is
//!    never freed, and the item is written only while the entry is free.
//! 2. **The item is read without the shard's lock only inside a claim**
//!    (after the `Acquire` CAS that set busy, which reads from the store
//!    that published the item): by invariant 1 it is then neither dropped
//!    nor overwritten. Under the shard's lock the item of an occupied
//!    entry may be read without a claim (nothing else writes it).
//! 3. **The phase, the delayed bit and the hint change only inside a
//!    claim**, locked or not, so one item's changes are serialised, and
//!    whatever a claim wrote (its metric events included) is visible to
//!    the next claim and to the CAS that frees the entry (`Release` store,
//!    `Acquire` CAS).
//! 4. The hash is written only while the entry is free (under the lock)
//!    and read without it only as a hint (`Relaxed`): a stale hash costs a
//!    failed claim or a miss, never a wrong answer, since every hit is
//!    validated by the claim and an item comparison.
//!
//! # Storage that never moves
//!
//! Slot numbers map onto chunks: 16, 16, 32 and seven of 64 entries (the
//! first 512 slots, so that the many small shards of a big queue waste at
//! most 63 slots each), then chunks of 512. Chunks are allocated under the lock and
//! published through an `AtomicPtr` in a directory; the directory grows by
//! doubling, and a replaced directory is kept until the table drops (the
//! sum of the old ones is less than the current one). Nothing is freed
//! before the table drops, so a reader holding `&Slots` may follow any
//! pointer it loaded (`Acquire`, pairing with the `Release` publication).

use super::table::Phase;
use crate::sync::{spin_hint, thread, AtomicPtr, AtomicU32, Ordering, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr;

/// The phase bits of a state word; zero is a free entry.
const PHASE: u32 = 0b111;
const FREE: u32 = 0;
/// The item is in the delay heap.
const DELAYED: u32 = 1 << 3;
/// A claim is held.
const BUSY: u32 = 1 << 4;

fn bits(phase: Phase) -> u32 {
    match phase {
        Phase::Idle => 1,
        Phase::Queued => 2,
        Phase::Running => 3,
        Phase::RunningDirty => 4,
        Phase::Kept => 5,
    }
}

fn phase_of(word: u32) -> Phase {
    match word & PHASE {
        1 => Phase::Idle,
        2 => Phase::Queued,
        3 => Phase::Running,
        4 => Phase::RunningDirty,
        5 => Phase::Kept,
        _ => unreachable!("a claimed entry is never free"),
    }
}

/// One slot: see the module docs for what guards each field.
pub(crate) struct Entry<T, H> {
    state: AtomicU32,
    hash: AtomicU32,
    item: UnsafeCell<MaybeUninit<T>>,
    hint: UnsafeCell<H>,
}

impl<T, H: Default> Entry<T, H> {
    fn vacant() -> Self {
        Entry {
            state: AtomicU32::new(FREE),
            hash: AtomicU32::new(0),
            item: UnsafeCell::new(MaybeUninit::uninit()),
            hint: UnsafeCell::new(H::default()),
        }
    }
}

/// One wait for a claim's release: spin a while (a claim is a few dozen
/// instructions), then yield, so that with more threads than cores the
/// holder, if it was descheduled inside its claim, gets a core back.
#[inline]
fn wait_a_little(spins: &mut u32) {
    if *spins < 64 {
        *spins += 1;
        spin_hint();
    } else {
        thread::yield_now();
    }
}

/// What [`Entry::free_if_kept`] found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sweep {
    /// Freed: the caller owns the item and must drop it.
    Freed,
    /// Kept, but claimed now: look again at the next sweep.
    Busy,
    /// Not kept (re-added since, or freed).
    NotKept,
}

impl<T, H: Copy> Entry<T, H> {
    /// The hash stored with the item (a hint without the lock: invariant 4).
    #[inline]
    pub(crate) fn hash(&self) -> u32 {
        self.hash.load(Ordering::Relaxed)
    }

    /// Take the entry's busy bit, waiting while another claim holds it
    /// (a claim is a few dozen instructions on one item); `None` if the
    /// entry is free.
    #[inline]
    pub(crate) fn try_claim(&self) -> Option<Claim<'_, T, H>> {
        let mut word = self.state.load(Ordering::Relaxed);
        let mut spins = 0u32;
        loop {
            if word & PHASE == FREE {
                return None;
            }
            if word & BUSY != 0 {
                wait_a_little(&mut spins);
                word = self.state.load(Ordering::Relaxed);
                continue;
            }
            // Acquire: reads from the store that published the item
            // (occupy) or released the previous claim (invariants 2, 3).
            match self.state.compare_exchange(
                word,
                word | BUSY,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Claim { entry: self, word }),
                Err(now) => word = now,
            }
        }
    }

    /// The broken twin's comparison without a claim (never built
    /// otherwise): a data race with a sweep that loom's cells catch.
    #[cfg(apf_broken_wqfree = "claim")]
    pub(crate) fn peek_item_unclaimed(&self, item: &T) -> bool
    where
        T: Eq,
    {
        if self.state.load(Ordering::Relaxed) & PHASE == FREE {
            return false;
        }
        // SAFETY: none: this is the deliberately broken twin.
        self.item
            .with(|p| unsafe { (*p).assume_init_ref() == item })
    }

    /// Free a kept, unclaimed entry (under the shard's lock: invariant 1).
    /// On [`Sweep::Freed`] the caller owns the item: drop it with
    /// [`Entry::drop_item`] before the slot is reused.
    pub(crate) fn free_if_kept(&self) -> Sweep {
        let kept = bits(Phase::Kept);
        // Acquire: everything the last claim did (its metric events) is
        // visible to the sweep, which applies the events before reuse.
        match self
            .state
            .compare_exchange(kept, FREE, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Sweep::Freed,
            Err(word) if word & PHASE == bits(Phase::Kept) => Sweep::Busy,
            Err(_) => Sweep::NotKept,
        }
    }

    /// Drop the item of an entry the caller has just freed.
    ///
    /// # Safety
    /// The caller holds the shard's lock and freed the entry itself
    /// ([`Entry::free_if_kept`] returned `Freed`, or [`Claim::free`]), so
    /// no claim can be taken on it (invariant 1) and the item was live.
    unsafe fn drop_item(&self) {
        // SAFETY: see the function's contract; the item was initialised by
        // `occupy` and is dropped once, as the entry is free from now on.
        self.item
            .with_mut(|p| unsafe { ptr::drop_in_place((*p).as_mut_ptr()) });
    }
}

/// A held busy bit: the claim's view of the entry, written back by drop.
pub(crate) struct Claim<'a, T, H> {
    entry: &'a Entry<T, H>,
    /// The state to store when the claim ends (without the busy bit).
    word: u32,
}

impl<'a, T, H: Copy> Claim<'a, T, H> {
    #[inline]
    pub(crate) fn phase(&self) -> Phase {
        phase_of(self.word)
    }

    #[inline]
    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.word = (self.word & !PHASE) | bits(phase);
    }

    #[inline]
    pub(crate) fn delayed(&self) -> bool {
        self.word & DELAYED != 0
    }

    #[inline]
    pub(crate) fn set_delayed(&mut self, delayed: bool) {
        if delayed {
            self.word |= DELAYED;
        } else {
            self.word &= !DELAYED;
        }
    }

    /// The item (invariant 2: not dropped nor written while claimed).
    #[inline]
    pub(crate) fn item(&self) -> &'a T {
        // SAFETY: the entry is occupied (a claim is taken only from an
        // occupied state) and, while busy, neither freed nor written
        // (module invariants 1 and 2); `occupy` initialised the item
        // before publishing the state this claim read (Acquire).
        self.entry.item.with(|p| unsafe { (*p).assume_init_ref() })
    }

    /// The hint kept for a re-queue (`RunningDirty`).
    #[inline]
    pub(crate) fn hint(&self) -> H {
        // SAFETY: the hint is read and written only inside a claim
        // (invariant 3), and this claim holds the busy bit.
        self.entry.hint.with(|p| unsafe { *p })
    }

    #[inline]
    pub(crate) fn set_hint(&mut self, hint: H) {
        // SAFETY: as for `hint`: only a claim touches it.
        self.entry.hint.with_mut(|p| unsafe { *p = hint });
    }

    /// Free the entry (under the shard's lock: the caller is
    /// `Slots::vacate`). The item is dropped.
    fn free(self) {
        let entry = self.entry;
        std::mem::forget(self);
        entry.state.store(FREE, Ordering::Release);
        // SAFETY: this claim held the busy bit, so no other claim exists
        // and none can be taken now that the entry is free; the caller
        // holds the shard's lock (`vacate`).
        unsafe { entry.drop_item() };
    }
}

impl<T, H> Drop for Claim<'_, T, H> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next claim or the sweep's CAS sees what this one did.
        self.entry.state.store(self.word, Ordering::Release);
    }
}

/// The first 512 slots are in 10 chunks (16, 16, 32, then 64s), so that
/// a small shard wastes at most 63 slots; the rest in chunks of 512.
const HEAD_CHUNKS: usize = 10;
const CHUNK_BITS: u32 = 9;
const CHUNK: usize = 1 << CHUNK_BITS;

/// The chunk of `slot` and its offset there.
#[inline]
fn locate(slot: u32) -> (usize, usize) {
    let s = slot as usize;
    if s < 32 {
        (s >> 4, s & 15)
    } else if s < 64 {
        (2, s - 32)
    } else if s < CHUNK {
        (2 + (s >> 6), s & 63)
    } else {
        ((s >> CHUNK_BITS) + HEAD_CHUNKS - 1, s & (CHUNK - 1))
    }
}

fn chunk_len(chunk: usize) -> usize {
    match chunk {
        0 | 1 => 16,
        2 => 32,
        c if c < HEAD_CHUNKS => 64,
        _ => CHUNK,
    }
}

struct Dir<T, H> {
    chunks: Box<[AtomicPtr<Entry<T, H>>]>,
}

impl<T, H> Dir<T, H> {
    fn with_len(len: usize) -> Box<Self> {
        Box::new(Dir {
            chunks: (0..len).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
        })
    }
}

/// A shard's entries, readable without its lock (module docs).
pub(crate) struct Slots<T, H> {
    dir: AtomicPtr<Dir<T, H>>,
}

/// The parts of [`Slots`] only the shard's lock holder touches.
pub(crate) struct SlotsWriter<T, H> {
    /// Directories replaced by a bigger one, freed with the table. Boxed:
    /// readers hold `&Dir`, which must not move.
    #[allow(clippy::vec_box)]
    retired: Vec<Box<Dir<T, H>>>,
}

impl<T, H> SlotsWriter<T, H> {
    pub(crate) fn new() -> Self {
        SlotsWriter {
            retired: Vec::new(),
        }
    }
}

// SAFETY: entries hold `T` and `H` values that threads reach through
// `&Slots`: items are shared by reference (`T: Sync`) and moved into and
// out of the table by other threads (`T: Send`); hints likewise.
unsafe impl<T: Send + Sync, H: Send + Sync> Send for Slots<T, H> {}
// SAFETY: as above; every shared access follows the module's invariants.
unsafe impl<T: Send + Sync, H: Send + Sync> Sync for Slots<T, H> {}
// SAFETY: the writer only owns directories of pointers (see `Slots`).
unsafe impl<T: Send + Sync, H: Send + Sync> Send for SlotsWriter<T, H> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync, H: Send + Sync> Sync for SlotsWriter<T, H> {}

impl<T, H: Copy + Default> Slots<T, H> {
    pub(crate) fn new() -> Self {
        Slots {
            dir: AtomicPtr::new(Box::into_raw(Dir::with_len(HEAD_CHUNKS + 2))),
        }
    }

    /// The entry of `slot`, if its chunk exists (without the lock).
    #[inline]
    pub(crate) fn get(&self, slot: u32) -> Option<&Entry<T, H>> {
        let (chunk, offset) = locate(slot);
        // SAFETY: a directory, once published, lives until the table
        // drops (retired ones with the writer, which the shard drops
        // with the table); Acquire pairs with its publication.
        let dir = unsafe { &*self.dir.load(Ordering::Acquire) };
        let base = dir.chunks.get(chunk)?.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: `base` points to `chunk_len(chunk)` entries, published
        // (Release) after they were initialised and never freed before
        // the table drops; `offset < chunk_len(chunk)` by `locate`.
        Some(unsafe { &*base.add(offset) })
    }

    /// The entry of a slot handed out by `occupy` (under the lock, or
    /// from a structure that holds only occupied slots).
    #[inline]
    pub(crate) fn at(&self, slot: u32) -> &Entry<T, H> {
        match self.get(slot) {
            Some(e) => e,
            None => unreachable!("slot {slot} was never handed out"),
        }
    }

    /// Make `slot` addressable (under the lock).
    fn ensure(&self, writer: &mut SlotsWriter<T, H>, slot: u32) -> &Entry<T, H> {
        let (chunk, _) = locate(slot);
        // SAFETY: as in `get`; only the lock holder replaces it.
        let dir = unsafe { &*self.dir.load(Ordering::Acquire) };
        if chunk >= dir.chunks.len() {
            let bigger = Dir::with_len((chunk + 1).next_power_of_two());
            for (new, old) in bigger.chunks.iter().zip(dir.chunks.iter()) {
                new.store(old.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            let old = self.dir.swap(Box::into_raw(bigger), Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and is no longer
            // published; readers that loaded it may still use it, so it
            // is kept (not freed) until the table drops.
            writer.retired.push(unsafe { Box::from_raw(old) });
            return self.ensure(writer, slot);
        }
        if dir.chunks[chunk].load(Ordering::Relaxed).is_null() {
            let entries: Box<[Entry<T, H>]> =
                (0..chunk_len(chunk)).map(|_| Entry::vacant()).collect();
            let base = Box::into_raw(entries) as *mut Entry<T, H>;
            // Release: the entries are initialised before a reader finds
            // the chunk.
            dir.chunks[chunk].store(base, Ordering::Release);
        }
        self.at(slot)
    }

    /// Store `item` in the free `slot` (under the lock), claimed: the
    /// caller's claim publishes it when dropped.
    pub(crate) fn occupy(
        &self,
        writer: &mut SlotsWriter<T, H>,
        slot: u32,
        hash: u32,
        item: T,
        phase: Phase,
        hint: H,
    ) -> Claim<'_, T, H> {
        let entry = self.ensure(writer, slot);
        debug_assert_eq!(entry.state.load(Ordering::Relaxed), FREE);
        entry.hash.store(hash, Ordering::Relaxed);
        // SAFETY: the entry is free and the caller holds the lock, so no
        // claim exists or can be taken on it (invariant 1): nothing else
        // reads or writes the item or the hint.
        entry.item.with_mut(|p| unsafe { (*p).write(item) });
        // SAFETY: as above.
        entry.hint.with_mut(|p| unsafe { *p = hint });
        // Busy at once: a reader that finds the slot through a stale index
        // entry waits for the claim's release, which publishes the item.
        entry.state.store(bits(phase) | BUSY, Ordering::Release);
        Claim {
            entry,
            word: bits(phase),
        }
    }

    /// Free a claimed entry (under the lock) and drop its item.
    pub(crate) fn vacate(&self, claim: Claim<'_, T, H>) {
        claim.free();
    }

    /// Free a kept entry (under the lock), dropping its item if freed.
    pub(crate) fn sweep(&self, slot: u32) -> Sweep {
        let entry = self.at(slot);
        let found = entry.free_if_kept();
        if found == Sweep::Freed {
            // SAFETY: freed just now under the caller's lock.
            unsafe { entry.drop_item() };
        }
        found
    }

    /// Whether a claim is held on any of the first `high` slots (shutdown
    /// waits for lock-free adds to finish).
    pub(crate) fn wait_unclaimed(&self, high: u32) {
        for slot in 0..high {
            if let Some(entry) = self.get(slot) {
                let mut spins = 0u32;
                while entry.state.load(Ordering::Acquire) & BUSY != 0 {
                    wait_a_little(&mut spins);
                }
            }
        }
    }
}

impl<T, H> Drop for Slots<T, H> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader remains; the directory and every
        // chunk came from `Box::into_raw` with the lengths used here.
        let dir = unsafe { Box::from_raw(self.dir.load(Ordering::Relaxed)) };
        for (c, chunk) in dir.chunks.iter().enumerate() {
            let base = chunk.load(Ordering::Relaxed);
            if base.is_null() {
                continue;
            }
            let len = chunk_len(c);
            // SAFETY: see above.
            let mut entries = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, len)) };
            for e in entries.iter_mut() {
                if e.state.load(Ordering::Relaxed) & PHASE != FREE {
                    // SAFETY: an occupied entry holds an initialised item
                    // (invariant 1), dropped once here.
                    e.item
                        .with_mut(|p| unsafe { ptr::drop_in_place((*p).as_mut_ptr()) });
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_every_slot_once() {
        let mut seen = std::collections::HashSet::new();
        for s in 0..5000u32 {
            let (c, o) = locate(s);
            assert!(o < chunk_len(c), "slot {s}");
            assert!(seen.insert((c, o)), "slot {s} collides");
        }
        assert_eq!(locate(63), (2, 31));
        assert_eq!(locate(64), (3, 0));
        assert_eq!(locate(511), (9, 63));
        assert_eq!(locate(512), (10, 0));
        assert_eq!(locate(1024), (11, 0));
    }

    #[test]
    fn claims_serialise_and_free_entries_cannot_be_claimed() {
        let slots: Slots<String, ()> = Slots::new();
        let mut w = SlotsWriter::new();
        assert!(slots.get(3).is_none());
        drop(slots.occupy(&mut w, 3, 7, "a".to_owned(), Phase::Idle, ()));
        drop(slots.occupy(&mut w, 2000, 8, "b".to_owned(), Phase::Kept, ()));
        let e = slots.at(3);
        assert_eq!(e.hash(), 7);
        let mut c = e.try_claim().unwrap();
        assert_eq!((c.item().as_str(), c.phase()), ("a", Phase::Idle));
        c.set_phase(Phase::Queued);
        c.set_delayed(true);
        drop(c);
        let c = e.try_claim().unwrap();
        assert_eq!((c.phase(), c.delayed()), (Phase::Queued, true));
        slots.vacate(c);
        assert!(e.try_claim().is_none());
        assert_eq!(slots.sweep(2000), Sweep::Freed);
        assert_eq!(slots.sweep(2000), Sweep::NotKept);
        drop(slots.occupy(&mut w, 2000, 8, "c".to_owned(), Phase::Kept, ()));
        let held = slots.at(2000).try_claim().unwrap();
        assert_eq!(
            slots.sweep(2000),
            Sweep::Busy,
            "a claimed entry is never freed"
        );
        drop(held);
        // Dropping the table drops "c" (a leak would show under a leak
        // checker; the counting tests in tests/workqueue_memory.rs see it).
    }
}
