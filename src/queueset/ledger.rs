//! A shard's ledger: the shard-local part of the accounting of requests
//! admitted on the hot path (docs/scaling.md, "The next core", part a).
//!
//! Wired: every hot-path start opens a slot here, every hot-path finish
//! closes one, and the level lock's holder folds every shard's ledger
//! into the core at each operation it takes the lock for
//! (`Shared::lock_and_merge`, src/queueset/paths.rs; the epoch rule that
//! accounts a fold is `Core::merge_ledgers`, src/queueset/core/epoch.rs).
//!
//! # What it holds
//! - *Open slots*: one per request started on this shard's hot path and
//!   not yet finished or folded: its entry (placement, seats, charge,
//!   start), addressed by a [`LedgerTicket`] (slot index and generation) that the
//!   held request carries.
//! - *Completed sums*: what requests that finished here contribute and
//!   that adds up whatever the interleaving (counts, histograms, seat-time),
//!   so the sum over shards is the level's.
//!
//! # Protocol
//! Every operation below runs under the ledger's mutex (one per shard,
//! uncontended while each shard has one busy thread; the lock holder takes
//! it once per merge):
//! - **open** (a hot start, after it took its seats): build the entry
//!   from the shard's context (its placement: the level's policy and
//!   dealer), push the slot, then, still under the mutex, re-read the
//!   admission word; if it is fenced (`SLOW`: requests wait, or a
//!   decision is being taken), withdraw the slot and report it: the
//!   caller gives its seats back and takes the slow path.
//! - **set context** (the level lock's holder, reconfiguring: after the
//!   fence and the fold, before the fence is lifted): any start that
//!   builds from the old context was pushed before the fold (and is
//!   folded under the old configuration) or re-reads the fence and
//!   withdraws; starts after the lifting build from the new one.
//! - **close** (a hot finish): if the ticket's slot is open with the
//!   ticket's generation, free it and add the request's completion to the
//!   sums; otherwise it was folded, and the caller finishes the request
//!   through the core, under the level lock.
//! - **fold** (the level lock's holder, at a decision merge, after setting
//!   the fence): hand every open slot to the core and free it; take the
//!   sums.
//!
//! # Invariants
//! 1. **A request is accounted exactly once**: its slot is closed here or
//!    folded into the core, never both, never neither. Both happen under
//!    the mutex and both free the slot, so whichever comes second finds it
//!    free (close: `Folded`; fold: nothing to fold); the generation keeps a
//!    stale ticket from closing a later request in the reused slot.
//! 2. **A decision sees every executing request** (the fold is complete):
//!    the decider sets the fence before taking the mutex, and a start
//!    pushes its slot before it re-reads the word, both under the mutex.
//!    If the start's critical section comes first, the fold sees the slot;
//!    if the fold's comes first, the start's re-read is ordered after the
//!    fence (the fence happens before the decider's lock, which happens
//!    before the start's lock) and it withdraws. A start that re-read the
//!    word *before* pushing could see no fence, push after the fold, and
//!    execute unseen by the decision: the model
//!    `loom_tests::a_check_before_the_push_escapes_the_fold` shows it.
//!
//! # Memory orderings
//! The mutex orders the slots and sums; the fence is the admission word's
//! `AcqRel` RMW and the re-read its `Acquire` load
//! ([`AdmissionWord::is_fenced`](super::admission::AdmissionWord::is_fenced)).

use crate::sync::PlainMutex;

/// Where an open request's slot is (see the module documentation). The
/// default fills a held request's place when it has no ticket, and is
/// never read there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct LedgerTicket {
    slot: u32,
    generation: u32,
}

/// A close found the slot folded: finish the request through the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Folded;

/// The end of the free list.
const NO_SLOT: u32 = u32::MAX;

#[derive(Debug)]
enum Slot<E> {
    Free {
        generation: u32,
        /// The next free slot ([`NO_SLOT`]: none): the free list runs
        /// through the free slots themselves, so opening and closing a
        /// slot touches no second vector.
        next: u32,
    },
    Open {
        generation: u32,
        /// The shard's start number: folds hand entries over in start
        /// order (slots are reused, so the slab's order is not it).
        seq: u64,
        entry: E,
    },
}

#[derive(Debug)]
struct State<E, C, X> {
    /// What a start reads to build its entry (the shard's placement),
    /// changed only by the level lock's holder with the fence up.
    context: X,
    slots: Vec<Slot<E>>,
    /// The most recently freed slot, the head of the free list.
    free: u32,
    open: usize,
    next_seq: u64,
    completed: C,
}

