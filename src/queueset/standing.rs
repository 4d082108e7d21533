//! What the level lock's holder knows the shards hold while the fence
//! stands: a saturated level's slow path without touching every shard
//! (docs/scaling.md, "The saturated level (issue 21)").
//!
//! Every slow-path operation merges every shard's ledger (a decision
//! after it sets the fence, `SLOW`), and a slow-path arrival also sweeps
//! every shard's seat budget. On a saturated level, `SLOW` stays set from
//! one operation to the next (requests wait), and then neither can find
//! anything: the previous holder emptied them behind the fence, and the
//! fence keeps them empty. This type records that, so the holder skips
//! the fold and the sweep, and writes no shard's line.
//!
//! # State
//! Two facts, each true only while `SLOW` has stood without a break since
//! the lock holder established it:
//! - **ledgers empty**: a merge folded every shard's ledger after reading
//!   `SLOW` set in the admission word (read *before* the first fold);
//! - **budgets empty**: a reclaim swept every shard's budget after setting
//!   `SLOW`.
//!
//! # Protocol
//! All under the level lock (`SLOW` is set and cleared only there):
//! - a merge: if the ledgers are known empty, fold nothing; otherwise read
//!   the word, fold every ledger, and record the ledgers empty if the word
//!   read showed `SLOW` ([`Standing::folded`]);
//! - a reclaim: if the budgets are known empty, neither set `SLOW` (it
//!   stands) nor sweep; otherwise set it, sweep, and record the budgets
//!   empty ([`Standing::swept`]);
//! - every clear of `SLOW` forgets both facts ([`Standing::fence_lifted`]),
//!   in the same step (`Shared::clear_slow`, src/queueset/paths.rs).
//!
//! # Invariants
//! 1. **A skipped fold misses nothing**: while the ledgers are known
//!    empty, every shard's ledger has no open slot and empty sums outside
//!    a start's critical section. The recording merge folded each shard
//!    after its word read saw `SLOW`; a start whose critical section comes
//!    later in that shard's mutex order re-reads the word after that read
//!    (the fold's unlock happens before the start's lock), so by read-read
//!    coherence it sees `SLOW` too, unless a clear came between in the
//!    word's order, which forgets the fact first (a clear is a later lock
//!    holder's, after this one's read): it withdraws its slot in the same
//!    critical section (the ledger's invariant 2). A close needs an open
//!    slot, so no sums accrue. A start whose critical section came before
//!    the fold was folded by it.
//! 2. **A skipped sweep parks nothing a decision must see**: while the
//!    budgets are known empty, a budget can hold only a transient deposit
//!    or a budget start's seats, taken after the recording sweep in the
//!    budget's order; its re-read of the word sees the fence (the budget's
//!    invariant 3), so its owner returns the seats itself and dispatches.
//!    That is the state right after any sweep; skipping the sweep widens
//!    the window in which such a deposit exists, not what it may hold.
//!
//! The models: `loom_tests` below (the protocol alone on a word, two
//! ledgers and two budgets), each with a broken twin that fails; and
//! every queueset model in src/queueset/loom_tests runs over it.

/// See the module documentation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Standing {
    ledgers_empty: bool,
    budgets_empty: bool,
}

impl Standing {
    /// The fence came down: nothing is known about the shards any more.
    #[inline]
    pub(super) fn fence_lifted(&mut self) {
        *self = Standing::default();
    }

    /// Whether a merge must fold the ledgers (false: invariant 1 says they
    /// are empty).
    #[inline]
    pub(super) fn must_fold(&self) -> bool {
        !self.ledgers_empty
    }

    /// Every ledger was folded; `fenced_before`: the word read before the
    /// first fold showed `SLOW`.
    #[inline]
    pub(super) fn folded(&mut self, fenced_before: bool) {
        self.ledgers_empty = fenced_before;
    }

    /// Whether a reclaim must set the fence and sweep (false: invariant 2).
    #[inline]
    pub(super) fn must_sweep(&self) -> bool {
        !self.budgets_empty
    }

