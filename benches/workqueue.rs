//! The workqueue against plain baselines.
//!
//! - `fifo/{P}p{C}c/*`: P producer threads add distinct items, C consumer
//!   threads take (and for the workqueue, finish) them. Compared: the
//!   workqueue, a `Mutex<VecDeque>` + `Condvar` queue, a crossbeam channel.
//!   Only the concurrent section is timed: threads start behind a barrier.
//! - `single/*`: one thread adds, takes and finishes items (no contention).
//! - `two_lane/*`: a two-lane queue against two separate FIFO workqueues
//!   drained fast-first, one thread.
//!
//! Run `cargo bench --bench workqueue` on a quiet machine for numbers;
//! `-- --test` runs each case once.

use apf::workqueue::{Lane, TwoLane, Workqueue};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The operations a FIFO benchmark needs.
trait Fifo: Send + Sync + 'static {
    fn push(&self, x: u64);
    /// Take one item, blocking, and finish it.
    fn take(&self) -> u64;
}

struct Wq(Workqueue<u64>);

impl Fifo for Wq {
    fn push(&self, x: u64) {
        self.0.add(x);
    }
    fn take(&self) -> u64 {
        let x = self.0.get().expect("not shut down");
        self.0.done(&x).expect("processing");
        x
    }
}

/// The baseline: one lock around a deque, one condition variable.
#[derive(Default)]
struct Locked {
    queue: Mutex<VecDeque<u64>>,
    ready: Condvar,
}

impl Fifo for Locked {
    fn push(&self, x: u64) {
        self.queue.lock().unwrap().push_back(x);
        self.ready.notify_one();
    }
    fn take(&self) -> u64 {
        let mut q = self.queue.lock().unwrap();
        loop {
            if let Some(x) = q.pop_front() {
                return x;
            }
            q = self.ready.wait(q).unwrap();
        }
    }
}

struct Channel(
    crossbeam_channel::Sender<u64>,
    crossbeam_channel::Receiver<u64>,
);

impl Fifo for Channel {
    fn push(&self, x: u64) {
        self.0.send(x).expect("receiver alive");
    }
    fn take(&self) -> u64 {
        self.1.recv().expect("sender alive")
    }
}

/// Move `n` items from `producers` threads to `consumers` threads; the time
/// from the start barrier until every consumer has its share.
fn run<Q: Fifo>(q: Arc<Q>, producers: u64, consumers: u64, n: u64) -> Duration {
    let per_producer = n / producers;
    let per_consumer = per_producer * producers / consumers;
    let start = Arc::new(Barrier::new((producers + consumers + 1) as usize));
    let mut threads = Vec::new();
    for p in 0..producers {
        let (q, start) = (q.clone(), start.clone());
        threads.push(thread::spawn(move || {
            start.wait();
            for i in 0..per_producer {
                q.push(i * producers + p);
            }
        }));
    }
    for _ in 0..consumers {
        let (q, start) = (q.clone(), start.clone());
        threads.push(thread::spawn(move || {
            start.wait();
            for _ in 0..per_consumer {
                black_box(q.take());
            }
        }));
    }
    start.wait();
    let t0 = Instant::now();
    for t in threads {
        t.join().unwrap();
    }
    t0.elapsed()
}

fn fifo(c: &mut Criterion) {
    for (p, k) in [(1u64, 1u64), (2, 2)] {
        let mut g = c.benchmark_group(format!("fifo/{p}p{k}c"));
        g.throughput(Throughput::Elements(1));
        g.sample_size(20);
        let items = |iters: u64| iters.max(1).div_ceil(p * k) * p * k;
        g.bench_function("workqueue", |b| {
            b.iter_custom(|iters| {
                let q = Arc::new(Wq(Workqueue::new()));
                run(q, p, k, items(iters))
            })
        });
        g.bench_function("mutex_vecdeque_condvar", |b| {
            b.iter_custom(|iters| run(Arc::new(Locked::default()), p, k, items(iters)))
        });
        g.bench_function("crossbeam_channel", |b| {
            b.iter_custom(|iters| {
                let (tx, rx) = crossbeam_channel::unbounded();
                run(Arc::new(Channel(tx, rx)), p, k, items(iters))
            })
        });
        g.finish();
    }
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("single");
    g.throughput(Throughput::Elements(1));
    const BATCH: u64 = 1024;
    g.bench_function(BenchmarkId::new("workqueue", BATCH), |b| {
        let q = Wq(Workqueue::new());
        b.iter(|| {
            for i in 0..BATCH {
                q.push(i);
            }
            for _ in 0..BATCH {
                black_box(q.take());
            }
        })
    });
    g.bench_function(BenchmarkId::new("mutex_vecdeque_condvar", BATCH), |b| {
        let q = Locked::default();
        b.iter(|| {
            for i in 0..BATCH {
                q.push(i);
            }
            for _ in 0..BATCH {
                black_box(q.take());
            }
        })
    });
    g.finish();
}

fn two_lane(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_lane");
    const BATCH: u64 = 1024;
    g.throughput(Throughput::Elements(BATCH));
    let lane = |i: u64| {
        if i.is_multiple_of(4) {
            Lane::Fast
        } else {
            Lane::Slow
        }
    };
    g.bench_function("two_lane_queue", |b| {
        let q: Workqueue<u64, TwoLane> =
            Workqueue::with_strategy(Default::default(), TwoLane::default());
        b.iter(|| {
            for i in 0..BATCH {
                q.add_with(i, lane(i));
            }
            while let Ok(x) = q.try_get() {
                q.done(black_box(&x)).unwrap();
            }
        })
    });
    g.bench_function("two_fifo_workqueues", |b| {
        let fast: Workqueue<u64> = Workqueue::new();
        let slow: Workqueue<u64> = Workqueue::new();
        b.iter(|| {
            for i in 0..BATCH {
                match lane(i) {
                    Lane::Fast => fast.add(i),
                    Lane::Slow => slow.add(i),
                }
            }
            loop {
                let (q, x) = match fast.try_get() {
                    Ok(x) => (&fast, x),
                    Err(_) => match slow.try_get() {
                        Ok(x) => (&slow, x),
                        Err(_) => break,
                    },
                };
                q.done(black_box(&x)).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, fifo, single, two_lane);
criterion_main!(benches);
