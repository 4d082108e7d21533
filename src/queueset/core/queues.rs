//! A level's queues, their waiting requests and the order they are served
//! in: the only writer of the queues' counts and of the level's totals over
//! them.
//!
//! # Invariants (checked by `Core::check_invariants` in debug builds)
//! 1. `waiting`, `waiting_seats` and `executing_seats` are the sums over
//!    the queues of their waiting requests, their waiting seats and their
//!    seats in use; `active` counts the queues with a request waiting or
//!    executing.
//! 2. The ready index holds exactly the queues with waiting requests, each
//!    once, under its virtual finish time `next_dispatch_r + head work`
//!    (`Queue::ready_key` is the key it is filed under). A change of a
//!    queue's head or next-dispatch R is followed by
//!    [`Queues::bound_and_reindex`] before the next dispatch.
//! 3. `robin`, the last queue dispatched from, is a valid index or None.
//!
//! A queue's waiting list and counts are changed only through the methods
//! here (`push_waiting`, `remove_waiting`, `begin_executing`,
//! `end_executing`, `release`), which keep invariant 1; next-dispatch R is
//! the virtual-time logic's (the core's), which re-keys after changing it.

use super::Waiter;
use crate::queueset::vtime::VTime;
use std::collections::{BTreeSet, VecDeque};
use std::ops::{Index, IndexMut};

#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Waiting requests, oldest first (changed only by [`Queues`]).
    pub(crate) waiting: VecDeque<Waiter>,
    /// Sum of `work` over waiting requests (shuffle sharding's load measure).
    pub(crate) waiting_work: VTime,
    pub(crate) waiting_seats: u64,
    pub(crate) executing: u32,
    pub(crate) seats_in_use: u32,
    pub(crate) next_dispatch_r: VTime,
    /// This queue's key in the ready index, while it has waiting requests.
    pub(super) ready_key: Option<VTime>,
}

impl Queue {
    pub(crate) fn is_active(&self) -> bool {
        !self.waiting.is_empty() || self.executing > 0
    }
    fn is_empty(&self) -> bool {
        !self.is_active() && self.seats_in_use == 0
    }
}

/// The queues of a level (see the module documentation).
#[derive(Debug)]
pub(crate) struct Queues {
    list: Vec<Queue>,
    /// Queues with waiting requests by virtual finish time (invariant 2).
    ready: BTreeSet<(VTime, usize)>,
    /// The last queue dispatched from (round-robin tie-break).
    robin: Option<usize>,
    /// Queues with a request waiting or executing.
    active: u32,
    /// Requests waiting, over all queues.
    waiting: u32,
    /// Seats of the waiting requests, over all queues.
    waiting_seats: u64,
    /// Seats held by requests that belong to a queue (virtual-time demand).
    executing_seats: u64,
}

impl Index<usize> for Queues {
    type Output = Queue;
    #[inline]
    fn index(&self, q: usize) -> &Queue {
        &self.list[q]
    }
}

impl IndexMut<usize> for Queues {
    #[inline]
    fn index_mut(&mut self, q: usize) -> &mut Queue {
        &mut self.list[q]
    }
}

