//! classify + start + finish end to end on the built-in configuration,
//! beside a plain baseline: the rules interpreted from the validated config
//! and one reference queueset per level, all behind one `Mutex`.
use apf::classification::{reference, RequestDigest};
use apf::clock::Clock;
use apf::config::{Config, LevelKind, LimitPolicy, ValidConfig};
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::queueset::reference::ReferenceQueueSet;
use apf::queueset::QueueSetConfig;
use apf::work_estimate::WorkEstimate;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

const GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:shop",
    "system:authenticated",
];

fn digest() -> RequestDigest<'static> {
    RequestDigest {
        user: "system:serviceaccount:shop:frontend",
        groups: GROUPS,
        verb: "get",
        is_resource_request: true,
        api_group: "",
        resource: "configmaps",
        namespace: "shop",
        name: "settings",
        path: "/api/v1/namespaces/shop/configmaps/settings",
        ..RequestDigest::default()
    }
}

fn one_seat() -> WorkEstimate {
    WorkEstimate::new(1, 0, Duration::ZERO)
}

struct Plain {
    clock: Clock,
    inner: Mutex<(ValidConfig, Vec<ReferenceQueueSet>, u64)>,
}

impl Plain {
    fn new() -> Plain {
        let clock = Clock::real();
        let valid = Config::builtin().validate().expect("valid");
        let levels = valid
            .priority_levels()
            .iter()
            .map(|pl| {
                let (queues, hand_size, queue_length_limit) = match &pl.kind {
                    LevelKind::Limited {
                        limit_response: LimitPolicy::Queue(q),
                        ..
                    } => (q.queues, q.hand_size, q.queue_length_limit),
                    _ => (0, 1, 1),
                };
                let cfg = QueueSetConfig {
                    name: pl.name.clone(),
                    concurrency_limit: 100,
                    queues,
                    hand_size,
                    queue_length_limit,
                    ..QueueSetConfig::default()
                };
                ReferenceQueueSet::new(cfg, clock.now()).expect("valid")
            })
            .collect();
        Plain {
            clock,
            inner: Mutex::new((valid, levels, 0)),
        }
    }

    fn start_finish(&self, d: &RequestDigest<'_>) {
        let (level, id) = {
            let mut g = self.inner.lock().unwrap();
            let c = reference::classify(&g.0, d).expect("catch-all exists");
            g.2 += 1;
            let id = g.2;
            let now = self.clock.now();
            black_box(g.1[c.level_index].start(now, id, c.flow_hash, one_seat(), None));
            (c.level_index, id)
        };
        let mut g = self.inner.lock().unwrap();
        let now = self.clock.now();
        g.1[level].finish(now, id);
    }
}

fn start_finish(d: &Dispatcher, digest: &RequestDigest<'_>) {
    match d.start_request(digest, one_seat(), None).outcome {
        Outcome::Execute(guard) => guard.finish(),
        _ => unreachable!("free seats"),
    }
}

fn parallel(threads: usize, iters: u64, f: &(dyn Fn(u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                f(iters);
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn end_to_end(c: &mut Criterion) {
    let d = Dispatcher::builtin(DispatcherOptions::default(), Clock::real());
    let plain = Plain::new();
    let digest = digest();
    let mut g = c.benchmark_group("e2e_classify_start_finish_uncontended");
    g.bench_function("dispatcher", |b| {
        b.iter(|| start_finish(&d, black_box(&digest)))
    });
    g.bench_function("mutex_plain", |b| {
        b.iter(|| plain.start_finish(black_box(&digest)))
    });
    g.finish();
    let mut g = c.benchmark_group("e2e_classify_start_finish_two_threads");
    g.bench_function("dispatcher", |b| {
        b.iter_custom(|iters| {
            parallel(2, iters, &|n| {
                for _ in 0..n {
                    start_finish(&d, &digest);
                }
            })
        })
    });
    g.bench_function("mutex_plain", |b| {
        b.iter_custom(|iters| {
            parallel(2, iters, &|n| {
                for _ in 0..n {
                    plain.start_finish(&digest);
                }
            })
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = end_to_end }
criterion_main!(benches);
