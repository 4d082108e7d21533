//! Randomised schedules of the FIFO workqueue with shuttle, for histories
//! too long for loom: two producers add a small set of items (duplicates
//! among them), two consumers get, re-add (while processing, and after
//! `done`: the retry pattern that finds the item's kept entry and adds it
//! without the shard lock) and finish them, and the history ends with the
//! main thread draining the queue, with `shut_down` or with
//! `shut_down_with_drain`. All the items live in one shard, and the history
//! starts with five queued items and one kept entry, so that sweeps (after
//! 2 kept entries in tests, `shard::KEEP`) and the growth of the shard's
//! hash index (8 buckets, doubled at the 7th entry) happen in it.
//!
//! Checked at every get: the item is not being processed by another
//! consumer (a set under a shuttle mutex); at every add: the queue never
//! holds more items than there are distinct ones. At quiescence, against a
//! plain model of the history: every add that returned before shutdown
//! began was covered by a later get, the drained items are distinct and
//! include every uncovered one, `len()` and the depth are 0 and the adds
//! counted equal the gets. Run with `scripts/shuttle.sh`
//! (SHUTTLE_ITERATIONS for longer runs); docs/verification.md lists the
//! broken twins these histories catch.
use super::{QueueConfig, TryGetError, Workqueue};
use crate::clock::Clock;
use shuttle::rand::Rng;
use shuttle::sync::{Arc, Mutex};
use shuttle::thread;

/// Distinct items in a history.
const ITEMS: usize = 9;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

/// The plain model of a history (under a shuttle mutex; it orders nothing
/// in the queue itself, whose calls run outside it).
#[derive(Default)]
struct Model {
    /// The number of the newest add of each item begun (numbers are
    /// history-wide, so they only grow).
    begun: [u64; ITEMS],
    /// The newest add of each item that returned before shutdown began:
    /// some get must start after it.
    required: [u64; ITEMS],
    /// The newest add begun when a get of the item returned.
    covered: [u64; ITEMS],
    /// Items being processed (from get until just before done).
    processing: [bool; ITEMS],
    /// Set just before the history's shutdown.
    closing: bool,
    next: u64,
    gets: u64,
}

struct History {
    q: Workqueue<u64>,
    /// `items[i]` is the queue's item for model index `i`: all in one shard.
    items: Vec<u64>,
    model: Mutex<Model>,
}

impl History {
    fn new() -> Self {
        let (clock, _manual) = Clock::manual();
        let mut config = QueueConfig::with_clock(clock);
        config.timed_metrics = false;
        let q = Workqueue::with_config(config);
        let shard = q.shard_index(&0);
        let items = (0u64..)
            .filter(|x| q.shard_index(x) == shard)
            .take(ITEMS)
            .collect();
        History {
            q,
            items,
            model: Mutex::new(Model::default()),
        }
    }

    fn index(&self, x: u64) -> usize {
        self.items
            .iter()
            .position(|&y| y == x)
            .expect("a known item")
    }

    fn add(&self, i: usize) {
        let n = {
            let mut m = self.model.lock().unwrap();
            m.next += 1;
            let n = m.next;
            m.begun[i] = n;
            n
        };
        self.q.add(self.items[i]);
        let mut m = self.model.lock().unwrap();
        if !m.closing {
            m.required[i] = m.required[i].max(n);
        }
        drop(m);
        let len = self.q.len();
        assert!(len <= ITEMS, "{len} queued, {ITEMS} distinct items");
    }

    /// Process an item just handed out: `readd` 1 re-adds it while it is
    /// processing, 2 after `done` (the retry pattern), 0 not at all.
    fn process(&self, x: u64, readd: u32) {
        let i = self.index(x);
        {
            let mut m = self.model.lock().unwrap();
            assert!(!m.processing[i], "item {x} handed to two consumers at once");
            m.processing[i] = true;
            m.covered[i] = m.covered[i].max(m.begun[i]);
            m.gets += 1;
        }
        if readd == 1 {
            self.add(i);
        }
        self.model.lock().unwrap().processing[i] = false;
        self.q.done(&x).expect("a processing item's done");
        if readd == 2 {
            self.add(i);
        }
    }

