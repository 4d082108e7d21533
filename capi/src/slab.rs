//! Handles: one generic, sharded slab of generation-checked slots, used for
//! the process's request handles (one slab, [`requests`]) and for each
//! workqueue's item handles (one slab per queue).
//!
//! # Handle encoding
//! A handle is a `u64`: the slot's generation XORed with the slab's salt in
//! the high 32 bits, the slot's index plus one in the low 32 bits. Handle 0
//! is never issued (the low half is at least 1), so C code can use 0 for
//! "no request" / "no item".
//!
//! The salt is drawn per slab (per queue, and once for the request slab):
//! two workqueues both hand out slot 0 first, and without the salt their
//! first handles would be equal, so an item handle given to the wrong queue
//! would finish that queue's live item. With it, a foreign handle names a
//! live slot only if the salts happen to agree on the generation (1 in
//! 2^32). Request handles need no such luck: they all come from one slab,
//! so no two live requests of the process share a handle, and each entry
//! records its owner ([`Request`]), which the ABI checks exactly.
//!
//! The index interleaves shards: `index = local * SHARDS + shard`, so a
//! handle names its shard without a lookup. Each thread inserts into one
//! shard (picked round-robin at the thread's first insert), which keeps
//! concurrent insert/remove on different threads off each other's locks.
//!
//! # Generations and retirement
//! A slot's generation is bumped when its occupant is retired, so every
//! handle issued for that occupancy goes stale at once. A free slot
//! remembers how its last occupant was retired (`R`), which lets the ABI
//! tell "finish of a rejected request" or "item already done" from
//! "unknown handle" for the handle just retired. Free slots are reused
//! first in, first out, so that memory lasts as long as possible; once the
//! slot is reused, the old handle is plainly unknown. Generations wrap after
//! 2^32 reuses of one slot, the only way a stale handle could alias a live
//! one.

use crate::sync::{lock, Arc, AtomicUsize, Mutex, Ordering};
use apf::level::{RequestGuard, RequestTicket, SharedRequest};
use apf::queueset::RejectReason;
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::LazyLock;

use super::completion::RequestWaker;

/// Number of shards (a power of two).
pub(crate) const SHARDS: usize = 16;

/// The dispatcher or queueset a request was started at: a process-wide
/// unique id (never reused, so an owner freed and a new one allocated at
/// the same address are told apart) and, in its lowest bit, the kind of
/// object (for error messages). Eight bytes, kept in the request's slot
/// beside its generation, not in the entry: the entry is moved whole when
/// it is retired, and at its 128 bytes the compiler still moves it with
/// inline copies rather than a call to `memcpy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(NonZeroU64);

/// What kind of object owns a request (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerKind {
    Dispatcher,
    QueueSet,
}

impl Owner {
    /// A new owner, distinct from every other of the process.
    pub(crate) fn new(kind: OwnerKind) -> Owner {
        let bit = match kind {
            OwnerKind::Dispatcher => 0,
            OwnerKind::QueueSet => 1,
        };
        // Ids start at 1 and would take centuries to reach 2^63.
        let id = crate::sync::unique_id() << 1 | bit;
        Owner(NonZeroU64::new(id).expect("unique ids start at 1"))
    }

    pub(crate) fn kind(self) -> OwnerKind {
        if self.0.get() & 1 == 0 {
            OwnerKind::Dispatcher
        } else {
            OwnerKind::QueueSet
        }
    }
}

/// What a request handle refers to while it is live.
pub(crate) enum Entry {
    /// Dispatched (at once, or its dispatch was reported): finish it. A
    /// release and the finish of it are exclusive end to end (see
    /// [`SharedRequest`]): one whose finish was asked for while a release
    /// was in flight stays here, reading as finished, until that release
    /// ends and finishes it.
    Executing(SharedRequest),
    /// In a queue, or decided without the caller having been told yet.
    Waiting(Box<Waiting>),
}

impl Entry {
    /// A request executing from now on.
    pub(crate) fn executing(guard: RequestGuard) -> Entry {
        Entry::Executing(SharedRequest::new(guard))
    }
}

/// A queued request and the waker registered with its ticket.
pub(crate) struct Waiting {
    pub(crate) ticket: RequestTicket,
    pub(crate) waker: Arc<RequestWaker>,
}

/// How a request slot's last occupant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retired {
    Finished,
    Cancelled,
    Rejected(RejectReason),
    /// Its dispatcher or queueset was freed while it was live (an executing
    /// request was finished then, a waiting one cancelled).
    OwnerFreed,
}

