//! How admission scales with cores (issue 21): every case at 1, 2, 4, 8 and
//! 16 threads (capped at the machine's cores), each group beside two
//! baselines measured in the same run, so every ratio comes from one run:
//!
//! - `shared_atomic`: one atomic seat counter (CAS take, `fetch_sub` give
//!   back), the least any shared admission can write per request;
//! - `mutex_counter`: one `Mutex<u32>` taken twice per request.
//!
//! Groups (the benchmark id is `group/case/threads`):
//!
//! - `tight`: start+finish in a tight loop with seats to spare: one level
//!   under each policy (`kubernetes`, `flow`, `flow_maxmin`) and a level per
//!   thread (`level_per_thread`, nothing shared: the physical reference);
//! - `dispatcher`: classify+start+finish on the built-in configuration,
//!   16 service-account users that all land in `workload-low`;
//! - `work_1us`, `work_5us`: each thread holds its seat while it spins for
//!   that long (`one_level`, `dispatcher`), beside the spin alone
//!   (`work_alone`, no admission);
//! - `saturated`: one level with as many seats as threads and eight
//!   requests outstanding per thread, so seven of every eight wait: each
//!   finish dispatches a waiter (often another thread's), each start queues;
//! - `workqueue`: get+done+add on a `Workqueue<u64>` holding 1,024 items,
//!   beside client-go's design (`plain_client_go`: one mutex, one condvar).
//!
//! One iteration is one request per thread: criterion's time per iteration
//! is the time per request per thread, and the requests per second of a
//! case are `threads / time`. Threads are started once per sample and
//! released together by a barrier; only the section between the barriers
//! is timed. `scripts/bench-scaling.sh` runs this in rounds and prints the
//! table (docs/scaling.md); `APF_SCALING_THREADS=1,4` picks thread counts.

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use apf::workqueue::Workqueue;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode,
    Throughput,
};
use crossbeam_queue::SegQueue;
use std::future::Future;
use std::hint::{black_box, spin_loop};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

#[path = "support/plain_workqueue.rs"]
mod plain_workqueue;
use plain_workqueue::PlainWorkqueue;

