//! Max-min allocation among queues (Kubernetes issue 95979): the water
//! level at which R advances under the `flow-maxmin` fairness policy.
//!
//! Kubernetes advances R at min(limit, demand) / active queues: every
//! active queue is credited an equal share, even one that asks for less,
//! and the share it leaves unused is not redistributed within the round.
//! Max-min allocation credits each active queue i, demanding d_i seats
//! (executing, lingering and waiting), min(d_i, λ), where the water level λ
//! solves Σ_i min(d_i, λ) = min(limit, Σ_i d_i). R advances at λ: the rate
//! at which a queue that is not satisfied (d_i ≥ λ) is served.
//! When the level is not contended (Σ_i d_i ≤ limit), every λ ≥ max d_i
//! solves it and R advances at the smallest, max d_i.
//!
//! λ is a rational number `num / den` (den: the queues above the water
//! level), so R advances by ⌊num × dt × 2^20 / den⌋, exactly as the
//! reference model's sort-and-scan computes it.
//!
//! `DemandIndex` keeps the active queues' demands in a binary trie over
//! the demand's b bits, b = ⌈log2(limit + 1)⌉ (10 at a limit of 1000, at
//! most 31), each node counting the demands below it and their sum, so a
//! demand change and the water level both cost b steps (O(log limit),
//! independent of the number of queues). Demands are clamped to 2^b - 1:
//! λ never exceeds the limit, and min(d, λ) is the same for any d above
//! it (the index is rebuilt when the limit needs more or fewer bits).

use super::vtime::{rate_increment, VTime};

/// No child.
const NIL: u32 = u32::MAX;

/// The water level λ = `num / den` seats (`den` ≥ 1, or `den` = 0 with
/// `num` = 0 when nothing is active).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Numerator, in seats.
    pub num: u64,
    /// Denominator: the number of queues above the water level (1 when
    /// the level is not contended).
    pub den: u64,
}

impl Level {
    /// How far R advances in `dt_nanos` at this water level.
    #[inline]
    pub fn increment(self, dt_nanos: u64) -> VTime {
        rate_increment(self.num, self.den, dt_nanos)
    }
}

/// The water level of `demands` (one per active queue) under `limit`, by
/// sorting and scanning: the plain definition, for the reference model.
#[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
pub fn water_level_by_sorting(limit: u32, demands: &mut [u64]) -> Level {
    demands.sort_unstable();
    let total: u64 = demands.iter().sum();
    let Some(&max) = demands.last() else {
        return Level { num: 0, den: 0 };
    };
    if total <= u64::from(limit) {
        return Level { num: max, den: 1 };
    }
    let target = u64::from(limit);
    let n = demands.len() as u64;
    let mut below = 0u64;
    for (k, &d) in demands.iter().enumerate() {
        let rest = n - k as u64;
        // λ = (target - below) / rest, valid when it does not exceed d:
        // every queue from the k-th on is then capped at λ.
        if target - below <= rest * d {
            return Level {
                num: target - below,
                den: rest,
            };
        }
        below += d;
    }
    unreachable!("the total exceeds the target, so the last queue caps")
}

#[derive(Debug, Clone, Copy)]
struct Node {
    child: [u32; 2],
    count: u32,
    sum: u64,
}

/// The active queues' demands, indexed for the water level (see the module
/// documentation). Kept only under the `flow-maxmin` policy.
#[derive(Debug, Clone)]
pub(crate) struct DemandIndex {
    /// Node 0 is the root (always present).
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Each queue's demand as registered (None: not active).
    keys: Vec<Option<u64>>,
    /// Sum of the registered (clamped) demands.
    total: u64,
    /// Bits of a demand in the trie.
    bits: u32,
}

impl DemandIndex {
    /// The bits a trie needs under concurrency limit `limit`.
    pub(crate) fn bits_for(limit: u32) -> u32 {
        (u64::BITS - u64::from(limit).leading_zeros()).max(1)
    }

    /// An empty index for concurrency limits of [`DemandIndex::bits_for`]
    /// `bits`.
    pub(crate) fn new(bits: u32) -> Self {
        DemandIndex {
            bits,
            nodes: vec![Node {
                child: [NIL; 2],
                count: 0,
                sum: 0,
            }],
            free: Vec::new(),
            keys: Vec::new(),
            total: 0,
        }
    }
}