/// One shard's ledger: open slots of entries `E`, completed sums `C`,
/// and the context `X` a start builds its entry from.
#[derive(Debug)]
pub(crate) struct Ledger<E, C, X = ()> {
    state: PlainMutex<State<E, C, X>>,
}

impl<E: Copy, C: Default> Ledger<E, C> {
    #[cfg(test)]
    pub(crate) fn new() -> Ledger<E, C> {
        Ledger::with_context(())
    }

    /// A hot start of a ready-made entry ([`Ledger::open_with`]).
    #[cfg(test)]
    pub(crate) fn open(&self, entry: E, fenced: impl FnOnce() -> bool) -> Option<LedgerTicket> {
        self.open_with(|_| (entry, ()), fenced, |_, _, _| {})
            .map(|(ticket, ())| ticket)
    }
}

impl<E: Copy, C: Default, X> Ledger<E, C, X> {
    pub(crate) fn with_context(context: X) -> Ledger<E, C, X> {
        Ledger {
            state: PlainMutex::new(State {
                context,
                slots: Vec::new(),
                free: NO_SLOT,
                open: 0,
                next_seq: 0,
                completed: C::default(),
            }),
        }
    }

    /// A hot start: build the entry from the context (and what else the
    /// caller wants back, `R`), open a slot for it, then re-read the word
    /// (`fenced`); if fenced, the slot is withdrawn and None returned: the
    /// caller gives its seats back and takes the slow path; if not, the
    /// sums note the start (`opened`, with its start number on this
    /// shard). The context is
    /// read under the mutex, so an entry is built from the context of the
    /// configuration it is folded under (the lock holder changes it only
    /// between a fold and the fence's lifting).
    #[inline]
    pub(crate) fn open_with<R>(
        &self,
        build: impl FnOnce(&X) -> (E, R),
        fenced: impl FnOnce() -> bool,
        opened: impl FnOnce(&mut C, u64, &E),
    ) -> Option<(LedgerTicket, R)> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let (entry, back) = build(&st.context);
        let (ticket, seq) = st.push(entry);
        if fenced() {
            st.free_slot(ticket.slot);
            return None;
        }
        opened(&mut st.completed, seq, &entry);
        Some((ticket, back))
    }

    /// A new context (the level lock's holder, with the fence up and every
    /// open slot folded: see the module documentation).
    pub(crate) fn set_context(&self, context: X) {
        self.state.lock().context = context;
    }

    /// A hot finish: close the ticket's slot and add its completion (with
    /// its start number on this shard) to the sums, or report that a fold
    /// took it.
    #[inline]
    pub(crate) fn close(
        &self,
        ticket: LedgerTicket,
        complete: impl FnOnce(&mut C, u64, &E),
    ) -> Result<(), Folded> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        // The entry is read where it lies, then its slot freed.
        let (seq, entry) = State::<E, C, X>::open_entry(&st.slots, ticket).ok_or(Folded)?;
        complete(&mut st.completed, seq, entry);
        st.free_slot(ticket.slot);
        Ok(())
    }

    /// A merge (the level lock's holder; fence set for a decision): hand
    /// every open entry, with its start number on this shard, to `fold`
    /// and free its slot; returns the sums, restarted. O(1) when nothing
    /// opened since the last fold.
    #[cfg(test)]
    pub(crate) fn fold(&self, mut fold: impl FnMut(u64, E)) -> C {
        let mut sums = None;
        self.fold_into(
            |_, _, seq, e| fold(seq, e),
            |_, c| sums = Some(std::mem::take(c)),
        );
        sums.unwrap_or_default()
    }

    /// [`Ledger::fold`], handing each entry with its ticket, and then the
    /// sums in place (`take` takes what it needs and leaves them
    /// restarted, so that the shard keeps what the sums allocated), each
    /// with the context: the one every entry and sum here was built
    /// under (the context changes only after a fold, with the fence up,
    /// so no entry of an older context is left).
    pub(crate) fn fold_into(
        &self,
        mut fold: impl FnMut(&X, LedgerTicket, u64, E),
        take: impl FnOnce(&X, &mut C),
    ) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if st.open > 0 {
            for i in 0..st.slots.len() {
                if let Slot::Open {
                    entry,
                    seq,
                    generation,
                } = st.slots[i]
                {
                    let ticket = LedgerTicket {
                        slot: i as u32,
                        generation,
                    };
                    fold(&st.context, ticket, seq, entry);
                    st.free_slot(i as u32);
                }
            }
        }
        take(&st.context, &mut st.completed);
    }

    /// `read` of the context and the entry of the ticket's slot, if it is
    /// still open (not closed, not folded).
    pub(crate) fn with_open<R>(
        &self,
        ticket: LedgerTicket,
        read: impl FnOnce(&X, &E) -> R,
    ) -> Option<R> {
        let st = self.state.lock();
        let (_, entry) = State::<E, C, X>::open_entry(&st.slots, ticket)?;
        Some(read(&st.context, entry))
    }

    /// Whether the ledger holds nothing to fold: no open slot, and sums
    /// that `empty` says are empty (the debug check behind a skipped fold,
    /// src/queueset/standing.rs, invariant 1).
    pub(crate) fn is_settled(&self, empty: impl FnOnce(&C) -> bool) -> bool {
        let st = self.state.lock();
        st.open == 0 && empty(&st.completed)
    }

    /// Open slots now.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn open_count(&self) -> usize {
        self.state.lock().open
    }
}