/// The request slab: every request handle of the process, whoever started
/// it, each slot recording its occupant's [`Owner`].
///
/// # Invariants
/// 1. A handle names at most one live request in the process (one slab,
///    generation-checked slots), and its slot records that request's
///    owner; the owner stays recorded once the request is retired, until
///    the slot is reused.
/// 2. Every live request's owner is live: an owner's `Drop` retires its
///    requests (`request::close_requests`, which walks the slab with
///    [`Slab::drain_where`] for those whose owner matches) before any of
///    its fields are dropped, and no request is started at an owner once
///    its free began (the free is the last call on it, by the ABI's
///    contract). Each request is retired exactly once: by its finish,
///    cancel or rejection, or by that walk, whichever takes it under its
///    shard lock first.
/// 3. A handle whose owner was freed names a retired slot
///    ([`Retired::OwnerFreed`]) or, once the slot is reused, a different
///    generation: an error, never another owner's request.
///
/// Walking the slab at a free costs time in proportion to the slab's slots
/// (its peak of live requests, all owners together), one shard lock at a
/// time; a per-owner list would make the free proportional to the owner's
/// requests but cost the start and finish of every request a list update,
/// and frees are rare.
pub(crate) type RequestSlab = Slab<Entry, Retired, Owner>;

/// The process's request slab (see [`RequestSlab`]).
pub(crate) fn requests() -> &'static RequestSlab {
    static REQUESTS: LazyLock<RequestSlab> = LazyLock::new(RequestSlab::default);
    &REQUESTS
}

/// Why a handle does not name a live occupant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale<R> {
    /// Zero, never issued by this slab, or its slot has been reused since.
    Unknown,
    /// The slot's last occupant, retired this way.
    Retired(R),
}

/// Why [`Slab::with_owned`] refuses a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused<R, O> {
    /// See [`Stale`].
    Stale(Stale<R>),
    /// The occupant (live, or just retired) is this owner's, not one the
    /// caller accepts.
    Foreign(O),
}

enum State<T, R> {
    Free(Option<R>),
    Busy(T),
}

struct Slot<T, R, O> {
    generation: u32,
    /// The occupant's owner; after its retirement, the last occupant's.
    owner: O,
    state: State<T, R>,
}

struct Shard<T, R, O> {
    slots: Vec<Slot<T, R, O>>,
    /// Local indexes of free slots, oldest first.
    free: VecDeque<u32>,
}

impl<T, R, O> Default for Shard<T, R, O> {
    fn default() -> Self {
        Shard {
            slots: Vec::new(),
            free: VecDeque::new(),
        }
    }
}

/// One shard behind its own lock, on its own cache line.
type LockedShard<T, R, O> = CachePadded<Mutex<Shard<T, R, O>>>;

/// The slab. See the module documentation. `O` is what each slot records
/// of its occupant's owner (`()` where there is one owner, a workqueue).
pub(crate) struct Slab<T, R, O = ()> {
    shards: Box<[LockedShard<T, R, O>]>,
    salt: u32,
}

/// A live slot, borrowed under its shard's lock.
pub(crate) struct Occupied<'a, T, R, O = ()> {
    shard: &'a mut Shard<T, R, O>,
    local: u32,
}

impl<T, R, O> Occupied<'_, T, R, O> {
    #[inline]
    pub(crate) fn entry(&mut self) -> &mut T {
        match &mut self.shard.slots[self.local as usize].state {
            State::Busy(entry) => entry,
            State::Free(_) => unreachable!("an Occupied slot is busy"),
        }
    }

    /// Retire the occupant: its handle goes stale. The entry comes back to
    /// be dropped after the lock is released (dropping a guard finishes a
    /// request, dropping a ticket cancels one; neither runs under our lock).
    #[inline]
    pub(crate) fn retire(self, how: R) -> T {
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

/// The shard the calling thread inserts into: threads are spread over the
/// shards round robin, so workers on different threads rarely share a lock.
fn home_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    HOME.try_with(|h| *h).unwrap_or(0)
}

/// A salt that differs between slabs of one process (and between runs).
fn fresh_salt() -> u32 {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    ahash::RandomState::new().hash_one(n) as u32
}

impl<T, R, O> Default for Slab<T, R, O> {
    fn default() -> Self {
        Slab {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
            salt: fresh_salt(),
        }
    }
}

impl<T, R: Copy> Slab<T, R> {
    /// Store `entry` under a new handle, or give it back if the handle
    /// space (2^32 - 1 live slots) is exhausted.
    pub(crate) fn insert(&self, entry: T) -> Result<u64, T> {
        self.insert_owned((), entry)
    }

