//! Two threads take turns, one request each, on one case (`dispatcher`,
//! `one_level`, `level_per_thread`), for a memory trace under valgrind's
//! lackey (scripts/shared-lines.sh): each turn begins with a store to the
//! thread's marker, so the trace says which thread made every access, and
//! the script counts the cache lines one thread's request takes from the
//! other's cache.
use apf::classification::RequestDigest;
use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::queueset::{Admission, QueueSet, QueueSetConfig, Request};
use apf::work_estimate::WorkEstimate;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

static MARK: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static TURN: AtomicUsize = AtomicUsize::new(0);

const GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:shop",
    "system:authenticated",
];

fn main() {
    let case = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "dispatcher".into());
    let turns: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    // A third thread takes a thread index between the two threads' first
    // requests: `same-shard`, it stays alive until the second thread has
    // its index, so that both busy threads land on one shard (three live
    // threads, two shards); `churn`, it exits first (a thread that came
    // and went: its index is free again for the second thread).
    let third = std::env::args().nth(3).unwrap_or_default();
    let third = third.as_str();
    let names: Vec<String> = (0..16)
        .map(|i| format!("system:serviceaccount:shop:user-{i}"))
        .collect();
    let digests: Vec<RequestDigest<'_>> = names
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
        .collect();
    let one = WorkEstimate::new(1, 0, Duration::ZERO);
    let d = Dispatcher::builtin(DispatcherOptions::default(), Clock::real());
    let cfg = |name: &str| QueueSetConfig {
        name: name.into(),
        concurrency_limit: 1000,
        queues: 64,
        hand_size: 8,
        queue_length_limit: 1 << 20,
        ..QueueSetConfig::default()
    };
    let shared = QueueSet::new(cfg("shared"), Clock::real()).unwrap();
    let own = [
        QueueSet::new(cfg("a"), Clock::real()).unwrap(),
        QueueSet::new(cfg("b"), Clock::real()).unwrap(),
    ];
    let request = |t: usize, u: usize| match case.as_str() {
        "dispatcher" | "dispatcher_shared_arc" => {
            let decision = d.start_request(&digests[u], one, None);
            if case == "dispatcher_shared_arc" {
                // The calibration: a clone of the level's shared `Arc`
                // (what a request did before the leases) must show as a
                // line taken from the other thread.
                drop(std::hint::black_box(decision.priority_level.arc().clone()));
            }
            match decision.outcome {
                Outcome::Execute(g) => g.finish(),
                _ => unreachable!("seats to spare"),
            }
        }
        "one_level" | "level_per_thread" => {
            let qs = if case == "one_level" {
                &shared
            } else {
                &own[t]
            };
            let r = Request {
                flow_hash: (u as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                estimate: one,
                deadline: None,
            };
            match qs.start(&r) {
                Admission::Execute(g) => g.finish(),
                _ => unreachable!("seats to spare"),
            }
        }
        other => panic!("unknown case {other}"),
    };
    eprintln!("MARKS {:p} {:p} TURN {:p}", &MARK[0], &MARK[1], &TURN);
    std::thread::scope(|s| {
        for (t, mark) in MARK.iter().enumerate() {
            let request = &request;
            s.spawn(move || {
                // Warm up: thread-locals, the ledger's slot, the budget.
                for u in 0..64 {
                    while TURN.load(Ordering::Acquire) != t {
                        std::thread::yield_now();
                    }
                    if t == 1 && u == 0 && third == "churn" {
                        std::thread::scope(|s| {
                            s.spawn(|| request(t, 0));
                        });
                    }
                    if t == 1 && u == 0 && third == "same-shard" {
                        let (ready, is_ready) = std::sync::mpsc::channel();
                        let (done, is_done) = std::sync::mpsc::channel::<()>();
                        std::thread::scope(|s| {
                            s.spawn(move || {
                                request(t, 0);
                                ready.send(()).unwrap();
                                is_done.recv().ok();
                            });
                            is_ready.recv().unwrap();
                            request(t, 0);
                            done.send(()).unwrap();
                        });
                    }
                    request(t, u % 16);
                    TURN.store(1 - t, Ordering::Release);
                }
                let mut u = t;
                for i in 0..turns {
                    while TURN.load(Ordering::Acquire) != t {
                        std::thread::yield_now();
                    }
                    mark.store(i + 1, Ordering::Relaxed);
                    u = (u + 1) % 16;
                    request(t, u);
                    mark.store(0, Ordering::Relaxed);
                    TURN.store(1 - t, Ordering::Release);
                }
            });
        }
    });
}
