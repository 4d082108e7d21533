//! Queue strategies: the order in which queued items are handed out.

use super::chunk::ChunkVec;
use super::table::NONE;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// An item's place in the queue's slab. Slot numbers are dense (they start
/// at zero and freed ones are reused first), so a strategy may keep per-slot
/// data in an array indexed by [`Slot::index`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub(crate) u32);

impl Slot {
    /// The slot number.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The order in which a queue hands out its queued items.
///
/// This is the `Queue` interface Kubernetes PR 123347 puts under client-go's
/// workqueue (push, pop, len and touch), with two changes:
/// - Items are named by [`Slot`]: the queue keeps each item once, in its
///   slab, and a strategy stores slot numbers (4 bytes) instead of a second
///   copy of the item. The item is passed by reference to `push` and `touch`
///   for strategies that order by content.
/// - Every add carries a [`QueueStrategy::Hint`] (`()` for FIFO, a [`Lane`],
///   a priority) that `push` and `touch` receive and `pop` returns, so a
///   re-add can move a queued item without the strategy parsing items.
///
/// The queue calls a strategy with its lock held and upholds: `push` only
/// for a slot that is not in the strategy, `touch` only for one that is, and
/// a slot handed out by `pop` is not in the strategy any more.
pub trait QueueStrategy<T>: Send + 'static {
    /// What an add says about where the item goes.
    type Hint: Copy + Default + Send + Sync + fmt::Debug + 'static;

    /// Queue a slot that is not queued.
    fn push(&mut self, slot: Slot, item: &T, hint: Self::Hint);

    /// An add for a slot that is queued: move it if the hint asks for that.
    fn touch(&mut self, slot: Slot, item: &T, hint: Self::Hint);

    /// Take the next slot, with the hint it is queued under.
    fn pop(&mut self) -> Option<(Slot, Self::Hint)>;

    /// How many slots are queued.
    fn len(&self) -> usize;

    /// Whether no slot is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The hint to keep when an item that is not in the strategy (waiting,
    /// or processing and dirty) is added again: what `touch` would have
    /// done.
    fn merge(held: Self::Hint, new: Self::Hint) -> Self::Hint;
}

/// First in, first out: client-go's default.
///
/// A workqueue built with `Fifo` keeps its ready items in a lock-free list
/// of its own, so that `get` takes no lock; the `Fifo` value it was given
/// (and [`Workqueue::inspect_strategy`](super::Workqueue::inspect_strategy)
/// shows) stays empty. Used on its own, `Fifo` is a plain FIFO strategy.
#[derive(Debug, Default)]
pub struct Fifo {
    slots: VecDeque<u32>,
}

impl Fifo {
    /// A FIFO with room for `capacity` items before it first grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Fifo {
            slots: VecDeque::with_capacity(capacity),
        }
    }
}

impl<T> QueueStrategy<T> for Fifo {
    type Hint = ();

    fn push(&mut self, slot: Slot, _item: &T, _hint: ()) {
        self.slots.push_back(slot.0);
    }

    fn touch(&mut self, _slot: Slot, _item: &T, _hint: ()) {}

    fn pop(&mut self) -> Option<(Slot, ())> {
        self.slots.pop_front().map(|s| (Slot(s), ()))
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn merge(_held: (), _new: ()) {}
}

/// Doubly linked lists threaded through an array indexed by slot, so a slot
/// moves between lists in O(1) without searching.
#[derive(Default)]
struct Links {
    links: ChunkVec<Link>,
}

#[derive(Copy, Clone)]
struct Link {
    prev: u32,
    next: u32,
    /// The list the slot is on: a lane or a priority.
    class: i32,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            prev: NONE,
            next: NONE,
            class: 0,
        }
    }
}

#[derive(Copy, Clone, Debug)]
struct Ends {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for Ends {
    fn default() -> Self {
        Ends {
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }
}

impl Links {
    fn class(&self, slot: u32) -> i32 {
        self.links.get(slot as usize).map_or(0, |l| l.class)
    }