impl Queues {
    pub(crate) fn new(n: usize) -> Queues {
        let mut list = Vec::new();
        list.resize_with(n, Queue::default);
        Queues {
            list,
            ready: BTreeSet::new(),
            robin: None,
            active: 0,
            waiting: 0,
            waiting_seats: 0,
            executing_seats: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    #[inline]
    pub(crate) fn get(&self, q: usize) -> Option<&Queue> {
        self.list.get(q)
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Queue> {
        self.list.iter()
    }

    /// Queues with a request waiting or executing.
    #[inline]
    pub(crate) fn active(&self) -> u32 {
        self.active
    }

    /// Requests waiting, over all queues.
    #[inline]
    pub(crate) fn waiting(&self) -> u32 {
        self.waiting
    }

    /// Seats of the waiting requests, over all queues.
    #[inline]
    pub(crate) fn waiting_seats(&self) -> u64 {
        self.waiting_seats
    }

    /// Seats held by requests that belong to a queue.
    #[inline]
    pub(crate) fn executing_seats(&self) -> u64 {
        self.executing_seats
    }

    /// The queues with waiting requests, by key (for invariant checks).
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub(super) fn is_ready(&self, key: VTime, q: usize) -> bool {
        self.ready.contains(&(key, q))
    }

    /// Grow to at least `n` queues (a reconfiguration to more queues).
    pub(crate) fn grow_to(&mut self, n: usize) {
        if self.list.len() < n {
            self.list.resize_with(n, Queue::default);
        }
    }

    /// Make queue `q` exist (a replayed or late record may name a queue
    /// beyond the current count).
    #[inline]
    pub(crate) fn ensure(&mut self, q: usize) -> usize {
        if q >= self.list.len() {
            self.list.resize_with(q + 1, Queue::default);
        }
        q
    }

    /// The round-robin position: `q` was just dispatched from.
    #[inline]
    pub(crate) fn set_robin(&mut self, q: usize) {
        self.robin = Some(q);
    }

    /// The queue to dispatch from: least virtual finish, ties broken
    /// round-robin from the queue after the last one chosen.
    pub(crate) fn next(&self) -> Option<usize> {
        let &(min_vf, first) = self.ready.first()?;
        let from = self.robin.map_or(0, |r| r + 1) % self.list.len().max(1);
        Some(
            self.ready
                .range((min_vf, from)..=(min_vf, usize::MAX))
                .next()
                .map_or(first, |&(_, q)| q),
        )
    }

    /// Append a waiting request to queue `q`. Returns the queue's length.
    pub(crate) fn push_waiting(&mut self, q: usize, w: Waiter) -> usize {
        if !self.list[q].is_active() {
            self.active += 1;
        }
        let seats = u64::from(w.estimate.max_seats());
        let queue = &mut self.list[q];
        queue.waiting_work += w.work;
        queue.waiting_seats += seats;
        queue.waiting.push_back(w);
        self.waiting_seats += seats;
        self.waiting += 1;
        queue.waiting.len()
    }

    /// Remove the `pos`-th waiting request of queue `q` (the caller re-keys
    /// the queue with `bound_and_reindex`).
    pub(crate) fn remove_waiting(&mut self, q: usize, pos: usize) -> Waiter {
        let queue = &mut self.list[q];
        let w = queue
            .waiting
            .remove(pos)
            .expect("a waiting request at this position");
        let seats = u64::from(w.estimate.max_seats());
        queue.waiting_work -= w.work;
        queue.waiting_seats -= seats;
        let now_idle = !queue.is_active();
        self.waiting_seats -= seats;
        self.waiting -= 1;
        if now_idle {
            self.active -= 1;
        }
        w
    }

    /// A request of queue `q` holding `seats` starts executing.
    #[inline]
    pub(crate) fn begin_executing(&mut self, q: usize, seats: u32) {
        let queue = &mut self.list[q];
        if !queue.is_active() {
            self.active += 1;
        }
        queue.executing += 1;
        queue.seats_in_use += seats;
        self.executing_seats += u64::from(seats);
    }

    /// A request of queue `q` stops executing (its seats are released
    /// separately: they may linger).
    #[inline]
    pub(crate) fn end_executing(&mut self, q: usize) {
        let queue = &mut self.list[q];
        queue.executing -= 1;
        if !queue.is_active() {
            self.active -= 1;
        }
    }

    /// Queue `q` gives back `seats` it held.
    #[inline]
    pub(crate) fn release(&mut self, q: usize, seats: u32) {
        self.list[q].seats_in_use -= seats;
        self.executing_seats -= u64::from(seats);
    }

    /// Anti-windup: a queue's next dispatch never precedes the arrival of
    /// its oldest waiting request. Then refresh its place in the ready
    /// index (invariant 2).
    pub(crate) fn bound_and_reindex(&mut self, q: usize) {
        let queue = &mut self.list[q];
        if let Some(head) = queue.waiting.front() {
            queue.next_dispatch_r = queue.next_dispatch_r.max(head.arrival_r);
        }
        let key = queue
            .waiting
            .front()
            .map(|head| queue.next_dispatch_r + head.work);
        if key != queue.ready_key {
            if let Some(old) = queue.ready_key {
                self.ready.remove(&(old, q));
            }
            if let Some(new) = key {
                self.ready.insert((new, q));
            }
            self.list[q].ready_key = key;
        }
    }

    /// Drop trailing queues beyond `desired` once they are empty (a
    /// reconfiguration to fewer queues keeps queue identities stable).
    pub(crate) fn drop_undesired_empty(&mut self, desired: usize) {
        while self.list.len() > desired && self.list.last().is_some_and(Queue::is_empty) {
            self.list.pop();
        }
        if self.robin.is_some_and(|r| r >= self.list.len()) {
            self.robin = self.list.len().checked_sub(1);
        }
    }

    /// Take every waiting request out without keeping any count (a failed
    /// level releases its waiters; its counts are not trusted any more).
    pub(crate) fn drain_waiting_of_failed_level(&mut self) -> Vec<Waiter> {
        self.list
            .iter_mut()
            .flat_map(|q| q.waiting.drain(..))
            .collect()
    }
}
