//! A level's event rings, sharded by thread: each shard has its own ring,
//! so two threads admitting on the same level write different cache lines
//! for everything but the admission word and the deal counter.
//!
//! # What a shard holds
//! - `ring`: the hot-path records (starts and finishes) of the requests that
//!   *started* on this shard. A request's finish goes to the ring of its
//!   start (the [`Execution`](super::Execution) remembers the shard), never
//!   to the finishing thread's, so a request's two records are in one FIFO.
//!
//! The deal counter (Kubernetes' `enqueues`, the rotating offset into a
//! flow's hand) stays level-wide: the slow path's choices, made in the
//! lock's order, must follow Kubernetes' one sequence, and hot-path and
//! slow-path choices share it (a per-shard counter was tried and broke
//! src/queueset/shuttle_tests/paths.rs's comparison with the reference model).
//!
//! A thread uses shard `thread_index() % shards` for every start; with one
//! thread (every single-threaded test, the reference-model differential
//! tests) the level behaves exactly as with one ring.
//!
//! # Invariants
//! 1. **A request's start record is replayed before its finish record.**
//!    Both are in the same ring, pushed in that order (the finish happens
//!    after the start returned), a ring is FIFO, and the merge below only
//!    ever takes a ring's oldest record.
//! 2. **Every record is replayed exactly once, before any decision that
//!    depends on it.** The lock holder pops, from every ring, the records
//!    it held when the drain looked at it (a bounded count, so producers
//!    cannot keep the lock holder replaying forever), then replays them all
//!    before it decides anything. A record pushed while the drain runs is
//!    replayed by the next lock holder: it is a later event.
//! 3. **The admission word stays the one authority on seats** (its own
//!    protocol is unchanged): the rings only tell the core, after the fact,
//!    which requests started and finished, for fair-queuing accounting.
//!
//! # The replay order, and why it gives today's state
//! With one ring the core replays records in push order. With several, the
//! drain merges the popped records by timestamp: it repeatedly replays the
//! oldest *head* of the rings (ties: a finish before a start, then the lower
//! shard). That order is a valid history:
//! - each ring's order is kept (invariant 1);
//! - a start that took seats another request's finish gave back comes after
//!   that finish: the finisher read its clock, pushed its record and then
//!   gave the seats back (`Release`); the starter took them (`Acquire`) and
//!   then read its clock, so the finish's time is at most the start's (the
//!   clock is monotonic across threads) and the tie-break puts the finish
//!   first. So when both records are in one drain, the replay never counts
//!   more seats in use than the word held (but see below);
//! - the core integrates R and the utilization between successive record
//!   times, and ignores a time earlier than one already seen (`Core::sync`),
//!   so records of the same instant give the same R whatever their order,
//!   and records in time order give exactly the R of the sequential history.
//!
//! The merged order can differ from the order the events happened in only
//! by a record the drain did not see yet: it pushed to a ring after the
//! drain had counted that ring's records. It is replayed by the next drain,
//! at its own time, which `sync` treats as "no time passed since the last
//! replayed record" — what one ring did too, for a thread preempted between
//! its clock read and its push. One case is new with several rings: the
//! drain counts ring 0, a finish is pushed to ring 0 and gives its seat
//! back, a start takes that seat and is pushed to ring 1, the drain counts
//! ring 1. Until the next drain the core then counts one request more than
//! the word holds. No admission depends on it (only the word decides
//! seats); the level's R and utilization are integrated with that extra
//! seat from the start's time until the next drain — a window of one drain,
//! as for the late record above. The differential tests (one thread, one
//! shard) see the very same sequence as before.
//!
//! # Memory orderings
//! Nothing new: a ring's push/pop pair orders a record's contents (crossbeam
//! `ArrayQueue`, or a mutex under loom and shuttle); the level lock orders
//! the drains; a finish is pushed before the seats go back to the word
//! (`Release`), as the admission word's protocol requires.
//!
//! # The admission word: sharded through seat budgets
//! Each shard also holds a seat budget (src/queueset/budget.rs): seats drawn
//! from the level's admission word in batches, so that on an unsaturated
//! level a start and a finish write only their shard's lines (the budget,
//! the ring) — and the deal counter, which stays level-wide (see above).
//! docs/scaling.md says what each step predicts on many cores.

use super::admission::AdmissionWord;
use super::budget::SeatBudget;
use super::paths::Record;
use crate::sync::{thread_index, EventRing};
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;

/// Records a ring holds before the hot path replays it under the lock.
// Two under loom, so a model with a few hot-path events fills the ring and
// exercises the full-ring fallback (src/queueset/loom_tests/configs.rs).
pub(super) const RING_CAPACITY: usize = if cfg!(loom) { 2 } else { 256 };

/// The most shards a level has: beyond this, more rings make the drain's
/// merge slower than the contention they save (and cost memory per level).
const MAX_SHARDS: usize = 16;

/// The shard of an execution that has no start record in any ring (the
/// slow path accounted its start under the lock): its finish may go to any
/// ring.
pub(super) const ANY_SHARD: u32 = u32::MAX;

/// One shard (see the module documentation).
pub(super) struct Shard {
    pub(super) ring: EventRing<Record>,
    /// The seats this shard holds for its threads (src/queueset/budget.rs).
    pub(super) budget: SeatBudget,
}