    fn push_back(&mut self, ends: &mut Ends, slot: u32, class: i32) {
        *self.links.at(slot as usize) = Link {
            prev: ends.tail,
            next: NONE,
            class,
        };
        if ends.tail == NONE {
            ends.head = slot;
        } else {
            self.links.at(ends.tail as usize).next = slot;
        }
        ends.tail = slot;
        ends.len += 1;
    }

    fn unlink(&mut self, ends: &mut Ends, slot: u32) {
        let Link { prev, next, .. } = *self.links.at(slot as usize);
        if prev == NONE {
            ends.head = next;
        } else {
            self.links.at(prev as usize).next = next;
        }
        if next == NONE {
            ends.tail = prev;
        } else {
            self.links.at(next as usize).prev = prev;
        }
        ends.len -= 1;
    }

    fn pop_front(&mut self, ends: &mut Ends) -> Option<u32> {
        let slot = ends.head;
        if slot == NONE {
            return None;
        }
        self.unlink(ends, slot);
        Some(slot)
    }
}

/// The lane of a [`TwoLane`] queue.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Served first.
    #[default]
    Fast,
    /// Served only while the fast lane is empty.
    Slow,
}

impl Lane {
    fn index(self) -> usize {
        match self {
            Lane::Fast => 0,
            Lane::Slow => 1,
        }
    }

    fn from_class(class: i32) -> Lane {
        if class == 0 {
            Lane::Fast
        } else {
            Lane::Slow
        }
    }
}

/// Two FIFO lanes, fast and slow: a slow item is handed out only while no
/// fast item is queued, so slow work (resyncs, start-up backlogs) never
/// delays fast work (events) by more than the processing already running.
///
/// An add names a lane ([`Lane::Fast`] by default). Adding a queued item
/// with the other lane moves it to the back of that lane, in either
/// direction: the latest add decides, as in the two-lane queue the seed
/// describes. Adding it with its own lane keeps its place.
#[derive(Default)]
pub struct TwoLane {
    links: Links,
    lanes: [Ends; 2],
}

impl fmt::Debug for TwoLane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoLane")
            .field("fast", &self.lanes[0].len)
            .field("slow", &self.lanes[1].len)
            .finish()
    }
}

impl TwoLane {
    /// How many items wait in `lane`.
    pub fn lane_len(&self, lane: Lane) -> usize {
        self.lanes[lane.index()].len
    }
}

impl<T> QueueStrategy<T> for TwoLane {
    type Hint = Lane;

    fn push(&mut self, slot: Slot, _item: &T, lane: Lane) {
        let ends = &mut self.lanes[lane.index()];
        self.links.push_back(ends, slot.0, lane.index() as i32);
    }

    fn touch(&mut self, slot: Slot, _item: &T, lane: Lane) {
        let current = Lane::from_class(self.links.class(slot.0));
        if current != lane {
            self.links.unlink(&mut self.lanes[current.index()], slot.0);
            let ends = &mut self.lanes[lane.index()];
            self.links.push_back(ends, slot.0, lane.index() as i32);
        }
    }

    fn pop(&mut self) -> Option<(Slot, Lane)> {
        for lane in [Lane::Fast, Lane::Slow] {
            if let Some(s) = self.links.pop_front(&mut self.lanes[lane.index()]) {
                return Some((Slot(s), lane));
            }
        }
        None
    }

    fn len(&self) -> usize {
        self.lanes[0].len + self.lanes[1].len
    }

    fn merge(_held: Lane, new: Lane) -> Lane {
        new
    }
}

/// Integer priorities, higher first, FIFO within a priority.
///
/// Adding a queued item with a higher priority moves it to the back of its
/// new priority (so items already waiting at that priority stay ahead of
/// it); adding it with an equal or lower priority changes nothing.
#[derive(Default)]
pub struct Priority {
    links: Links,
    levels: BTreeMap<i32, Ends>,
    len: usize,
}

impl fmt::Debug for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let levels: Vec<(i32, usize)> = self.levels.iter().map(|(&p, e)| (p, e.len)).collect();
        f.debug_struct("Priority").field("levels", &levels).finish()
    }
}

