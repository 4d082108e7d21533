//! The waiting items: a binary min-heap of ready times that knows where each
//! slot sits, so a ready time can be moved earlier (or an entry removed) in
//! O(log n). Equal ready times leave in the order they were first added.

use super::chunk::ChunkVec;
use super::table::NONE;

struct Node<H> {
    at: u64,
    seq: u64,
    slot: u32,
    hint: H,
}

impl<H> Node<H> {
    #[inline]
    fn before(&self, other: &Self) -> bool {
        (self.at, self.seq) < (other.at, other.seq)
    }
}

#[derive(Copy, Clone)]
struct Pos(u32);

impl Default for Pos {
    fn default() -> Self {
        Pos(NONE)
    }
}

pub(crate) struct DelayHeap<H> {
    nodes: Vec<Node<H>>,
    pos: ChunkVec<Pos>,
    next_seq: u64,
}

impl<H: Copy> DelayHeap<H> {
    pub(crate) fn new() -> Self {
        DelayHeap {
            nodes: Vec::new(),
            pos: ChunkVec::new(),
            next_seq: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    fn position(&self, slot: u32) -> Option<usize> {
        match self.pos.get(slot as usize) {
            Some(&Pos(p)) if p != NONE => Some(p as usize),
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, slot: u32) -> bool {
        self.position(slot).is_some()
    }

    /// The ready time and hint of a waiting slot.
    pub(crate) fn get(&self, slot: u32) -> Option<(u64, H)> {
        self.position(slot)
            .map(|i| (self.nodes[i].at, self.nodes[i].hint))
    }

    /// Start waiting: `slot` must not be waiting yet.
    pub(crate) fn push(&mut self, slot: u32, at: u64, hint: H) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let i = self.nodes.len();
        self.nodes.push(Node {
            at,
            seq,
            slot,
            hint,
        });
        self.pos.at(slot as usize).0 = i as u32;
        self.sift_up(i);
    }

    /// Move a waiting slot's ready time to `at` if that is earlier, and
    /// replace its hint.
    pub(crate) fn update(&mut self, slot: u32, at: u64, hint: H) {
        let Some(i) = self.position(slot) else {
            return;
        };
        self.nodes[i].hint = hint;
        if at < self.nodes[i].at {
            self.nodes[i].at = at;
            self.sift_up(i);
        }
    }

    /// Stop waiting; returns the hint it waited with.
    pub(crate) fn remove(&mut self, slot: u32) -> Option<H> {
        let i = self.position(slot)?;
        Some(self.take(i).hint)
    }

    /// The earliest ready time.
    pub(crate) fn peek_at(&self) -> Option<u64> {
        self.nodes.first().map(|n| n.at)
    }

    /// The earliest waiting slot if it is ready at `now`.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<(u32, H)> {
        if self.nodes.first()?.at > now {
            return None;
        }
        let n = self.take(0);
        Some((n.slot, n.hint))
    }

    /// Forget every waiting slot, returning them.
    pub(crate) fn drain(&mut self) -> Vec<u32> {
        let slots: Vec<u32> = self.nodes.iter().map(|n| n.slot).collect();
        for &s in &slots {
            self.pos.at(s as usize).0 = NONE;
        }
        self.nodes.clear();
        slots
    }

    fn take(&mut self, i: usize) -> Node<H> {
        let last = self.nodes.len() - 1;
        self.swap(i, last);
        let n = self.nodes.pop().expect("heap holds position i");
        self.pos.at(n.slot as usize).0 = NONE;
        if i < self.nodes.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
        n
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.nodes.swap(a, b);
        let (sa, sb) = (self.nodes[a].slot, self.nodes[b].slot);
        self.pos.at(sa as usize).0 = a as u32;
        self.pos.at(sb as usize).0 = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.nodes[i].before(&self.nodes[parent]) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut min = i;
            if l < self.nodes.len() && self.nodes[l].before(&self.nodes[min]) {
                min = l;
            }
            if r < self.nodes.len() && self.nodes[r].before(&self.nodes[min]) {
                min = r;
            }
            if min == i {
                return;
            }
            self.swap(i, min);
            i = min;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn pops_in_ready_time_order_then_insertion_order() {
        let mut h: DelayHeap<()> = DelayHeap::new();
        h.push(1, 30, ());
        h.push(2, 10, ());
        h.push(3, 10, ());
        h.push(4, 20, ());
        assert_eq!(h.pop_due(5), None);
        let order: Vec<u32> = std::iter::from_fn(|| h.pop_due(100).map(|(s, _)| s)).collect();
        assert_eq!(order, vec![2, 3, 4, 1]);
        assert!(!h.contains(2));
    }

    #[test]
    fn update_only_moves_earlier_and_remove_forgets() {
        let mut h: DelayHeap<u8> = DelayHeap::new();
        h.push(1, 30, 0);
        h.push(2, 20, 0);
        h.update(1, 40, 7);
        assert_eq!(h.get(1), Some((30, 7)));
        h.update(1, 10, 8);
        assert_eq!(h.peek_at(), Some(10));
        assert_eq!(h.remove(1), Some(8));
        assert_eq!(h.remove(1), None);
        assert_eq!(h.pop_due(100), Some((2, 0)));
        assert_eq!(h.len(), 0);
    }

    proptest! {
        /// The heap against a sorted map of (at, seq) -> slot.
        #[test]
        fn matches_a_sorted_map(ops in proptest::collection::vec((0u32..16, 0u64..50, 0u8..3), 1..200)) {
            let mut h: DelayHeap<()> = DelayHeap::new();
            let mut model: BTreeMap<(u64, u64), u32> = BTreeMap::new();
            let mut seq_of: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            let mut seq = 0u64;
            for (slot, at, op) in ops {
                match op {
                    0 => {
                        if let Some(&(old_at, s)) = seq_of.get(&slot) {
                            h.update(slot, at, ());
                            if at < old_at {
                                model.remove(&(old_at, s));
                                model.insert((at, s), slot);
                                seq_of.insert(slot, (at, s));
                            }
                        } else {
                            h.push(slot, at, ());
                            model.insert((at, seq), slot);
                            seq_of.insert(slot, (at, seq));
                            seq += 1;
                        }
                    }
                    1 => {
                        let removed = h.remove(slot).is_some();
                        prop_assert_eq!(removed, seq_of.contains_key(&slot));
                        if let Some(k) = seq_of.remove(&slot) {
                            model.remove(&k);
                        }
                    }
                    _ => {
                        let got = h.pop_due(at).map(|(s, _)| s);
                        let want = model.iter().next().filter(|(k, _)| k.0 <= at).map(|(k, &s)| (*k, s));
                        prop_assert_eq!(got, want.map(|(_, s)| s));
                        if let Some((k, s)) = want {
                            model.remove(&k);
                            seq_of.remove(&s);
                        }
                    }
                }
                prop_assert_eq!(h.len(), model.len());
                prop_assert_eq!(h.peek_at(), model.keys().next().map(|k| k.0));
            }
        }
    }
}
