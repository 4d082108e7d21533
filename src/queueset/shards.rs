//! A level's shards: one per CPU (up to 16), each on its own cache lines,
//! so that threads admitting on the same level write different lines.
//!
//! # What a shard holds
//! - `ledger` (src/queueset/ledger.rs): the hot-path requests that
//!   *started* on this shard and are still open (not finished, not folded
//!   into the core), and the sums of those that finished. A request's
//!   finish closes the slot of its start's shard (the held request carries
//!   the shard and the slot's ticket), from whichever thread finishes.
//! - `budget` (src/queueset/budget.rs): seats drawn from the level's
//!   admission word in batches, so a hot start and finish do not write
//!   the word's line. A finish gives its seats to the budget of its
//!   start's shard, whose ledger it closes.
//! - the ledger's context, the shard's [`Placement`]: how a start places
//!   its request (the level's policy, and its dealer under Kubernetes'
//!   policy), read under the ledger's mutex.
//!
//! The deal counter (Kubernetes' `enqueues`, the rotating offset into a
//! flow's hand) stays level-wide under Kubernetes' policy: queue choices
//! must follow Kubernetes' one sequence, hot-path and slow-path ones alike
//! (a per-shard offset for the hot path was tried with the ledger and
//! failed five Kubernetes-policy tests, among them two of Kubernetes' own
//! scenarios). The hot path takes only the offset; the card is dealt
//! later, where it is needed ([`DEAL_LATER`]). The flow policies' hot path
//! deals nothing.
//!
//! A thread uses shard `thread_index() % shards` for every start; with one
//! thread (every single-threaded test, the reference-model differential
//! tests) one shard serves every request.
//!
//! # Invariants
//! 1. **A hot-path request is accounted exactly once**: closed in its
//!    shard's ledger, or folded into the core by the lock holder and then
//!    finished through the core (the ledger's invariant 1).
//! 2. **A decision sees every executing request**: a decision fences
//!    (`SLOW`, an RMW on the admission word) before it folds every shard,
//!    and a start re-reads the word after pushing its slot, both under the
//!    shard's mutex (the ledger's invariant 2). While the fence has stood
//!    since a fold that read it set, the ledgers are empty and the lock
//!    holder skips the fold (src/queueset/standing.rs), as it skips the
//!    budgets' sweep.
//! 3. **The admission word stays the one authority on seats**: the
//!    ledgers only tell the core, at a merge, which requests execute and
//!    what finished ones added up to, for fair-queuing accounting and
//!    metrics.
//!
//! # Memory orderings
//! The ledger's mutex orders a slot's contents and the sums; the fence's
//! `AcqRel` RMW and the start's `Acquire` re-read order the handshake
//! (the ledger's documentation).