impl Priority {
    /// How many items are queued at each priority, highest first.
    pub fn depth_by_priority(&self) -> Vec<(i32, usize)> {
        self.levels.iter().rev().map(|(&p, e)| (p, e.len)).collect()
    }

    fn enqueue(&mut self, slot: u32, priority: i32) {
        let ends = self.levels.entry(priority).or_default();
        self.links.push_back(ends, slot, priority);
        self.len += 1;
    }

    fn unlink(&mut self, slot: u32, priority: i32) {
        if let Some(ends) = self.levels.get_mut(&priority) {
            self.links.unlink(ends, slot);
            if ends.len == 0 {
                self.levels.remove(&priority);
            }
            self.len -= 1;
        }
    }
}

impl<T> QueueStrategy<T> for Priority {
    type Hint = i32;

    fn push(&mut self, slot: Slot, _item: &T, priority: i32) {
        self.enqueue(slot.0, priority);
    }

    fn touch(&mut self, slot: Slot, _item: &T, priority: i32) {
        let current = self.links.class(slot.0);
        if priority > current {
            self.unlink(slot.0, current);
            self.enqueue(slot.0, priority);
        }
    }

    fn pop(&mut self) -> Option<(Slot, i32)> {
        let mut level = self.levels.last_entry()?;
        let priority = *level.key();
        let slot = self.links.pop_front(level.get_mut())?;
        if level.get().len == 0 {
            level.remove();
        }
        self.len -= 1;
        Some((Slot(slot), priority))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn merge(held: i32, new: i32) -> i32 {
        held.max(new)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn drain<S: QueueStrategy<()>>(s: &mut S) -> Vec<(u32, S::Hint)> {
        std::iter::from_fn(|| s.pop().map(|(slot, h)| (slot.0, h))).collect()
    }

    #[test]
    fn fifo_keeps_order_and_ignores_touch() {
        let mut f = Fifo::default();
        for s in [3, 1, 2] {
            QueueStrategy::<()>::push(&mut f, Slot(s), &(), ());
        }
        QueueStrategy::<()>::touch(&mut f, Slot(3), &(), ());
        assert_eq!(QueueStrategy::<()>::len(&f), 3);
        assert_eq!(drain(&mut f), vec![(3, ()), (1, ()), (2, ())]);
    }

    #[test]
    fn two_lane_serves_fast_first_and_moves_on_touch() {
        let mut q = TwoLane::default();
        let push = |q: &mut TwoLane, s, l| QueueStrategy::<()>::push(q, Slot(s), &(), l);
        push(&mut q, 0, Lane::Slow);
        push(&mut q, 1, Lane::Slow);
        push(&mut q, 2, Lane::Fast);
        push(&mut q, 3, Lane::Fast);
        QueueStrategy::<()>::touch(&mut q, Slot(0), &(), Lane::Fast);
        QueueStrategy::<()>::touch(&mut q, Slot(2), &(), Lane::Slow);
        QueueStrategy::<()>::touch(&mut q, Slot(3), &(), Lane::Fast);
        assert_eq!(q.lane_len(Lane::Fast), 2);
        assert_eq!(
            drain(&mut q),
            vec![
                (3, Lane::Fast),
                (0, Lane::Fast),
                (1, Lane::Slow),
                (2, Lane::Slow)
            ]
        );
    }

    #[test]
    fn priority_is_highest_first_fifo_within_and_raise_goes_to_the_back() {
        let mut q = Priority::default();
        let push = |q: &mut Priority, s, p| QueueStrategy::<()>::push(q, Slot(s), &(), p);
        push(&mut q, 0, 0);
        push(&mut q, 1, 5);
        push(&mut q, 2, 5);
        push(&mut q, 3, -1);
        QueueStrategy::<()>::touch(&mut q, Slot(0), &(), 5);
        QueueStrategy::<()>::touch(&mut q, Slot(1), &(), 2);
        assert_eq!(q.depth_by_priority(), vec![(5, 3), (-1, 1)]);
        assert_eq!(drain(&mut q), vec![(1, 5), (2, 5), (0, 5), (3, -1)]);
        assert!(q.levels.is_empty());
        assert_eq!(QueueStrategy::<()>::len(&q), 0);
    }
}
