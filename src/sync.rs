//! The one import path for atomics, locks and thread primitives.
//!
//! Under `--cfg loom` everything here is loom's model type, so a loom test
//! explores every interleaving of code that goes through this module; under
//! `--cfg shuttle` it is shuttle's, so a shuttle test runs it under
//! randomised schedules (the `shuttle_tests` modules). Code that imports `std::sync`
//! directly is invisible to both: do not.

#[cfg(not(any(loom, shuttle)))]
mod imp {
    pub use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use std::thread;

    pub use super::cell::UnsafeCell;

    /// Spin-loop hint; a no-op yield point under loom.
    #[inline(always)]
    pub fn spin_hint() {
        std::hint::spin_loop();
    }
}

/// `UnsafeCell` with loom's closure API, so the same code compiles under
/// std, loom and shuttle (shuttle has no cell of its own: its schedules
/// only switch threads at its synchronisation points).
#[cfg(not(loom))]
mod cell {
    #[derive(Debug, Default)]
    pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(all(shuttle, not(loom)))]
mod imp {
    pub use shuttle::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub use shuttle::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use shuttle::thread;

    pub use super::cell::UnsafeCell;

    /// A spin loop must let shuttle schedule another thread, or it spins
    /// for ever in a schedule where the awaited thread never runs.
    pub fn spin_hint() {
        shuttle::thread::yield_now();
    }
}

#[cfg(loom)]
mod imp {
    pub use loom::cell::UnsafeCell;
    pub use loom::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use loom::thread;

    pub fn spin_hint() {
        loom::thread::yield_now();
    }
}

pub use imp::*;

/// A mutex without poisoning, for the short critical sections of the hot
/// path (a shard's ledger, src/queueset/ledger.rs): parking_lot's
/// normally, whose uncontended lock and unlock are one compare-and-swap
/// each, without std's poison bookkeeping (a `panicking()` check on each);
/// loom's and shuttle's mutex under their cfgs, so their models see every
/// interleaving around it. Code under it must not panic half-way through
/// an update (nothing would mark the data): the ledger's does not.
#[cfg(not(any(loom, shuttle)))]
#[derive(Debug, Default)]
pub struct PlainMutex<T>(parking_lot::Mutex<T>);

#[cfg(not(any(loom, shuttle)))]
impl<T> PlainMutex<T> {
    pub fn new(value: T) -> Self {
        PlainMutex(parking_lot::Mutex::new(value))
    }
    #[inline]
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }
}

#[cfg(any(loom, shuttle))]
#[derive(Debug, Default)]
pub struct PlainMutex<T>(Mutex<T>);

#[cfg(any(loom, shuttle))]
impl<T> PlainMutex<T> {
    pub fn new(value: T) -> Self {
        PlainMutex(Mutex::new(value))
    }
    pub fn lock(&self) -> MutexGuard<'_, T> {
        lock(&self.0)
    }
}

/// Lock a mutex, recovering the data if a panicking thread poisoned it.
///
/// Every structure guarded here restores its invariants before any code that
/// can panic runs (user callbacks run outside the locks), so the data behind a
/// poisoned lock is consistent and the library stays usable.
#[inline]
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Lock a mutex if it is free now, recovering the data from a poisoned
/// lock as [`lock`] does; `None` if another thread holds it.
#[inline]
pub fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// An unbounded multi-producer multi-consumer FIFO: crossbeam's lock-free
/// `SegQueue` normally, a mutex-guarded deque under loom and shuttle
/// (crossbeam's internals are outside their view, and its push-to-pop
/// ordering with them; they check our protocol around it).
#[cfg(not(any(loom, shuttle)))]
#[derive(Debug, Default)]
pub struct SegQueue<T>(crossbeam_queue::SegQueue<T>);

#[cfg(not(any(loom, shuttle)))]
impl<T> SegQueue<T> {
    pub fn new() -> Self {
        SegQueue(crossbeam_queue::SegQueue::new())
    }
    #[inline]
    pub fn push(&self, value: T) {
        self.0.push(value)
    }
    #[inline]
    pub fn pop(&self) -> Option<T> {
        self.0.pop()
    }
    /// Values in the queue now (a snapshot).
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the queue is empty now (a snapshot: two atomic loads).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(any(loom, shuttle))]
#[derive(Debug)]
pub struct SegQueue<T>(Mutex<std::collections::VecDeque<T>>);

#[cfg(any(loom, shuttle))]
impl<T> SegQueue<T> {
    pub fn new() -> Self {
        SegQueue(Mutex::new(std::collections::VecDeque::new()))
    }
    pub fn push(&self, value: T) {
        lock(&self.0).push_back(value)
    }
    pub fn pop(&self) -> Option<T> {
        lock(&self.0).pop_front()
    }
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }
    pub fn is_empty(&self) -> bool {
        lock(&self.0).is_empty()
    }
}

