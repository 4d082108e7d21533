//! The state machine every queue of the family shares.
//!
//! Each tracked item has one entry in the item table whose [`Phase`]
//! encodes client-go's dirty and processing sets; waiting for a ready time
//! is kept apart in the [`DelayHeap`]. Two add policies exist:
//! - [`Mode::Independent`] (client-go's delaying queue): a ready add and a
//!   delayed add are independent; an item may be queued and waiting at once,
//!   and the wait, when it ends, is one more add.
//! - [`Mode::Merged`] (controller-runtime's priority queue): an item is
//!   either ready or waiting; of all its adds the shortest delay and the
//!   merged hint (highest priority) win, so a ready add ends any wait.
//!
//! Workers that find nothing queued park on a [`Waiter`] of their own, on a
//! lock-free list ([`super::parking`]); an item that becomes ready while
//! workers are parked is handed to the one parked longest (it is then
//! already processing), and the wake-up runs after every lock is released.
//!
//! # Locks and what they guard
//!
//! - **The item table is sharded by hash** ([`super::shard`]): the table's
//!   shape (which slots are occupied, the index) and the per-item metrics
//!   are guarded by the lock of the shard its hash picks; an item's phase,
//!   re-queue hint and delayed bit change only inside a *claim* of its
//!   entry's busy bit, with or without that lock (src/workqueue/slots.rs),
//!   and metric changes made without the lock wait on the shard's event
//!   list for the next holder. So `add` and `done` of items in different
//!   shards never wait for each other, and (FIFO) a caller that is
//!   descheduled inside its section stalls only calls for its own item.
//! - **The queue's lock** ([`Shared::state`], [`Inner`]) guards the strategy
//!   (two lanes, priorities), the delay heap, the shutdown flags and the
//!   timer. The parked workers are not under it: they are on a lock-free
//!   list ([`super::parking`]) that strategies other than FIFO happen to
//!   use only while holding the queue's lock (except a timed-out worker's
//!   withdrawal, which needs no lock).
//! - **Lock order: the queue's lock, then one shard's lock.** Nothing takes
//!   the queue's lock while holding a shard's, and nothing holds two shards'
//!   locks at once (shutdown and snapshots visit the shards one by one).
//!
//! Strategies other than FIFO, and the priority queue's merged adds, take
//! the queue's lock and then the item's shard lock for every operation: the
//! strategy's order and the delay heap are queue-wide. A FIFO queue
//! ([`Shared::fast`]) takes no lock in a `get` that finds an item ready, nor
//! in an `add` or `done` that finds its item's entry through the index
//! ([`Shards::claim`]); one that misses (a new item, or a probe that raced
//! a change of the index) takes the item's shard lock:
//!
//! # FIFO without the queue's lock
//!
//! - **The ready list** ([`Shared::ready`], a lock-free FIFO of
//!   [`Ticket`]s) holds the queued items in order. A ticket is pushed inside
//!   a claim of its item's entry by the one transition into
//!   [`Phase::Queued`], and an item leaves `Queued` only through a get, so
//!   an item has at most one ticket and its slot is never freed while the
//!   ticket is out.
//! - **A get** pops a ticket (item and hint were cloned into it when it was
//!   pushed) and claims the ticket's entry: the item becomes processing,
//!   the shard's processing count grows, and a started event goes onto the
//!   shard's event list, before the get returns. So every operation that
//!   follows a get (its `done`, an add made after it returned, a snapshot,
//!   a draining shutdown) sees the item processing. An operation between
//!   the pop and the claim sees the item still `Queued`, the state just
//!   before the get, which the locked queue also allows.
//! - **Parking takes no lock either** ([`super::parking`], where the
//!   protocol's invariants and orderings are): a worker that found the
//!   ready list empty counts itself, pushes its waiter onto the lock-free
//!   parked list, issues a `SeqCst` fence and looks at the ready list (and
//!   [`Shared::sealed`]) once more, withdrawing if anything is there. Every
//!   push of a ticket (an `add` or `done` under a shard lock, the timer and
//!   a ready delayed add under the queue's lock) is followed, once its
//!   caller released its locks, by the pusher's half: a `SeqCst` fence,
//!   then, if a worker is counted as parked and an item is ready, a claim
//!   of the worker parked longest and a hand-off of the item at the ready
//!   list's head. No pusher takes the queue's lock for it, and the wake-up
//!   (a waiter's mutex and condition variable) runs with no lock held.
//! - **Shutdown** sets its flags under the queue's lock, issues a `SeqCst`
//!   fence, then takes every shard's lock in turn and waits there until no
//!   entry of the shard is claimed: an add that found the queue open under
//!   its shard lock has pushed its ticket before that pass, and one after
//!   it sees the flag. A lock-free add claims its entry, issues a `SeqCst`
//!   fence and only then reads the closed flag: either it sees the flag,
//!   or the shutdown's pass sees its claim (and waits for its release,
//!   after the ticket's push) or a later state. Only then does it set [`Shared::sealed`] (a
//!   get that then finds nothing ready returns none, a parker's last look
//!   sees it) and hand every parked worker "look again": each takes what is
//!   still ready, or sees the queue sealed, so a released worker never
//!   leaves behind an item added before the shutdown.
//! - **A draining shutdown** sets the draining flag, issues a `SeqCst`
//!   fence, sums the shards' atomic processing counts while holding the
//!   queue's lock, and waits on [`Shared::drained`]. A `done` decrements its
//!   shard's count, issues a `SeqCst` fence and reads the draining flag;
//!   if its decrement brought the count to zero and the flag is set, it
//!   takes the queue's lock to signal. The two fences order the two: a
//!   `done` whose decrement the sum missed reads the flag set before it.
//!   The signal needs the queue's lock, which the shutdown holds from its
//!   sum until it waits: no signal is lost.
//!
//! Items are stored once, in their shard's slab; the strategies, the delay
//! heap and the tickets hold queue-wide slot numbers that name the shard.