impl DemandIndex {
    /// The bits of this index's demands.
    pub(crate) fn bits(&self) -> u32 {
        self.bits
    }

    /// Queue `q` now demands `demand` seats (None: it is not active).
    /// O(bits) when it changed, O(1) otherwise.
    pub(crate) fn set(&mut self, q: usize, demand: Option<u64>) {
        let demand = demand.map(|d| self.key(d));
        if q >= self.keys.len() {
            if demand.is_none() {
                return;
            }
            self.keys.resize(q + 1, None);
        }
        let old = std::mem::replace(&mut self.keys[q], demand);
        if demand.is_none() && q + 1 == self.keys.len() {
            // Keys past the last active one go, and memory with them after
            // a burst (keys are dense small numbers, reused).
            while self.keys.last() == Some(&None) {
                self.keys.pop();
            }
            if self.keys.capacity() > 64 && self.keys.len() * 4 < self.keys.capacity() {
                self.keys.shrink_to(self.keys.len() * 2);
            }
        }
        if old == demand {
            return;
        }
        if let Some(old) = old {
            self.remove(old);
        }
        if let Some(new) = demand {
            self.insert(new);
        }
    }

    fn insert(&mut self, key: u64) {
        self.total += key;
        let mut node = 0usize;
        self.nodes[0].count += 1;
        self.nodes[0].sum += key;
        for bit in (0..self.bits).rev() {
            let side = ((key >> bit) & 1) as usize;
            let mut next = self.nodes[node].child[side];
            if next == NIL {
                next = self.alloc();
                self.nodes[node].child[side] = next;
            }
            node = next as usize;
            self.nodes[node].count += 1;
            self.nodes[node].sum += key;
        }
    }

    fn remove(&mut self, key: u64) {
        self.total -= key;
        let mut node = 0usize;
        self.nodes[0].count -= 1;
        self.nodes[0].sum -= key;
        for bit in (0..self.bits).rev() {
            let side = ((key >> bit) & 1) as usize;
            let next = self.nodes[node].child[side];
            debug_assert_ne!(next, NIL, "a registered demand is in the trie");
            let child = &mut self.nodes[next as usize];
            child.count -= 1;
            child.sum -= key;
            if child.count == 0 {
                // Nothing below it any more: the whole path below is the
                // one being removed, every other branch having been freed
                // when it emptied. Free it all.
                self.nodes[node].child[side] = NIL;
                self.free_path(next, key, bit);
                return;
            }
            node = next as usize;
        }
    }

    /// Free `node` (at the level of `bit`) and the path below it to `key`.
    fn free_path(&mut self, mut node: u32, key: u64, bit: u32) {
        for b in (0..bit).rev() {
            let next = self.nodes[node as usize].child[((key >> b) & 1) as usize];
            self.release(node);
            node = next;
        }
        self.release(node);
    }

