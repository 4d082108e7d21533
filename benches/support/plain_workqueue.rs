//! client-go's workqueue as written there: one lock over the queue and the
//! dirty and processing sets, one condition variable for waiting consumers.
//! The plain design the workqueue is measured against, shared by
//! `benches/scaling.rs` and `examples/workqueue_latency.rs` (included by
//! path: benches and examples cannot import each other).

use std::collections::{HashSet, VecDeque};
use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub struct PlainWorkqueue {
    state: Mutex<PlainState>,
    ready: Condvar,
}

#[derive(Default)]
struct PlainState {
    queue: VecDeque<u64>,
    dirty: HashSet<u64>,
    processing: HashSet<u64>,
}

impl PlainWorkqueue {
    pub fn add(&self, item: u64) {
        let mut s = self.state.lock().unwrap();
        if !s.dirty.insert(item) {
            return;
        }
        if s.processing.contains(&item) {
            return;
        }
        s.queue.push_back(item);
        drop(s);
        self.ready.notify_one();
    }

    /// Blocks until an item is queued.
    pub fn get(&self) -> u64 {
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(item) = s.queue.pop_front() {
                s.processing.insert(item);
                s.dirty.remove(&item);
                return item;
            }
            s = self.ready.wait(s).unwrap();
        }
    }

    pub fn done(&self, item: u64) {
        let mut s = self.state.lock().unwrap();
        s.processing.remove(&item);
        if s.dirty.contains(&item) {
            s.queue.push_back(item);
            drop(s);
            self.ready.notify_one();
        }
    }
}
