//! A real-thread soak of one level and of the built-in dispatcher on the
//! real clock: worker threads start, finish, wait for and cancel requests
//! at random while one thread reconfigures and another scrapes stats,
//! metrics and dumps. The test's own count of executing seats must stay
//! within the limit at every step, and at quiescence every seat is back and
//! every level's counts balance (started = finished + rejected, cancelled
//! and timed-out requests being rejections). Bounded in time: SOAK_SECONDS
//! (default 3) for each part. scripts/tsan.sh runs it under ThreadSanitizer.
//! A third part soaks the FIFO workqueue's lock-free get.
#![cfg(not(any(loom, shuttle)))]

use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::queueset::{QueueSet, QueueSetConfig, RawAdmission};
use apf::work_estimate::WorkEstimate;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const WORKERS: u64 = 6;

fn soak_time() -> Duration {
    let secs = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

/// A small xorshift generator: each thread its own, seeded by its number.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The test's own count of executing seats at one level.
#[derive(Default)]
struct Executing {
    seats: AtomicU32,
    /// The highest limit the level has been given so far (raised before the
    /// level is reconfigured, so it bounds every admission).
    max_limit: AtomicU32,
}

impl Executing {
    fn begin(&self, seats: u32) {
        let now = self.seats.fetch_add(seats, SeqCst) + seats;
        let limit = self.max_limit.load(SeqCst);
        assert!(
            now <= limit || now == seats,
            "{now} seats executing, limit at most {limit}"
        );
    }
    fn end(&self, seats: u32) {
        self.seats.fetch_sub(seats, SeqCst);
    }
}

fn level_config(limit: u32, queues: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "soak".into(),
        concurrency_limit: limit,
        queues,
        hand_size: queues.min(4),
        queue_length_limit: 8,
        wait_limit: Duration::from_millis(20),
        fairness: apf::queueset::Fairness::Kubernetes,
        ..QueueSetConfig::default()
    }
}

fn estimate(rng: &mut Rng) -> WorkEstimate {
    let latency = if rng.below(4) == 0 { 200 } else { 0 };
    WorkEstimate::new(
        rng.below(3) as u32,
        rng.below(2) as u32,
        Duration::from_micros(latency),
    )
}

/// Hold an execution for a moment (sometimes yielding, sometimes spinning).
fn hold(rng: &mut Rng) {
    match rng.below(3) {
        0 => thread::yield_now(),
        1 => (0..rng.below(200)).for_each(|_| std::hint::spin_loop()),
        _ => {}
    }
}

#[test]
fn one_level_under_real_threads() {
    one_level(1);
}

/// The same at limits 8 to 48: large enough for per-shard seat budgets
/// (src/queueset/budget.rs: `B = limit / (4 · shards)`), so the budgets'
/// draws, returns, trims and the lock holder's sweeps race real threads,
/// reconfigurations and cancels.
#[test]
fn one_level_with_seat_budgets() {
    one_level(8);
}

/// One level under workers, a reconfiguring thread (limits `scale` to
/// `6 · scale`) and a scraping thread.
fn one_level(scale: u32) {
    let qs = Arc::new(QueueSet::new(level_config(4 * scale, 8), Clock::real()).expect("valid"));
    let ex = Arc::new(Executing::default());
    ex.max_limit.store(4 * scale, SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..WORKERS {
        let (qs, ex, stop, started) = (qs.clone(), ex.clone(), stop.clone(), started.clone());
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(t + 1);
            while !stop.load(SeqCst) {
                let req = apf::queueset::Request {
                    flow_hash: rng.below(16),
                    estimate: estimate(&mut rng),
                    deadline: None,
                };
                started.fetch_add(1, SeqCst);
                let exec = match qs.admit(&req) {
                    RawAdmission::Execute(exec) => Some(exec),
                    RawAdmission::Rejected(_) => None,
                    RawAdmission::Queued(w) if rng.below(4) == 0 => {
                        hold(&mut rng);
                        qs.cancel_waiting(w);
                        None
                    }
                    RawAdmission::Queued(w) => qs.wait_for(w).ok(),
                };
                if let Some(exec) = exec {
                    let seats = exec.estimate().max_seats();
                    ex.begin(seats);
                    hold(&mut rng);
                    ex.end(seats);
                    qs.finish_execution(exec, qs.clock().now());
                }
            }
        }));
    }
    {
        // Reconfigures: limit down and up, queue count changed.
        let (qs, ex, stop) = (qs.clone(), ex.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(99);
            while !stop.load(SeqCst) {
                let limit = scale * (1 + rng.below(6) as u32);
                ex.max_limit.fetch_max(limit, SeqCst);
                qs.reconfigure(level_config(limit, 1 + rng.below(10) as u32))
                    .expect("valid");
                thread::sleep(Duration::from_micros(300));
            }
        }));
    }
    {
        // Scrapes: stats (which checks the core's invariants in debug
        // builds), tallies and dumps.
        let (qs, stop) = (qs.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            while !stop.load(SeqCst) {
                let stats = qs.stats();
                assert!(stats.seats_in_use <= 6 * scale, "{stats:?}");
                let _ = qs.tag_stats();
                let _ = qs.dump();
                thread::sleep(Duration::from_micros(200));
            }
        }));
    }
    thread::sleep(soak_time());
    stop.store(true, SeqCst);
    for h in handles {
        h.join().expect("no thread panicked");
    }
    wait_for_lingering(|| qs.stats().seats_in_use == 0);
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "{stats:?}");
    assert_eq!(stats.requests_executing, 0, "{stats:?}");
    assert_eq!(stats.requests_waiting, 0, "{stats:?}");
    let tally = tally_sums(&qs.tag_stats());
    assert_eq!(
        tally.0 + tally.1,
        started.load(SeqCst),
        "started = executed + rejected (cancelled and timed out included): {stats:?}"
    );
    assert_eq!(tally.0, tally.2, "every executed request finished");
}

