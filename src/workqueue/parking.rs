//! The parked workers: a lock-free list in the order they parked, and the
//! handshake by which a thread that makes an item ready finds them without
//! any queue-wide lock.
//!
//! # The protocol
//!
//! A worker that finds nothing ready *parks*: it counts itself in
//! [`ParkedList::live`], pushes a fresh [`Waiter`] onto
//! [`ParkedList::list`], issues a `SeqCst` fence and looks once more (the caller's `ready`: is an item
//! ready, or the queue closed?). If nothing is, it sleeps on its waiter;
//! otherwise it *withdraws* and looks again, unless a serving thread
//! claimed it first (then a delivery is owed to it: it waits for that).
//!
//! A thread that made an item ready (pushed it where `ready` looks) *serves*:
//! it issues a `SeqCst` fence, reads `live`, and while it is not zero and an
//! item is ready it pops waiters off the list, oldest first, until it
//! claims one, and hands it an item (`take`). If `take` finds nothing (a
//! running worker took the item in between) the claimed waiter is handed
//! "look again" instead, and serving stops.
//!
//! # Invariants
//!
//! 1. **No lost wake-up: no worker sleeps while an item is ready.** Every
//!    insertion into the list is followed by a `SeqCst` fence and a look at
//!    `ready` by the inserting thread, and every push of an item by a
//!    `SeqCst` fence and a read of `live` (then of the list). Of the two
//!    fences one comes first in their single total order: either the
//!    parker's look sees the item (it withdraws and takes it, or was
//!    claimed and is served), or the pusher's reads after its fence see
//!    both the parker's writes before its own (the count and the push onto
//!    the list), so its pop finds the waiter (unless another server popped
//!    it first, who then serves it). A waiter handed "look again" re-runs
//!    the whole look, so it is a fresh parker. The orderings of the count
//!    and of the list's own atomics do not matter to this: the two fences
//!    order them.
//! 2. **One way out** ([`Waiter`]): each waiter is claimed or withdrawn,
//!    never both, and `live` is decremented once, by whichever won. So a
//!    worker gets at most one item from a hand-off, and an item is handed
//!    to one worker (`take` pops it from a lock-free list exactly once).
//!    **`live` never undercounts**: a waiter is counted before it is
//!    pushed, so its decrement (by a claimer that popped it, or by itself)
//!    comes after its increment. Counted after the push, a claimer could
//!    pop and claim it first and its decrement would, for a moment, hide
//!    another parked worker from a pusher (the loom models
//!    `a_timed_out_worker_withdrawing_beside_a_parked_one_and_two_adds`
//!    and `two_parked_workers_and_a_producer` fail so).
//! 3. **Oldest first.** The list is FIFO and claims pop from its front, so
//!    with more workers than items none is passed over by later parkers.
//!    Withdrawn waiters stay on the list until popped (and skipped); when
//!    they outnumber live ones, a withdrawer compacts the list (pops every
//!    entry, pushes the parked ones back in order). A live waiter is off
//!    the list meanwhile, so a server may miss it: the compacting thread
//!    must serve afterwards ([`Compacted`]), which re-establishes 1.
//!
//! Nothing here takes a lock but a waiter's own mutex, inside the hand-off
//! that runs after the serving thread released every lock ([`Wakes`]).

use super::waiter::{Waiter, Wakes};
use crate::sync::{fence, Arc, AtomicUsize, Ordering, SegQueue};
use crossbeam_utils::CachePadded;

/// How many withdrawn waiters beyond twice the live ones the list keeps
/// before a withdrawer compacts it. Small under loom so that the models
/// reach the compaction.
const SLACK: usize = if cfg!(loom) { 0 } else { 64 };

/// The parked workers.
pub(crate) struct ParkedList<T, H> {
    /// Parked (and some withdrawn) waiters, oldest first.
    list: SegQueue<Arc<Waiter<T, H>>>,
    /// Waiters parked and not yet claimed or withdrawn: incremented before
    /// the push onto `list`, decremented by the claim or the withdrawal that
    /// ends a waiter's wait. It may count a waiter not yet on the list (a
    /// server then finds the list short and stops: the parker's own look
    /// covers that), never one fewer than are parked.
    live: CachePadded<AtomicUsize>,
}