use super::admission::AdmissionWord;
use super::budget::SeatBudget;
use super::config::Fairness;
use super::core::{Completed, Entry, FLOW_QUEUE, NO_QUEUE};
use super::ledger::Ledger;
use crate::dealer::{Dealer, MAX_HAND_SIZE};
use crate::sync::{thread_index, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The most shards a level has: beyond this, more ledgers make the merge
/// slower than the contention they save (and cost memory per level).
const MAX_SHARDS: usize = 16;

/// The shard of an execution that has no slot in any ledger (the slow
/// path accounted its start under the lock).
pub(super) const ANY_SHARD: u32 = u32::MAX;

/// How a hot start places its request: the shard's copy of the level's
/// policy and dealer, read under the shard's ledger mutex (the ledger's
/// context: no shared pointer to load on the hot path), replaced by the
/// level lock's holder on reconfiguration ([`Shards::set_placement`]).
/// A struct rather than an enum of the three cases, so that a hot start
/// tests one field rather than matching a discriminant.
// One per shard: the dealer inline, beside the ledger's slots, spares the
// hot start a pointer to chase; the size costs nothing at one a shard.
#[derive(Debug, Clone)]
pub(super) struct Placement {
    /// Under Kubernetes' policy the hand size (never 0), else 0: the one
    /// field a hot start tests.
    hand: u32,
    /// Without a dealing policy, the queue every start takes:
    /// [`NO_QUEUE`] (the level does not queue) or [`FLOW_QUEUE`] (a flow
    /// policy: the queue is chosen at the fold).
    queue: u32,
    /// Kubernetes' policy's dealer (the card at the rotating offset of
    /// the flow's hand: with nothing waiting every card is equally empty).
    dealer: Option<Dealer>,
}

impl Placement {
    /// The placement of a configuration.
    pub(super) fn of(dealer: &Option<Dealer>, fairness: Fairness) -> Placement {
        match dealer {
            None => Placement {
                hand: 0,
                queue: NO_QUEUE,
                dealer: None,
            },
            Some(_) if fairness.is_flow() => Placement {
                hand: 0,
                queue: FLOW_QUEUE,
                dealer: None,
            },
            Some(dealer) => Placement {
                hand: dealer.hand_size(),
                queue: NO_QUEUE,
                dealer: Some(dealer.clone()),
            },
        }
    }

    /// The queue of a hot start ([`FLOW_QUEUE`] under a flow policy,
    /// [`NO_QUEUE`] at a level that does not queue). Under Kubernetes'
    /// policy it takes the next value of `enqueues`, Kubernetes'
    /// level-wide rotating offset, and defers the card: the queue is
    /// [`DEAL_LATER`] plus the offset into the flow's hand, and
    /// [`Placement::card`] deals it when it is first needed (see
    /// [`DEAL_LATER`]).
    #[inline]
    pub(super) fn queue(&self, enqueues: &AtomicU64) -> u32 {
        if self.hand == 0 {
            return self.queue;
        }
        let n = enqueues.fetch_add(1, Ordering::Relaxed);
        if n >= ENQUEUES_REDUCED_FROM {
            return DEAL_LATER + reduce_enqueues(enqueues, n, self.hand);
        }
        // Below 2^31: a 32-bit division. The offset is below the hand
        // size, at most MAX_HAND_SIZE.
        DEAL_LATER + (n as u32) % self.hand
    }

    /// `queue` with a deferred card dealt (the card at the deferred
    /// offset of `flow_hash`'s hand); any other queue as it is. Only the
    /// placement the start read may deal it: a shard's context while its
    /// ledger holds the entry, or at the fold that hands it to the core.
    #[inline]
    pub(super) fn card(&self, queue: u32, flow_hash: u64) -> u32 {
        match (&self.dealer, deferred_offset(queue)) {
            (Some(dealer), Some(offset)) => dealer.card_at(flow_hash, offset),
            (None, Some(_)) => unreachable!("only a dealing placement defers a card"),
            (_, None) => queue,
        }
    }
}

/// Every hand size divides this, the least common multiple of 1 to
/// `MAX_HAND_SIZE` = 15: subtracting a multiple of it from Kubernetes'
/// `enqueues` counter leaves its value modulo every hand size, the only
/// thing anything reads of it (the offset into a hand), unchanged.
const EVERY_HAND: u64 = 360_360;

/// Once a hot start draws a number this large, the counter is brought
/// down by this much (the largest multiple of [`EVERY_HAND`] below 2^31),
/// so the numbers hot starts draw stay below 2^32 and their offsets take
/// a 32-bit division.
const ENQUEUES_REDUCED_FROM: u64 = EVERY_HAND * ((1 << 31) / EVERY_HAND);
// The hot path's numbers, below this, fit the 32-bit division.
const _: () = assert!(ENQUEUES_REDUCED_FROM < 1 << 31);

/// The cold side of [`Placement::queue`]: the offset of number `n` into a
/// hand of `hand` cards, and the counter brought down by
/// [`ENQUEUES_REDUCED_FROM`] if it is still that large (a compare-and-swap,
/// so concurrent starts that all drew large numbers subtract it once; the
/// counter never goes below zero and keeps its value modulo every hand).
#[cold]
#[inline(never)]
fn reduce_enqueues(enqueues: &AtomicU64, n: u64, hand: u32) -> u32 {
    let mut cur = enqueues.load(Ordering::Relaxed);
    while cur >= ENQUEUES_REDUCED_FROM {
        match enqueues.compare_exchange_weak(
            cur,
            cur - ENQUEUES_REDUCED_FROM,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(actual) => cur = actual,
        }
    }
    (n % u64::from(hand)) as u32
}

/// A hot start's queue under Kubernetes' policy before its card is dealt:
/// `DEAL_LATER + offset`, the offset (`enqueues mod hand size`) into the
/// flow's hand. With nothing waiting Kubernetes picks the card at that
/// offset (every queue of the hand is equally empty), and the card is a
/// pure function of (dealer, hash, offset); so the hot start only takes
/// the offset, in Kubernetes' one sequence, and the card is dealt where
/// it is read: at the fold (src/queueset/ledger.rs, under the placement
/// the start read, which the level lock's holder changes only after
/// folding), for the round-robin position of the latest finished start
/// (at the same fold), and for [`super::QueueSet::execution_queue`].
/// A request that starts and finishes between two folds, the common
/// case, never deals. Queue indexes stay below `MAX_DECK_SIZE = 2^26`,
/// so the deferred range, below [`FLOW_QUEUE`], is distinct from them.
pub(crate) const DEAL_LATER: u32 = 1 << 31;

/// The offset of a deferred card ([`DEAL_LATER`]), if `queue` is one.
#[inline]
pub(crate) fn deferred_offset(queue: u32) -> Option<u32> {
    queue
        .checked_sub(DEAL_LATER)
        .filter(|&offset| offset < MAX_HAND_SIZE as u32)
}

/// One shard (see the module documentation).
pub(super) struct Shard {
    /// Hot-path requests of this shard (src/queueset/ledger.rs), and its
    /// placement (the ledger's context).
    pub(super) ledger: Ledger<Entry, Completed, Placement>,
    /// The seats this shard holds for its threads (src/queueset/budget.rs).
    pub(super) budget: SeatBudget,
}

/// A level's shards, each on its own cache lines.
pub(super) struct Shards(Box<[CachePadded<Shard>]>);

impl Shards {
    /// One shard per CPU, rounded down to a power of two (so picking a
    /// thread's shard is a mask, not a division), at most [`MAX_SHARDS`];
    /// two under loom and shuttle, so their models race two ledgers.
    pub(super) fn new(placement: &Placement) -> Shards {
        let n = if cfg!(any(loom, shuttle)) {
            2
        } else {
            let cpus = std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, MAX_SHARDS);
            1 << cpus.ilog2()
        };
        Shards(
            (0..n)
                .map(|_| {
                    CachePadded::new(Shard {
                        ledger: Ledger::with_context(placement.clone()),
                        budget: SeatBudget::new(),
                    })
                })
                .collect(),
        )
    }

    /// Every shard's new placement (the level lock's holder,
    /// reconfiguring: after the fence and the fold, before the fence is
    /// lifted; the ledger's protocol, "set context").
    pub(super) fn set_placement(&self, placement: &Placement) {
        for shard in self.iter() {
            shard.ledger.set_context(placement.clone());
        }
    }

    /// How many shards.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Every budget's parked seats back to the word (the lock holder, after
    /// setting the reclaim fence, or for an exact snapshot). Returns how
    /// many seats went back.
    pub(super) fn sweep(&self, word: &AdmissionWord) -> u32 {
        self.0.iter().map(|shard| shard.budget.sweep(word)).sum()
    }

    /// The calling thread's shard and its index.
    #[inline]
    pub(super) fn mine(&self) -> (u32, &Shard) {
        // A power of two (see `new`).
        let i = thread_index() & (self.0.len() - 1);
        (i as u32, &self.0[i])
    }

    /// Shard `i` (an index [`Shards::mine`] returned: the shard of a
    /// request's start).
    #[inline]
    pub(super) fn get(&self, i: u32) -> &Shard {
        &self.0[i as usize]
    }

    /// Every shard, in index order (the merge folds them in this order).
    pub(super) fn iter(&self) -> impl Iterator<Item = &Shard> {
        self.0.iter().map(|s| &**s)
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn every_hand_size_divides_the_reduction() {
        for hand in 1..=crate::dealer::MAX_HAND_SIZE as u64 {
            assert_eq!(EVERY_HAND % hand, 0, "hand {hand}");
            assert_eq!(ENQUEUES_REDUCED_FROM % hand, 0, "hand {hand}");
        }
    }

    /// Around the reduction, every hot start's offset is Kubernetes' (its
    /// number in the unreduced sequence modulo the hand size), and the
    /// counter comes back below the threshold with the same value modulo
    /// every hand size.
    #[test]
    fn offsets_follow_kubernetes_sequence_through_the_reduction() {
        for hand in 1..=crate::dealer::MAX_HAND_SIZE as u32 {
            let dealer = Dealer::new(hand, hand).expect("valid dealer");
            let placement = Placement::of(&Some(dealer), Fairness::Kubernetes);
            let first = ENQUEUES_REDUCED_FROM - 5;
            let enqueues = AtomicU64::new(first);
            for i in 0..20 {
                let unreduced = first + i;
                assert_eq!(
                    placement.queue(&enqueues),
                    DEAL_LATER + (unreduced % u64::from(hand)) as u32,
                    "hand {hand}, start {i}"
                );
            }
            let now = enqueues.load(Ordering::Relaxed);
            assert!(now < ENQUEUES_REDUCED_FROM, "reduced once: {now}");
            assert_eq!(now % EVERY_HAND, (first + 20) % EVERY_HAND);
        }
    }
}
