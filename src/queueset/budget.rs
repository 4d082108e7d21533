//! Per-shard seat budgets: seats drawn from the level's admission word in
//! batches, counted there as taken, and handed out by a shard to its own
//! threads' starts and finishes without writing the word's cache line.
//!
//! # State
//! - [`SeatBudget`]: one per shard (in [`Shard`](super::shards::Shard)),
//!   the seats the shard holds for its threads' next starts;
//! - the batch `B` ([`AdmissionWord::batch`]): `min(16, limit / (4 ·
//!   shards))`, recomputed on every limit change. `B = 0` (small limits, or
//!   one shard with a limit under 4) turns budgets off: every start and
//!   finish is then exactly today's one-CAS path on the word.
//!
//! # Protocol
//! - **Hot start** ([`SeatBudget::take`]), for a request of `seats ≤ B`:
//!   take the seats from the own shard's budget (CAS on the shard line),
//!   then re-read the word: if it shows `SLOW` or `FAILED` now, the seats go
//!   back to the word and the start takes the exact path. If the budget is
//!   short, its few seats go back to the word first (so the word alone
//!   shows every free seat of this shard: one thread sees exactly
//!   Kubernetes' admissions), then one CAS draws `seats + B` from the word
//!   (failing on `SLOW`, `FAILED` or no room), keeps `seats` and deposits
//!   `B`; if that fails, the exact take of `seats` alone. Requests wider
//!   than `B` always take the exact path.
//! - **Hot finish** ([`SeatBudget::give`]): if the word shows neither
//!   `SLOW` nor `FAILED`, add the seats to the budget of the shard the
//!   request started on (whose ledger line the finish writes anyway),
//!   give back to the word whatever exceeds `2·B`, then re-read the word; if
//!   `SLOW` or `FAILED` is set now, swap the budget to 0 and give those
//!   seats to the word (dispatching if `SLOW`).
//! - **Slow path** (the level lock's holder, [`SeatBudget::sweep`]): before
//!   a decision that reads free seats from the word with nothing waiting (a
//!   slow-path arrival, a limit change), it sets `SLOW` (the *reclaim
//!   fence*), then swaps every budget to 0 and gives the sum to the word.
//!   `SLOW` is cleared as always, when the lock holder settles with nothing
//!   waiting; while requests wait it stays set, so budgets stay empty (only
//!   transient deposits, which their depositors return themselves).
//!
//! # Why `SLOW` is the reclaim fence, not a separate `RECLAIM` bit
//! The design in docs/scaling.md asked for a `RECLAIM` bit in the word. The
//! word has none to spare (31 bits of seats, 31 of limit since the limit
//! may be 2^30, `FAILED`, `SLOW`), and a flag outside the word would let a
//! draw that read it clear land its CAS after the sweep: the lock holder
//! would then decide on a word holding `B` parked seats (a too-wide request
//! at a non-queuing level rejected for seats nobody uses). `SLOW` already
//! has the three properties the fence needs: a draw fails on it in the same
//! CAS that takes the seats; a depositor or a budget start that sees it
//! returns its seats; a finisher that returns seats while it is set
//! dispatches. Setting it for the length of one slow-path decision costs
//! the hot path only while the lock is held (its starts and finishes then
//! take the slow path, as they would behind a waiter), and settles
//! unchanged for one thread: no other thread's hot path runs meanwhile.
//!
//! # Invariants
//! 1. **Budgets count as taken**: seats in the word = seats held by
//!    executing requests + lingering and held seats + Σ budgets, so the
//!    word's limit check bounds executing requests too: a budget seat was
//!    under the limit when it was drawn, and a limit change sweeps first.
//! 2. **Every seat leaves a budget exactly once**: by one successful CAS (a
//!    start, a trim) or swap (a sweep, a depositor's return), each on the
//!    budget's one atomic.
//! 3. **No decision reads parked seats, and no waiter starves behind
//!    them**: the fence-then-sweep and the deposit-then-re-read are two
//!    read-modify-writes on the same budget atomic, so one comes first in
//!    its modification order. If the deposit (or a budget start) is first,
//!    the sweep's swap reads it and returns it. If the sweep is first, the
//!    deposit reads from the sweep's release sequence, so it happens after
//!    the fence and its re-read sees `SLOW`: the depositor returns the
//!    seats itself and, as a finisher seeing `SLOW`, dispatches (a budget
//!    start gives its seat back and takes the exact path). Between a sweep
//!    and the end of the decision, the word can only hold such transient
//!    deposits, which are returned with a dispatch (a too-wide request that
//!    saw one is dispatched by that return).
//! 4. **Parking is bounded**: a budget holds at most `2·B` after a deposit
//!    (the excess goes back at once), so at most `2·B·shards` seats are
//!    parked while the level is idle; `QueueSet::stats` sweeps them back
//!    before reporting seats in use.
//!
//! # Memory orderings
//! Budget read-modify-writes are `AcqRel`: a start that takes a seat a
//! finisher deposited reads its clock after the finisher pushed its record
//! (the admission word's `Release`/`Acquire` argument, carried by the
//! budget), and invariant 3 rests on release sequences of the one budget
//! atomic, not on `SeqCst` (loom checks it with these orderings). The
//! re-reads of the word are `Acquire` loads: after the sweep's swap in the
//! budget's order, they see the fence that preceded it.

