//! Many producers and consumers on every queue kind: nothing lost, nothing
//! processed twice at once.

use super::*;

/// What the stress test drives.
trait Harness: Send + Sync + 'static {
    fn add(&self, k: u32);
    fn get(&self) -> Option<u32>;
    fn done(&self, k: u32);
    fn tracked(&self) -> usize;
    fn shut_down(&self);
    fn shut_down_with_drain(&self);
    fn depth(&self) -> u64;
}

/// A workqueue and how the stress test adds to it.
struct Plain<S: QueueStrategy<u32>>(Workqueue<u32, S>, fn(&Workqueue<u32, S>, u32));

impl<S: QueueStrategy<u32>> Harness for Plain<S> {
    fn add(&self, k: u32) {
        (self.1)(&self.0, k);
    }
    fn get(&self) -> Option<u32> {
        self.0.get()
    }
    fn done(&self, k: u32) {
        self.0.done(&k).unwrap();
    }
    fn tracked(&self) -> usize {
        self.0.tracked()
    }
    fn shut_down(&self) {
        self.0.shut_down();
    }
    fn shut_down_with_drain(&self) {
        self.0.shut_down_with_drain();
    }
    fn depth(&self) -> u64 {
        self.0.metrics().depth
    }
}

impl Harness for PriorityQueue<u32> {
    fn add(&self, k: u32) {
        let priority = (k % 5) as i32;
        self.add_with_opts(
            k,
            AddOpts {
                priority,
                ..AddOpts::default()
            },
        );
    }
    fn get(&self) -> Option<u32> {
        PriorityQueue::get(self)
    }
    fn done(&self, k: u32) {
        PriorityQueue::done(self, &k).unwrap();
    }
    fn tracked(&self) -> usize {
        self.queue().tracked()
    }
    fn shut_down(&self) {
        PriorityQueue::shut_down(self);
    }
    fn shut_down_with_drain(&self) {
        PriorityQueue::shut_down_with_drain(self);
    }
    fn depth(&self) -> u64 {
        self.metrics().depth
    }
}

#[test]
fn stress_many_producers_and_consumers() {
    stress(Plain(Workqueue::with_config(manual().0), |q, k| q.add(k)));
}

/// The sharded FIFO's handshakes: keys spread over every shard, and more
/// consumers than producers so that workers park and are handed items by
/// adds and dones that hold no queue lock; ends with a draining shutdown.
#[test]
fn stress_fifo_shards_and_parked_workers() {
    let shape = Shape {
        keys: 4096,
        producers: 2,
        consumers: 6,
        adds: 6000,
        drain: true,
    };
    stress_shaped(
        Plain(Workqueue::with_config(manual().0), |q, k| q.add(k)),
        shape,
    );
}

#[test]
fn stress_two_lanes() {
    stress(Plain(
        Workqueue::with_strategy(manual().0, TwoLane::default()),
        |q, k| q.add_with(k, if k % 3 == 0 { Lane::Slow } else { Lane::Fast }),
    ));
}

#[test]
fn stress_priorities() {
    stress(Plain(
        Workqueue::with_strategy(manual().0, Priority::default()),
        |q, k| q.add_with(k, (k % 5) as i32),
    ));
}

#[test]
fn stress_priority_queue() {
    stress(PriorityQueue::with_config(manual().0));
}

struct Shape {
    keys: usize,
    producers: usize,
    consumers: usize,
    /// Adds per producer.
    adds: u64,
    /// End with a draining shutdown while consumers still run (instead of
    /// waiting for the queue to go idle first).
    drain: bool,
}

fn stress(q: impl Harness) {
    let shape = Shape {
        keys: 64,
        producers: 4,
        consumers: 4,
        adds: 4000,
        drain: false,
    };
    stress_shaped(q, shape);
}

/// Producers add keys from a set while consumers process them.
/// Checks that no key is processed by two consumers at once and that
/// every add is followed by a processing that starts after it.
fn stress_shaped(q: impl Harness, shape: Shape) {
    let Shape {
        keys,
        producers: n_producers,
        consumers: n_consumers,
        adds,
        drain,
    } = shape;
    let q = Arc::new(q);
    let seq = Arc::new(AtomicU64::new(1));
    let last_add: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let covered: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..keys).map(|_| AtomicBool::new(false)).collect());
    let processed = Arc::new(AtomicUsize::new(0));
    let consumers: Vec<_> = (0..n_consumers)
        .map(|_| {
            let (q, last_add, covered, busy, processed) = (
                q.clone(),
                last_add.clone(),
                covered.clone(),
                busy.clone(),
                processed.clone(),
            );
            thread::spawn(move || {
                while let Some(k) = q.get() {
                    let k_ = k as usize;
                    assert!(
                        !busy[k_].swap(true, Ordering::SeqCst),
                        "{k} processed twice at once"
                    );
                    // Everything added before this processing started is covered.
                    let seen = last_add[k_].load(Ordering::SeqCst);
                    covered[k_].fetch_max(seen, Ordering::SeqCst);
                    processed.fetch_add(1, Ordering::Relaxed);
                    thread::yield_now();
                    busy[k_].store(false, Ordering::SeqCst);
                    q.done(k);
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..n_producers)
        .map(|p| {
            let (q, seq, last_add) = (q.clone(), seq.clone(), last_add.clone());
            thread::spawn(move || {
                for i in 0..adds {
                    let k = ((i * 7 + p as u64 * 13) % keys as u64) as u32;
                    let s = seq.fetch_add(1, Ordering::SeqCst);
                    last_add[k as usize].fetch_max(s, Ordering::SeqCst);
                    q.add(k);
                }
            })
        })
        .collect();
    for p in producers {
        p.join_within();
    }
    if drain {
        // Consumers are still taking what is queued: the drain must end
        // (its wake-up comes from dones that hold only a shard lock), and
        // every add made before it is still processed.
        let q2 = q.clone();
        thread::spawn(move || q2.shut_down_with_drain()).join_within();
    } else {
        wait_until("queue goes idle", || q.tracked() == 0);
        q.shut_down();
    }
    for c in consumers {
        c.join_within();
    }
    assert_eq!(q.tracked(), 0, "every item done and forgotten");
    for k in 0..keys {
        assert_eq!(
            covered[k].load(Ordering::SeqCst),
            last_add[k].load(Ordering::SeqCst),
            "key {k}: its last add was never processed"
        );
    }
    let n = processed.load(Ordering::Relaxed);
    assert!(n >= keys && n as u64 <= n_producers as u64 * adds);
    assert_eq!(q.depth(), 0);
}