/// What [`ParkedList::park`] left the worker with.
pub(crate) enum Parking<T, H> {
    /// Wait on this waiter for a delivery.
    Parked(Arc<Waiter<T, H>>),
    /// Something was ready: the worker withdrew and looks again.
    LookAgain(Compacted),
}

/// Whether a withdrawal compacted the list: if so, the caller must serve
/// (run the pusher's half) once it holds no lock that servers need, since a
/// server may have missed a parked worker while it was off the list.
#[must_use]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Compacted(pub(crate) bool);

/// The handshake's fence. A deliberately broken twin for the loom models
/// (`--cfg apf_broken_parking="fence"`) weakens it to acquire-release,
/// which does not order a store before it with a load after it.
#[inline]
fn handshake_fence() {
    #[cfg(not(apf_broken_parking = "fence"))]
    fence(Ordering::SeqCst);
    #[cfg(apf_broken_parking = "fence")]
    fence(Ordering::AcqRel);
}

impl<T, H> ParkedList<T, H> {
    pub(crate) fn new() -> Self {
        ParkedList {
            list: SegQueue::new(),
            live: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Workers parked now (a snapshot; tests and the C ABI's test aid).
    #[cfg(all(not(loom), any(test, feature = "test-hooks")))]
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The parker's half of the handshake. `ready` says whether an item is
    /// ready or the queue closed (anything that makes sleeping wrong).
    pub(crate) fn park(&self, ready: impl FnOnce() -> bool) -> Parking<T, H> {
        let waiter = Arc::new(Waiter::new());
        // Counted before it can be claimed (2 in the module docs).
        self.live.fetch_add(1, Ordering::Relaxed);
        self.list.push(waiter.clone());
        handshake_fence();
        // The broken twin for the loom models sleeps without the last look.
        if cfg!(apf_broken_parking = "recheck") || !ready() {
            return Parking::Parked(waiter);
        }
        match self.withdraw(&waiter) {
            Some(compacted) => Parking::LookAgain(compacted),
            // Claimed first: an item (or "look again") is on its way.
            None => Parking::Parked(waiter),
        }
    }

    /// End `waiter`'s wait from its own side. `None`: it was claimed first,
    /// and a delivery is owed to it.
    pub(crate) fn withdraw(&self, waiter: &Waiter<T, H>) -> Option<Compacted> {
        if !waiter.withdraw() {
            return None;
        }
        let live = self.live.fetch_sub(1, Ordering::Relaxed) - 1;
        if self.list.len() <= 2 * live + SLACK {
            return Some(Compacted(false));
        }
        // Every entry now on the list once: withdrawn ones are dropped,
        // parked ones go back in the order they came out.
        for _ in 0..self.list.len() {
            let Some(w) = self.list.pop() else { break };
            if w.is_parked() {
                self.list.push(w);
            }
        }
        Some(Compacted(true))
    }

    /// Pop waiters, oldest first, until one is claimed (withdrawn ones are
    /// dropped); `None` when the list runs out.
    pub(crate) fn claim(&self) -> Option<Arc<Waiter<T, H>>> {
        while let Some(waiter) = self.list.pop() {
            if waiter.claim() {
                self.live.fetch_sub(1, Ordering::Relaxed);
                return Some(waiter);
            }
        }
        None
    }

    /// The pusher's half of the handshake, after an item was made ready
    /// (or after a compaction): while workers are parked and `ready` says
    /// an item is, claim the oldest and hand it what `take` gives. The
    /// hand-offs go into `wakes`, to run once the caller holds no lock.
    #[inline]
    pub(crate) fn serve(
        &self,
        wakes: &mut Wakes<T, H>,
        ready: impl Fn() -> bool,
        mut take: impl FnMut() -> Option<(T, H)>,
    ) {
        handshake_fence();
        while self.live.load(Ordering::Relaxed) != 0 && ready() {
            let Some(waiter) = self.claim() else { return };
            match take() {
                Some(got) => wakes.push((waiter, Some(got))),
                None => {
                    // Taken by a running worker in between: the claimed one
                    // looks again rather than sleep on a claim.
                    wakes.push((waiter, None));
                    return;
                }
            }
        }
    }

    /// Claim every parked worker and hand each "look again" (shutdown: each
    /// then sees the queue closed, after taking what is still ready).
    pub(crate) fn release_all(&self, wakes: &mut Wakes<T, H>) {
        handshake_fence();
        while let Some(waiter) = self.claim() {
            wakes.push((waiter, None));
        }
    }
}
