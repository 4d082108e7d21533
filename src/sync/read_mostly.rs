//! A shared `Arc<T>` that many threads read and a rare writer replaces:
//! a reader writes only its own shard's counter, and a writer waits for
//! the readers of the value it replaced before it lets go of it.
//!
//! # Why
//! The dispatcher's configuration snapshot and each queueset's routing
//! are read by every request and replaced only by a reconfiguration or a
//! limit change. `arc-swap`'s load (a per-thread debt slot taken and paid
//! back) cost ~60 instructions per read, and cloning the `Arc` writes
//! its one reference count, a line every core writes. Here a read is two
//! read-modify-writes on a counter of the reader's shard
//! (`thread_index() & (shards − 1)`, as the queueset's shards and the
//! level leases), about 20 instructions, on a line that only that
//! shard's threads write.
//!
//! # Protocol (per-shard reader counts in two parities, an SRCU)
//! - Reader ([`ReadMostly::with`]): reads the parity `p` (`epoch & 1`),
//!   increments `readers[shard][p]` (AcqRel), loads the current pointer
//!   (Acquire), runs its closure on the value, then decrements the same
//!   counter (Release; also when the closure panics, by a drop guard).
//! - Writer ([`ReadMostly::store`]), one at a time (a mutex): swaps the
//!   pointer (AcqRel), then twice: flips the parity and waits until every
//!   shard's counter of the parity it left reads 0, each read a
//!   read-modify-write (`fetch_add(0, AcqRel)`); then drops the old value.
//!
//! # Invariants
//! 1. **A value is dropped only after every reader that loaded it has left
//!    `with`.** A reader that loads the old pointer incremented its counter
//!    `c` before. The writer's waits read `c` after its swap, with
//!    read-modify-writes, which are totally ordered with the reader's on
//!    `c`: either the writer's read comes after the increment (and it
//!    waits until the matching decrement, whose Release makes the reader's
//!    use of the value happen before the drop), or it comes before, and
//!    then the reader's increment (Acquire) reads from it (or from a later
//!    read-modify-write of its release sequence), so the swap happens
//!    before the reader's load and the reader loaded the new pointer, not
//!    the old. Both parities are waited for, so a reader that read the
//!    parity before an earlier writer's flip and counted itself in the
//!    other one is waited for too (with one parity waited for, the model
//!    below catches a reader using a value a second writer freed).
//! 2. **A writer is not starved**: each wait is for the parity new readers
//!    no longer enter; the readers still entering it read the parity
//!    before the flip, at most one per thread.
//! 3. **No ordering depends on SeqCst** (the argument in 1 uses only
//!    read-modify-writes on one counter and acquire/release), so loom
//!    models it exactly.
//!
//! A reader must not wait for a writer inside `with` (a closure that took
//! a lock the writer holds while it stores would deadlock), and must not
//! store into the cell it reads: every caller's closure is a short,
//! lock-free read. The loom model below checks 1 (a value reused after
//! its `store` returned, under a reader, is a race loom reports) with a
//! reader against two stores, and fails when the writer waits for one
//! parity only.

use super::{thread_index, Arc, AtomicPtr, AtomicUsize, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::mem::ManuallyDrop;

/// See the module documentation.
pub struct ReadMostly<T> {
    /// `Arc::into_raw` of the value in force; owns one count of it.
    current: AtomicPtr<T>,
    /// Which parity of the counters new readers enter (its low bit).
    epoch: AtomicUsize,
    /// Per shard, readers inside `with` by the parity they entered.
    readers: Box<[CachePadded<[AtomicUsize; 2]>]>,
    /// One writer at a time.
    writer: Mutex<()>,
}

// SAFETY: the cell owns an `Arc<T>` (through its raw pointer) and hands
// out `&Arc<T>` to any thread: exactly `Arc<T>`'s own requirements.
unsafe impl<T: Send + Sync> Send for ReadMostly<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for ReadMostly<T> {}

/// Leaves a reader's counter when dropped (also on a panic in `with`).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<T> ReadMostly<T> {
    /// A cell holding `value`, with as many reader shards as the
    /// queueset's (one per CPU rounded down to a power of two, at most 16;
    /// two under loom).
    pub fn new(value: Arc<T>) -> Self {
        let n = if cfg!(loom) {
            2
        } else {
            let cpus = std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, 16);
            1 << cpus.ilog2()
        };
        ReadMostly {
            current: AtomicPtr::new(Arc::into_raw(value) as *mut T),
            epoch: AtomicUsize::new(0),
            readers: (0..n)
                .map(|_| CachePadded::new([AtomicUsize::new(0), AtomicUsize::new(0)]))
                .collect(),
            writer: Mutex::new(()),
        }
    }

    /// Run `f` on the value in force (see the protocol).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        let shard = &self.readers[thread_index() & (self.readers.len() - 1)];
        // Relaxed: the parity only spreads readers (invariant 2); safety
        // does not depend on which one a reader enters.
        let count = &shard[self.epoch.load(Ordering::Relaxed) & 1];
        count.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(count);
        let ptr = self.current.load(Ordering::Acquire);
        // SAFETY: `ptr` came from `Arc::into_raw` and the cell's count of
        // it is not given back before this reader leaves (invariant 1);
        // `ManuallyDrop`: the count stays the cell's.
        let value = ManuallyDrop::new(unsafe { Arc::from_raw(ptr) });
        f(&value)
    }

    /// A clone of the value in force.
    pub fn load_full(&self) -> Arc<T> {
        self.with(Arc::clone)
    }

    /// Replace the value; returns after every reader of the old value has
    /// left, and drops it (unless others hold it).
    pub fn store(&self, value: Arc<T>) {
        self.replace(value, 2);
    }

    /// The writer's protocol, waiting for `waits` parities (2; the loom
    /// model's broken variant waits for 1).
    fn replace(&self, value: Arc<T>, waits: usize) {
        let _one_writer = super::lock(&self.writer);
        let old = self
            .current
            .swap(Arc::into_raw(value) as *mut T, Ordering::AcqRel);
        for _ in 0..waits {
            let left = self.epoch.fetch_add(1, Ordering::Relaxed) & 1;
            for shard in self.readers.iter() {
                // A read-modify-write, not a load: it is ordered with the
                // readers' increments on this counter (invariant 1).
                while shard[left].fetch_add(0, Ordering::AcqRel) != 0 {
                    super::thread::yield_now();
                }
            }
        }
        // SAFETY: `old` came from `Arc::into_raw`, the cell owned that
        // count, and no reader can still be using it (invariant 1).
        drop(unsafe { Arc::from_raw(old) });
    }
}

