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
//! Wall-clock latencies include every time a thread was descheduled inside
//! a call: with more threads than cores that is what a caller sees.
//!
//! ```text
//! cargo run --release --example workqueue_latency -- --items 1000000 --consumers 1000
//! ```

use apf::workqueue::{Config, Workqueue};
use hdrhistogram::Histogram;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Barrier, Condvar, Mutex};
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

/// client-go's workqueue as written there: one lock over everything, a
/// condition variable for waiting consumers.
#[derive(Default)]
struct PlainWorkqueue {
    state: Mutex<PlainState>,
    ready: Condvar,
}

#[derive(Default)]
struct PlainState {
    queue: VecDeque<u64>,
    dirty: HashSet<u64>,
    processing: HashSet<u64>,
}

impl Queue for PlainWorkqueue {
    fn add(&self, item: u64) {
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
    fn get(&self) -> u64 {
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
    fn done(&self, item: u64) {
        let mut s = self.state.lock().unwrap();
        s.processing.remove(&item);
        if s.dirty.contains(&item) {
            s.queue.push_back(item);
            drop(s);
            self.ready.notify_one();
        }
    }
}

struct Args {
    items: u64,
    consumers: usize,
    rounds: usize,
    timed_metrics: bool,
    /// Run only the queue whose name starts with this (all when empty).
    only: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        items: 1_000_000,
        consumers: 1000,
        rounds: 2000,
        timed_metrics: true,
        only: String::new(),
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
    add: Histogram<u64>,
    get: Histogram<u64>,
    done: Histogram<u64>,
}

impl Latencies {
    fn new() -> Latencies {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        Latencies {
            add: h(),
            get: h(),
            done: h(),
        }
    }

    fn merge(&mut self, other: &Latencies) {
        self.add.add(&other.add).expect("same bounds");
        self.get.add(&other.get).expect("same bounds");
        self.done.add(&other.done).expect("same bounds");
    }
}

fn nanos_since(t: Instant) -> u64 {
    (t.elapsed().as_nanos() as u64).max(1)
}

fn consume<Q: Queue>(q: &Q, rounds: usize) -> Latencies {
    let mut lat = Latencies::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let item = q.get();
        lat.get.saturating_record(nanos_since(t));
        let t = Instant::now();
        q.done(item);
        lat.done.saturating_record(nanos_since(t));
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
    let start = Arc::new(Barrier::new(args.consumers + 1));
    let workers: Vec<_> = (0..args.consumers)
        .map(|_| {
            let (q, start, rounds) = (q.clone(), start.clone(), args.rounds);
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    start.wait();
                    consume(&*q, rounds)
                })
                .expect("spawn a consumer")
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut all = Latencies::new();
    for w in workers {
        all.merge(&w.join().expect("consumer finished"));
    }
    let wall = began.elapsed();
    let ops = (args.consumers * args.rounds) as f64;
    println!(
        "{name}: {} items, {} consumers x {} rounds; fill {:.2?}, run {:.2?} ({:.0} get+done+add/s)",
        args.items,
        args.consumers,
        args.rounds,
        fill,
        wall,
        ops / wall.as_secs_f64()
    );
    for (op, h) in [("add", &all.add), ("get", &all.get), ("done", &all.done)] {
        println!(
            "  {op:<4} p50 {:>9} ns  p99 {:>9} ns  p99.9 {:>10} ns  max {:>11} ns",
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("workqueue_latency: {e}");
            std::process::exit(2);
        }
    };
    let config = Config {
        timed_metrics: args.timed_metrics,
        capacity: args.items as usize,
        ..Config::default()
    };
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
}