    /// The fence was set and then every budget swept.
    #[inline]
    pub(super) fn swept(&mut self) {
        self.budgets_empty = true;
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The protocol alone: the lock holder's merges and reclaims, with and
    //! without the standing fence, against hot-path starts and finishes on
    //! an admission word, two ledgers and two seat budgets. Each model
    //! asserts what the skipped step must not miss, and each has broken
    //! twins that the model must catch.
    use super::*;
    use crate::queueset::admission::AdmissionWord;
    use crate::queueset::budget::SeatBudget;
    use crate::queueset::ledger::{Ledger, LedgerTicket};
    use loom::sync::atomic::{AtomicU32, Ordering};
    use loom::sync::{Arc, Mutex};
    use loom::thread;
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// Which protocols' lock holders skipped a fold (a sweep) in any
    /// execution, one bit per [`Protocol`] (std's atomics: they outlive
    /// loom's executions), so a model that passes is known to exercise
    /// the skip.
    static SKIPPED_FOLD: AtomicU8 = AtomicU8::new(0);
    static SKIPPED_SWEEP: AtomicU8 = AtomicU8::new(0);

    /// Which protocol a model runs.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Protocol {
        Correct,
        /// The ledgers recorded empty from the word read at the end of the
        /// operation (after its own enqueue set `SLOW`), not before the
        /// first fold.
        RecordAtUnlock,
        /// A clear of `SLOW` that does not forget what the fence kept.
        KeepOnClear,
    }

    #[derive(Debug, Default)]
    struct Sums {
        requests: u32,
    }

    /// The lock holder's state (the level lock is this mutex).
    #[derive(Debug, Default)]
    struct Holder {
        standing: Standing,
        /// Requests the merges saw: folded, or completed before a fold.
        seen: u32,
        /// Folded requests still executing in the core.
        executing: u32,
    }

    struct Level {
        word: AdmissionWord,
        ledgers: [Ledger<u32, Sums>; 2],
        lock: Mutex<Holder>,
        /// Requests that executed on the hot path.
        hot: AtomicU32,
        protocol: Protocol,
    }

    impl Level {
        fn new(protocol: Protocol) -> Arc<Level> {
            Arc::new(Level {
                word: AdmissionWord::new(2, 0),
                ledgers: [Ledger::new(), Ledger::new()],
                lock: Mutex::new(Holder::default()),
                hot: AtomicU32::new(0),
                protocol,
            })
        }

        /// A hot start of one seat on shard `shard`.
        fn start(&self, shard: usize) -> Option<LedgerTicket> {
            if !self.word.try_take_fast(1) {
                return None;
            }
            match self.ledgers[shard].open(1, || self.word.is_fenced()) {
                Some(t) => {
                    self.hot.fetch_add(1, Ordering::AcqRel);
                    Some(t)
                }
                None => {
                    self.word.give_back(1);
                    None
                }
            }
        }

        fn finish(&self, shard: usize, ticket: LedgerTicket) {
            let closed = self.ledgers[shard].close(ticket, |c, _, _| c.requests += 1);
            if closed.is_err() {
                // Folded: the core finishes it, under the level lock.
                self.lock.lock().unwrap().executing -= 1;
            }
            self.word.give_back(1);
        }

        /// `Shared::merge`.
        fn merge(&self, h: &mut Holder) {
            if !h.standing.must_fold() {
                SKIPPED_FOLD.fetch_or(1 << self.protocol as u8, Relaxed);
                return;
            }
            let fenced = self.word.is_fenced();
            for ledger in &self.ledgers {
                let mut folded = 0;
                let sums = ledger.fold(|_, seats| folded += seats);
                h.executing += folded;
                h.seen += folded + sums.requests;
            }
            if self.protocol != Protocol::RecordAtUnlock {
                h.standing.folded(fenced);
            }
        }

        /// `Shared::clear_slow`.
        fn clear_slow(&self, h: &mut Holder) {
            self.word.clear_slow();
            if self.protocol != Protocol::KeepOnClear {
                h.standing.fence_lifted();
            }
        }