    /// The checks at quiescence, given what the final drain handed out.
    fn check_end(&self, drained: &[u64]) {
        let m = self.model.lock().unwrap();
        let mut seen = [false; ITEMS];
        for &x in drained {
            let i = self.index(x);
            assert!(!seen[i], "item {x} drained twice");
            seen[i] = true;
        }
        for i in 0..ITEMS {
            assert!(
                m.covered[i] >= m.required[i],
                "item {}: add {} never processed after it (last get covered {})",
                self.items[i],
                m.required[i],
                m.covered[i]
            );
            assert!(!m.processing[i]);
        }
        assert_eq!(self.q.len(), 0);
        let metrics = self.q.metrics();
        assert_eq!(metrics.depth, 0, "depth at quiescence");
        assert_eq!(metrics.adds, m.gets, "every counted add handed out once");
        assert_eq!(metrics.retries, 0);
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum End {
    /// Consumers poll with `try_get`; the main thread drains what is left.
    Drain,
    /// Consumers block in `get` until `shut_down`.
    ShutDown,
    /// Consumers block in `get` until `shut_down_with_drain`.
    ShutDownWithDrain,
}

fn history(end: End) {
    let h = Arc::new(History::new());
    // Five queued, one done (its entry kept: a sweep is due after the next
    // done), six entries in the shard's index: the next new item grows it.
    for i in 0..6 {
        h.add(i);
    }
    let x = h.q.try_get().expect("queued");
    h.process(x, 0);
    let producers: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                for _ in 0..4 {
                    h.add(rng.gen_range(0..ITEMS));
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                // Re-adds per consumer, so that a history ends.
                let mut budget = 2;
                let mut readd = |rng: &mut shuttle::rand::rngs::ThreadRng| {
                    let r = if budget > 0 { rng.gen_range(0..3) } else { 0 };
                    budget -= u32::from(r != 0);
                    r
                };
                if end == End::Drain {
                    for _ in 0..5 {
                        if let Ok(x) = h.q.try_get() {
                            let r = readd(&mut rng);
                            h.process(x, r);
                        }
                    }
                } else {
                    while let Some(x) = h.q.get() {
                        let r = readd(&mut rng);
                        h.process(x, r);
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let mut drained = Vec::new();
    match end {
        End::Drain => {
            for c in consumers {
                c.join().unwrap();
            }
            let len = h.q.len();
            // Every item with an add not yet covered must be queued.
            let uncovered: Vec<u64> = {
                let m = h.model.lock().unwrap();
                (0..ITEMS)
                    .filter(|&i| m.covered[i] < m.required[i])
                    .map(|i| h.items[i])
                    .collect()
            };
            while let Ok(x) = h.q.try_get() {
                drained.push(x);
                h.process(x, 0);
            }
            assert_eq!(drained.len(), len, "len() before the drain");
            for x in uncovered {
                assert!(drained.contains(&x), "item {x} added but not queued");
            }
        }
        End::ShutDown | End::ShutDownWithDrain => {
            h.model.lock().unwrap().closing = true;
            if end == End::ShutDown {
                h.q.shut_down();
            } else {
                h.q.shut_down_with_drain();
            }
            for c in consumers {
                c.join().unwrap();
            }
            assert_eq!(h.q.try_get(), Err(TryGetError::ShutDown));
        }
    }
    h.check_end(&drained);
}

#[test]
fn fifo_histories_drained_by_the_main_thread() {
    shuttle::check_random(|| history(End::Drain), iterations());
}

#[test]
fn fifo_histories_ending_in_shut_down() {
    shuttle::check_random(|| history(End::ShutDown), iterations());
}

#[test]
fn fifo_histories_ending_in_shut_down_with_drain() {
    shuttle::check_random(|| history(End::ShutDownWithDrain), iterations());
}
