//! The queueset against a plain `Mutex<ReferenceQueueSet>` baseline, same
//! semantics, same group, so the ratio is read from one run.
use apf::clock::Clock;
use apf::queueset::reference::{Event, Outcome, ReferenceQueueSet};
use apf::queueset::{Admission, Fairness, Guard, QueueSet, QueueSetConfig, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Barrier, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

fn cfg(limit: u32, queues: u32, hand: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "bench".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit: 1 << 20,
        ..QueueSetConfig::default()
    }
}

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

/// The baseline: the reference model behind one mutex, on the real clock.
struct Baseline {
    clock: Clock,
    model: Mutex<(ReferenceQueueSet, u64)>,
}

impl Baseline {
    fn new(c: QueueSetConfig) -> Baseline {
        let clock = Clock::real();
        let model = ReferenceQueueSet::new(c, clock.now()).expect("valid");
        Baseline {
            clock,
            model: Mutex::new((model, 0)),
        }
    }
    fn start(&self, hash: u64) -> (u64, Outcome) {
        let mut m = self.model.lock().unwrap();
        m.1 += 1;
        let id = m.1;
        let out = m.0.start(self.clock.now(), id, hash, one_seat(), None);
        (id, out)
    }
    fn finish(&self, id: u64) -> Vec<Event> {
        let mut m = self.model.lock().unwrap();
        m.0.finish(self.clock.now(), id);
        m.0.take_events()
    }
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("a_uncontended_start_finish");
    let qs = QueueSet::new(cfg(1000, 64, 8), Clock::real()).unwrap();
    let mut h = 1u64;
    g.bench_function("queueset", |b| {
        b.iter(|| {
            let r = Request {
                flow_hash: xorshift(&mut h),
                estimate: one_seat(),
                deadline: None,
            };
            match qs.start(&r) {
                Admission::Execute(guard) => guard.finish(),
                _ => unreachable!("free seats"),
            }
        })
    });
    let flow = QueueSet::new(
        QueueSetConfig {
            fairness: Fairness::Flow,
            ..cfg(1000, 64, 8)
        },
        Clock::real(),
    )
    .unwrap();
    g.bench_function("queueset_flow", |b| {
        b.iter(|| {
            let r = Request {
                flow_hash: xorshift(&mut h),
                estimate: one_seat(),
                deadline: None,
            };
            match flow.start(&r) {
                Admission::Execute(guard) => guard.finish(),
                _ => unreachable!("free seats"),
            }
        })
    });
    let base = Baseline::new(cfg(1000, 64, 8));
    g.bench_function("mutex_reference", |b| {
        b.iter(|| {
            let (id, _) = base.start(xorshift(&mut h));
            base.finish(id);
        })
    });
    g.finish();
}

/// `threads` threads, each doing `iters` start+finish on `levels[i % n]`.
fn parallel<F: Fn(usize, u64) + Sync>(threads: usize, iters: u64, f: &F) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                f(t, iters);
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn two_threads(c: &mut Criterion) {
    for (name, levels) in [
        ("b_two_threads_one_level", 1usize),
        ("c_two_threads_two_levels", 2),
    ] {
        let mut g = c.benchmark_group(name);
        let qss: Vec<QueueSet> = (0..levels)
            .map(|_| QueueSet::new(cfg(1000, 64, 8), Clock::real()).unwrap())
            .collect();
        g.bench_function("queueset", |b| {
            b.iter_custom(|iters| {
                parallel(2, iters, &|t, n| {
                    let qs = &qss[t % levels];
                    let mut h = t as u64 + 1;
                    for _ in 0..n {
                        let r = Request {
                            flow_hash: xorshift(&mut h),
                            estimate: one_seat(),
                            deadline: None,
                        };
                        match qs.start(&r) {
                            Admission::Execute(guard) => guard.finish(),
                            _ => unreachable!("free seats"),
                        }
                    }
                })
            })
        });
        // The same loop under the `flow` policy, whose hot start writes no
        // level-wide line (no deal counter: the queue is chosen at replay),
        // so only the admission word and the drain are shared.
        let flow: Vec<QueueSet> = (0..levels)
            .map(|_| {
                let c = QueueSetConfig {
                    fairness: Fairness::Flow,
                    ..cfg(1000, 64, 8)
                };
                QueueSet::new(c, Clock::real()).unwrap()
            })
            .collect();
        g.bench_function("queueset_flow", |b| {
            b.iter_custom(|iters| {
                parallel(2, iters, &|t, n| {
                    let qs = &flow[t % levels];
                    let mut h = t as u64 + 1;
                    for _ in 0..n {
                        let r = Request {
                            flow_hash: xorshift(&mut h),
                            estimate: one_seat(),
                            deadline: None,
                        };
                        match qs.start(&r) {
                            Admission::Execute(guard) => guard.finish(),
                            _ => unreachable!("free seats"),
                        }
                    }
                })
            })
        });
        let bases: Vec<Baseline> = (0..levels)
            .map(|_| Baseline::new(cfg(1000, 64, 8)))
            .collect();
        g.bench_function("mutex_reference", |b| {
            b.iter_custom(|iters| {
                parallel(2, iters, &|t, n| {
                    let base = &bases[t % levels];
                    let mut h = t as u64 + 1;
                    for _ in 0..n {
                        let (id, _) = base.start(xorshift(&mut h));
                        base.finish(id);
                    }
                })
            })
        });
        g.finish();
    }
}