/// (executed, rejected, finished) over all tags.
fn tally_sums(tags: &[(u32, apf::stats::TagStats)]) -> (u64, u64, u64) {
    tags.iter().fold((0, 0, 0), |(d, r, f), (_, t)| {
        (
            d + t.dispatched,
            r + t.rejected.iter().sum::<u64>(),
            f + t.execution.count(),
        )
    })
}

/// Seats lingering for additional latency come back on the real clock's
/// timer thread; give it a moment (this bounds the wait, it is not what
/// the test checks).
fn wait_for_lingering(idle: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !idle() && Instant::now() < until {
        thread::sleep(Duration::from_millis(5));
    }
}

fn digests() -> Vec<RequestDigest<'static>> {
    const SA: &[&str] = &["system:serviceaccounts", "system:authenticated"];
    const NODES: &[&str] = &["system:nodes", "system:authenticated"];
    const ANON: &[&str] = &["system:unauthenticated"];
    let base = RequestDigest {
        verb: "list",
        is_resource_request: true,
        resource: "configmaps",
        namespace: "tenant",
        path: "/api/v1/namespaces/tenant/configmaps",
        ..RequestDigest::default()
    };
    vec![
        RequestDigest {
            user: "system:serviceaccount:tenant:a",
            groups: SA,
            ..base
        },
        RequestDigest {
            user: "system:serviceaccount:tenant:b",
            groups: SA,
            ..base
        },
        RequestDigest {
            user: "system:node:n1",
            groups: NODES,
            ..base
        },
        RequestDigest {
            user: "alice",
            groups: &["system:authenticated"],
            ..base
        },
        RequestDigest {
            user: "system:anonymous",
            groups: ANON,
            ..base
        },
    ]
}