    /// Run `f` on the live occupant `handle` names, under its shard's lock.
    /// `f` must not block or call user code.
    pub(crate) fn with<X>(
        &self,
        handle: u64,
        f: impl FnOnce(Occupied<'_, T, R>) -> X,
    ) -> Result<X, Stale<R>> {
        self.with_owned(handle, |()| true, f)
            .map_err(|refused| match refused {
                Refused::Stale(stale) => stale,
                Refused::Foreign(()) => unreachable!("every owner is accepted"),
            })
    }

    /// Retire the occupant `handle` names, giving it back.
    pub(crate) fn remove(&self, handle: u64, how: R) -> Result<T, Stale<R>> {
        self.with(handle, |occupied| occupied.retire(how))
    }
}

impl<T, R: Copy, O: Copy> Slab<T, R, O> {
    fn encode(&self, generation: u32, index: usize) -> u64 {
        u64::from(generation ^ self.salt) << 32 | (index as u64 + 1)
    }

    /// The shard, local index and generation of a handle (None for 0).
    fn decode(&self, handle: u64) -> Option<(usize, u32, u32)> {
        let index = (handle as u32).checked_sub(1)? as usize;
        let generation = (handle >> 32) as u32 ^ self.salt;
        Some((index % SHARDS, (index / SHARDS) as u32, generation))
    }