use super::admission::AdmissionWord;
use crate::sync::{AtomicU32, Ordering};

/// The largest batch: beyond it a budget parks more seats than the word
/// RMWs it saves are worth.
const MAX_BATCH: u32 = 16;

/// The batch `B` for a limit and a number of shards (0: budgets off).
pub(super) fn batch_for(limit: u32, shards: usize) -> u32 {
    let per = u64::from(limit) / (4 * shards.max(1) as u64);
    per.min(u64::from(MAX_BATCH)) as u32
}

/// What [`SeatBudget::take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Take {
    /// The seats are the request's; otherwise it takes the slow path.
    pub(crate) taken: bool,
    /// Seats went back to the word while requests wait: the caller must
    /// dispatch them (before taking the slow path itself, if it does).
    pub(crate) dispatch: bool,
}

/// One shard's seat budget (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct SeatBudget(AtomicU32);

impl SeatBudget {
    pub(crate) fn new() -> SeatBudget {
        SeatBudget(AtomicU32::new(0))
    }

    /// Seats parked here now (a snapshot, for the models).
    #[cfg(all(test, loom))]
    pub(crate) fn parked(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// The hot start: `seats` for a request, from this budget or the word.
    #[inline]
    pub(crate) fn take(&self, word: &AdmissionWord, seats: u32) -> Take {
        let batch = word.batch();
        let mut cur = self.0.load(Ordering::Relaxed);
        if batch == 0 && cur == 0 {
            return Self::exact(word, seats, false);
        }
        if seats <= batch {
            while cur >= seats {
                match self.0.compare_exchange_weak(
                    cur,
                    cur - seats,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) if !word.is_fenced() => {
                        return Take {
                            taken: true,
                            dispatch: false,
                        }
                    }
                    // Taken after a fence (invariant 3): the seats go
                    // back, and the exact path decides.
                    Ok(_) => return Self::exact(word, seats, word.give_back(seats)),
                    Err(actual) => cur = actual,
                }
            }
        }
        // Short (or a request wider than the batch): this shard's spare
        // seats go back first, so that the word shows them free.
        let mut dispatch = false;
        if cur > 0 {
            let spare = self.0.swap(0, Ordering::AcqRel);
            if spare > 0 {
                dispatch = word.give_back(spare);
            }
        }
        if seats <= batch && !dispatch && word.try_take_fast(seats + batch) {
            // The draw's CAS fails on SLOW, so it came before any fence:
            // the seats it keeps are the request's, and the batch is a
            // deposit like a finisher's (returned if a fence came since).
            return Take {
                taken: true,
                dispatch: self.deposit(word, batch, batch),
            };
        }
        Self::exact(word, seats, dispatch)
    }

