//! The admission word: one level's seats in use, its concurrency limit and
//! whether requests wait, in one atomic, so that taking seats is a single
//! compare-and-swap on every path.
//!
//! # Layout
//! One cache-padded `AtomicU64`:
//! - bits 0..=30 (`SEATS`): seats in use, held by executing requests and by
//!   finished requests lingering for their additional latency;
//! - bits 31..=61 (`LIMIT`): the concurrency limit;
//! - bit 62 (`FAILED`): a panic left the level's locked state half-updated;
//!   set once under the level lock and never cleared: the hot path refuses
//!   and the slow path rejects every new request;
//! - bit 63 (`SLOW`): requests are waiting in queues.
//!
//! # Protocol
//! Who may change what:
//! - **Seats are taken only by [`AdmissionWord::try_take_fast`] (the hot
//!   path, any thread, no lock) and [`AdmissionWord::try_take`] (the slow
//!   path, under the level lock).** Both are one CAS loop that re-checks the
//!   room against the value it replaces, so no check-then-add exists: a
//!   decision and the seats it takes are one atomic step.
//!   A hot-path take is either a request's own seats or a shard's
//!   *seat-budget* draw of `seats + B` (src/queueset/budget.rs): seats in
//!   a budget count as taken here, so every limit check below also bounds
//!   them.
//! - Seats are given back by [`AdmissionWord::give_back`] (a finish on the hot
//!   path, a budget's return, trim or sweep, or the level lock's holder for
//!   finishes, lingering releases, cancelled dispatches and *early
//!   releases*).
//! - An **early release** (`QueueSet::release_seats`: a request gives back
//!   part or all of its seats and keeps executing) runs only under the level
//!   lock, after merging the ledgers: the core learns of it (seats, charge,
//!   tallies) and then the seats go back to the word with `give_back`, in
//!   that order, exactly as a slow-path finish. The request's `Execution`
//!   counts what it released; its finish (hot path, slow path or lingering)
//!   gives back only what it still holds.
//! - `SLOW` is set and cleared only under the level lock
//!   ([`AdmissionWord::set_slow`], [`AdmissionWord::clear_slow`]); it is
//!   also the seat budgets' *reclaim fence*: the lock holder sets it before
//!   a slow-path arrival's or a limit change's decision and sweeps every
//!   budget, and clears it when it settles with nothing waiting; the
//!   `LIMIT` field is changed only under the level lock
//!   ([`AdmissionWord::set_limit`]).
//!
//! Invariants:
//! 1. **While any request waits, `SLOW` is set** (it may also be set with
//!    nothing waiting, while the lock holder decides behind the fence). The lock holder sets it
//!    before the lock is released after an enqueue, and clears it only when
//!    the core counts no waiting request. `try_take_fast` fails on `SLOW`,
//!    so no arrival overtakes a waiter, and a hot-path finish that sees `SLOW`
//!    in the value it replaced dispatches the waiters (see below).
//! 2. **Seats in use never exceed the limit, except for one request wider
//!    than the limit** (or any request at a limit of 0), which is admitted
//!    only when no request executes — Kubernetes' `canAccommodateSeats`
//!    rule — plus seats still lingering from requests that already finished.
//!    The hot path admits only requests that fit; the too-wide case needs to
//!    know how many of the seats in use linger, which only the lock holder
//!    knows (lingering seats are created and released only under the lock),
//!    so it is decided by `try_take` alone.
//! 3. **Every seat taken is given back exactly once**: the caller of a
//!    successful take owns the seats until it (or the lock holder on its
//!    behalf) gives them back. It may give them back in pieces: early
//!    releases of `r1, r2, …` seats, then its finish of `held = taken − Σ r`
//!    (the `Execution` is owned by one thread and consumed by the finish, so
//!    the pieces cannot overlap or repeat; a release of more than `held`, or
//!    of nothing, is refused before touching the word).
//!
//! # Memory orderings
//! - `try_take_fast` succeeds with `Acquire`: the request's later reads of
//!   the level (its ledger slot, the dealer) are ordered after the seats
//!   became free, pairing with the `Release` of the `give_back` that freed
//!   them. It fails with `Relaxed`: a failed attempt takes the slow path,
//!   whose lock orders everything.
//! - `give_back` is `AcqRel`: a hot finish closes its ledger slot (under
//!   the shard's mutex) *before* its seats are given back, so a decision
//!   that sees those seats free and then folds the ledgers finds the
//!   request finished, never executing with its seats already reused
//!   (src/queueset/ledger.rs). It is also `Acquire` so that a finisher that
//!   sees `SLOW` in the replaced value sees the enqueue that set it before
//!   it takes the level lock (the lock would order it anyway; `AcqRel`
//!   keeps the argument local).
//! - `set_slow`, `clear_slow`, `set_limit` and `try_take` run under the level
//!   lock; they use `AcqRel` so hot-path threads that read the new value
//!   (with their CAS) also see the state the lock holder wrote before it.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;

