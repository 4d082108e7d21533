//! Randomised schedules of the sharded event rings (src/queueset/shards.rs)
//! with shuttle: several threads (two shards under shuttle) start requests
//! and hand their executions to one another, so finishes land on threads of
//! other shards, while the clock advances and the level drains its rings.
//! Checks at every step that the seats in use stay within the limit and,
//! at quiescence, that every start and finish was replayed exactly once.
//! Run with `scripts/shuttle.sh` (SHUTTLE_ITERATIONS for longer runs).
use crate::clock::Clock;
use crate::queueset::{Execution, QueueSet, QueueSetConfig, RawAdmission, Request};
use crate::work_estimate::WorkEstimate;
use shuttle::rand::Rng;
use shuttle::sync::{Arc, Mutex};
use shuttle::thread;
use std::time::Duration;

const LIMIT: u32 = 3;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

fn request(flow: u64) -> Request {
    Request {
        flow_hash: flow,
        estimate: WorkEstimate::new(1, 0, Duration::ZERO),
        deadline: None,
    }
}

fn check(qs: &QueueSet) {
    let stats = qs.stats();
    assert!(
        stats.seats_in_use <= LIMIT,
        "{} seats in use at limit {LIMIT}",
        stats.seats_in_use
    );
}

fn run(queues: u32) {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "shuttle-shards".into(),
        concurrency_limit: LIMIT,
        queues,
        hand_size: queues.clamp(1, 2),
        queue_length_limit: 2,
        ..QueueSetConfig::default()
    };
    let qs = Arc::new(QueueSet::new(cfg, clock.clone()).expect("valid config"));
    // Executions any thread may finish: most are finished by a thread other
    // than the one that started them.
    let mailbox: Arc<Mutex<Vec<Execution>>> = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let qs = qs.clone();
            let mailbox = mailbox.clone();
            let clock = clock.clone();
            thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                for round in 0..4u64 {
                    match rng.gen_range(0..4) {
                        0 | 1 => match qs.admit(&request(t * 10 + round)) {
                            RawAdmission::Execute(e) => mailbox.lock().unwrap().push(e),
                            // Gives up at once; a dispatch that won the race
                            // is finished by the cancellation itself.
                            RawAdmission::Queued(w) => {
                                qs.cancel_waiting(w);
                            }
                            RawAdmission::Rejected(_) => {}
                        },
                        2 => {
                            let e = mailbox.lock().unwrap().pop();
                            if let Some(e) = e {
                                qs.finish_execution(e, clock.now());
                            }
                        }
                        _ => check(&qs),
                    }
                }
            })
        })
        .collect();
    for _ in 0..2 {
        manual.advance(Duration::from_micros(1));
        check(&qs);
    }
    for t in threads {
        t.join().unwrap();
    }
    let left: Vec<_> = mailbox.lock().unwrap().drain(..).collect();
    for e in left {
        qs.finish_execution(e, clock.now());
    }
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "every seat given back");
    assert_eq!(stats.requests_executing, 0, "every finish replayed");
    assert_eq!(stats.requests_waiting, 0);
}

#[test]
fn executions_finished_on_other_shards() {
    shuttle::check_random(|| run(2), iterations());
}

#[test]
fn executions_finished_on_other_shards_without_queues() {
    shuttle::check_random(|| run(0), iterations());
}

/// Seat budgets (src/queueset/budget.rs) over longer histories: three
/// threads start requests of 1 to 3 seats at limit 8 (budgets of one seat
/// under shuttle's two shards), hand their executions to one another and
/// wait when queued; one more thread changes the limit when `limits` is
/// set. Checked at every admission: the seats executing never exceed the
/// limit (the largest one set, when it changes: requests admitted under a
/// higher limit keep running after it is lowered). A thread finishes every
/// execution in the shared mailbox before it waits and when it is done, so
/// once every thread waits or is done nothing executes: a waiter
/// left waiting while seats sit in budgets would leave every thread
/// blocked, which shuttle reports as a deadlock. At the end every seat is
/// back.
fn budgets(limits: &'static [u32]) {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "shuttle-budgets".into(),
        concurrency_limit: 8,
        queues: 4,
        hand_size: 2,
        queue_length_limit: 8,
        ..QueueSetConfig::default()
    };
    let qs = Arc::new(QueueSet::new(cfg, clock.clone()).expect("valid config"));
    let bound = limits.iter().copied().fold(8, u32::max);
    let executing = Arc::new(Mutex::new(0u32));
    let mailbox: Arc<Mutex<Vec<Execution>>> = Arc::new(Mutex::new(Vec::new()));
    let finish = {
        let (qs, executing, clock) = (qs.clone(), executing.clone(), clock.clone());
        move |e: Execution| {
            *executing.lock().unwrap() -= e.estimate().max_seats();
            qs.finish_execution(e, clock.now());
        }
    };
    let mut threads: Vec<_> = (0..3u64)
        .map(|t| {
            let (qs, mailbox, executing, finish) = (
                qs.clone(),
                mailbox.clone(),
                executing.clone(),
                finish.clone(),
            );
            thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                for round in 0..5u64 {
                    if rng.gen_range(0..3) == 0 {
                        let e = mailbox.lock().unwrap().pop();
                        if let Some(e) = e {
                            finish(e);
                        }
                        continue;
                    }
                    let seats = rng.gen_range(1..=3);
                    let r = Request {
                        flow_hash: t * 10 + round,
                        estimate: WorkEstimate::new(seats, 0, Duration::ZERO),
                        deadline: None,
                    };
                    let exec = match qs.admit(&r) {
                        RawAdmission::Execute(e) => Some(e),
                        RawAdmission::Queued(w) => {
                            let held: Vec<_> = mailbox.lock().unwrap().drain(..).collect();
                            for e in held {
                                finish(e);
                            }
                            qs.wait_for(w).ok()
                        }
                        RawAdmission::Rejected(_) => None,
                    };
                    if let Some(e) = exec {
                        let mut ex = executing.lock().unwrap();
                        *ex += e.estimate().max_seats();
                        assert!(*ex <= bound, "{} seats execute, limit {bound}", *ex);
                        drop(ex);
                        mailbox.lock().unwrap().push(e);
                    }
                }
                // Leave no execution behind for a thread that waits.
                let held: Vec<_> = mailbox.lock().unwrap().drain(..).collect();
                for e in held {
                    finish(e);
                }
            })
        })
        .collect();
    if !limits.is_empty() {
        let qs = qs.clone();
        threads.push(thread::spawn(move || {
            for &limit in limits {
                qs.set_concurrency_limit(limit).expect("a valid limit");
            }
        }));
    }
    manual.advance(Duration::from_micros(1));
    for t in threads {
        t.join().unwrap();
    }
    let left: Vec<_> = mailbox.lock().unwrap().drain(..).collect();
    for e in left {
        finish(e);
    }
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "every seat given back");
    assert_eq!(stats.requests_executing, 0, "every finish replayed");
    assert_eq!(stats.requests_waiting, 0, "every waiter dispatched");
}

#[test]
fn budgets_keep_the_limit_and_starve_no_waiter() {
    shuttle::check_random(|| budgets(&[]), iterations());
}

#[test]
fn budgets_across_limit_changes() {
    shuttle::check_random(|| budgets(&[4, 16, 8]), iterations());
}
