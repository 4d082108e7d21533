//! The per-item limiters' bounded state: two generations of items.

use super::DEFAULT_STATE_CAPACITY;
use crate::clock::{duration_nanos, Clock, Instant};
use crate::sync::{lock, Mutex};
use crate::workqueue::{Item, WorkqueueError};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

/// Per-item state in two generations (see [`RateLimiter`]).
pub(super) struct ItemStates<T, V> {
    current: HashMap<T, V, ahash::RandomState>,
    older: HashMap<T, V, ahash::RandomState>,
    aged_at: u64,
    period: u64,
    capacity: usize,
}

impl<T: Item, V> ItemStates<T, V> {
    pub(super) fn new(now: Instant, idle_expiry: Duration) -> Self {
        ItemStates {
            current: HashMap::default(),
            older: HashMap::default(),
            aged_at: now.as_nanos(),
            period: duration_nanos(idle_expiry).max(1),
            capacity: DEFAULT_STATE_CAPACITY,
        }
    }

    pub(super) fn age(&mut self, now: u64) {
        self.older = std::mem::take(&mut self.current);
        self.aged_at = now;
    }

    pub(super) fn maintain(&mut self, now: u64) {
        let idle = now.saturating_sub(self.aged_at);
        if idle >= self.period.saturating_mul(2) {
            self.current = HashMap::default();
            self.older = HashMap::default();
            self.aged_at = now;
        } else if idle >= self.period {
            self.age(now);
        }
    }

    pub(super) fn entry(&mut self, item: &T, now: u64, init: impl FnOnce() -> V) -> &mut V {
        self.maintain(now);
        if !self.current.contains_key(item) {
            let value = self.older.remove(item).unwrap_or_else(init);
            if self.current.len() >= self.capacity {
                self.age(now);
            }
            self.current.insert(item.clone(), value);
        }
        self.current
            .get_mut(item)
            .expect("present: inserted just above")
    }

    pub(super) fn get(&mut self, item: &T, now: u64) -> Option<&V> {
        self.maintain(now);
        self.current.get(item).or_else(|| self.older.get(item))
    }

    pub(super) fn remove(&mut self, item: &T) {
        self.current.remove(item);
        self.older.remove(item);
    }

    pub(super) fn len(&self) -> usize {
        self.current.len() + self.older.len()
    }
}

/// The shared part of the per-item limiters: a clock and bounded state.
pub(super) struct Tracked<T, V> {
    clock: Clock,
    states: Mutex<ItemStates<T, V>>,
}

impl<T: Item, V> Tracked<T, V> {
    pub(super) fn new(clock: &Clock, idle_expiry: Duration) -> Self {
        Tracked {
            clock: clock.clone(),
            states: Mutex::new(ItemStates::new(clock.now(), idle_expiry)),
        }
    }

    pub(super) fn set_idle_expiry(&mut self, idle_expiry: Duration) -> Result<(), WorkqueueError> {
        if idle_expiry.is_zero() {
            return Err(WorkqueueError::InvalidExpiry);
        }
        lock(&self.states).period = duration_nanos(idle_expiry);
        Ok(())
    }

    pub(super) fn set_capacity(&mut self, capacity: NonZeroUsize) {
        lock(&self.states).capacity = capacity.get();
    }

    pub(super) fn with_entry<R>(
        &self,
        item: &T,
        init: impl FnOnce(u64) -> V,
        f: impl FnOnce(&mut V, u64) -> R,
    ) -> R {
        let now = self.clock.now().as_nanos();
        let mut states = lock(&self.states);
        let v = states.entry(item, now, || init(now));
        f(v, now)
    }

    pub(super) fn read<R>(&self, item: &T, f: impl FnOnce(Option<&V>) -> R) -> R {
        let now = self.clock.now().as_nanos();
        let mut states = lock(&self.states);
        f(states.get(item, now))
    }

    pub(super) fn forget(&self, item: &T) {
        lock(&self.states).remove(item);
    }

    pub(super) fn tracked(&self) -> usize {
        lock(&self.states).len()
    }
}