const SEATS_BITS: u32 = 31;
const SEATS_MASK: u64 = (1 << SEATS_BITS) - 1;
const LIMIT_SHIFT: u32 = SEATS_BITS;
const LIMIT_MASK: u64 = ((1 << 31) - 1) << LIMIT_SHIFT;
const FAILED: u64 = 1 << 62;
const SLOW: u64 = 1 << 63;

/// The largest number of seats the word can hold in use at once.
pub(crate) const MAX_SEATS_IN_USE: u64 = SEATS_MASK;

/// A snapshot of the word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WordState {
    pub(crate) seats_in_use: u32,
    pub(crate) limit: u32,
    pub(crate) slow: bool,
}

impl WordState {
    fn of(w: u64) -> WordState {
        WordState {
            seats_in_use: (w & SEATS_MASK) as u32,
            limit: ((w & LIMIT_MASK) >> LIMIT_SHIFT) as u32,
            slow: w & SLOW != 0,
        }
    }
}

/// Whether a request of `seats` may start now, by Kubernetes' rule
/// (`canAccommodateSeats`), given the word's seats in use and limit and the
/// seats among them that only linger (held by requests that already
/// finished). A request wider than the limit starts only when no request
/// executes; any other request starts when it fits.
#[inline]
fn room_for(in_use: u64, limit: u64, seats: u64, lingering: u64) -> bool {
    if in_use + seats > MAX_SEATS_IN_USE {
        return false; // never overflow into the limit's bits
    }
    if seats > limit {
        return in_use == lingering;
    }
    in_use + seats <= limit
}

/// The admission word (see the module documentation for its protocol).
pub(crate) struct AdmissionWord(CachePadded<Line>);

/// The word's cache line: the word, and beside it the seat budgets' batch,
/// which every hot start reads with it (and which changes only with the
/// configuration, under the level lock). How a start places its request
/// is its shard's (src/queueset/shards.rs, `Placement`).
struct Line {
    word: AtomicU64,
    batch: AtomicU32,
}

impl AdmissionWord {
    /// No seats in use, nothing waiting, `limit` seats, budgets of `batch`
    /// seats (0: off; see `super::budget`).
    pub(crate) fn new(limit: u32, batch: u32) -> AdmissionWord {
        AdmissionWord(CachePadded::new(Line {
            word: AtomicU64::new((u64::from(limit) << LIMIT_SHIFT) & LIMIT_MASK),
            batch: AtomicU32::new(batch),
        }))
    }

    /// The seat budgets' batch `B` (0: budgets off).
    #[inline]
    pub(crate) fn batch(&self) -> u32 {
        // Relaxed: a stale batch only sizes a draw, which the word's own
        // CAS checks against the limit, or a trim (parking stays bounded by
        // the larger of the two batches until the next finish).
        self.0.batch.load(Ordering::Relaxed)
    }

    /// A new batch (with a new limit). Lock holder only, after a sweep.
    pub(crate) fn set_batch(&self, batch: u32) {
        self.0.batch.store(batch, Ordering::Relaxed);
    }

    /// Whether budgets must not hold seats now: `SLOW` (requests wait, or
    /// the lock holder's reclaim fence) or `FAILED`. `Acquire`: a re-read
    /// after a budget RMW that follows a sweep in the budget's order sees
    /// the fence set before that sweep (`super::budget`, invariant 3).
    #[inline]
    pub(crate) fn is_fenced(&self) -> bool {
        self.0.word.load(Ordering::Acquire) & (SLOW | FAILED) != 0
    }

    /// The hot path: take `seats` if nothing waits and they fit under the
    /// limit. Never admits a request wider than the limit (that needs the
    /// lock holder's count of lingering seats).
    #[inline]
    pub(crate) fn try_take_fast(&self, seats: u32) -> bool {
        let seats = u64::from(seats);
        let mut w = self.0.word.load(Ordering::Relaxed);
        loop {
            let limit = (w & LIMIT_MASK) >> LIMIT_SHIFT;
            if w & (SLOW | FAILED) != 0 || (w & SEATS_MASK) + seats > limit {
                return false;
            }
            match self.0.word.compare_exchange_weak(
                w,
                w + seats,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => w = actual,
            }
        }
    }

