//! Request handles: a sharded slab of slots with generations.
//!
//! # Handle encoding
//! A handle is a `u64`: the slot's generation in the high 32 bits, the
//! slot's index plus one in the low 32 bits. Handle 0 is never issued (the
//! low half is at least 1), so C code can use 0 for "no request".
//!
//! The index interleaves shards: `index = local * SHARDS + shard`, so a
//! handle names its shard without a lookup. Each thread inserts into one
//! shard (picked round-robin at the thread's first insert), which keeps
//! concurrent start/finish on different threads off each other's locks.
//!
//! # Generations and retirement
//! A slot's generation is bumped when its request is retired (finished,
//! cancelled, or rejected after waiting), so every handle issued for that
//! occupancy goes stale at once. A free slot remembers how its last occupant
//! was retired, which lets the ABI tell "finish of a rejected request" from
//! "unknown handle" for the handle just retired. Free slots are reused first
//! in, first out, so that memory lasts as long as possible; once the slot is
//! reused, the old handle is plainly unknown. Generations wrap after 2^32
//! reuses of one slot, the only way a stale handle could alias a live one.

use crate::level::{RequestGuard, RequestTicket};
use crate::queueset::RejectReason;
use crate::sync::{lock, Arc, AtomicUsize, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;

use super::completion::RequestWaker;

/// Number of shards (a power of two).
pub(crate) const SHARDS: usize = 16;

/// What a handle refers to while it is live.
pub(crate) enum Entry {
    /// Dispatched (at once, or its dispatch was reported): finish it.
    Executing(RequestGuard),
    /// In a queue, or decided without the caller having been told yet.
    Waiting(Box<Waiting>),
}

/// A queued request and the waker registered with its ticket.
pub(crate) struct Waiting {
    pub(crate) ticket: RequestTicket,
    pub(crate) waker: Arc<RequestWaker>,
}

/// How a slot's last occupant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retired {
    Finished,
    Cancelled,
    Rejected(RejectReason),
}

/// Why a handle does not name a live request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Zero, never issued, or its slot has been reused since.
    Unknown,
    /// The slot's last occupant, retired this way.
    Retired(Retired),
}

enum State {
    Free(Option<Retired>),
    Busy(Entry),
}

struct Slot {
    generation: u32,
    state: State,
}

#[derive(Default)]
struct Shard {
    slots: Vec<Slot>,
    /// Local indexes of free slots, oldest first.
    free: VecDeque<u32>,
}

/// The slab. See the module documentation.
pub(crate) struct RequestSlab {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
}

/// A live slot, borrowed under its shard's lock.
pub(crate) struct Occupied<'a> {
    shard: &'a mut Shard,
    local: u32,
}

impl Occupied<'_> {
    pub(crate) fn entry(&mut self) -> &mut Entry {
        match &mut self.shard.slots[self.local as usize].state {
            State::Busy(entry) => entry,
            State::Free(_) => unreachable!("an Occupied slot is busy"),
        }
    }

    /// Retire the request: its handle goes stale. The entry comes back to
    /// be dropped after the lock is released (dropping a guard finishes a
    /// request, dropping a ticket cancels one; neither runs under our lock).
    pub(crate) fn retire(self, how: Retired) -> Entry {
        let slot = &mut self.shard.slots[self.local as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let state = std::mem::replace(&mut slot.state, State::Free(Some(how)));
        self.shard.free.push_back(self.local);
        match state {
            State::Busy(entry) => entry,
            State::Free(_) => unreachable!("an Occupied slot is busy"),
        }
    }
}

fn encode(generation: u32, index: u32) -> u64 {
    (generation as u64) << 32 | (index as u64 + 1)
}

/// The shard, local index and generation of a handle (None for 0).
fn decode(handle: u64) -> Option<(usize, u32, u32)> {
    let low = handle as u32;
    let index = low.checked_sub(1)? as usize;
    let generation = (handle >> 32) as u32;
    Some((index % SHARDS, (index / SHARDS) as u32, generation))
}

/// The shard the calling thread inserts into: threads are spread over the
/// shards round robin, so workers on different threads rarely share a lock.
/// Also used by the workqueue's item handles.
pub(crate) fn home_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    HOME.try_with(|h| *h).unwrap_or(0)
}

impl Default for RequestSlab {
    fn default() -> Self {
        RequestSlab {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
        }
    }
}

impl RequestSlab {
    /// Store `entry` under a new handle, or give it back if the handle
    /// space is exhausted.
    pub(crate) fn insert(&self, entry: Entry) -> Result<u64, Entry> {
        let shard_index = home_shard();
        let mut shard = lock(&self.shards[shard_index]);
        let local = match shard.free.pop_front() {
            Some(local) => {
                shard.slots[local as usize].state = State::Busy(entry);
                local
            }
            None => {
                let local = shard.slots.len();
                // The low half of a handle is index + 1, so the largest index
                // is u32::MAX - 1.
                if local * SHARDS + shard_index > (u32::MAX - 1) as usize {
                    return Err(entry);
                }
                shard.slots.push(Slot {
                    generation: 0,
                    state: State::Busy(entry),
                });
                local as u32
            }
        };
        let index = local as usize * SHARDS + shard_index;
        Ok(encode(shard.slots[local as usize].generation, index as u32))
    }

    /// Run `f` on the live request `handle` names, under its shard's lock.
    /// `f` must not block or call user code.
    pub(crate) fn with<R>(
        &self,
        handle: u64,
        f: impl FnOnce(Occupied<'_>) -> R,
    ) -> Result<R, Stale> {
        let (shard_index, local, generation) = decode(handle).ok_or(Stale::Unknown)?;
        let mut shard = lock(&self.shards[shard_index]);
        let slot = shard.slots.get(local as usize).ok_or(Stale::Unknown)?;
        match &slot.state {
            State::Busy(_) if slot.generation == generation => Ok(f(Occupied {
                shard: &mut shard,
                local,
            })),
            State::Free(Some(how)) if slot.generation == generation.wrapping_add(1) => {
                Err(Stale::Retired(*how))
            }
            _ => Err(Stale::Unknown),
        }
    }

    /// Every live entry, removed (for tearing the dispatcher down).
    pub(crate) fn drain(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let busy: Vec<u32> = (0..shard.slots.len() as u32)
                .filter(|&i| matches!(shard.slots[i as usize].state, State::Busy(_)))
                .collect();
            for local in busy {
                out.push(
                    Occupied {
                        shard: &mut shard,
                        local,
                    }
                    .retire(Retired::Cancelled),
                );
            }
        }
        out
    }

    /// Requests live in the slab (executing or waiting).
    pub(crate) fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.slots.len() - s.free.len()
            })
            .sum()
    }

    /// Panic while holding the calling thread's shard lock (the
    /// panic-boundary test).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn panic_while_locked(&self) {
        let _shard = lock(&self.shards[home_shard()]);
        panic!("apf_test_panic: deliberate panic while holding a request-slab lock");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_zero_is_invalid() {
        assert_eq!(decode(0), None);
        for (generation, index) in [(0, 0), (7, 15), (u32::MAX, u32::MAX - 1), (3, 16 * 5 + 2)] {
            let h = encode(generation, index);
            assert_ne!(h, 0);
            let (shard, local, g) = decode(h).unwrap();
            assert_eq!(g, generation);
            assert_eq!(local as usize * SHARDS + shard, index as usize);
        }
    }
}