#[test]
fn builtin_dispatcher_under_real_threads() {
    let options = DispatcherOptions {
        server_concurrency_limit: 24,
        wait_limit: Duration::from_millis(20),
        ..DispatcherOptions::default()
    };
    let server_limit = options.server_concurrency_limit;
    let d = Arc::new(Dispatcher::builtin(options, Clock::real()));
    let executing: Arc<Mutex<HashMap<String, Arc<AtomicU32>>>> = Arc::default();
    let started: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..WORKERS {
        let (d, executing, started, stop) =
            (d.clone(), executing.clone(), started.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(t + 7);
            let digests = digests();
            while !stop.load(SeqCst) {
                let digest = &digests[rng.below(digests.len() as u64) as usize];
                let est = estimate(&mut rng);
                let decision = d.start_request(digest, est, None);
                let level = decision.priority_level.name.clone();
                *started.lock().unwrap().entry(level.clone()).or_default() += 1;
                let counter = executing
                    .lock()
                    .unwrap()
                    .entry(level.clone())
                    .or_default()
                    .clone();
                let guard = match decision.outcome {
                    Outcome::Execute(g) => Some(g),
                    Outcome::Rejected(_) => None,
                    Outcome::Queued(ticket) if rng.below(4) == 0 => {
                        hold(&mut rng);
                        ticket.cancel();
                        None
                    }
                    Outcome::Queued(ticket) => ticket.wait().ok(),
                };
                if let Some(g) = guard {
                    // As the level clamps it (0 initial seats count as 1).
                    let seats = est.initial_seats.max(1).max(est.final_seats);
                    // A level's limit never exceeds the server's (borrowing
                    // and reconfiguration move it below that).
                    let now = counter.fetch_add(seats, SeqCst) + seats;
                    assert!(
                        now <= server_limit,
                        "{level}: {now} seats executing, server limit {server_limit}"
                    );
                    hold(&mut rng);
                    counter.fetch_sub(seats, SeqCst);
                    g.finish();
                }
            }
        }));
    }
    {
        // Reconfigures between the built-in configuration and one whose
        // workload-low level has a different share, and adjusts borrowing.
        let (d, stop) = (d.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            let builtin = Config::builtin();
            let mut i = 0u64;
            while !stop.load(SeqCst) {
                let config = if i.is_multiple_of(2) {
                    builtin.clone()
                } else {
                    reshared(&builtin)
                };
                d.reconfigure(&config).expect("valid");
                if i.is_multiple_of(3) {
                    d.adjust_borrowing_now();
                }
                i += 1;
                thread::sleep(Duration::from_micros(500));
            }
        }));
    }
    {
        let (d, stop) = (d.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            while !stop.load(SeqCst) {
                assert!(d.metrics_text().contains("apiserver_flowcontrol"));
                let _ = d.dump_queues();
                for level in d.levels() {
                    let _ = level.stats();
                }
                thread::sleep(Duration::from_micros(300));
            }
        }));
    }
    thread::sleep(soak_time());
    stop.store(true, SeqCst);
    for h in handles {
        h.join().expect("no thread panicked");
    }
    let levels = d.levels();
    wait_for_lingering(|| levels.iter().all(|l| l.stats().queueset.seats_in_use == 0));
    let started = started.lock().unwrap();
    for level in &levels {
        let stats = level.stats().queueset;
        assert_eq!(stats.seats_in_use, 0, "{}: {stats:?}", level.name);
        assert_eq!(stats.requests_executing, 0, "{}: {stats:?}", level.name);
        assert_eq!(stats.requests_waiting, 0, "{}: {stats:?}", level.name);
        let (executed, rejected, finished) = tally_sums(&level.tag_stats());
        assert_eq!(
            executed, finished,
            "{}: every executed request finished",
            level.name
        );
        if !level.is_exempt() {
            assert_eq!(
                executed + rejected,
                started.get(&level.name).copied().unwrap_or(0),
                "{}: started = finished + rejected",
                level.name
            );
        }
    }
}

/// The built-in configuration with workload-low's nominal shares changed.
fn reshared(builtin: &Config) -> Config {
    let mut config = builtin.clone();
    for pl in config.priority_levels.iter_mut() {
        if pl.metadata.name == "workload-low" {
            if let Some(limited) = pl.spec.limited.as_mut() {
                limited.nominal_concurrency_shares =
                    Some(limited.nominal_concurrency_shares.unwrap_or(100) / 2 + 1);
            }
        }
    }
    config
}

/// The FIFO workqueue's lock-free get (src/workqueue/core/mod.rs) under real
/// threads: producers add keys from a small set while consumers get and
/// finish them. No key is ever processed by two consumers at once, and a
/// key's last processing starts after its last add (an add while the key
/// waits or is processed is not lost), checked by a generation per key
/// bumped before each add and read right after each get.
#[test]
fn fifo_workqueue_under_real_threads() {
    soak_fifo_workqueue(16, 0, 3, false, false);
}

/// The same with the item table sharded 1,024 ways (a queue sized for a
/// million items) and keys over every shard: adds and dones of different
/// shards run at once, and re-queued keys reach parked consumers through
/// the parking handshake (src/workqueue/core/mod.rs).
#[test]
fn sharded_fifo_workqueue_under_real_threads() {
    soak_fifo_workqueue(4096, 1 << 20, 3, false, false);
}

/// More consumers than keys, half of their gets with a 1 µs–1 ms timeout:
/// most consumers are parked at any moment, timed-out ones withdraw from
/// the lock-free parked list (and compact it) while adds and dones hand
/// items to the others (src/workqueue/parking.rs).
#[test]
fn fifo_workqueue_with_many_parked_and_timed_out_consumers() {
    soak_fifo_workqueue(4, 0, 8, true, false);
}