    /// A hot start that could not use a budget: the word's exact take
    /// (which fails on `SLOW`, so not tried when seats just went back to
    /// waiters).
    #[inline]
    fn exact(word: &AdmissionWord, seats: u32, dispatch: bool) -> Take {
        Take {
            taken: !dispatch && word.try_take_fast(seats),
            dispatch,
        }
    }

    /// The hot finish: give back `seats` through this (the finishing
    /// thread's) budget. Returns whether the caller must dispatch waiters
    /// (seats went to the word while `SLOW` was set).
    #[inline]
    pub(crate) fn give(&self, word: &AdmissionWord, seats: u32) -> bool {
        let batch = word.batch();
        if batch == 0 || seats > batch || word.is_fenced() {
            return word.give_back(seats);
        }
        self.deposit(word, seats, batch)
    }

    /// Add `seats` (already counted as taken in the word) to the budget,
    /// trim it to `B` if it exceeds `2·B`, and return everything if the
    /// word is fenced now (invariant 3).
    fn deposit(&self, word: &AdmissionWord, seats: u32, batch: u32) -> bool {
        let mut dispatch = false;
        let mut cur = self.0.fetch_add(seats, Ordering::AcqRel) + seats;
        while cur > 2 * batch {
            match self
                .0
                .compare_exchange_weak(cur, batch, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    dispatch |= word.give_back(cur - batch);
                    break;
                }
                Err(actual) => cur = actual,
            }
        }
        if word.is_fenced() {
            let parked = self.0.swap(0, Ordering::AcqRel);
            if parked > 0 {
                dispatch |= word.give_back(parked);
            }
        }
        dispatch
    }

    /// The lock holder's sweep, after the fence: every seat parked here
    /// goes back to the word. Returns how many.
    pub(crate) fn sweep(&self, word: &AdmissionWord) -> u32 {
        let parked = self.0.swap(0, Ordering::AcqRel);
        if parked > 0 {
            word.give_back(parked);
        }
        parked
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The budget protocol alone, on an admission word and two shards'
    //! budgets: every interleaving of starts, finishes and the lock
    //! holder's fence and sweep. The level lock is a mutex here; the
    //! queueset's own models are in src/queueset/loom_tests/shards.rs.
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    struct Level {
        word: AdmissionWord,
        budgets: [SeatBudget; 2],
        /// The level lock, and whether a request waits behind it.
        waiting: Mutex<bool>,
        /// The waiter was dispatched.
        served: AtomicBool,
        /// Seats executing requests hold (updated right after a take and
        /// right before a give).
        executing: loom::sync::atomic::AtomicU32,
        /// The slow-path request's width.
        want: u32,
    }

    impl Level {
        fn new(limit: u32, batch: u32, want: u32) -> Arc<Level> {
            Arc::new(Level {
                word: AdmissionWord::new(limit, batch),
                budgets: [SeatBudget::new(), SeatBudget::new()],
                waiting: Mutex::new(false),
                served: AtomicBool::new(false),
                executing: loom::sync::atomic::AtomicU32::new(0),
                want,
            })
        }

        /// Invariant 1 at this step: the word never shows more than the
        /// limit, and it counts every executing and every parked seat.
        fn check(&self) {
            let w = self.word.load();
            assert!(
                w.seats_in_use <= w.limit,
                "{} seats in the word at limit {}",
                w.seats_in_use,
                w.limit
            );
        }

        fn start(&self, shard: usize) -> bool {
            let took = self.budgets[shard].take(&self.word, 1);
            if took.dispatch {
                self.dispatch();
            }
            if took.taken {
                let now = self.executing.fetch_add(1, Ordering::AcqRel) + 1;
                assert!(now <= self.word.load().limit, "{now} requests execute");
            }
            self.check();
            took.taken
        }

        fn finish(&self, shard: usize) {
            self.executing.fetch_sub(1, Ordering::AcqRel);
            if self.budgets[shard].give(&self.word, 1) {
                self.dispatch();
            }
            self.check();
        }

        /// The lock holder's part of a finish that saw `SLOW`.
        fn dispatch(&self) {
            let mut waiting = self.waiting.lock().unwrap();
            if *waiting && self.word.try_take(self.want, self.want, 0) {
                *waiting = false;
                self.served.store(true, Ordering::Release);
            }
        }

        /// A slow-path arrival: fence, sweep, then take a seat or wait.
        fn arrive(&self, sweep: bool) {
            let mut waiting = self.waiting.lock().unwrap();
            self.word.set_slow();
            if sweep {
                for b in &self.budgets {
                    b.sweep(&self.word);
                }
            }
            if self.word.try_take(self.want, self.want, 0) {
                self.served.store(true, Ordering::Release);
                self.word.clear_slow();
            } else {
                *waiting = true;
            }
            self.check();
        }

        /// At the end, with every thread joined: the waiter ran (it holds
        /// one seat, which goes back), and after a sweep the word is empty.
        fn assert_settled(&self) {
            assert!(
                self.served.load(Ordering::Acquire),
                "the waiter starved while {} seats sat in budgets",
                self.budgets[0].parked() + self.budgets[1].parked()
            );
            self.word.give_back(self.want);
            for b in &self.budgets {
                b.sweep(&self.word);
            }
            assert_eq!(self.word.load().seats_in_use, 0, "a seat was lost");
        }
    }

    fn protocol_against_a_waiter(sweep: bool) {
        loom::model(move || {
            // Limit 4, batch 1; the slow-path request needs 3 seats, so it
            // fits only once both requests are done or their seats parked
            // before the sweep.
            let level = Level::new(4, 1, 3);
            // Shard 1 holds one seat and parks another, drawn before the
            // model's race.
            assert!(level.start(1));
            let l0 = level.clone();
            let t0 = thread::spawn(move || {
                // A refill (or the exact take) and a return to shard 0.
                if l0.start(0) {
                    l0.finish(0);
                }
            });
            let l1 = level.clone();
            let t1 = thread::spawn(move || l1.finish(1));
            level.arrive(sweep);
            t0.join().unwrap();
            t1.join().unwrap();
            level.assert_settled();
        });
    }

    /// A budget refill and a return race a finish on the other shard and a
    /// slow-path arrival that fences and sweeps: the limit holds at every
    /// step, the waiter is dispatched once the requests finish, and no
    /// seat is lost.
    #[test]
    fn refill_and_return_against_a_fenced_waiter() {
        protocol_against_a_waiter(true);
    }

    /// The same with the sweep left out: a seat parked before the fence
    /// stays parked and the waiter starves — the model must catch it.
    #[test]
    #[should_panic(expected = "starved")]
    fn a_missing_sweep_starves_the_waiter() {
        protocol_against_a_waiter(false);
    }

    /// A limit change with seats parked: the lock holder fences, sweeps,
    /// lowers the limit and the batch, and lifts the fence. A start that
    /// began after the change never runs above the new limit.
    #[test]
    fn a_limit_change_with_budgets_outstanding() {
        loom::model(|| {
            let level = Level::new(4, 1, 1);
            let changed = Arc::new(AtomicBool::new(false));
            // Shard 0 parks a seat: a draw of 2, one of them returned.
            assert!(level.start(0));
            let l0 = level.clone();
            let c0 = changed.clone();
            let t0 = thread::spawn(move || {
                l0.finish(0);
                let after = c0.load(Ordering::Acquire);
                if l0.start(0) {
                    if after {
                        let n = l0.executing.load(Ordering::Acquire);
                        assert!(n <= 1, "{n} requests at the lowered limit 1");
                    }
                    l0.finish(0);
                }
            });
            {
                let _lock = level.waiting.lock().unwrap();
                level.word.set_slow();
                for b in &level.budgets {
                    b.sweep(&level.word);
                }
                level.word.set_limit(1);
                level.word.set_batch(batch_for(1, 2));
                level.word.clear_slow();
                changed.store(true, Ordering::Release);
            }
            t0.join().unwrap();
            for b in &level.budgets {
                b.sweep(&level.word);
            }
            assert_eq!(level.word.load().seats_in_use, 0, "a seat was lost");
        });
    }
}
