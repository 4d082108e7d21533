//! The state machine every queue of the family shares.
//!
//! Each tracked item has one slab entry whose [`Phase`] encodes client-go's
//! dirty and processing sets; waiting for a ready time is kept apart in the
//! [`DelayHeap`]. Two add policies exist:
//! - [`Mode::Independent`] (client-go's delaying queue): a ready add and a
//!   delayed add are independent; an item may be queued and waiting at once,
//!   and the wait, when it ends, is one more add.
//! - [`Mode::Merged`] (controller-runtime's priority queue): an item is
//!   either ready or waiting; of all its adds the shortest delay and the
//!   merged hint (highest priority) win, so a ready add ends any wait.
//!
//! Workers that find nothing queued park on a [`Waiter`] of their own; an
//! item that becomes ready while workers are parked is handed to one of them
//! directly (it is then already processing), after the lock is released.
//!
//! # Gets without the lock (FIFO)
//!
//! With the [`Fifo`](super::Fifo) strategy the ready items live in a
//! lock-free list ([`Shared::ready`], crossbeam's `SegQueue` of
//! [`Ticket`]s) and `get` takes one without the lock, so a getter never
//! waits for a thread that holds the lock and was descheduled (with many
//! more threads than cores that wait is a scheduler round: the 1,000
//! consumers' first gets waited milliseconds for it). The protocol:
//! - Tickets are pushed only under the lock, by the one transition into
//!   [`Phase::Queued`]; an item leaves `Queued` only through a get. So a
//!   slot has at most one ticket, it is never freed while its ticket is
//!   out, and under the lock the list only shrinks. Hence "a worker is
//!   parked ⇒ the list is empty" holds as with the lock: a worker parks
//!   only after finding the list empty under the lock, and an add hands
//!   the item to a parked worker instead of pushing a ticket.
//! - A lock-free get pops a ticket (the item and hint were cloned into it
//!   under the lock) and then pushes the slot and its time onto
//!   [`Shared::taken`] before it returns. Every lock acquisition
//!   ([`Shared::lock`]) first applies the taken list (the slot becomes
//!   processing, the metrics count the get), so any operation that follows
//!   a get (its `done`, an add made after it returned, a metrics snapshot,
//!   a draining shutdown) sees the item processing. The get takes effect
//!   at its push onto the taken list: an operation under the lock between
//!   the pop and that push sees the item still `Queued`, which is the
//!   state just before the get (an add then changes nothing, a `done`
//!   reports that the item is not processing), so each history is one that
//!   the locked queue also allows.
//! - Both lists are linearizable queues; their push and pop order the
//!   ticket's contents and the taken record between threads. No other
//!   field is read without the lock.

use super::heap::DelayHeap;
use super::metrics::{QueueMetrics, WorkqueueMetrics};
use super::strategy::{QueueStrategy, Slot};
use super::table::{short_hash, ItemTable, Phase};
use super::{Config, GetTimeoutError, Item, TryGetError, WorkqueueError};
use crate::clock::{Clock, Instant, Timer};
use crate::sync::{lock, Arc, Condvar, Mutex, MutexGuard, SegQueue};
use std::any::TypeId;
use std::collections::VecDeque;
use std::time::Duration;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Independent,
    Merged,
}

/// A parked worker's private rendezvous.
pub(crate) struct Waiter<T, H> {
    slot: Mutex<Handoff<T, H>>,
    signal: Condvar,
}

enum Handoff<T, H> {
    Pending,
    Item(T, H),
    Closed,
}

impl<T, H> Waiter<T, H> {
    fn new() -> Self {
        Waiter {
            slot: Mutex::new(Handoff::Pending),
            signal: Condvar::new(),
        }
    }

    fn deliver(&self, payload: Option<(T, H)>) {
        let mut slot = lock(&self.slot);
        *slot = match payload {
            Some((item, hint)) => Handoff::Item(item, hint),
            None => Handoff::Closed,
        };
        drop(slot);
        self.signal.notify_one();
    }

