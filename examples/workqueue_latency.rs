//! Per-operation latency of the workqueue under a deep queue and many
//! consumers: issue 5's goal is add, get and done at most 1 µs at the 99th
//! percentile with 1,000,000 items queued and 1,000 consumer threads.
//!
//! The queue is filled with `--items` distinct keys; then `--consumers`
//! threads, released together, each repeat `--rounds` times: take an item
//! (`get`), finish it (`done`), add it back (`add`), timing each call on
//! its own. The queue therefore stays at its depth for the whole run. The
//! same loop runs against a plain translation of client-go's design (one
//! mutex over a deque and the dirty and processing sets, one condition
//! variable), so the two can be read side by side.
//!
//! With `--producer true` the run is the drain of a backlog instead: the
//! consumers only take and finish items (each `--rounds` of them), while one
//! extra thread adds new distinct items as fast as it can until the
//! consumers are through. Its add rate while the backlog lasts, and its own
//! add latencies, are printed on their own line: a queue whose one lock
//! 1,000 consumers contend for starves the producer.
//!
//! Wall-clock latencies include every time a thread was descheduled inside
//! a call: with more threads than cores that is what a caller sees.
//!
//! With `--profile N` nothing is timed: one thread fills the queue, then
//! runs N rounds of get, done, add, for callgrind (instructions per round:
//! the difference of two N, divided by their difference).
//!
//! ```text
//! cargo run --release --example workqueue_latency -- --items 1000000 --consumers 1000
//! cargo run --release --example workqueue_latency -- --items 1000000 --consumers 1000 \
//!     --rounds 1000 --producer true
//! ```

use apf::workqueue::{QueueConfig, Workqueue};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

/// The three operations the loop times.
trait Queue: Send + Sync + 'static {
    fn add(&self, item: u64);
    fn get(&self) -> u64;
    fn done(&self, item: u64);
}

impl Queue for Workqueue<u64> {
    fn add(&self, item: u64) {
        Workqueue::add(self, item);
    }
    fn get(&self) -> u64 {
        Workqueue::get(self).expect("never shut down here")
    }
    fn done(&self, item: u64) {
        Workqueue::done(self, &item).expect("the item is processing");
    }
}

#[path = "../benches/support/plain_workqueue.rs"]
mod plain_workqueue;
use plain_workqueue::PlainWorkqueue;

impl Queue for PlainWorkqueue {
    fn add(&self, item: u64) {
        PlainWorkqueue::add(self, item);
    }
    fn get(&self) -> u64 {
        PlainWorkqueue::get(self)
    }
    fn done(&self, item: u64) {
        PlainWorkqueue::done(self, item);
    }
}

/// Not a workqueue (no dirty or processing sets): crossbeam's lock-free
/// `SegQueue`, a floor that shows what no lock costs. An empty queue is
/// waited on by yielding, which is fine for the backlog scenarios only.
#[derive(Default)]
struct LockFree(crossbeam_queue::SegQueue<u64>);

impl Queue for LockFree {
    fn add(&self, item: u64) {
        self.0.push(item);
    }
    fn get(&self) -> u64 {
        loop {
            if let Some(item) = self.0.pop() {
                return item;
            }
            thread::yield_now();
        }
    }
    fn done(&self, _item: u64) {}
}

struct Args {
    items: u64,
    consumers: usize,
    rounds: usize,
    timed_metrics: bool,
    /// Drain the backlog under one full-speed producer instead of adding
    /// each item back.
    producer: bool,
    /// Run only the queue whose name starts with this (all when empty).
    only: String,
    /// Rounds of get+done+add on one thread, untimed (for callgrind);
    /// 0: the timed run.
    profile: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        items: 1_000_000,
        consumers: 1000,
        rounds: 2000,
        timed_metrics: true,
        producer: false,
        only: String::new(),
        profile: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--items" => args.items = number()?,
            "--consumers" => args.consumers = number()? as usize,
            "--rounds" => args.rounds = number()? as usize,
            "--only" => args.only = value.clone(),
            "--profile" => args.profile = number()?,
            "--producer" => args.producer = value.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--timed-metrics" => {
                args.timed_metrics = value.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.items < args.consumers as u64 {
        return Err("--items must be at least --consumers (each holds one)".into());
    }
    Ok(args)
}

struct Latencies {
    /// Gets slower than [`SLOW`], and how many of them were their thread's
    /// first (the start barrier releases every consumer at once).
    slow_gets: u64,
    slow_first_gets: u64,
    /// The same for `done` (which still takes the lock after a lock-free
    /// get, so the start stampede lands on the first `done`s).
    slow_dones: u64,
    slow_first_dones: u64,
    add: Histogram<u64>,
    get: Histogram<u64>,
    done: Histogram<u64>,
}

impl Latencies {
    fn new() -> Latencies {
        let h = histogram;
        Latencies {
            slow_gets: 0,
            slow_first_gets: 0,
            slow_dones: 0,
            slow_first_dones: 0,
            add: h(),
            get: h(),
            done: h(),
        }
    }

    fn merge(&mut self, other: &Latencies) {
        self.slow_gets += other.slow_gets;
        self.slow_first_gets += other.slow_first_gets;
        self.slow_dones += other.slow_dones;
        self.slow_first_dones += other.slow_first_dones;
        self.add.add(&other.add).expect("same bounds");
        self.get.add(&other.get).expect("same bounds");
        self.done.add(&other.done).expect("same bounds");
    }
}

/// 1 ns to 60 s at two significant digits (1% resolution): 31 KB a
/// histogram, where three digits took 221 KB, so 1,000 threads' three
/// histograms each fit in the allocator's arenas (92 MB, not 663 MB of
/// fresh mappings faulted in during the run).
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds")
}

