//! Learned cost: a bounded table of what requests of each (flow schema,
//! verb, resource) really cost, learned from the costs servers report when
//! requests finish, and used for the seats of later requests of flow
//! schemas that ask for it (`apf.libapf.io/cost: learned`). See
//! docs/cost.md.
//!
//! # Bounds
//! [`CostEstimator::CAPACITY`] entries (1,024 by default), fixed when the
//! estimator is built: the table never grows, however many distinct
//! (schema, verb, resource) triples arrive (their strings come from
//! clients). It is 4-way set associative: a key lives in one of the 4 slots
//! of its set, and a new key evicts the slot of its set used least
//! recently. Each entry is 24 bytes, so the table is 24 KiB.
//!
//! # Learning
//! Each entry keeps an exponentially decaying average of the reported
//! costs, in seats: `avg += (cost - avg) / 8` (the first report sets it),
//! so a change of cost is followed within a few dozen requests and an
//! outlier moves the average by an eighth. Costs are clamped to
//! `[0, MAX_SEATS]` and non-finite reports are ignored (`record` says so).
//! A request's seats are the average rounded to the nearest, at least 1.

use crate::sync::{lock, Mutex};
use std::hash::{Hash, Hasher};

/// The most seats a learned estimate gives (Kubernetes' largest static
/// estimate: a LIST's maximum).
pub const MAX_SEATS: u32 = 10;

/// Weight of a new report in the decaying average: 1 / `DECAY`.
const DECAY: f64 = 8.0;

const WAYS: usize = 4;

/// The key of one (flow schema, verb, resource): a 64-bit hash, so the
/// table holds no client strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CostKey(u64);

impl CostKey {
    /// The key of requests of schema `schema_id` with `verb` on `resource`
    /// (`api_group/resource`, or the path for a non-resource request).
    pub fn new(schema_id: u32, verb: &str, api_group: &str, resource: &str) -> CostKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (schema_id, verb, api_group, resource).hash(&mut h);
        // 0 marks an empty slot.
        CostKey(h.finish().max(1))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    key: u64,
    avg: f64,
    last_used: u64,
}

#[derive(Debug)]
struct Table {
    entries: Vec<Entry>,
    tick: u64,
    evictions: u64,
}

/// The learned-cost table (see the module documentation). Shared by all
/// the dispatcher's levels; its lock is taken only by requests of schemas
/// that learn (at start and at a finish that reports a cost).
#[derive(Debug)]
pub struct CostEstimator {
    table: Mutex<Table>,
}

/// What [`CostEstimator::record`] did with a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Folded into the key's average (or started it).
    Learned,
    /// NaN or infinite: ignored.
    NotFinite,
}

impl Default for CostEstimator {
    fn default() -> Self {
        CostEstimator::with_capacity(CostEstimator::CAPACITY)
    }
}

impl CostEstimator {
    /// The default number of entries.
    pub const CAPACITY: usize = 1024;

    /// A table of `capacity` entries (rounded up to a multiple of 4, at
    /// least 4).
    pub fn with_capacity(capacity: usize) -> CostEstimator {
        let sets = capacity.div_ceil(WAYS).max(1);
        CostEstimator {
            table: Mutex::new(Table {
                entries: vec![Entry::default(); sets * WAYS],
                tick: 0,
                evictions: 0,
            }),
        }
    }

    /// The number of entries (the bound on its state).
    pub fn capacity(&self) -> usize {
        lock(&self.table).entries.len()
    }

    /// Keys evicted so far to make room for new ones.
    pub fn evictions(&self) -> u64 {
        lock(&self.table).evictions
    }

    /// The seats learned for `key`, if it has been reported.
    pub fn seats(&self, key: CostKey) -> Option<u32> {
        let mut t = lock(&self.table);
        t.tick += 1;
        let tick = t.tick;
        let set = t.set_of(key);
        let e = t.entries[set..set + WAYS]
            .iter_mut()
            .find(|e| e.key == key.0)?;
        e.last_used = tick;
        Some((e.avg.round() as u32).clamp(1, MAX_SEATS))
    }

    /// A request of `key` finished having cost `cost` seats.
    pub fn record(&self, key: CostKey, cost: f64) -> Recorded {
        if !cost.is_finite() {
            return Recorded::NotFinite;
        }
        let cost = cost.clamp(0.0, f64::from(MAX_SEATS));
        let mut t = lock(&self.table);
        t.tick += 1;
        let tick = t.tick;
        let set = t.set_of(key);
        let slots = &mut t.entries[set..set + WAYS];
        if let Some(e) = slots.iter_mut().find(|e| e.key == key.0) {
            e.avg += (cost - e.avg) / DECAY;
            e.last_used = tick;
            return Recorded::Learned;
        }
        let victim = slots
            .iter_mut()
            .min_by_key(|e| (e.key != 0, e.last_used))
            .expect("a set has 4 slots");
        let evicted = victim.key != 0;
        *victim = Entry {
            key: key.0,
            avg: cost,
            last_used: tick,
        };
        if evicted {
            t.evictions += 1;
        }
        Recorded::Learned
    }
}

impl Table {
    fn set_of(&self, key: CostKey) -> usize {
        let sets = self.entries.len() / WAYS;
        // The high bits: the low ones also pick the hash map buckets
        // elsewhere; either is fine for a well-mixed hash.
        ((key.0 >> 32) as usize % sets) * WAYS
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn learns_a_decaying_average_in_seats() {
        let est = CostEstimator::default();
        let k = CostKey::new(1, "list", "", "pods");
        assert_eq!(est.seats(k), None, "nothing reported yet");
        est.record(k, 10.0);
        assert_eq!(est.seats(k), Some(10));
        for _ in 0..40 {
            est.record(k, 2.0);
        }
        assert_eq!(
            est.seats(k),
            Some(2),
            "follows the new cost: 2 + 8 (7/8)^40, rounded"
        );
        est.record(k, 0.0);
        assert!(est.seats(k).unwrap() >= 1, "at least one seat");
        assert_eq!(est.record(k, f64::NAN), Recorded::NotFinite);
        est.record(k, 1e9);
        assert!(est.seats(k).unwrap() <= MAX_SEATS);
    }

    #[test]
    fn keys_differ_by_schema_verb_and_resource() {
        let a = CostKey::new(1, "list", "", "pods");
        assert_ne!(a, CostKey::new(2, "list", "", "pods"));
        assert_ne!(a, CostKey::new(1, "get", "", "pods"));
        assert_ne!(a, CostKey::new(1, "list", "apps", "pods"));
        assert_ne!(a, CostKey::new(1, "list", "", "nodes"));
    }

    #[test]
    fn the_table_never_grows_and_evicts_the_least_recently_used() {
        let est = CostEstimator::with_capacity(8);
        assert_eq!(est.capacity(), 8);
        for i in 0..10_000u32 {
            est.record(CostKey::new(i, "list", "", "pods"), 5.0);
        }
        assert_eq!(est.capacity(), 8, "bounded");
        assert_eq!(est.evictions(), 10_000 - 8);
        // A key in use survives newcomers to its set.
        let est = CostEstimator::with_capacity(4);
        let hot = CostKey::new(0, "list", "", "pods");
        est.record(hot, 7.0);
        for i in 1..100u32 {
            est.seats(hot);
            est.record(CostKey::new(i, "get", "", "pods"), 1.0);
        }
        assert_eq!(est.seats(hot), Some(7));
    }
}