    fn alloc(&mut self) -> u32 {
        let blank = Node {
            child: [NIL; 2],
            count: 0,
            sum: 0,
        };
        if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = blank;
            return i;
        }
        self.nodes.push(blank);
        (self.nodes.len() - 1) as u32
    }

    fn release(&mut self, node: u32) {
        self.free.push(node);
    }

    /// The water level under `limit` (at most 2^bits - 1). O(bits).
    pub(crate) fn level(&self, limit: u32) -> Level {
        let root = &self.nodes[0];
        let target = u64::from(limit);
        match root.count {
            0 => return Level { num: 0, den: 0 },
            // One active queue (the uncontended common case): its demand,
            // up to the limit.
            1 => {
                return Level {
                    num: self.total.min(target),
                    den: 1,
                }
            }
            _ => {}
        }
        if self.total <= target {
            return Level {
                num: self.max(),
                den: 1,
            };
        }
        // λ < max demand < 2^bits. Descend keeping λ within the current
        // node's range [lo, lo + 2^bit): `below` sums the demands under
        // lo, `above` counts those at or past the range's end, so
        // f(y) = Σ min(d, y) = below + (demands in range, capped) + y × above.
        let (mut node, mut lo, mut below, mut above) = (0u32, 0u64, 0u64, 0u64);
        for bit in (0..self.bits).rev() {
            let n = self.nodes[node as usize];
            let (left, right) = (self.node(n.child[0]), self.node(n.child[1]));
            let mid = lo + (1 << bit);
            let f_mid = below + left.1 + mid * (above + u64::from(right.0));
            if f_mid <= target {
                below += left.1;
                lo = mid;
                node = n.child[1];
            } else {
                above += u64::from(right.0);
                node = n.child[0];
            }
            if node == NIL {
                // No demand inside the range: f is linear in it.
                return Level {
                    num: target - below,
                    den: above,
                };
            }
        }
        // A leaf: `count` demands equal to lo, and λ in [lo, lo + 1).
        let leaf = self.nodes[node as usize];
        Level {
            num: target - below - leaf.sum,
            den: above,
        }
    }

    /// (count, sum) of a possibly absent node.
    fn node(&self, i: u32) -> (u32, u64) {
        if i == NIL {
            (0, 0)
        } else {
            let n = &self.nodes[i as usize];
            (n.count, n.sum)
        }
    }

    /// The largest demand registered (the trie is not empty).
    fn max(&self) -> u64 {
        let mut node = 0usize;
        let mut key = 0u64;
        for bit in (0..self.bits).rev() {
            let n = &self.nodes[node];
            let side = usize::from(n.child[1] != NIL);
            key |= (side as u64) << bit;
            node = n.child[side] as usize;
        }
        key
    }

    /// Queue `q`'s demand as registered (None: not active), clamped.
    pub(crate) fn demand_of(&self, q: usize) -> Option<u64> {
        self.keys.get(q).copied().flatten()
    }

    /// The demand `d` as the index keeps it (clamped, see the module
    /// documentation).
    pub(crate) fn key(&self, d: u64) -> u64 {
        d.min((1 << self.bits) - 1)
    }

    /// Nodes allocated (memory: at most `bits` per active queue, plus the
    /// root).
    #[cfg(test)]
    pub(crate) fn live_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Room for keys (tests: memory after a burst).
    #[cfg(test)]
    pub(crate) fn key_capacity(&self) -> usize {
        self.keys.capacity()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn by_index(limit: u32, demands: &[u64]) -> Level {
        let mut idx = DemandIndex::new(DemandIndex::bits_for(limit));
        for (q, &d) in demands.iter().enumerate() {
            idx.set(q, Some(d));
        }
        idx.level(limit)
    }

    /// λ as a float, for readable expectations.
    fn lambda(l: Level) -> f64 {
        l.num as f64 / l.den as f64
    }

    #[test]
    fn a_narrow_queue_leaves_its_share_to_the_others() {
        // Limit 4, one queue wants 1, two want 10: 1 + 2λ = 4, λ = 1.5
        // (Kubernetes' equal division would credit 4/3 each).
        for level in [
            by_index(4, &[1, 10, 10]),
            water_level_by_sorting(4, &mut [10, 1, 10]),
        ] {
            assert_eq!(lambda(level), 1.5);
        }
    }

    #[test]
    fn an_uncontended_level_advances_at_the_largest_demand() {
        assert_eq!(by_index(10, &[1, 3, 2]), Level { num: 3, den: 1 });
        assert_eq!(
            water_level_by_sorting(10, &mut [1, 3, 2]),
            Level { num: 3, den: 1 }
        );
        assert_eq!(by_index(10, &[]), Level { num: 0, den: 0 });
        assert_eq!(by_index(0, &[2, 5]).num, 0);
    }

    #[test]
    fn the_trie_agrees_with_sorting_and_frees_its_nodes() {
        // A deterministic pseudo-random walk of demand changes.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Bits for a limit of 63: demands clamped to 63.
        let mut idx = DemandIndex::new(DemandIndex::bits_for(63));
        let mut demands: Vec<Option<u64>> = vec![None; 24];
        for step in 0..20_000 {
            let q = (next() % 24) as usize;
            let d = match next() % 5 {
                0 => None,
                1 => Some(next() % (1 << 33)),
                _ => Some(1 + next() % 12),
            };
            demands[q] = d;
            idx.set(q, d);
            let limit = (next() % 64) as u32;
            let mut active: Vec<u64> = demands.iter().flatten().copied().collect();
            let want = water_level_by_sorting(limit, &mut active);
            let got = idx.level(limit);
            // Same rational number.
            assert_eq!(
                u128::from(want.num) * u128::from(got.den),
                u128::from(got.num) * u128::from(want.den),
                "step {step}: {want:?} vs {got:?}"
            );
        }
        for q in 0..24 {
            idx.set(q, None);
        }
        assert_eq!(idx.live_nodes(), 1, "only the root is left");
    }
}