/// Records which ticket a dispatch woke, so the bench can find it in O(1).
struct Woken {
    index: usize,
    log: Arc<Mutex<Vec<usize>>>,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.log.lock().unwrap().push(self.index);
    }
}

/// A saturated level: `queues` queues, `waiting` requests queued, one seat.
/// One iteration: the executing request finishes, the dispatcher picks the
/// next request by least virtual finish, and a new request arrives and
/// queues.
struct Saturated<'q> {
    qs: &'q QueueSet,
    tickets: Vec<Option<Ticket<'q>>>,
    running: Option<Guard<'q>>,
    log: Arc<Mutex<Vec<usize>>>,
    seed: u64,
}

impl<'q> Saturated<'q> {
    fn new(qs: &'q QueueSet, waiting: usize) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut s = Saturated {
            qs,
            tickets: Vec::new(),
            running: None,
            log,
            seed: 7,
        };
        let Admission::Execute(g) = qs.start(&s.request()) else {
            panic!("first fits")
        };
        s.running = Some(g);
        for i in 0..waiting {
            let t = s.enqueue(i);
            s.tickets.push(Some(t));
        }
        s
    }
    fn request(&mut self) -> Request {
        Request {
            flow_hash: xorshift(&mut self.seed),
            estimate: one_seat(),
            deadline: None,
        }
    }
    fn enqueue(&mut self, index: usize) -> Ticket<'q> {
        let r = self.request();
        let Admission::Queued(mut t) = self.qs.start(&r) else {
            panic!("level is saturated")
        };
        let waker = Waker::from(Arc::new(Woken {
            index,
            log: self.log.clone(),
        }));
        assert!(Pin::new(&mut t)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        t
    }
    fn step(&mut self) {
        drop(self.running.take());
        let index = self
            .log
            .lock()
            .unwrap()
            .pop()
            .expect("a dispatch woke a ticket");
        let mut t = self.tickets[index].take().expect("woken ticket is live");
        let g = t.poll().expect("decided").expect("dispatched");
        self.running = Some(g);
        let fresh = self.enqueue(index);
        self.tickets[index] = Some(fresh);
    }
}

struct BaselineSaturated {
    base: Baseline,
    running: u64,
    seed: u64,
}

impl BaselineSaturated {
    fn new(c: QueueSetConfig, waiting: usize) -> Self {
        let base = Baseline::new(c);
        let mut seed = 7;
        let (running, _) = base.start(xorshift(&mut seed));
        for _ in 0..waiting {
            base.start(xorshift(&mut seed));
        }
        BaselineSaturated {
            base,
            running,
            seed,
        }
    }
    fn step(&mut self) {
        let events = self.base.finish(self.running);
        let Some(Event::Dispatched(next)) = events.first().copied() else {
            panic!("dispatched one")
        };
        self.running = next;
        self.base.start(xorshift(&mut self.seed));
    }
}

fn saturated(c: &mut Criterion) {
    let mut g = c.benchmark_group("d_saturated_queue_and_dispatch");
    let qs = QueueSet::new(cfg(1, 64, 8), Clock::real()).unwrap();
    let mut s = Saturated::new(&qs, 256);
    g.bench_function("queueset", |b| b.iter(|| s.step()));
    let mut bs = BaselineSaturated::new(cfg(1, 64, 8), 256);
    g.bench_function("mutex_reference", |b| b.iter(|| bs.step()));
    g.finish();
}

fn dispatch_by_queue_count(c: &mut Criterion) {
    let mut g = c.benchmark_group("f_dispatch_by_queues");
    for queues in [16u32, 128, 1024, 16384] {
        let hand = if queues >= 16384 { 4 } else { 6 };
        let waiting = (queues as usize * 2).max(256);
        let qs = QueueSet::new(cfg(1, queues, hand), Clock::real()).unwrap();
        let mut s = Saturated::new(&qs, waiting);
        g.bench_with_input(BenchmarkId::new("queueset", queues), &queues, |b, _| {
            b.iter(|| s.step())
        });
        // Diagnostic (issue 14): the same queue count with the waiting
        // population of the 16-queue case, to separate the cost of more
        // queues from the cost of 128 times more waiting requests.
        if queues == 16384 {
            let qs = QueueSet::new(cfg(1, queues, hand), Clock::real()).unwrap();
            let mut s = Saturated::new(&qs, 256);
            g.bench_with_input(
                BenchmarkId::new("queueset_256_waiting", queues),
                &queues,
                |b, _| b.iter(|| s.step()),
            );
        }
        let mut bs = BaselineSaturated::new(cfg(1, queues, hand), waiting);
        g.bench_with_input(
            BenchmarkId::new("mutex_reference", queues),
            &queues,
            |b, _| b.iter(|| bs.step()),
        );
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = uncontended, two_threads, saturated, dispatch_by_queue_count }
criterion_main!(benches);