/// What [`Shards::busy`] found.
pub(super) enum Busy<'a> {
    None,
    One(&'a EventRing<Record>),
    Several,
}

/// A level's shards, each on its own cache lines.
pub(super) struct Shards(Box<[CachePadded<Shard>]>);

impl Shards {
    /// One shard per CPU, rounded down to a power of two (so picking a
    /// thread's shard is a mask, not a division), at most [`MAX_SHARDS`];
    /// two under loom and shuttle, so their models race two rings.
    pub(super) fn new() -> Shards {
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
                        ring: EventRing::new(RING_CAPACITY),
                        budget: SeatBudget::new(),
                    })
                })
                .collect(),
        )
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

    /// Shard `i` (an index [`Shards::mine`] returned; the ring of a
    /// request's start).
    #[inline]
    pub(super) fn get(&self, i: u32) -> &Shard {
        &self.0[i as usize]
    }

    /// Where a request's finish record goes: the shard of its start record
    /// (invariant 1), or the calling thread's for a request whose start
    /// the slow path accounted directly ([`ANY_SHARD`]).
    #[inline]
    pub(super) fn for_finish(&self, i: u32) -> &Shard {
        if i == ANY_SHARD {
            self.mine().1
        } else {
            self.get(i)
        }
    }

    /// Which rings hold records now: the drain replays a sole busy ring
    /// in place and merges only when several are (a snapshot: a ring found
    /// empty may be pushed to meanwhile; that record is a later event, for
    /// the next drain, as in invariant 2).
    pub(super) fn busy(&self) -> Busy<'_> {
        let mut found = None;
        for shard in self.0.iter() {
            if !shard.ring.is_empty() {
                if found.is_some() {
                    return Busy::Several;
                }
                found = Some(&shard.ring);
            }
        }
        found.map_or(Busy::None, Busy::One)
    }

    /// Empty every ring without replaying (a failed level).
    pub(super) fn discard(&self) {
        for shard in self.0.iter() {
            while shard.ring.pop().is_some() {}
        }
    }

    /// Pop the records every ring holds now into `buffers` (one per shard,
    /// reused between drains), at most the count each ring had when it was
    /// looked at. Returns how many were popped.
    pub(super) fn take(&self, buffers: &mut Vec<VecDeque<Record>>) -> usize {
        buffers.resize_with(self.0.len(), VecDeque::new);
        let mut total = 0;
        for (shard, buffer) in self.0.iter().zip(buffers.iter_mut()) {
            let mut budget = shard.ring.len();
            while budget > 0 {
                let Some(record) = shard.ring.pop() else {
                    break;
                };
                buffer.push_back(record);
                budget -= 1;
                total += 1;
            }
        }
        total
    }
}

/// The next record to replay from `buffers`: the oldest head (see the
/// module documentation for the order and why it is a valid history).
pub(super) fn next_in_order(buffers: &mut [VecDeque<Record>]) -> Option<Record> {
    let mut best: Option<(usize, (crate::clock::Instant, bool))> = None;
    for (i, buffer) in buffers.iter().enumerate() {
        if let Some(head) = buffer.front() {
            let key = head.order_key();
            if best.is_none_or(|(_, k)| key < k) {
                best = Some((i, key));
            }
        }
    }
    best.and_then(|(i, _)| buffers[i].pop_front())
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;
    use crate::clock::Instant;

    fn start(at: u64) -> Record {
        Record::Start {
            queue: 0,
            tag: 0,
            initial_seats: 1,
            final_seats: 0,
            latency_secs: 0,
            latency_subsec_nanos: 0,
            at: Instant::from_nanos(at),
        }
    }

    fn finish(start: u64, at: u64) -> Record {
        Record::Finish {
            queue: 0,
            tag: 0,
            initial_seats: 1,
            seats: 1,
            start: Instant::from_nanos(start),
            at: Instant::from_nanos(at),
        }
    }

    fn times(mut buffers: Vec<VecDeque<Record>>) -> Vec<(u64, bool)> {
        std::iter::from_fn(|| next_in_order(&mut buffers))
            .map(|r| {
                let (at, start) = r.order_key();
                (at.as_nanos(), start)
            })
            .collect()
    }

    #[test]
    fn merges_by_time_with_finishes_first_and_keeps_each_ring_in_order() {
        // Ring 0: a start at 5 that another shard's finish at 5 made room
        // for, and a finish at 9; ring 1: that finish at 5, then a start at
        // 3 pushed late (its clock read before a preemption).
        let buffers = vec![
            VecDeque::from([start(1), start(5), finish(5, 9)]),
            VecDeque::from([finish(0, 5), start(3)]),
        ];
        assert_eq!(
            times(buffers),
            vec![
                (1, true),
                (5, false), // the finish before the start it made room for
                (3, true),  // the older head goes first
                (5, true),
                (9, false), // behind its ring's older records, never before
            ]
        );
    }

    #[test]
    fn a_request_at_one_instant_starts_before_it_finishes() {
        // Start and finish at the same instant (a manual clock): one ring,
        // so its order holds whatever the tie-break says.
        let buffers = vec![VecDeque::from([start(4), finish(4, 4)]), VecDeque::new()];
        assert_eq!(times(buffers), vec![(4, true), (4, false)]);
    }
}