    /// The slow path (caller holds the level lock, whose state says
    /// `lingering` of the seats in use belong to finished requests): if
    /// Kubernetes' rule admits a request `width` seats wide now, take
    /// `seats` (at most `width`: the width once its final seats are capped
    /// at the limit). Ignores `SLOW`: the lock holder is the one dispatching
    /// waiters.
    pub(crate) fn try_take(&self, width: u32, seats: u32, lingering: u64) -> bool {
        debug_assert!(seats <= width, "a request holds at most its width");
        let (width, seats) = (u64::from(width), u64::from(seats));
        let mut w = self.0.word.load(Ordering::Acquire);
        loop {
            let limit = (w & LIMIT_MASK) >> LIMIT_SHIFT;
            if !room_for(w & SEATS_MASK, limit, width, lingering) {
                return false;
            }
            match self.0.word.compare_exchange_weak(
                w,
                w + seats,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => w = actual,
            }
        }
    }

    /// Give back `seats` taken earlier. Returns whether `SLOW` was set in
    /// the value replaced: the caller must then dispatch the waiters.
    #[inline]
    pub(crate) fn give_back(&self, seats: u32) -> bool {
        let prev = self.0.word.fetch_sub(u64::from(seats), Ordering::AcqRel);
        debug_assert!(
            prev & SEATS_MASK >= u64::from(seats),
            "gave back more seats than held"
        );
        prev & SLOW != 0
    }

    /// Requests wait: hot-path arrivals must queue behind them and hot-path
    /// finishes must dispatch them. Lock holder only.
    pub(crate) fn set_slow(&self) {
        self.0.word.fetch_or(SLOW, Ordering::AcqRel);
    }

    /// Nothing waits any more. Lock holder only.
    pub(crate) fn clear_slow(&self) {
        self.0.word.fetch_and(!SLOW, Ordering::AcqRel);
    }

    /// The level failed (see `FAILED`): from now on the hot path refuses
    /// every request. Lock holder only.
    pub(crate) fn set_failed(&self) {
        self.0.word.fetch_or(FAILED, Ordering::AcqRel);
    }

    /// A new concurrency limit. Lock holder only.
    pub(crate) fn set_limit(&self, limit: u32) {
        let field = (u64::from(limit) << LIMIT_SHIFT) & LIMIT_MASK;
        let mut w = self.0.word.load(Ordering::Relaxed);
        loop {
            let new = (w & !LIMIT_MASK) | field;
            match self
                .0
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => w = actual,
            }
        }
    }

    /// The word as it is now.
    pub(crate) fn load(&self) -> WordState {
        WordState::of(self.0.word.load(Ordering::Acquire))
    }
}

impl fmt::Debug for AdmissionWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&WordState::of(self.0.word.load(Ordering::Relaxed)), f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fast_take_needs_room_and_no_waiters() {
        let w = AdmissionWord::new(3, 0);
        assert!(w.try_take_fast(2));
        assert!(!w.try_take_fast(2), "2 + 2 > 3");
        assert!(w.try_take_fast(1));
        assert!(!w.give_back(3));
        w.set_slow();
        assert!(!w.try_take_fast(1), "waiters come first");
        assert!(w.give_back(0), "a finisher learns that requests wait");
        w.clear_slow();
        assert!(
            !w.try_take_fast(4),
            "the hot path never admits a too-wide request"
        );
        w.set_failed();
        assert!(!w.try_take_fast(1), "a failed level admits nothing");
    }

    #[test]
    fn too_wide_requests_start_only_when_nothing_executes() {
        let w = AdmissionWord::new(2, 0);
        assert!(w.try_take(1, 1, 0));
        assert!(!w.try_take(5, 5, 0), "one request executes");
        assert!(w.try_take(5, 5, 1), "the one seat in use only lingers");
        assert_eq!(w.load().seats_in_use, 6);
        assert!(!w.try_take(1, 1, 1), "over the limit now");
        w.give_back(6);
        assert!(
            w.try_take(9, 2, 0),
            "decided on the width, holds the capped seats"
        );
        assert_eq!(w.load().seats_in_use, 2);
        w.give_back(2);
        w.set_limit(0);
        assert!(
            w.try_take(1, 1, 0),
            "a level at limit 0 serves one at a time"
        );
        assert!(!w.try_take(1, 1, 0));
    }

    #[test]
    fn seats_never_overflow_into_the_limit() {
        let w = AdmissionWord::new(1, 0);
        let most = u32::MAX >> 1;
        assert!(w.try_take(most, most, 0));
        assert!(!w.try_take(2, 2, MAX_SEATS_IN_USE));
        assert_eq!(w.load().limit, 1);
    }

    #[test]
    fn limit_changes_keep_seats_and_slow() {
        let w = AdmissionWord::new(4, 0);
        assert!(w.try_take_fast(3));
        w.set_slow();
        w.set_limit(1);
        assert_eq!(
            w.load(),
            WordState {
                seats_in_use: 3,
                limit: 1,
                slow: true
            }
        );
    }
}