    /// Store `entry`, owned by `owner`, under a new handle, or give it back
    /// if the handle space (2^32 - 1 live slots) is exhausted.
    pub(crate) fn insert_owned(&self, owner: O, entry: T) -> Result<u64, T> {
        let shard_index = home_shard();
        let mut shard = lock(&self.shards[shard_index]);
        let local = match shard.free.pop_front() {
            Some(local) => {
                let slot = &mut shard.slots[local as usize];
                slot.owner = owner;
                slot.state = State::Busy(entry);
                local as usize
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
                    owner,
                    state: State::Busy(entry),
                });
                local
            }
        };
        let generation = shard.slots[local].generation;
        Ok(self.encode(generation, local * SHARDS + shard_index))
    }

    /// Run `f` on the live occupant `handle` names, under its shard's lock,
    /// if `accept` takes its owner; a slot just retired is refused to an
    /// owner `accept` does not take too, so the check is exact while the
    /// slot remembers its last occupant. `f` must not block or call user
    /// code.
    #[inline]
    pub(crate) fn with_owned<X>(
        &self,
        handle: u64,
        accept: impl FnOnce(O) -> bool,
        f: impl FnOnce(Occupied<'_, T, R, O>) -> X,
    ) -> Result<X, Refused<R, O>> {
        let unknown = Refused::Stale(Stale::Unknown);
        let (shard_index, local, generation) = self.decode(handle).ok_or(unknown)?;
        let mut shard = lock(&self.shards[shard_index]);
        let slot = shard.slots.get(local as usize).ok_or(unknown)?;
        let owner = slot.owner;
        match &slot.state {
            State::Busy(_) if slot.generation == generation => {
                if !accept(owner) {
                    return Err(Refused::Foreign(owner));
                }
                Ok(f(Occupied {
                    shard: &mut shard,
                    local,
                }))
            }
            State::Free(Some(how)) if slot.generation == generation.wrapping_add(1) => {
                let how = *how;
                if accept(owner) {
                    Err(Refused::Stale(Stale::Retired(how)))
                } else {
                    Err(Refused::Foreign(owner))
                }
            }
            _ => Err(unknown),
        }
    }

    /// Every live occupant for which `pick` holds (given its owner),
    /// retired as `how` and removed (for tearing its owner down). Walks
    /// every slot, one shard lock at a time.
    pub(crate) fn drain_where(&self, mut pick: impl FnMut(O, &T) -> bool, how: R) -> Vec<T> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let picked: Vec<u32> = (0..shard.slots.len() as u32)
                .filter(|&i| {
                    let slot = &shard.slots[i as usize];
                    matches!(&slot.state, State::Busy(entry) if pick(slot.owner, entry))
                })
                .collect();
            for local in picked {
                out.push(
                    Occupied {
                        shard: &mut shard,
                        local,
                    }
                    .retire(how),
                );
            }
        }
        out
    }

    /// Live occupants for which `pick` holds (given their owner).
    pub(crate) fn count_where(&self, mut pick: impl FnMut(O, &T) -> bool) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.slots
                    .iter()
                    .filter(
                        |slot| matches!(&slot.state, State::Busy(entry) if pick(slot.owner, entry)),
                    )
                    .count()
            })
            .sum()
    }

    /// Occupants live in the slab.
    pub(crate) fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.slots.len() - s.free.len()
            })
            .sum()
    }

    /// Panic with `message` while holding the calling thread's shard lock
    /// (the panic-boundary tests).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn panic_while_locked(&self, message: &str) {
        let _shard = lock(&self.shards[home_shard()]);
        panic!("{message}");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Gone;

    #[test]
    fn handles_round_trip_and_zero_is_invalid() {
        let slab: Slab<(), ()> = Slab::default();
        assert_eq!(slab.decode(0), None);
        for (generation, index) in [(0, 0), (7, 15), (u32::MAX, u32::MAX - 1), (3, 16 * 5 + 2)] {
            let h = slab.encode(generation, index as usize);
            assert_ne!(h, 0);
            let (shard, local, g) = slab.decode(h).unwrap();
            assert_eq!(g, generation);
            assert_eq!(local as usize * SHARDS + shard, index as usize);
        }
    }

    #[test]
    fn a_handle_retires_once_and_goes_stale_on_reuse() {
        let slab: Slab<&str, Gone> = Slab::default();
        let h = slab.insert("a").unwrap();
        assert_ne!(h, 0);
        assert_eq!(slab.live(), 1);
        assert_eq!(slab.remove(h, Gone), Ok("a"));
        assert_eq!(slab.remove(h, Gone), Err(Stale::Retired(Gone)));
        assert_eq!(slab.remove(0, Gone), Err(Stale::Unknown));
        assert_eq!(slab.remove(h + 1, Gone), Err(Stale::Unknown));
        assert_eq!(slab.live(), 0);
        // The slot is reused with a new generation: the old handle stays
        // stale, and is no longer even "just retired".
        let h2 = slab.insert("b").unwrap();
        assert_ne!(h2, h);
        assert_eq!(slab.remove(h, Gone), Err(Stale::Unknown));
        assert_eq!(slab.remove(h2, Gone), Ok("b"));
    }

    #[test]
    fn drain_where_retires_exactly_the_picked_occupants() {
        let slab: Slab<u8, Gone, char> = Slab::default();
        let handles: Vec<u64> = [('a', 1), ('b', 2), ('a', 3), ('b', 4)]
            .into_iter()
            .map(|(owner, e)| slab.insert_owned(owner, e).unwrap())
            .collect();
        assert_eq!(slab.count_where(|owner, _| owner == 'a'), 2);
        let mut drained = slab.drain_where(|owner, _| owner == 'a', Gone);
        drained.sort();
        assert_eq!(drained, [1, 3]);
        assert_eq!(slab.count_where(|owner, _| owner == 'a'), 0);
        assert_eq!(slab.live(), 2, "the others stay");
        let is = |want: char| move |owner: char| owner == want;
        // Just retired: still told apart by owner.
        let retire = |o: Occupied<'_, u8, Gone, char>| o.retire(Gone);
        assert_eq!(
            slab.with_owned(handles[0], is('a'), retire),
            Err(Refused::Stale(Stale::Retired(Gone)))
        );
        assert_eq!(
            slab.with_owned(handles[0], is('b'), retire),
            Err(Refused::Foreign('a'))
        );
        assert_eq!(
            slab.with_owned(handles[1], is('a'), retire),
            Err(Refused::Foreign('b')),
            "live, and refused to another owner"
        );
        assert_eq!(slab.with_owned(handles[1], is('b'), retire), Ok(2));
        assert!(slab.drain_where(|owner, _| owner == 'a', Gone).is_empty());
    }

    #[test]
    fn another_slabs_handle_is_unknown_here() {
        let (a, b): (Slab<u8, Gone>, Slab<u8, Gone>) = (Slab::default(), Slab::default());
        assert_ne!(a.salt, b.salt, "salts are drawn per slab");
        // Same thread, same shard, same first slot in both: only the salt
        // tells the handles apart.
        let ha = a.insert(1).unwrap();
        let hb = b.insert(2).unwrap();
        assert_ne!(ha, hb);
        assert_eq!(b.remove(ha, Gone), Err(Stale::Unknown));
        assert_eq!(a.remove(hb, Gone), Err(Stale::Unknown));
        assert_eq!(b.remove(hb, Gone), Ok(2));
        assert_eq!(a.remove(ha, Gone), Ok(1));
    }
}