mod delay;

use super::heap::DelayHeap;
use super::metrics::{Totals, WorkqueueMetrics};
use super::parking::{Compacted, ParkedList, Parking};
use super::shard::{Held, Locked, Shards};
use super::strategy::{QueueStrategy, Slot};
use super::table::{short_hash, Phase};
use super::waiter::{wait, Waiter, Wakes};
use super::{GetTimeoutError, Item, QueueConfig, TryGetError, WorkqueueError};
use crate::clock::{Clock, Timer};
use crate::sync::{fence, lock, Arc, AtomicBool, Condvar, Mutex, MutexGuard, Ordering, SegQueue};
use std::any::TypeId;
use std::time::Duration;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Independent,
    Merged,
}

/// A ready item in the lock-free list: its queue-wide slot, and a clone of
/// the item and hint taken under its shard lock when it became ready.
pub(crate) struct Ticket<T, H> {
    slot: u32,
    item: T,
    hint: H,
}

type Hint<T, S> = <S as QueueStrategy<T>>::Hint;

pub(crate) struct Shared<T, S: QueueStrategy<T>> {
    /// The queue's lock (see the module docs for what it guards).
    state: Mutex<Inner<T, S>>,
    shards: Shards<T, Hint<T, S>>,
    /// FIFO only: the ready items, in order; popped without any lock.
    ready: SegQueue<Ticket<T, Hint<T, S>>>,
    /// The parked workers, found without the queue's lock (the parking
    /// handshake, [`super::parking`]).
    parked: ParkedList<T, Hint<T, S>>,
    /// Shutdown has begun (mirrors [`Inner::shutting_down`] for adds that
    /// take only a shard lock).
    closed: AtomicBool,
    /// FIFO: shutdown's pass over the shard locks is over, so every add
    /// that found the queue open has pushed its item. A get that then finds
    /// nothing ready returns none; parked workers are released after it.
    sealed: AtomicBool,
    /// A draining shutdown waits (mirrors [`Inner::drain`] for dones that
    /// take only a shard lock).
    draining: AtomicBool,
    /// FIFO with independent adds: `add` and `done` take only the item's
    /// shard lock, `get` none while an item is ready.
    fast: bool,
    /// Signalled when a shard's last processing item is done during a
    /// draining shutdown, and when a plain shutdown cancels the drain.
    drained: Condvar,
    hasher: ahash::RandomState,
    clock: Clock,
    timed: bool,
    mode: Mode,
    name: String,
}