/// A call this slow waited through many other threads' turns.
const SLOW: u64 = 1_000_000;

fn nanos_since(t: Instant) -> u64 {
    (t.elapsed().as_nanos() as u64).max(1)
}

fn consume<Q: Queue>(q: &Q, mut lat: Latencies, rounds: usize, add_back: bool) -> Latencies {
    for round in 0..rounds {
        let t = Instant::now();
        let item = q.get();
        let took = nanos_since(t);
        lat.get.saturating_record(took);
        if took > SLOW {
            lat.slow_gets += 1;
            lat.slow_first_gets += u64::from(round == 0);
        }
        let t = Instant::now();
        q.done(item);
        let took = nanos_since(t);
        lat.done.saturating_record(took);
        if took > SLOW {
            lat.slow_dones += 1;
            lat.slow_first_dones += u64::from(round == 0);
        }
        if !add_back {
            continue;
        }
        let t = Instant::now();
        q.add(item);
        lat.add.saturating_record(nanos_since(t));
    }
    lat
}

fn run<Q: Queue>(name: &str, q: Arc<Q>, args: &Args) {
    let filled = Instant::now();
    for i in 0..args.items {
        q.add(i);
    }
    let fill = filled.elapsed();
    let producing = args.producer;
    let start = Arc::new(Barrier::new(args.consumers + 1 + usize::from(producing)));
    let workers: Vec<_> = (0..args.consumers)
        .map(|_| {
            let (q, start, rounds) = (q.clone(), start.clone(), args.rounds);
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    // Allocated before the barrier: 1,000 threads allocating
                    // their histograms at once after it would time the
                    // allocator and the kernel's memory map lock, not the
                    // queue.
                    let lat = Latencies::new();
                    start.wait();
                    consume(&*q, lat, rounds, !producing)
                })
                .expect("spawn a consumer")
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let added = Arc::new(AtomicU64::new(0));
    let producer = producing.then(|| {
        let (q, start, stop, first) = (q.clone(), start.clone(), stop.clone(), args.items);
        let added = added.clone();
        thread::spawn(move || {
            let mut lat = histogram();
            start.wait();
            let mut next = first;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                q.add(next);
                lat.saturating_record(nanos_since(t));
                next += 1;
                added.store(next - first, Ordering::Relaxed);
            }
            lat
        })
    });
    start.wait();
    let began = Instant::now();
    let mut all = Latencies::new();
    for w in workers {
        all.merge(&w.join().expect("consumer finished"));
    }
    let wall = began.elapsed();
    // The producer's adds while the consumers ran: the rate while the
    // backlog lasted (it may finish a call it is descheduled in later).
    let produced = added.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let ops = (args.consumers * args.rounds) as f64;
    println!(
        "{name}: {} items, {} consumers x {} rounds; fill {:.2?}, run {:.2?} ({:.0} {}/s)",
        args.items,
        args.consumers,
        args.rounds,
        fill,
        wall,
        ops / wall.as_secs_f64(),
        if producing {
            "get+done"
        } else {
            "get+done+add"
        }
    );
    let ops_timed: &[(&str, &Histogram<u64>)] = if producing {
        &[("get", &all.get), ("done", &all.done)]
    } else {
        &[("add", &all.add), ("get", &all.get), ("done", &all.done)]
    };
    for &(op, h) in ops_timed {
        println!(
            "  {op:<4} p50 {:>9} ns  p99 {:>9} ns  p99.9 {:>10} ns  max {:>11} ns",
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
    println!(
        "  gets over {} ms: {} ({} of them their thread's first)",
        SLOW / 1_000_000,
        all.slow_gets,
        all.slow_first_gets
    );
    println!(
        "  dones over {} ms: {} ({} of them their thread's first)",
        SLOW / 1_000_000,
        all.slow_dones,
        all.slow_first_dones
    );
    if let Some(p) = producer {
        let h = p.join().expect("producer finished");
        println!(
            "  producer: {produced} adds in {wall:.2?} ({:.0} adds/s while the backlog drained); \
             add p50 {} ns  p99 {} ns  p99.9 {} ns  max {} ns",
            produced as f64 / wall.as_secs_f64(),
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
}

/// `--profile`: fill, then `rounds` of get+done+add on this thread.
fn profile<Q: Queue>(q: &Q, items: u64, rounds: u64) -> u64 {
    for i in 0..items {
        q.add(i);
    }
    let mut sum = 0u64;
    for _ in 0..rounds {
        let item = q.get();
        q.done(item);
        q.add(item);
        sum = sum.wrapping_add(item);
    }
    sum
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("workqueue_latency: {e}");
            std::process::exit(2);
        }
    };
    let config = QueueConfig {
        timed_metrics: args.timed_metrics,
        capacity: args.items as usize,
        ..QueueConfig::default()
    };
    if args.profile > 0 {
        let sum = if "workqueue".starts_with(&args.only) {
            profile(
                &Workqueue::<u64>::with_config(config),
                args.items,
                args.profile,
            )
        } else {
            profile(&PlainWorkqueue::default(), args.items, args.profile)
        };
        println!("{} rounds of get+done+add (item sum {sum})", args.profile);
        return;
    }
    if "workqueue".starts_with(&args.only) {
        let q = Workqueue::<u64>::with_config(config);
        run("workqueue", Arc::new(q), &args);
    }
    if "plain".starts_with(&args.only) {
        let q = PlainWorkqueue::default();
        run(
            "plain (client-go design: one mutex, one condvar)",
            Arc::new(q),
            &args,
        );
    }
    // Only on request: it is a floor, not a workqueue.
    if args.only == "lockfree" {
        run(
            "lockfree (SegQueue, not a workqueue: no sets)",
            Arc::new(LockFree::default()),
            &args,
        );
    }
}