impl<E: Copy, C, X> State<E, C, X> {
    fn push(&mut self, entry: E) -> (LedgerTicket, u64) {
        if self.free == NO_SLOT {
            self.slots.push(Slot::Free {
                generation: 0,
                next: NO_SLOT,
            });
            self.free = (self.slots.len() - 1) as u32;
        }
        let slot = self.free;
        let generation = match self.slots[slot as usize] {
            Slot::Free { generation, next } => {
                self.free = next;
                generation.wrapping_add(1)
            }
            Slot::Open { .. } => unreachable!("a free-listed slot is free"),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots[slot as usize] = Slot::Open {
            generation,
            seq,
            entry,
        };
        self.open += 1;
        (LedgerTicket { slot, generation }, seq)
    }

    fn open_entry(slots: &[Slot<E>], ticket: LedgerTicket) -> Option<(u64, &E)> {
        match slots.get(ticket.slot as usize)? {
            Slot::Open {
                generation,
                seq,
                entry,
            } if *generation == ticket.generation => Some((*seq, entry)),
            _ => None,
        }
    }

    fn free_slot(&mut self, slot: u32) {
        if let Slot::Open { generation, .. } = self.slots[slot as usize] {
            self.slots[slot as usize] = Slot::Free {
                generation,
                next: self.free,
            };
            self.free = slot;
            self.open -= 1;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Sums {
        requests: u32,
        seats: u64,
    }

    fn add(c: &mut Sums, _seq: u64, seats: &u32) {
        c.requests += 1;
        c.seats += u64::from(*seats);
    }

    #[test]
    fn a_closed_request_counts_in_the_sums_and_a_folded_one_in_the_core() {
        let ledger: Ledger<u32, Sums> = Ledger::new();
        let a = ledger.open(2, || false).unwrap();
        let b = ledger.open(3, || false).unwrap();
        assert_eq!(ledger.close(a, add), Ok(()));
        let mut folded = Vec::new();
        let sums = ledger.fold(|_, e| folded.push(e));
        assert_eq!(folded, vec![3]);
        assert_eq!(
            sums,
            Sums {
                requests: 1,
                seats: 2
            }
        );
        assert_eq!(ledger.close(b, add), Err(Folded));
        assert_eq!(ledger.open_count(), 0);
    }

    #[test]
    fn a_stale_ticket_never_closes_the_next_request_in_its_slot() {
        let ledger: Ledger<u32, Sums> = Ledger::new();
        let old = ledger.open(1, || false).unwrap();
        ledger.fold(|_, _| {});
        let new = ledger.open(5, || false).unwrap();
        assert_eq!(old.slot, new.slot, "the slot is reused");
        assert_eq!(ledger.close(old, add), Err(Folded));
        assert_eq!(ledger.close(new, add), Ok(()));
        assert_eq!(
            ledger.fold(|_, _| {}),
            Sums {
                requests: 1,
                seats: 5
            }
        );
    }

    #[test]
    fn a_fenced_start_withdraws_its_slot() {
        let ledger: Ledger<u32, Sums> = Ledger::new();
        assert_eq!(ledger.open(1, || true), None);
        assert_eq!(ledger.open_count(), 0);
        let mut folded = 0;
        ledger.fold(|_, _| folded += 1);
        assert_eq!(folded, 0);
    }
}

#[cfg(all(test, loom))]
impl<E: Copy, C: Default> Ledger<E, C> {
    /// The broken twin of `close` for the models: it checks that the slot
    /// is open in one critical section and frees it in another, so a fold
    /// in between is counted twice.
    fn close_in_two_steps(
        &self,
        ticket: LedgerTicket,
        complete: impl FnOnce(&mut C, u64, &E),
    ) -> Result<(), Folded> {
        let (seq, entry) = {
            let st = self.state.lock();
            let (seq, entry) = State::<E, C, ()>::open_entry(&st.slots, ticket).ok_or(Folded)?;
            (seq, *entry)
        };
        let mut st = self.state.lock();
        st.free_slot(ticket.slot);
        complete(&mut st.completed, seq, &entry);
        Ok(())
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The ledger's protocol with the admission word and a level lock:
    //! every interleaving of a hot start or finish with the lock holder's
    //! fence and fold. Each model asserts at every step, and each has a
    //! broken twin that the model must catch.
    use super::*;
    use crate::queueset::admission::AdmissionWord;
    use loom::sync::atomic::{AtomicU32, Ordering};
    use loom::sync::{Arc, Mutex as LoomMutex};
    use loom::thread;

    #[derive(Debug, Default)]
    struct Sums {
        requests: u32,
    }

    /// The core's side, under the level lock.
    #[derive(Debug, Default)]
    struct CoreModel {
        /// Seats of requests the core knows execute (folded ones).
        executing: u32,
        /// Requests the decision saw: folded, or completed before it.
        seen: u32,
        /// Requests folded and then finished through the core.
        finished: u32,
        /// Requests whose completion a fold collected from the sums.
        completed: u32,
    }

    struct Level {
        word: AdmissionWord,
        ledger: Ledger<u32, Sums>,
        core: LoomMutex<CoreModel>,
        /// Requests that executed on the hot path.
        hot: AtomicU32,
    }

    /// Which protocol a model runs.
    #[derive(Clone, Copy, PartialEq)]
    enum Protocol {
        Correct,
        /// A start re-reads the word before pushing its slot.
        CheckBeforePush,
        /// A finish checks and frees its slot in two critical sections.
        CloseInTwoSteps,
    }

    impl Level {
        fn new(limit: u32) -> Arc<Level> {
            Arc::new(Level {
                word: AdmissionWord::new(limit, 0),
                ledger: Ledger::new(),
                core: LoomMutex::new(CoreModel::default()),
                hot: AtomicU32::new(0),
            })
        }

        /// A hot start of one seat.
        fn start(&self, protocol: Protocol) -> Option<LedgerTicket> {
            if !self.word.try_take_fast(1) {
                return None;
            }
            let ticket = if protocol == Protocol::CheckBeforePush {
                let fenced = self.word.is_fenced();
                self.ledger.open(1, || fenced)
            } else {
                self.ledger.open(1, || self.word.is_fenced())
            };
            match ticket {
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

        fn finish(&self, ticket: LedgerTicket, protocol: Protocol) {
            let complete = |c: &mut Sums, _: u64, _: &u32| c.requests += 1;
            let closed = if protocol == Protocol::CloseInTwoSteps {
                self.ledger.close_in_two_steps(ticket, complete)
            } else {
                self.ledger.close(ticket, complete)
            };
            if closed.is_err() {
                // Folded: the core finishes it, under the level lock.
                let mut core = self.core.lock().unwrap();
                core.executing -= 1;
                core.finished += 1;
            }
            self.word.give_back(1);
        }

        /// A decision merge: fence, fold. The fence stays (a request waits
        /// behind it), so no hot start may run unseen from now on.
        fn decide(&self) {
            let mut core = self.core.lock().unwrap();
            self.word.set_slow();
            let mut folded = 0;
            let sums = self.ledger.fold(|_, seats| folded += seats);
            core.executing += folded;
            core.seen += folded + sums.requests;
            core.completed += sums.requests;
            let word = self.word.load().seats_in_use;
            assert!(
                core.executing <= word,
                "the core counts {} executing seats, the word {}",
                core.executing,
                word
            );
        }

        /// With every thread joined: every hot request was seen by the
        /// decision and accounted exactly once, and no seat was lost.
        fn assert_settled(&self) {
            let mut core = self.core.lock().unwrap();
            let mut late = 0;
            let sums = self.ledger.fold(|_, seats| late += seats);
            core.completed += sums.requests;
            let hot = self.hot.load(Ordering::Acquire);
            assert_eq!(late, 0, "a request ran unseen by the decision");
            assert_eq!(core.seen, hot, "a request ran unseen by the decision");
            assert_eq!(core.executing, 0, "a request counted executing for ever");
            assert_eq!(
                core.finished + core.completed,
                hot,
                "{hot} hot requests, {} finished through the core, {} in the sums",
                core.finished,
                core.completed
            );
            assert_eq!(self.word.load().seats_in_use, 0, "a seat was lost");
        }
    }

    fn start_against_a_decision(protocol: Protocol) {
        loom::model(move || {
            let level = Level::new(2);
            let l = level.clone();
            let t = thread::spawn(move || {
                if let Some(ticket) = l.start(protocol) {
                    l.finish(ticket, protocol);
                }
            });
            level.decide();
            t.join().unwrap();
            level.assert_settled();
        });
    }

    /// A hot start races a decision that fences and folds: the start is
    /// folded (or completed before the fold), or it sees the fence and
    /// withdraws (invariant 2); either way it is accounted once
    /// (invariant 1).
    #[test]
    fn a_start_is_folded_or_sees_the_fence() {
        start_against_a_decision(Protocol::Correct);
    }

    /// The same start re-reading the word before its push: it can miss
    /// the fence and push after the fold, running unseen by the decision.
    #[test]
    #[should_panic(expected = "unseen by the decision")]
    fn a_check_before_the_push_escapes_the_fold() {
        start_against_a_decision(Protocol::CheckBeforePush);
    }

    fn finish_against_a_fold(protocol: Protocol) {
        loom::model(move || {
            let level = Level::new(2);
            let ticket = level.start(protocol).expect("room for one");
            let l = level.clone();
            let t = thread::spawn(move || l.finish(ticket, protocol));
            level.decide();
            t.join().unwrap();
            level.assert_settled();
        });
    }

    /// A finish on another thread races the fold of its request: counted
    /// once, in the sums or through the core (invariant 1).
    #[test]
    fn a_finish_racing_a_fold_is_counted_once() {
        finish_against_a_fold(Protocol::Correct);
    }

    /// The same with a finish that checks and frees its slot in two
    /// critical sections: a fold in between counts the request twice.
    #[test]
    #[should_panic(expected = "executing for ever")]
    fn a_close_in_two_steps_counts_twice() {
        finish_against_a_fold(Protocol::CloseInTwoSteps);
    }

    /// What finished requests were placed under: the configuration's
    /// number each start read from the ledger's context.
    #[derive(Debug, Default)]
    struct Placed {
        under_old: u32,
        under_new: u32,
    }

    /// The hot start's placement against a reconfiguration (the ledger's
    /// "set context"): the lock holder fences, folds, changes the
    /// configuration (the core's and the shard's context), then lifts the
    /// fence; `context_after_lifting` is the broken order.
    fn placement_against_a_reconfiguration(context_after_lifting: bool) {
        loom::model(move || {
            let word = Arc::new(AdmissionWord::new(2, 0));
            let ledger: Arc<Ledger<u32, Placed, u32>> = Arc::new(Ledger::with_context(1));
            // The core's configuration, under the level lock.
            let core = Arc::new(LoomMutex::new(1u32));
            let (w, l) = (word.clone(), ledger.clone());
            let t = thread::spawn(move || {
                if !w.try_take_fast(1) {
                    return;
                }
                match l.open_with(|&config| (config, ()), || w.is_fenced(), |_, _, _| {}) {
                    Some((ticket, ())) => {
                        // Folded or not, the seat goes back.
                        let _ = l.close(ticket, |sums, _, &config| {
                            if config == 1 {
                                sums.under_old += 1;
                            } else {
                                sums.under_new += 1;
                            }
                        });
                        w.give_back(1);
                    }
                    None => {
                        w.give_back(1);
                    }
                }
            });
            {
                let mut config = core.lock().unwrap();
                word.set_slow();
                let sums = ledger.fold(|_, placed| {
                    assert_eq!(placed, *config, "placed under another configuration")
                });
                assert_eq!(sums.under_new, 0, "placed under another configuration");
                *config = 2;
                if context_after_lifting {
                    word.clear_slow();
                    ledger.set_context(2);
                } else {
                    ledger.set_context(2);
                    word.clear_slow();
                }
            }
            t.join().unwrap();
            // Every start accounted after the reconfiguration was placed
            // under the new configuration.
            let config = core.lock().unwrap();
            let sums = ledger.fold(|_, placed| {
                assert_eq!(placed, *config, "placed under another configuration")
            });
            assert_eq!(sums.under_old, 0, "placed under another configuration");
            assert_eq!(word.load().seats_in_use, 0, "a seat was lost");
        });
    }

    /// A start that reads its shard's placement races a reconfiguration:
    /// it is folded under the old configuration, or withdraws at the
    /// fence, or places under the new one.
    #[test]
    fn a_start_places_under_the_configuration_that_accounts_it() {
        placement_against_a_reconfiguration(false);
    }

    /// The same with the context changed after the fence is lifted: a
    /// start in between places under the old configuration and is
    /// accounted under the new one.
    #[test]
    #[should_panic(expected = "placed under another configuration")]
    fn a_context_changed_after_the_fence_misplaces_a_start() {
        placement_against_a_reconfiguration(true);
    }
}