pub(crate) struct Inner<T, S: QueueStrategy<T>> {
    /// Unused by FIFO queues, whose ready items are in [`Shared::ready`].
    strategy: S,
    waiting: DelayHeap<S::Hint>,
    shutting_down: bool,
    drain: bool,
    timer: Option<Timer>,
    retries: u64,
}

/// What a look for a ready item found.
enum Next<T, H> {
    Got((T, H)),
    Empty,
    Closed,
    Parked(Arc<Waiter<T, H>>),
}

impl<T: Item, S: QueueStrategy<T>> Shared<T, S> {
    pub(crate) fn new(config: QueueConfig, mode: Mode, strategy: S) -> Arc<Self> {
        let QueueConfig {
            name,
            clock,
            timed_metrics: timed,
            capacity,
        } = config;
        let fifo = TypeId::of::<S>() == TypeId::of::<super::Fifo>();
        Arc::new(Shared {
            state: Mutex::new(Inner {
                strategy,
                waiting: DelayHeap::new(),
                shutting_down: false,
                drain: false,
                timer: None,
                retries: 0,
            }),
            shards: Shards::new(capacity, timed),
            ready: SegQueue::new(),
            parked: ParkedList::new(),
            closed: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            fast: fifo && mode == Mode::Independent,
            drained: Condvar::new(),
            hasher: hasher(),
            clock,
            timed,
            mode,
            name,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T, S>> {
        lock(&self.state)
    }

    /// The shard of the item whose short hash is `hash`, locked.
    #[inline]
    fn shard(&self, hash: u32) -> Locked<'_, T, Hint<T, S>> {
        self.shards.lock_hash(hash)
    }

    /// The shard of a queue-wide slot, locked.
    #[inline]
    fn shard_of(&self, slot: u32) -> Locked<'_, T, Hint<T, S>> {
        self.shards.lock_slot(slot)
    }

    /// A get without any lock (FIFO), if an item is ready.
    #[inline]
    fn take_ready(&self, now: u64) -> Option<(T, Hint<T, S>)> {
        let Ticket { slot, item, hint } = self.ready.pop()?;
        // The get takes effect in a claim of the item's entry, so that a
        // lock-free `done` after it sees the item processing.
        let mut held = self.shards.claim_slot(slot);
        debug_assert_eq!(held.phase(), Phase::Queued);
        held.start(now);
        Some((item, hint))
    }

    /// Queue the item in `slot` on the ready list (FIFO); the caller then
    /// serves parked workers (see the module docs).
    #[inline]
    fn push_ticket(&self, held: &mut Held<'_, '_, T, Hint<T, S>>, hint: Hint<T, S>) {
        held.set_phase(Phase::Queued);
        self.ready.push(Ticket {
            slot: held.slot(),
            item: held.item().clone(),
            hint,
        });
    }

    /// Hand ready items to parked workers (FIFO): the pusher's half of the
    /// parking handshake, after an item was made ready (or the parked list
    /// compacted). Takes no lock; the wake-ups go into `wakes`.
    #[inline]
    fn serve_parked(&self, now: u64, wakes: &mut Wakes<T, Hint<T, S>>) {
        self.parked
            .serve(wakes, || !self.ready.is_empty(), || self.take_ready(now));
    }

    /// [`Shared::serve_parked`], then the wake-ups, by a caller that holds
    /// no lock.
    #[inline]
    fn wake_parked(&self, now: u64) {
        let mut wakes = Wakes::new();
        self.serve_parked(now, &mut wakes);
        wakes.run();
    }

    /// After a withdrawal that compacted the parked list: a server may have
    /// missed a parked worker while it was off the list (no lock held).
    fn after_withdrawal(&self, compacted: Compacted, now: u64) {
        if compacted.0 && self.fast {
            self.wake_parked(now);
        }
    }

    /// Give the queue a timer for delayed adds. The timer's callback holds
    /// the queue, so [`Shared::release_timer`] must run when the owner goes.
    pub(crate) fn install_timer(this: &Arc<Self>) {
        let shared = this.clone();
        let timer = this.clock.timer(move |now| shared.fire(now));
        this.lock().timer = Some(timer);
    }

    /// Drop the timer, breaking the cycle queue -> timer -> callback -> queue.
    pub(crate) fn release_timer(&self) {
        let timer = self.lock().timer.take();
        drop(timer);
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    #[inline]
    fn hash(&self, item: &T) -> u32 {
        short_hash(self.hasher.hash_one(item))
    }

    #[inline]
    fn stamp(&self) -> u64 {
        if self.timed {
            self.clock.now().as_nanos()
        } else {
            0
        }
    }

    pub(crate) fn add(&self, item: T, hint: Hint<T, S>) {
        let hash = self.hash(&item);
        let now = self.stamp();
        if self.fast {
            let queued = match self.shards.claim(hash, &item) {
                Some(mut held) => {
                    // The adder's half of the shutdown handshake (module
                    // docs): claim, fence, then look at the flag.
                    #[cfg(not(apf_broken_wqfree = "close"))]
                    fence(Ordering::SeqCst);
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    self.add_tracked(None, &mut held, hint, now, None)
                }
                None => {
                    let mut shard = self.shard(hash);
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    let queued = match shard.track(hash, item, hint) {
                        Some(mut held) => self.add_tracked(None, &mut held, hint, now, None),
                        None => false,
                    };
                    queued
                }
            };
            if queued {
                self.wake_parked(now);
            }
            return;
        }
        let mut wakes = Wakes::new();
        {
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            let mut shard = self.shard(hash);
            if let Some(mut held) = shard.track(hash, item, hint) {
                self.add_tracked(Some(&mut inner), &mut held, hint, now, Some(&mut wakes));
            };
        }
        wakes.run();
    }

    pub(crate) fn get(&self) -> Option<(T, Hint<T, S>)> {
        loop {
            match self.next(true) {
                Next::Got(got) => return Some(got),
                Next::Parked(waiter) => {
                    if let Some(got) = waiter.wait() {
                        return Some(got);
                    }
                    // Handed "look again": nothing was taken for us.
                }
                Next::Empty | Next::Closed => return None,
            }
        }
    }

    /// [`Shared::get`], giving up after `timeout` of real time (whatever the
    /// queue's clock). A zero timeout never parks.
    pub(crate) fn get_timeout(
        &self,
        timeout: Duration,
    ) -> Result<(T, Hint<T, S>), GetTimeoutError> {
        // A deadline too far to represent is no deadline.
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            match self.next(!timeout.is_zero()) {
                Next::Got(got) => return Ok(got),
                Next::Empty => return Err(GetTimeoutError::TimedOut),
                Next::Closed => return Err(GetTimeoutError::ShutDown),
                Next::Parked(waiter) => match waiter.wait_until(deadline) {
                    Some(Some(got)) => return Ok(got),
                    Some(None) => {} // look again
                    None => return self.abandon(&waiter),
                },
            }
        }
    }

    pub(crate) fn try_get(&self) -> Result<(T, Hint<T, S>), TryGetError> {
        match self.next(false) {
            Next::Got(got) => Ok(got),
            Next::Closed => Err(TryGetError::ShutDown),
            Next::Empty | Next::Parked(_) => Err(TryGetError::Empty),
        }
    }

    /// Take a ready item, or say why there is none; with `park`, a worker
    /// that finds none (and the queue open) is parked.
    fn next(&self, park: bool) -> Next<T, Hint<T, S>> {
        let now = self.stamp();
        if self.fast {
            return self.next_fifo(park, now);
        }
        let mut inner = self.lock();
        if let Some((Slot(slot), hint)) = inner.strategy.pop() {
            let mut shard = self.shard_of(slot);
            let mut held = shard.claim_slot(slot);
            held.start(now);
            return Next::Got((held.item().clone(), hint));
        }
        if inner.shutting_down {
            Next::Closed
        } else if !park {
            Next::Empty
        } else {
            // Under the queue's lock, which every hand-off of these queues
            // holds: nothing can become ready before the worker is listed.
            match self.parked.park(|| false) {
                Parking::Parked(waiter) => Next::Parked(waiter),
                Parking::LookAgain(_) => unreachable!("nothing is ready under the lock"),
            }
        }
    }

    /// [`Shared::next`] of a FIFO queue: no lock at all (the parking
    /// handshake, [`super::parking`]).
    fn next_fifo(&self, park: bool, now: u64) -> Next<T, Hint<T, S>> {
        loop {
            if let Some(got) = self.take_ready(now) {
                return Next::Got(got);
            }
            if self.sealed.load(Ordering::Acquire) {
                // Every add made before the shutdown has pushed its item:
                // one more look sees it.
                return match self.take_ready(now) {
                    Some(got) => Next::Got(got),
                    None => Next::Closed,
                };
            }
            if !park {
                return Next::Empty;
            }
            let ready = || !self.ready.is_empty() || self.sealed.load(Ordering::Acquire);
            match self.parked.park(ready) {
                Parking::Parked(waiter) => return Next::Parked(waiter),
                Parking::LookAgain(compacted) => self.after_withdrawal(compacted, now),
            }
        }
    }

    /// A timed-out worker withdraws from the parked list. If it was claimed
    /// first, a hand-off is under way: take it, since an item in it is
    /// already counted as processing by this worker.
    fn abandon(
        &self,
        waiter: &Arc<Waiter<T, S::Hint>>,
    ) -> Result<(T, Hint<T, S>), GetTimeoutError> {
        let withdrew = if self.fast {
            self.parked.withdraw(waiter)
        } else {
            // A compaction moves parked workers off the list for a moment:
            // under the lock, no hand-off of these queues looks meanwhile.
            let _inner = self.lock();
            self.parked.withdraw(waiter)
        };
        match withdrew {
            Some(compacted) => {
                self.after_withdrawal(compacted, self.stamp());
                Err(GetTimeoutError::TimedOut)
            }
            None => match waiter.wait() {
                Some(got) => Ok(got),
                // Released by a shutdown, or the item went to a running
                // worker: one last look that does not park.
                None => match self.next(false) {
                    Next::Got(got) => Ok(got),
                    Next::Closed => Err(GetTimeoutError::ShutDown),
                    Next::Empty | Next::Parked(_) => Err(GetTimeoutError::TimedOut),
                },
            },
        }
    }

    pub(crate) fn done(&self, item: &T) -> Result<(), WorkqueueError> {
        let hash = self.hash(item);
        let now = self.stamp();
        if self.fast {
            let (queued, left) = match self.shards.claim(hash, item) {
                Some(mut held) => self.finish(None, &mut held, now, None)?,
                None => {
                    let mut shard = self.shard(hash);
                    let mut held = shard
                        .find(hash, item)
                        .ok_or(WorkqueueError::NotProcessing)?;
                    self.finish(None, &mut held, now, None)?
                }
            };
            if queued {
                self.wake_parked(now);
            }
            // The done's half of the drain handshake (module docs): the
            // count's decrement, a fence, then the flag.
            #[cfg(not(apf_broken_wqfree = "drain"))]
            fence(Ordering::SeqCst);
            if left == 0 && self.draining.load(Ordering::Acquire) {
                let _inner = self.lock();
                self.drained.notify_all();
            }
            return Ok(());
        }
        let mut wakes = Wakes::new();
        let result = {
            let mut inner = self.lock();
            let mut shard = self.shard(hash);
            let result = match shard.find(hash, item) {
                Some(mut held) => self.finish(Some(&mut inner), &mut held, now, Some(&mut wakes)),
                None => Err(WorkqueueError::NotProcessing),
            };
            if let Ok((_, 0)) = result {
                if inner.drain {
                    self.drained.notify_all();
                }
            }
            result
        };
        wakes.run();
        result.map(|_| ())
    }

    /// `done` under the item's shard lock (and the queue's, `inner`, unless
    /// FIFO). Returns whether a ticket was pushed (FIFO: serve parked
    /// workers) and how many of the shard's items are still processing.
    fn finish(
        &self,
        inner: Option<&mut Inner<T, S>>,
        held: &mut Held<'_, '_, T, Hint<T, S>>,
        now: u64,
        wakes: Option<&mut Wakes<T, Hint<T, S>>>,
    ) -> Result<(bool, usize), WorkqueueError> {
        let requeue = match held.phase() {
            Phase::Running => None,
            Phase::RunningDirty => Some(held.hint()),
            Phase::Idle | Phase::Queued | Phase::Kept => return Err(WorkqueueError::NotProcessing),
        };
        // Forgotten, as client-go does, unless dirty again or waiting; the
        // entry is kept for a re-add (the shard sweeps it later).
        let kept = requeue.is_none() && !held.delayed();
        held.set_phase(if kept { Phase::Kept } else { Phase::Idle });
        let left = held.finish(now, kept);
        let queued = match requeue {
            Some(hint) => self.make_available(inner, held, hint, now, wakes),
            None => false,
        };
        Ok((queued, left))
    }

    /// An add (or the end of a wait) for a tracked item, under its shard
    /// lock and, unless FIFO, the queue's lock. Returns whether a ticket was
    /// pushed.
    fn add_tracked(
        &self,
        mut inner: Option<&mut Inner<T, S>>,
        held: &mut Held<'_, '_, T, Hint<T, S>>,
        hint: Hint<T, S>,
        now: u64,
        wakes: Option<&mut Wakes<T, Hint<T, S>>>,
    ) -> bool {
        held.revive();
        let slot = held.slot();
        let mut hint = hint;
        match held.phase() {
            Phase::Queued => {
                if let (false, Some(inner)) = (self.fast, inner) {
                    inner.strategy.touch(Slot(slot), held.item(), hint);
                }
                return false;
            }
            Phase::RunningDirty => {
                held.set_hint(S::merge(held.hint(), hint));
                return false;
            }
            Phase::Kept => unreachable!("revived above"),
            Phase::Idle | Phase::Running => {
                if self.mode == Mode::Merged {
                    if let Some(waited) = inner.as_deref_mut().and_then(|i| i.waiting.remove(slot))
                    {
                        held.set_delayed(false);
                        hint = S::merge(waited, hint);
                    }
                }
            }
        }
        // Into the dirty set.
        held.on_add(now);
        if held.phase() == Phase::Running {
            held.set_phase(Phase::RunningDirty);
            held.set_hint(hint);
            return false;
        }
        self.make_available(inner, held, hint, now, wakes)
    }

    /// A dirty item that nobody processes: FIFO pushes its ticket (returns
    /// true; the caller serves parked workers); otherwise, under the
    /// queue's lock, it goes to a parked worker or into the strategy.
    fn make_available(
        &self,
        inner: Option<&mut Inner<T, S>>,
        held: &mut Held<'_, '_, T, Hint<T, S>>,
        hint: Hint<T, S>,
        now: u64,
        wakes: Option<&mut Wakes<T, Hint<T, S>>>,
    ) -> bool {
        if self.fast {
            self.push_ticket(held, hint);
            return true;
        }
        let (Some(inner), Some(wakes)) = (inner, wakes) else {
            unreachable!("only FIFO queues change items without the queue's lock")
        };
        if let Some(waiter) = self.parked.claim() {
            held.start(now);
            wakes.push((waiter, Some((held.item().clone(), hint))));
        } else {
            held.set_phase(Phase::Queued);
            inner.strategy.push(Slot(held.slot()), held.item(), hint);
        }
        false
    }

    pub(crate) fn len(&self) -> usize {
        if self.fast {
            self.ready.len()
        } else {
            self.lock().strategy.len()
        }
    }

    /// Items tracked at all: queued, processing or waiting.
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.shards.lock(i).state.tracked())
            .sum()
    }

    /// Entries the shards hold, kept ones included (tests of the sweep).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn held(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.shards.lock(i).state.held())
            .sum()
    }

    /// How many shards the queue has (tests).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn while_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _held = lock(&self.state);
        f()
    }

    /// Run `f` while holding the lock of `item`'s shard (tests of what
    /// does not wait for it).
    #[cfg(all(test, not(loom), not(shuttle)))]
    pub(crate) fn while_shard_locked<R>(&self, item: &T, f: impl FnOnce() -> R) -> R {
        let _held = self.shard(self.hash(item));
        f()
    }

    /// The shard `item` lives in (tests that need two items in one shard,
    /// or in two).
    #[cfg(test)]
    pub(crate) fn shard_index(&self, item: &T) -> usize {
        self.shards.index_of_hash(self.hash(item))
    }

    /// Workers parked in `get` (tests, and the C ABI's test aid).
    #[cfg(all(not(loom), any(test, feature = "test-hooks")))]
    pub(crate) fn parked(&self) -> usize {
        self.parked.live()
    }

    pub(crate) fn waiting_len(&self) -> usize {
        self.lock().waiting.len()
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Items processing in every shard (under the queue's lock; the
    /// summing half of the drain handshake).
    fn processing(&self) -> usize {
        self.shards.processing()
    }

    /// Stop accepting adds and release parked workers. With `drain`, also
    /// wait until no item is processing (or a plain shutdown cancels that).
    pub(crate) fn shut_down(&self, drain: bool) {
        let mut wakes = Wakes::new();
        let mut inner = self.lock();
        inner.shutting_down = true;
        inner.drain = drain;
        self.closed.store(true, Ordering::Release);
        self.draining.store(drain, Ordering::Release);
        // The shutdown's half of the add handshake (module docs): the flag,
        // a fence, then every claim seen released.
        fence(Ordering::SeqCst);
        // Every add that found the queue open has queued its item once
        // each shard's lock was taken after the flag, and each claim held
        // then was released (module docs).
        for i in 0..self.shards.len() {
            self.shards.quiesce(i);
        }
        self.sealed.store(true, Ordering::Release);
        // Every parked worker looks again: it takes what is still ready,
        // then sees the queue closed (module docs).
        self.parked.release_all(&mut wakes);
        self.forget_waiting(&mut inner);
        if !drain {
            self.drained.notify_all();
        }
        drop(inner);
        wakes.run();
        if drain {
            let mut inner = self.lock();
            while inner.drain && self.processing() > 0 {
                inner = wait(&self.drained, inner);
            }
        }
    }

    pub(crate) fn metrics(&self) -> WorkqueueMetrics {
        let now = if self.timed {
            self.clock.now().as_nanos()
        } else {
            0
        };
        let inner = self.lock();
        let mut totals = Totals::new(now);
        totals.add_retries(inner.retries);
        for i in 0..self.shards.len() {
            self.shards.lock(i).state.metrics.add_to(&mut totals);
        }
        drop(inner);
        totals.finish(&self.name)
    }

    /// Run `f` on the strategy, under the lock.
    pub(crate) fn with_strategy<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().strategy)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// The item hasher. Fixed seeds under loom: an item's shard must be the
/// same in every execution of a model.
fn hasher() -> ahash::RandomState {
    #[cfg(loom)]
    return ahash::RandomState::with_seeds(1, 2, 3, 4);
    #[cfg(not(loom))]
    ahash::RandomState::new()
}