/// The lock-free `done` and `add` (src/workqueue/shard.rs, slots.rs,
/// index.rs) under churn: 4,096 keys over 4 shards, consumers re-adding
/// every other key they finish (get, done, add: the retry pattern, whose
/// add finds the kept entry without the lock), so kept entries are swept
/// and their slots reused beside lock-free claims, index arrays grow
/// under probes, and a scraper takes metric snapshots throughout. After
/// the drain the metrics are exact: one queue-time and one work-time
/// observation per get, nothing dirty, nothing running.
#[test]
fn fifo_workqueue_lock_free_churn_with_scrapes() {
    soak_fifo_workqueue(4096, 0, 3, false, true);
}

fn soak_fifo_workqueue(keys: usize, capacity: usize, consumers: u64, timed: bool, churn: bool) {
    use apf::workqueue::{GetTimeoutError, QueueConfig, Workqueue};
    use std::time::Duration;
    let config = QueueConfig {
        capacity,
        ..QueueConfig::default()
    };
    let queue: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(config));
    let processing: Arc<Vec<AtomicBool>> =
        Arc::new((0..keys).map(|_| AtomicBool::new(false)).collect());
    let added: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..consumers)
        .map(|c| {
            let (queue, processing, added, seen) = (
                queue.clone(),
                processing.clone(),
                added.clone(),
                seen.clone(),
            );
            thread::spawn(move || {
                let mut taken = 0u64;
                let mut rng = Rng::new(c + 201);
                let mut next = || {
                    if !timed || rng.next().is_multiple_of(2) {
                        return queue.get();
                    }
                    let wait = Duration::from_micros(1 + rng.next() % 1000);
                    loop {
                        match queue.get_timeout(wait) {
                            Ok(k) => return Some(k),
                            Err(GetTimeoutError::TimedOut) => continue,
                            Err(GetTimeoutError::ShutDown) => return None,
                        }
                    }
                };
                while let Some(k) = next() {
                    let k = k as usize;
                    assert!(
                        !processing[k].swap(true, SeqCst),
                        "key {k} processed by two consumers at once"
                    );
                    seen[k].fetch_max(added[k].load(SeqCst), SeqCst);
                    taken += 1;
                    if taken.is_multiple_of(7) {
                        thread::yield_now();
                    }
                    processing[k].store(false, SeqCst);
                    queue.done(&(k as u32)).unwrap();
                    // Not counted in `added`: a re-add after the
                    // shutdown is ignored, and the producers' adds are
                    // what the last check follows.
                    if churn && taken.is_multiple_of(2) {
                        queue.add(k as u32);
                    }
                }
                taken
            })
        })
        .collect();
    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let (queue, added, stop) = (queue.clone(), added.clone(), stop.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(p + 101);
                let mut adds = 0u64;
                while !stop.load(SeqCst) {
                    let k = (rng.next() % keys as u64) as usize;
                    added[k].fetch_add(1, SeqCst);
                    queue.add(k as u32);
                    adds += 1;
                    if adds.is_multiple_of(64) {
                        thread::yield_now();
                    }
                }
                adds
            })
        })
        .collect();
    let scraper = churn.then(|| {
        let (queue, stop) = (queue.clone(), stop.clone());
        thread::spawn(move || {
            let mut scrapes = 0u64;
            while !stop.load(SeqCst) {
                let m = queue.metrics();
                assert!(m.queue_duration.count >= m.work_duration.count);
                scrapes += 1;
                thread::yield_now();
            }
            scrapes
        })
    });
    thread::sleep(soak_time());
    stop.store(true, SeqCst);
    let adds: u64 = producers.into_iter().map(|t| t.join().unwrap()).sum();
    if let Some(scraper) = scraper {
        assert!(scraper.join().unwrap() > 0);
    }
    queue.shut_down_with_drain();
    let taken: u64 = consumers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(
        taken > 0 && (churn || (adds > 0 && taken <= adds)),
        "adds {adds}, taken {taken}"
    );
    assert_eq!(queue.len(), 0);
    if churn {
        let m = queue.metrics();
        assert_eq!(m.queue_duration.count, taken, "one queue time per get");
        assert_eq!(m.work_duration.count, taken, "one work time per get");
        assert_eq!(m.depth, 0, "nothing dirty after the drain");
        assert_eq!(m.unfinished_work_seconds, 0.0, "nothing running");
    }
    for k in 0..keys {
        assert_eq!(
            seen[k].load(SeqCst),
            added[k].load(SeqCst),
            "key {k}: its last add was never processed"
        );
    }
}