/// A bounded multi-producer queue of plain records: crossbeam's lock-free
/// `ArrayQueue` normally, a mutex-guarded deque under loom and shuttle
/// (crossbeam's internals are outside their view; they check our protocol
/// around it).
#[cfg(not(any(loom, shuttle)))]
#[derive(Debug)]
pub struct EventRing<T>(crossbeam_queue::ArrayQueue<T>);

#[cfg(not(any(loom, shuttle)))]
impl<T> EventRing<T> {
    pub fn new(capacity: usize) -> Self {
        EventRing(crossbeam_queue::ArrayQueue::new(capacity))
    }
    /// Append `value`, or give it back when the ring is full.
    #[inline]
    pub fn push(&self, value: T) -> Result<(), T> {
        self.0.push(value)
    }
    #[inline]
    pub fn pop(&self) -> Option<T> {
        self.0.pop()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Records in the ring now (a snapshot: producers may be pushing).
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(any(loom, shuttle))]
#[derive(Debug)]
pub struct EventRing<T>(Mutex<std::collections::VecDeque<T>>, usize);

#[cfg(any(loom, shuttle))]
impl<T> EventRing<T> {
    pub fn new(capacity: usize) -> Self {
        EventRing(Mutex::new(std::collections::VecDeque::new()), capacity)
    }
    pub fn push(&self, value: T) -> Result<(), T> {
        let mut q = lock(&self.0);
        if q.len() >= self.1 {
            return Err(value);
        }
        q.push_back(value);
        Ok(())
    }
    pub fn pop(&self) -> Option<T> {
        lock(&self.0).pop_front()
    }
    pub fn is_empty(&self) -> bool {
        lock(&self.0).is_empty()
    }
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

// Under loom only its own model uses it; shuttle keeps the mutex cell.
#[cfg(any(loom, not(shuttle)))]
#[cfg_attr(loom, allow(dead_code))]
mod read_mostly;
#[cfg(not(any(loom, shuttle)))]
pub use read_mostly::ReadMostly;

/// A shared pointer that readers load without locking or touching a shared
/// reference count, and a writer swaps, waiting for the readers of the
/// old value: [`ReadMostly`] (per-shard reader counts) normally, a mutex
/// under loom and shuttle (`ReadMostly` has its own loom model).
#[cfg(not(any(loom, shuttle)))]
#[derive(Debug)]
pub struct ArcCell<T>(ReadMostly<T>);

#[cfg(not(any(loom, shuttle)))]
impl<T> ArcCell<T> {
    pub fn new(value: Arc<T>) -> Self {
        ArcCell(ReadMostly::new(value))
    }
    /// Run `f` on the current value. `f` must not wait for a writer of
    /// this cell (see `ReadMostly`).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        self.0.with(f)
    }
    pub fn load_full(&self) -> Arc<T> {
        self.0.load_full()
    }
    /// Replace the value; returns once no reader uses the old one.
    pub fn store(&self, value: Arc<T>) {
        self.0.store(value)
    }
}

#[cfg(any(loom, shuttle))]
#[derive(Debug)]
pub struct ArcCell<T>(Mutex<Arc<T>>);

#[cfg(any(loom, shuttle))]
impl<T> ArcCell<T> {
    pub fn new(value: Arc<T>) -> Self {
        ArcCell(Mutex::new(value))
    }
    pub fn with<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        let current = lock(&self.0).clone();
        f(&current)
    }
    pub fn load_full(&self) -> Arc<T> {
        lock(&self.0).clone()
    }
    pub fn store(&self, value: Arc<T>) {
        *lock(&self.0) = value;
    }
}

/// Under loom and shuttle the counter and the thread-local of
/// `thread_index` are theirs, so every model run numbers its threads
/// afresh, in the order the schedule makes them ask.
#[cfg(not(any(loom, shuttle)))]
mod thread_index;
#[cfg(not(any(loom, shuttle)))]
pub use thread_index::thread_index;

#[cfg(loom)]
pub fn thread_index() -> usize {
    loom::lazy_static! {
        static ref NEXT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

#[cfg(all(shuttle, not(loom)))]
pub fn thread_index() -> usize {
    shuttle::lazy_static! {
        static ref NEXT: shuttle::sync::atomic::AtomicUsize =
            shuttle::sync::atomic::AtomicUsize::new(0);
    }
    shuttle::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

/// A process-wide unique number (never 0). A plain counter, outside any
/// concurrent protocol, so it uses std's atomic directly even under loom
/// (loom's atomics cannot live in a `static`).
pub fn unique_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