    fn wait(&self) -> Option<(T, H)> {
        match self.wait_until(None) {
            Some(got) => got,
            None => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// Wait for a hand-off until `deadline` (real time; `None`: forever).
    /// The outer `None` means the deadline passed with nothing handed off.
    fn wait_until(&self, deadline: Option<std::time::Instant>) -> Option<Option<(T, H)>> {
        let mut slot = lock(&self.slot);
        loop {
            match std::mem::replace(&mut *slot, Handoff::Pending) {
                Handoff::Item(item, hint) => return Some(Some((item, hint))),
                Handoff::Closed => return Some(None),
                Handoff::Pending => match deadline {
                    None => slot = wait(&self.signal, slot),
                    Some(deadline) => {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            return None;
                        }
                        slot = match self.signal.wait_timeout(slot, left) {
                            Ok((g, _)) => g,
                            Err(poisoned) => poisoned.into_inner().0,
                        };
                    }
                },
            }
        }
    }
}

fn wait<'a, G>(cv: &Condvar, guard: MutexGuard<'a, G>) -> MutexGuard<'a, G> {
    match cv.wait(guard) {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A parked worker and what to hand it (`None`: the queue shut down).
type Wake<T, H> = (Arc<Waiter<T, H>>, Option<(T, H)>);

/// Hand-offs decided under the lock and carried out after it is released.
/// An operation hands off at most one item except when a timer releases
/// many at once, so the first is kept apart and the rest in a `Vec` that
/// costs nothing while empty (this is built and dropped on every call).
pub(crate) struct Wakes<T, H> {
    first: Option<Wake<T, H>>,
    more: Vec<Wake<T, H>>,
}

impl<T, H> Wakes<T, H> {
    #[inline]
    fn new() -> Self {
        Wakes {
            first: None,
            more: Vec::new(),
        }
    }

    fn push(&mut self, wake: Wake<T, H>) {
        if self.first.is_none() {
            self.first = Some(wake);
        } else {
            self.more.push(wake);
        }
    }

    #[inline]
    fn run(self) {
        if let Some((waiter, payload)) = self.first {
            waiter.deliver(payload);
            for (waiter, payload) in self.more {
                waiter.deliver(payload);
            }
        }
    }
}

/// A ready item in the lock-free list: its slot, and a clone of the item
/// and hint taken under the lock when it became ready.
pub(crate) struct Ticket<T, H> {
    slot: u32,
    item: T,
    hint: H,
}

type Tickets<T, S> = SegQueue<Ticket<T, <S as QueueStrategy<T>>::Hint>>;

pub(crate) struct Shared<T, S: QueueStrategy<T>> {
    state: Mutex<Inner<T, S>>,
    /// The ready items when [`Inner::lock_free`] (FIFO), in order; the same
    /// list as [`Inner::ready`]. Popped without the lock (see the module
    /// docs).
    ready: Arc<Tickets<T, S>>,
    /// Gets made without the lock: slot and time, applied by the next lock
    /// holder.
    taken: SegQueue<(u32, u64)>,
    /// Signalled when the last processing item is done during a draining
    /// shutdown, and when a plain shutdown cancels the drain.
    drained: Condvar,
    hasher: ahash::RandomState,
    clock: Clock,
    timed: bool,
    mode: Mode,
    name: String,
}

pub(crate) struct Inner<T, S: QueueStrategy<T>> {
    table: ItemTable<T, S::Hint>,
    strategy: S,
    /// Whether ready items go to `ready` instead of the strategy: FIFO
    /// only, whose `touch` never moves an item.
    lock_free: bool,
    /// Pushed under the lock; see [`Shared::ready`].
    ready: Arc<Tickets<T, S>>,
    waiting: DelayHeap<S::Hint>,
    /// Parked workers in the order they parked; the hand-off serves the
    /// longest parked first, so no worker is passed over while others that
    /// parked later are served (with many more workers than items, serving
    /// the most recent one left early parkers waiting 100+ ms).
    waiters: VecDeque<Arc<Waiter<T, S::Hint>>>,
    processing: usize,
    shutting_down: bool,
    drain: bool,
    timer: Option<Timer>,
    metrics: QueueMetrics,
}

type Hint<T, S> = <S as QueueStrategy<T>>::Hint;

impl<T: Item, S: QueueStrategy<T>> Shared<T, S> {
    pub(crate) fn new(config: Config, mode: Mode, strategy: S) -> Arc<Self> {
        let Config {
            name,
            clock,
            timed_metrics: timed,
            capacity,
        } = config;
        let ready = Arc::new(SegQueue::new());
        Arc::new(Shared {
            ready: ready.clone(),
            taken: SegQueue::new(),
            state: Mutex::new(Inner {
                table: ItemTable::with_capacity(capacity),
                strategy,
                lock_free: TypeId::of::<S>() == TypeId::of::<super::Fifo>(),
                ready,
                waiting: DelayHeap::new(),
                waiters: VecDeque::new(),
                processing: 0,
                shutting_down: false,
                drain: false,
                timer: None,
                metrics: QueueMetrics::new(timed),
            }),
            drained: Condvar::new(),
            hasher: ahash::RandomState::new(),
            clock,
            timed,
            mode,
            name,
        })
    }

    /// Hold the queue's lock, with every get made without it applied.
    fn lock(&self) -> MutexGuard<'_, Inner<T, S>> {
        let mut inner = lock(&self.state);
        while let Some((slot, now)) = self.taken.pop() {
            inner.start(slot, now);
        }
        inner
    }

    /// A get without the lock (FIFO), if an item is ready.
    #[inline]
    fn take_ready(&self, now: u64) -> Option<(T, Hint<T, S>)> {
        let Ticket { slot, item, hint } = self.ready.pop()?;
        self.taken.push((slot, now));
        Some((item, hint))
    }

    /// Give the queue a timer for delayed adds. The timer's callback holds
    /// the queue, so [`Shared::release_timer`] must run when the owner goes.
    pub(crate) fn install_timer(this: &Arc<Self>) {
        let shared = this.clone();
        let timer = this.clock.timer(move |now| shared.fire(now));
        lock(&this.state).timer = Some(timer);
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
        let mut wakes = Wakes::new();
        self.lock()
            .add(self.mode, hash, item, hint, now, &mut wakes);
        wakes.run();
    }

    /// Add `item` once `delay` nanoseconds have passed (at once for zero).
    /// `count_retry` says whether this add counts in `workqueue_retries_total`.
    pub(crate) fn add_after(&self, item: T, delay: u64, hint: Hint<T, S>, count_retry: bool) {
        let hash = self.hash(&item);
        let mut wakes = Wakes::new();
        {
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            if count_retry {
                inner.metrics.on_retry();
            }
            if delay == 0 {
                let now = self.stamp();
                inner.add(self.mode, hash, item, hint, now, &mut wakes);
            } else {
                let at = self.clock.now().as_nanos().saturating_add(delay);
                inner.add_waiting(self.mode, hash, item, at, hint);
            }
        }
        wakes.run();
    }

    /// The timer's callback: make every item whose time has come ready.
    fn fire(&self, now: Instant) {
        let mut wakes = Wakes::new();
        {
            let mut inner = self.lock();
            let now = now.as_nanos();
            while let Some((slot, hint)) = inner.waiting.pop_due(now) {
                inner.add_existing(self.mode, slot, hint, now, &mut wakes);
            }
            inner.arm_timer();
        }
        wakes.run();
    }

    pub(crate) fn get(&self) -> Option<(T, Hint<T, S>)> {
        let now = self.stamp();
        if let Some(got) = self.take_ready(now) {
            return Some(got);
        }
        let waiter = {
            let mut inner = self.lock();
            if let Some(got) = inner.pop_ready(now) {
                return Some(got);
            }
            if inner.shutting_down {
                return None;
            }
            let waiter = Arc::new(Waiter::new());
            inner.waiters.push_back(waiter.clone());
            waiter
        };
        waiter.wait()
    }

    /// [`Shared::get`], giving up after `timeout` of real time (whatever the
    /// queue's clock). A zero timeout never parks.
    pub(crate) fn get_timeout(
        &self,
        timeout: Duration,
    ) -> Result<(T, Hint<T, S>), GetTimeoutError> {
        let now = self.stamp();
        // A deadline too far to represent is no deadline.
        let deadline = std::time::Instant::now().checked_add(timeout);
        if let Some(got) = self.take_ready(now) {
            return Ok(got);
        }
        let waiter = {
            let mut inner = self.lock();
            if let Some(got) = inner.pop_ready(now) {
                return Ok(got);
            }
            if inner.shutting_down {
                return Err(GetTimeoutError::ShutDown);
            }
            if timeout.is_zero() {
                return Err(GetTimeoutError::TimedOut);
            }
            let waiter = Arc::new(Waiter::new());
            inner.waiters.push_back(waiter.clone());
            waiter
        };
        match waiter.wait_until(deadline) {
            Some(got) => got.ok_or(GetTimeoutError::ShutDown),
            None => self.abandon(&waiter),
        }
    }

    /// A timed-out worker leaves the parked list. If it is not there any
    /// more, a hand-off was decided under the lock and is under way: take
    /// it, since the item is already counted as processing by this worker.
    fn abandon(
        &self,
        waiter: &Arc<Waiter<T, S::Hint>>,
    ) -> Result<(T, Hint<T, S>), GetTimeoutError> {
        {
            let mut inner = self.lock();
            if let Some(i) = inner.waiters.iter().position(|w| Arc::ptr_eq(w, waiter)) {
                // `remove`, not `swap_remove`: the list's order is the
                // hand-off order.
                inner.waiters.remove(i);
                return Err(GetTimeoutError::TimedOut);
            }
        }
        waiter.wait().ok_or(GetTimeoutError::ShutDown)
    }

    pub(crate) fn try_get(&self) -> Result<(T, Hint<T, S>), TryGetError> {
        let now = self.stamp();
        if let Some(got) = self.take_ready(now) {
            return Ok(got);
        }
        let mut inner = self.lock();
        match inner.pop_ready(now) {
            Some(got) => Ok(got),
            None if inner.shutting_down => Err(TryGetError::ShutDown),
            None => Err(TryGetError::Empty),
        }
    }

    pub(crate) fn done(&self, item: &T) -> Result<(), WorkqueueError> {
        let hash = self.hash(item);
        let now = self.stamp();
        let mut wakes = Wakes::new();
        let result = {
            let mut inner = self.lock();
            let result = inner.done(hash, item, now, &mut wakes);
            if inner.drain && inner.processing == 0 {
                self.drained.notify_all();
            }
            result
        };
        wakes.run();
        result
    }

    pub(crate) fn len(&self) -> usize {
        let inner = self.lock();
        if inner.lock_free {
            inner.ready.len()
        } else {
            inner.strategy.len()
        }
    }

    /// Items tracked at all: queued, processing or waiting.
    #[cfg(all(not(loom), any(test, feature = "testing")))]
    pub(crate) fn tracked(&self) -> usize {
        self.lock().table.len()
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn while_locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _held = lock(&self.state);
        f()
    }

    /// Workers parked in `get` (tests, and the C ABI's test aid).
    #[cfg(all(not(loom), any(test, feature = "test-hooks")))]
    pub(crate) fn parked(&self) -> usize {
        self.lock().waiters.len()
    }

    pub(crate) fn waiting_len(&self) -> usize {
        self.lock().waiting.len()
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Stop accepting adds and release parked workers. With `drain`, also
    /// wait until no item is processing (or a plain shutdown cancels that).
    pub(crate) fn shut_down(&self, drain: bool) {
        let mut wakes = Wakes::new();
        let mut inner = self.lock();
        inner.shutting_down = true;
        inner.drain = drain;
        for waiter in inner.waiters.drain(..) {
            wakes.push((waiter, None));
        }
        inner.forget_waiting();
        if !drain {
            self.drained.notify_all();
        }
        drop(inner);
        wakes.run();
        if drain {
            let mut inner = self.lock();
            while inner.processing > 0 && inner.drain {
                inner = wait(&self.drained, inner);
            }
        }
    }

    pub(crate) fn metrics(&self) -> WorkqueueMetrics {
        let now = self.clock.now().as_nanos();
        let inner = self.lock();
        let now = if inner.metrics.timed() { now } else { 0 };
        inner.metrics.snapshot(&self.name, now)
    }

    /// Run `f` on the strategy, under the lock.
    pub(crate) fn with_strategy<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().strategy)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl<T: Item, S: QueueStrategy<T>> Inner<T, S> {
    fn add(
        &mut self,
        mode: Mode,
        hash: u32,
        item: T,
        hint: Hint<T, S>,
        now: u64,
        wakes: &mut Wakes<T, S::Hint>,
    ) {
        if self.shutting_down {
            return;
        }
        match self.table.find(hash, &item) {
            Some(slot) => self.add_existing(mode, slot, hint, now, wakes),
            None => match self.table.insert(hash, item, Phase::Idle, hint) {
                Some(slot) => self.mark_dirty(slot, hint, now, wakes),
                None => self.metrics.on_reject(),
            },
        }
    }

    /// An add (or the end of a wait) for a tracked item.
    fn add_existing(
        &mut self,
        mode: Mode,
        slot: u32,
        hint: Hint<T, S>,
        now: u64,
        wakes: &mut Wakes<T, S::Hint>,
    ) {
        let entry = self.table.entry_mut(slot);
        match entry.phase {
            Phase::Queued => self.strategy.touch(Slot(slot), &entry.item, hint),
            Phase::RunningDirty => entry.hint = S::merge(entry.hint, hint),
            Phase::Idle | Phase::Running => {
                let hint = match mode {
                    Mode::Merged => match self.waiting.remove(slot) {
                        Some(waited) => S::merge(waited, hint),
                        None => hint,
                    },
                    Mode::Independent => hint,
                };
                self.mark_dirty(slot, hint, now, wakes);
            }
        }
    }

    /// Put an item that is not dirty into the dirty set.
    fn mark_dirty(&mut self, slot: u32, hint: Hint<T, S>, now: u64, wakes: &mut Wakes<T, S::Hint>) {
        self.metrics.on_add(slot, now);
        let entry = self.table.entry_mut(slot);
        if entry.phase == Phase::Running {
            entry.phase = Phase::RunningDirty;
            entry.hint = hint;
        } else {
            self.make_available(slot, hint, now, wakes);
        }
    }

    /// A dirty item that nobody processes: hand it to a parked worker, or
    /// queue it.
    fn make_available(
        &mut self,
        slot: u32,
        hint: Hint<T, S>,
        now: u64,
        wakes: &mut Wakes<T, S::Hint>,
    ) {
        if let Some(waiter) = self.waiters.pop_front() {
            let item = self.begin(slot, now);
            wakes.push((waiter, Some((item, hint))));
        } else {
            let entry = self.table.entry_mut(slot);
            entry.phase = Phase::Queued;
            if self.lock_free {
                self.ready.push(Ticket {
                    slot,
                    item: entry.item.clone(),
                    hint,
                });
            } else {
                self.strategy.push(Slot(slot), &entry.item, hint);
            }
        }
    }

    /// A worker took the item in `slot` at `now`: it is processing.
    fn start(&mut self, slot: u32, now: u64) {
        self.processing += 1;
        self.metrics.on_get(slot, now);
        self.table.entry_mut(slot).phase = Phase::Running;
    }

    fn begin(&mut self, slot: u32, now: u64) -> T {
        self.start(slot, now);
        self.table.entry(slot).item.clone()
    }

    fn pop_ready(&mut self, now: u64) -> Option<(T, Hint<T, S>)> {
        if self.lock_free {
            let Ticket { slot, item, hint } = self.ready.pop()?;
            self.start(slot, now);
            return Some((item, hint));
        }
        let (slot, hint) = self.strategy.pop()?;
        Some((self.begin(slot.0, now), hint))
    }

    fn done(
        &mut self,
        hash: u32,
        item: &T,
        now: u64,
        wakes: &mut Wakes<T, S::Hint>,
    ) -> Result<(), WorkqueueError> {
        let slot = self
            .table
            .find(hash, item)
            .ok_or(WorkqueueError::NotProcessing)?;
        let entry = self.table.entry_mut(slot);
        let requeue = match entry.phase {
            Phase::Running => None,
            Phase::RunningDirty => Some(entry.hint),
            Phase::Idle | Phase::Queued => return Err(WorkqueueError::NotProcessing),
        };
        entry.phase = Phase::Idle;
        self.processing -= 1;
        self.metrics.on_done(slot, now);
        match requeue {
            Some(hint) => self.make_available(slot, hint, now, wakes),
            None if !self.waiting.contains(slot) => self.table.remove(slot),
            None => {}
        }
        Ok(())
    }

    /// A delayed add: wait until `at` (or keep an earlier wait).
    fn add_waiting(&mut self, mode: Mode, hash: u32, item: T, at: u64, hint: Hint<T, S>) {
        let slot = match self.table.find(hash, &item) {
            Some(slot) => slot,
            None => match self.table.insert(hash, item, Phase::Idle, hint) {
                Some(slot) => slot,
                None => return self.metrics.on_reject(),
            },
        };
        let entry = self.table.entry_mut(slot);
        if mode == Mode::Merged {
            // Already ready: no delay is shorter than none, but the hint
            // still merges.
            match entry.phase {
                Phase::Queued => return self.strategy.touch(Slot(slot), &entry.item, hint),
                Phase::RunningDirty => {
                    entry.hint = S::merge(entry.hint, hint);
                    return;
                }
                Phase::Idle | Phase::Running => {}
            }
        }
        match self.waiting.get(slot) {
            Some((_, held)) => self.waiting.update(slot, at, S::merge(held, hint)),
            None => self.waiting.push(slot, at, hint),
        }
        self.arm_timer();
    }

    fn arm_timer(&self) {
        if let (Some(timer), Some(at)) = (&self.timer, self.waiting.peek_at()) {
            timer.set_if_earlier(Instant::from_nanos(at));
        }
    }

    /// Shutdown ends every wait: items that were only waiting are dropped.
    fn forget_waiting(&mut self) {
        for slot in self.waiting.drain() {
            if self.table.entry(slot).phase == Phase::Idle {
                self.table.remove(slot);
            }
        }
        if let Some(timer) = &self.timer {
            timer.cancel();
        }
    }
}