impl<T> Drop for ReadMostly<T> {
    fn drop(&mut self) {
        // SAFETY: no reader is left (`&mut self`); the cell owns the count.
        drop(unsafe { Arc::from_raw(self.current.load(Ordering::Relaxed)) });
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ReadMostly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with(|v| f.debug_tuple("ReadMostly").field(&**v).finish())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A value that records its drop, and whose readers check it is alive.
    struct Probe {
        generation: u64,
        dropped: Arc<AtomicBool>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn readers_never_see_a_dropped_value_while_writers_replace_it() {
        let make = |generation| {
            Arc::new(Probe {
                generation,
                dropped: Arc::new(AtomicBool::new(false)),
            })
        };
        let cell = Arc::new(ReadMostly::new(make(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (cell, stop) = (cell.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut last = 0;
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) || reads < 1000 {
                        let g = cell.with(|p| {
                            std::hint::spin_loop();
                            assert!(!p.dropped.load(Ordering::SeqCst), "read after drop");
                            p.generation
                        });
                        assert!(g >= last, "generations go forward: {last} then {g}");
                        last = g;
                        reads += 1;
                    }
                })
            })
            .collect();
        let mut dropped = Vec::new();
        for generation in 1..=2000 {
            let old = cell.load_full();
            let flag = old.dropped.clone();
            drop(old);
            cell.store(make(generation));
            dropped.push(flag);
        }
        stop.store(true, Ordering::Relaxed);
        readers.into_iter().for_each(|r| r.join().unwrap());
        // Every replaced value was dropped by its store (no reader, no
        // count left behind).
        assert!(dropped.iter().all(|f| f.load(Ordering::SeqCst)));
        assert_eq!(cell.with(|p| p.generation), 2000);
        assert_eq!(Arc::strong_count(&cell.load_full()), 2);
    }

    #[test]
    fn a_panicking_reader_leaves_its_counter() {
        let cell = ReadMostly::new(Arc::new(1u32));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.with(|_| panic!("in the closure"))
        }));
        assert!(r.is_err());
        // Would wait for ever if the reader were still counted.
        cell.store(Arc::new(2));
        assert_eq!(cell.with(|v| **v), 2);
    }
}

/// The loom model: a reader against a writer that replaces the value
/// twice (`scripts/loom.sh read_mostly`). After each `store` returns, the
/// writer writes the value it replaced (as a reuse of its memory would):
/// a loom `UnsafeCell` that the reader reads, so a reader still using it
/// is a race loom reports. The test keeps its own clone of every value,
/// so nothing is really freed under the broken variant.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::UnsafeCell;
    use loom::thread;

    struct Value(UnsafeCell<u64>);

    fn value(n: u64) -> Arc<Value> {
        Arc::new(Value(UnsafeCell::new(n)))
    }

    fn reader_against_two_stores(waits: usize) {
        loom::model(move || {
            let values = [value(0), value(1), value(2)];
            let cell = Arc::new(ReadMostly::new(values[0].clone()));
            let writer = {
                let (cell, values) = (cell.clone(), values.clone());
                thread::spawn(move || {
                    for i in 1..3 {
                        cell.replace(values[i].clone(), waits);
                        // SAFETY: loom checks the access against the
                        // reader's.
                        values[i - 1].0.with_mut(|v| unsafe { *v = u64::MAX });
                    }
                })
            };
            // SAFETY: as above.
            let seen = cell.with(|v| v.0.with(|n| unsafe { *n }));
            assert!(seen <= 2, "a reader saw a replaced value reused");
            writer.join().unwrap();
            assert_eq!(cell.with(|v| v.0.with(|n| unsafe { *n })), 2);
            // Each replaced value's count was given back exactly once.
            assert_eq!(Arc::strong_count(&values[0]), 1);
            assert_eq!(Arc::strong_count(&values[1]), 1);
            assert_eq!(Arc::strong_count(&values[2]), 2);
        });
    }

    #[test]
    fn a_store_returns_only_after_the_old_values_readers_left() {
        reader_against_two_stores(2);
    }

    /// The deliberately broken writer (one parity waited for): a reader
    /// that entered the other parity before the first store's flip still
    /// uses the first new value when the second store returns.
    #[test]
    #[should_panic(expected = "Causality violation")]
    fn a_writer_waiting_for_one_parity_is_caught() {
        reader_against_two_stores(1);
    }
}