        fn unlock(&self, h: &mut Holder) {
            if self.protocol == Protocol::RecordAtUnlock {
                h.standing.folded(self.word.is_fenced());
            }
        }

        /// A slow-path arrival that finds room: fence, fold, decide, lift
        /// the fence (nothing waits).
        fn arrival_that_runs(&self) {
            let mut h = self.lock.lock().unwrap();
            self.word.set_slow();
            self.merge(&mut h);
            self.clear_slow(&mut h);
            self.unlock(&mut h);
        }

        /// An operation that merges without a fence (a slow finish, an
        /// observation) and then enqueues a request (`SLOW` from now on).
        fn merge_then_enqueue(&self) {
            let mut h = self.lock.lock().unwrap();
            self.merge(&mut h);
            self.word.set_slow();
            self.unlock(&mut h);
        }

        /// A decision while requests wait: its merge must see every
        /// request executing on the hot path, skipped or not. (Whether it
        /// did is checked at the end, by a last fold: a check here would
        /// take the ledgers' mutexes, an order the skip does not have.)
        fn decide(&self) {
            let mut h = self.lock.lock().unwrap();
            self.word.set_slow();
            self.merge(&mut h);
            let word = self.word.load().seats_in_use;
            assert!(
                h.executing <= word,
                "the core counts {} executing seats, the word {word}",
                h.executing
            );
            self.unlock(&mut h);
        }

        /// With every thread joined: nothing left to fold (no start can
        /// open after the last decision: `SLOW` stands), every hot request
        /// seen once, every seat back.
        fn assert_settled(&self) {
            let h = self.lock.lock().unwrap();
            for ledger in &self.ledgers {
                let mut late = 0;
                let sums = ledger.fold(|_, seats| late += seats);
                assert_eq!(
                    late + sums.requests,
                    0,
                    "a request ran unseen by the decision"
                );
            }
            assert_eq!(h.seen, self.hot.load(Ordering::Acquire), "seen once");
            assert_eq!(h.executing, 0, "a request counted executing for ever");
            assert_eq!(self.word.load().seats_in_use, 0, "a seat was lost");
        }
    }

    fn ledgers_against_the_lock_holder(protocol: Protocol) {
        loom::model(move || {
            let level = Level::new(protocol);
            let l = level.clone();
            let t = thread::spawn(move || {
                if let Some(ticket) = l.start(1) {
                    l.finish(1, ticket);
                }
            });
            level.arrival_that_runs();
            level.merge_then_enqueue();
            level.decide();
            level.decide();
            t.join().unwrap();
            level.assert_settled();
        });
        assert!(
            SKIPPED_FOLD.load(Relaxed) & (1 << protocol as u8) != 0,
            "no execution skipped a fold"
        );
    }

    /// A hot start and finish race four lock holders' operations: an
    /// arrival that fences and lifts the fence, a merge with no fence that
    /// then enqueues, and two decisions behind the standing fence, which
    /// fold or skip by the protocol (the second skips): neither misses a
    /// request (invariant 1).
    #[test]
    fn a_skipped_fold_misses_no_request() {
        ledgers_against_the_lock_holder(Protocol::Correct);
    }

    /// Recording the ledgers empty from `SLOW` as it stands at the end of
    /// the operation: a start between the unfenced fold and the enqueue
    /// runs unseen by the decision that skips.
    #[test]
    #[should_panic(expected = "unseen by the decision")]
    fn recording_after_the_fold_misses_a_request() {
        ledgers_against_the_lock_holder(Protocol::RecordAtUnlock);
    }

    /// A clear of `SLOW` that keeps the fact: a start after the clear runs
    /// unseen by the next decision, which skips.
    #[test]
    #[should_panic(expected = "unseen by the decision")]
    fn a_fold_skipped_after_a_clear_misses_a_request() {
        ledgers_against_the_lock_holder(Protocol::KeepOnClear);
    }

    /// The budgets' side: a level of 4 seats, budgets of one seat, and
    /// slow-path arrivals of all 4 seats that run (and finish) at once
    /// when they fit, or wait for a finisher's dispatch.
    struct Budgets {
        word: AdmissionWord,
        budgets: [SeatBudget; 2],
        /// The level lock: the standing fence and the arrivals waiting.
        lock: Mutex<(Standing, u32)>,
        served: AtomicU32,
        protocol: Protocol,
    }