/// 1, 2, 4, 8, 16, up to the machine's cores; or the list in
/// `APF_SCALING_THREADS` (comma-separated).
fn thread_counts() -> Vec<usize> {
    if let Ok(list) = std::env::var("APF_SCALING_THREADS") {
        let counts: Vec<usize> = list
            .split(',')
            .map(|s| s.trim().parse().expect("APF_SCALING_THREADS: numbers"))
            .collect();
        assert!(counts.iter().all(|&n| n > 0), "APF_SCALING_THREADS: > 0");
        return counts;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    [1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&n| n <= cores)
        .collect()
}

fn max_threads() -> usize {
    thread_counts().into_iter().max().unwrap_or(1)
}

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn level_config(limit: u32, fairness: Fairness) -> QueueSetConfig {
    QueueSetConfig {
        name: "scaling".into(),
        concurrency_limit: limit,
        queues: 64,
        hand_size: 8,
        queue_length_limit: 1 << 20,
        fairness,
        ..QueueSetConfig::default()
    }
}

/// `threads` threads, started now, each running `body(thread, iters)`;
/// the time from their release by the barrier until the last is through.
fn parallel(threads: usize, iters: u64, body: &(dyn Fn(usize, u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                body(t, iters);
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

/// Holds a seat for `work` (nothing for zero): a spin on the clock, the
/// same loop in every case of a group, with or without admission.
#[inline]
fn work(work: Duration) {
    if work.is_zero() {
        return;
    }
    let end = Instant::now() + work;
    while Instant::now() < end {
        spin_loop();
    }
}

/// The least a shared admission can do: one seat counter, CAS to take a
/// seat if one is free, `fetch_sub` to give it back.
struct SharedAtomic {
    taken: AtomicU32,
    limit: u32,
}

impl SharedAtomic {
    fn new() -> SharedAtomic {
        SharedAtomic {
            taken: AtomicU32::new(0),
            limit: 1000,
        }
    }
    fn request(&self, hold: Duration) {
        let mut now = self.taken.load(Ordering::Relaxed);
        loop {
            assert!(now < self.limit, "seats to spare");
            match self.taken.compare_exchange_weak(
                now,
                now + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        work(hold);
        self.taken.fetch_sub(1, Ordering::Release);
    }
}

/// One lock around the seat counter, taken to take a seat and again to
/// give it back.
struct MutexCounter(Mutex<u32>);

impl MutexCounter {
    fn request(&self, hold: Duration) {
        {
            let mut taken = self.0.lock().unwrap();
            assert!(*taken < 1000, "seats to spare");
            *taken += 1;
        }
        work(hold);
        *self.0.lock().unwrap() -= 1;
    }
}

/// Adds `case` at every thread count, one request per thread per
/// iteration.
fn each_count(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    case: &str,
    body: &(dyn Fn(usize, u64) + Sync),
) {
    for threads in thread_counts() {
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_with_input(BenchmarkId::new(case, threads), &threads, |b, &n| {
            b.iter_custom(|iters| parallel(n, iters, body))
        });
    }
}

/// The two baselines every group carries, holding the seat for `hold`.
fn baselines(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, hold: Duration) {
    let atomic = SharedAtomic::new();
    each_count(g, "shared_atomic", &|_, n| {
        for _ in 0..n {
            atomic.request(hold);
        }
    });
    let mutex = MutexCounter(Mutex::new(0));
    each_count(g, "mutex_counter", &|_, n| {
        for _ in 0..n {
            mutex.request(hold);
        }
    });
}

fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
) -> BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    // Every sample starts its threads: equal samples, not a linear ramp
    // that would make the first ones mostly thread start-up.
    g.sampling_mode(SamplingMode::Flat);
    g
}

/// `n` start+finish on `qs`, the seat held for `hold`.
fn level_loop(qs: &QueueSet, thread: usize, n: u64, hold: Duration) {
    let mut h = thread as u64 + 1;
    for _ in 0..n {
        let r = Request {
            flow_hash: xorshift(&mut h),
            estimate: one_seat(),
            deadline: None,
        };
        match qs.start(&r) {
            Admission::Execute(guard) => {
                work(hold);
                guard.finish()
            }
            _ => unreachable!("seats to spare"),
        }
    }
}

fn tight(c: &mut Criterion) {
    let mut g = group(c, "tight");
    for (case, fairness) in [
        ("kubernetes", Fairness::Kubernetes),
        ("flow", Fairness::Flow),
        ("flow_maxmin", Fairness::FlowMaxMin),
    ] {
        let qs = QueueSet::new(level_config(1000, fairness), Clock::real()).unwrap();
        each_count(&mut g, case, &|t, n| level_loop(&qs, t, n, Duration::ZERO));
    }
    let levels: Vec<QueueSet> = (0..max_threads())
        .map(|_| QueueSet::new(level_config(1000, Fairness::Kubernetes), Clock::real()).unwrap())
        .collect();
    each_count(&mut g, "level_per_thread", &|t, n| {
        level_loop(&levels[t], t, n, Duration::ZERO)
    });
    baselines(&mut g, Duration::ZERO);
    g.finish();
}

/// The built-in configuration with 16 service-account users, all
/// classified into `workload-low` (each its own flow).
struct Users {
    names: Vec<String>,
}

const GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:shop",
    "system:authenticated",
];

impl Users {
    fn new() -> Users {
        Users {
            names: (0..16)
                .map(|i| format!("system:serviceaccount:shop:user-{i}"))
                .collect(),
        }
    }
    fn digests(&self) -> Vec<RequestDigest<'_>> {
        self.names
            .iter()
            .map(|user| RequestDigest {
                user,
                groups: GROUPS,
                verb: "get",
                is_resource_request: true,
                api_group: "",
                resource: "configmaps",
                namespace: "shop",
                name: "settings",
                path: "/api/v1/namespaces/shop/configmaps/settings",
                ..RequestDigest::default()
            })
            .collect()
    }
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builtin(DispatcherOptions::default(), Clock::real())
}

/// Checks once that the 16 users share one level (the case's premise).
fn check_one_level(d: &Dispatcher, digests: &[RequestDigest<'_>]) {
    let levels: std::collections::HashSet<usize> = digests
        .iter()
        .map(|digest| {
            let decision = d.start_request(digest, one_seat(), None);
            assert!(matches!(decision.outcome, Outcome::Execute(_)));
            Arc::as_ptr(decision.priority_level.arc()) as usize
        })
        .collect();
    assert_eq!(levels.len(), 1, "the 16 users share one level");
}

/// `n` classify+start+finish, thread `t` cycling through the users from
/// its own offset, the seat held for `hold`.
fn dispatcher_loop(
    d: &Dispatcher,
    digests: &[RequestDigest<'_>],
    t: usize,
    n: u64,
    hold: Duration,
) {
    let mut u = t;
    for _ in 0..n {
        u = (u + 1) % digests.len();
        match d.start_request(&digests[u], one_seat(), None).outcome {
            Outcome::Execute(guard) => {
                work(hold);
                guard.finish()
            }
            _ => unreachable!("seats to spare"),
        }
    }
}

fn dispatcher_path(c: &mut Criterion) {
    let users = Users::new();
    let digests = users.digests();
    let d = dispatcher();
    check_one_level(&d, &digests);
    let mut g = group(c, "dispatcher");
    each_count(&mut g, "dispatcher", &|t, n| {
        dispatcher_loop(&d, &digests, t, n, Duration::ZERO)
    });
    baselines(&mut g, Duration::ZERO);
    g.finish();
}

fn with_work(c: &mut Criterion) {
    let users = Users::new();
    let digests = users.digests();
    for (name, hold) in [
        ("work_1us", Duration::from_micros(1)),
        ("work_5us", Duration::from_micros(5)),
    ] {
        let mut g = group(c, name);
        each_count(&mut g, "work_alone", &|_, n| {
            for _ in 0..n {
                work(black_box(hold));
            }
        });
        let qs = QueueSet::new(level_config(1000, Fairness::Kubernetes), Clock::real()).unwrap();
        each_count(&mut g, "one_level", &|t, n| level_loop(&qs, t, n, hold));
        let d = dispatcher();
        check_one_level(&d, &digests);
        each_count(&mut g, "dispatcher", &|t, n| {
            dispatcher_loop(&d, &digests, t, n, hold)
        });
        baselines(&mut g, hold);
        g.finish();
    }
}

/// Requests each thread keeps outstanding on the saturated level.
const OUTSTANDING: usize = 8;

/// Wakes a thread's ticket `index` by pushing it on the thread's list.
struct WakeSlot {
    index: usize,
    woken: Arc<SegQueue<usize>>,
}

impl Wake for WakeSlot {
    fn wake(self: Arc<Self>) {
        self.woken.push(self.index);
    }
}

/// One thread's side of the saturated level: `OUTSTANDING` requests, each
/// executing (a guard it will finish) or waiting (a ticket whose waker
/// pushes its slot on `woken`).
struct Client<'q> {
    qs: &'q QueueSet,
    held: Vec<Guard<'q>>,
    tickets: Vec<Option<Ticket<'q>>>,
    free: Vec<usize>,
    wakers: Vec<Waker>,
    woken: Arc<SegQueue<usize>>,
    seed: u64,
    /// Steps in a row with nothing to do.
    idle: u32,
}

impl<'q> Client<'q> {
    fn new(qs: &'q QueueSet, thread: usize) -> Self {
        let woken = Arc::new(SegQueue::new());
        let wakers = (0..OUTSTANDING)
            .map(|index| {
                Waker::from(Arc::new(WakeSlot {
                    index,
                    woken: woken.clone(),
                }))
            })
            .collect();
        let mut c = Client {
            qs,
            held: Vec::with_capacity(OUTSTANDING),
            tickets: (0..OUTSTANDING).map(|_| None).collect(),
            free: (0..OUTSTANDING).collect(),
            wakers,
            woken,
            seed: thread as u64 * 0x9e37_79b9 + 1,
            idle: 0,
        };
        for _ in 0..OUTSTANDING {
            c.submit();
        }
        c
    }

    /// A new request: executing at once, or queued with its waker.
    fn submit(&mut self) {
        let r = Request {
            flow_hash: xorshift(&mut self.seed),
            estimate: one_seat(),
            deadline: None,
        };
        match self.qs.start(&r) {
            Admission::Execute(g) => self.held.push(g),
            Admission::Queued(t) => {
                let slot = self
                    .free
                    .pop()
                    .expect("a free slot per outstanding request");
                self.tickets[slot] = Some(t);
                self.poll(slot);
            }
            Admission::Rejected(r) => panic!("saturated level rejected: {r:?}"),
        }
    }

    /// Polls ticket `slot` with its waker; a dispatched one is held.
    fn poll(&mut self, slot: usize) {
        let Some(t) = self.tickets[slot].as_mut() else {
            return; // a stale wake
        };
        let mut cx = Context::from_waker(&self.wakers[slot]);
        if let std::task::Poll::Ready(decision) = Pin::new(t).poll(&mut cx) {
            self.tickets[slot] = None;
            self.free.push(slot);
            self.held.push(decision.expect("no deadline, no rejection"));
        }
    }

    /// One step: finish a held request (its seat dispatches a waiter) and
    /// submit a new one; else take a wake. True when a request finished.
    fn step(&mut self) -> bool {
        if let Some(g) = self.held.pop() {
            g.finish();
            self.submit();
            return true;
        }
        match self.woken.pop() {
            Some(slot) => {
                self.idle = 0;
                self.poll(slot)
            }
            // Spin a while, then let another thread run: the seat this
            // thread waits for is freed by another thread's finish, and
            // with more threads than free cores a pure spin would hold the
            // core that thread needs.
            None if self.idle < 64 => {
                self.idle += 1;
                spin_loop()
            }
            None => std::thread::yield_now(),
        }
        false
    }
}

/// The saturated level's run: every thread finishes requests until the
/// first has finished `iters`; the time is scaled to `threads · iters`
/// requests, so it reads as the other groups do (per request per thread)
/// although the threads finish different numbers.
fn saturated_run(qs: &QueueSet, threads: usize, iters: u64) -> Duration {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let barrier = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, stop, total) = (&barrier, &stop, &total);
            s.spawn(move || {
                let mut client = Client::new(qs, t);
                barrier.wait();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if client.step() {
                        done += 1;
                        if done >= iters {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                total.fetch_add(done, Ordering::Relaxed);
                barrier.wait();
                // Untimed: the client's guards finish, its tickets cancel.
                drop(client);
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    });
    let done = total.load(Ordering::Relaxed).max(1);
    elapsed.mul_f64((threads as u64 * iters) as f64 / done as f64)
}

fn saturated(c: &mut Criterion) {
    let mut g = group(c, "saturated");
    for threads in thread_counts() {
        let qs = QueueSet::new(
            level_config(threads as u32, Fairness::Kubernetes),
            Clock::real(),
        )
        .unwrap();
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_with_input(BenchmarkId::new("one_level", threads), &threads, |b, &n| {
            b.iter_custom(|iters| saturated_run(&qs, n, iters))
        });
    }
    baselines(&mut g, Duration::ZERO);
    g.finish();
}

/// Items queued in the workqueue cases: more than any thread count holds.
const ITEMS: u64 = 1024;

fn workqueue(c: &mut Criterion) {
    let mut g = group(c, "workqueue");
    let q: Workqueue<u64> = Workqueue::new();
    for i in 0..ITEMS {
        q.add(i);
    }
    each_count(&mut g, "workqueue", &|_, n| {
        for _ in 0..n {
            let x = q.get().expect("not shut down");
            q.done(&x).expect("processing");
            q.add(x);
        }
    });
    let plain = PlainWorkqueue::default();
    for i in 0..ITEMS {
        plain.add(i);
    }
    each_count(&mut g, "plain_client_go", &|_, n| {
        for _ in 0..n {
            let x = plain.get();
            plain.done(x);
            plain.add(x);
        }
    });
    baselines(&mut g, Duration::ZERO);
    g.finish();
}

fn config() -> Criterion {
    // Sized for a 16-core run of every case in about 6 minutes over three
    // rounds (scripts/bench-scaling.sh passes its own times).
    Criterion::default()
        .sample_size(10)
        .nresamples(10_000)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(400))
}

criterion_group! { name = benches; config = config(); targets = tight, dispatcher_path, with_work, saturated, workqueue }
criterion_main!(benches);
