//! The C API's thread primitives: std's and arc-swap's, as the apf crate's
//! `sync` module uses them outside loom and shuttle. The C ABI is not
//! model-checked (its waker implements std's `Wake`); the loom and shuttle
//! models check the structures below it, in the apf crate.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Lock a mutex, recovering the data if a panicking thread poisoned it.
///
/// Every structure guarded here restores its invariants before any code
/// that can panic runs (user callbacks run outside the locks), so the data
/// behind a poisoned lock is consistent and the library stays usable after
/// a panic caught at the boundary.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// An `Arc` that readers load without taking a lock or touching a shared
/// reference count, and a writer swaps atomically.
#[derive(Debug)]
pub(crate) struct ArcCell<T>(arc_swap::ArcSwap<T>);

impl<T> ArcCell<T> {
    pub(crate) fn new(value: Arc<T>) -> Self {
        ArcCell(arc_swap::ArcSwap::new(value))
    }
    /// Run `f` on the current value.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Arc<T>) -> R) -> R {
        f(&self.0.load())
    }
    pub(crate) fn load_full(&self) -> Arc<T> {
        self.0.load_full()
    }
    pub(crate) fn store(&self, value: Arc<T>) {
        self.0.store(value)
    }
}

/// A process-wide unique number (never 0).
pub(crate) fn unique_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