    const WANT: u32 = 4;

    impl Budgets {
        fn new(protocol: Protocol) -> Arc<Budgets> {
            Arc::new(Budgets {
                word: AdmissionWord::new(4, 1),
                budgets: [SeatBudget::new(), SeatBudget::new()],
                lock: Mutex::new((Standing::default(), 0)),
                served: AtomicU32::new(0),
                protocol,
            })
        }

        fn check(&self) {
            let w = self.word.load();
            assert!(w.seats_in_use <= w.limit, "{} seats in use", w.seats_in_use);
        }

        fn start(&self, shard: usize) -> bool {
            let took = self.budgets[shard].take(&self.word, 1);
            if took.dispatch {
                self.dispatch();
            }
            self.check();
            took.taken
        }

        fn finish(&self, shard: usize) {
            if self.budgets[shard].give(&self.word, 1) {
                self.dispatch();
            }
            self.check();
        }

        fn dispatch(&self) {
            let mut h = self.lock.lock().unwrap();
            self.serve(&mut h);
        }

        /// Run every waiting arrival that fits (each finishes at once);
        /// lift the fence when none waits.
        fn serve(&self, h: &mut (Standing, u32)) {
            while h.1 > 0 && self.word.try_take(WANT, WANT, 0) {
                h.1 -= 1;
                self.served.fetch_add(1, Ordering::AcqRel);
                self.word.give_back(WANT);
            }
            if h.1 == 0 {
                self.word.clear_slow();
                if self.protocol != Protocol::KeepOnClear {
                    h.0.fence_lifted();
                }
            }
        }

        /// `Shared::reclaim`, then the arrival runs or waits.
        fn arrive(&self) {
            let mut h = self.lock.lock().unwrap();
            if h.0.must_sweep() {
                self.word.set_slow();
                for b in &self.budgets {
                    b.sweep(&self.word);
                }
                h.0.swept();
            } else {
                SKIPPED_SWEEP.fetch_or(1 << self.protocol as u8, Relaxed);
            }
            h.1 += 1;
            self.serve(&mut h);
            self.check();
        }

        fn assert_settled(&self) {
            assert_eq!(
                self.served.load(Ordering::Acquire),
                2,
                "an arrival starved while {} seats sat in budgets",
                self.budgets.iter().map(|b| b.parked()).sum::<u32>()
            );
            for b in &self.budgets {
                b.sweep(&self.word);
            }
            assert_eq!(self.word.load().seats_in_use, 0, "a seat was lost");
        }
    }

    fn budgets_against_two_arrivals(protocol: Protocol) {
        loom::model(move || {
            let level = Budgets::new(protocol);
            let l = level.clone();
            // A budget draw (one seat held, one parked) and a return.
            let t = thread::spawn(move || {
                if l.start(0) {
                    l.finish(0);
                }
            });
            level.arrive();
            level.arrive();
            t.join().unwrap();
            level.assert_settled();
        });
        assert!(
            SKIPPED_SWEEP.load(Relaxed) & (1 << protocol as u8) != 0,
            "no execution skipped a sweep"
        );
    }

    /// Two arrivals of 4 seats race a budget draw and return on shard 0;
    /// the second sweeps, or skips the sweep because the fence stood since
    /// the first's (the first waits behind the drawn seat): the limit holds
    /// at every step, neither arrival starves behind parked seats, no seat
    /// is lost (invariant 2).
    #[test]
    fn a_skipped_sweep_starves_no_arrival() {
        budgets_against_two_arrivals(Protocol::Correct);
    }

    /// A clear of `SLOW` that keeps the fact: seats parked after it stay
    /// parked through the second arrival's skipped sweep, which starves.
    #[test]
    #[should_panic(expected = "starved")]
    fn a_sweep_skipped_after_a_clear_starves_an_arrival() {
        budgets_against_two_arrivals(Protocol::KeepOnClear);
    }
}
