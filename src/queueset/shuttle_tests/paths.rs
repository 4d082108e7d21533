//! Randomised schedule tests of the queueset with shuttle, for runs too
//! large for loom: many threads starting, finishing, cancelling, timing out
//! (a thread advancing the manual clock) and reconfiguring at once. Each
//! checks at every step that the executing seats stay within the limit and
//! that no request is both waiting and executing, and at quiescence that the
//! counts balance. `slow_path_matches_reference` also replays the run, in
//! the order the level's lock saw it (`crate::queueset::history`), into the
//! reference model and requires the same decisions and the same final
//! state. Run with `scripts/shuttle.sh` (SHUTTLE_ITERATIONS for longer runs).
use crate::clock::{Clock, Instant, ManualClock};
use crate::queueset::history::{self, Site};
use crate::queueset::reference::{Event, Outcome, ReferenceQueueSet};
use crate::queueset::{
    Fairness, QueueSet, QueueSetConfig, RawAdmission, RejectReason, Request, RequestId,
};
use crate::work_estimate::WorkEstimate;
use shuttle::rand::Rng;
use shuttle::sync::Arc;
use shuttle::thread;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

fn iterations() -> usize {
    std::env::var("SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

fn config(limit: u32, queues: u32, hand: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "shuttle".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit: 2,
        wait_limit: Duration::from_millis(3),
        fairness: crate::queueset::Fairness::Kubernetes,
        ..QueueSetConfig::default()
    }
}

/// What the test threads saw, shared by all of them. Plain std types: shuttle
/// runs one task at a time on this OS thread, and these add no scheduling
/// points of their own.
#[derive(Default)]
struct Observed {
    /// Seats of requests executing now, counted by the test itself.
    executing_seats: AtomicU32,
    /// The highest limit configured so far: requests admitted under it may
    /// still run after it is lowered.
    max_limit: AtomicU32,
    /// Arrival numbers of queued requests that are executing now.
    executing_ids: Mutex<HashSet<u64>>,
    /// Every request and reconfiguration, by operation number.
    ops: Mutex<HashMap<u64, Op>>,
    /// The decision each start returned.
    outcomes: Mutex<HashMap<RequestId, Outcome>>,
    /// How each waited-for request ended.
    fates: Mutex<HashMap<RequestId, Event>>,
    /// What each cancellation returned.
    cancels: Mutex<HashMap<RequestId, bool>>,
    started: AtomicUsize,
    /// Whether executing requests may give back seats early (a random part
    /// of what they hold) before they finish.
    early_release: AtomicBool,
}

#[derive(Clone)]
enum Op {
    Request(Request),
    Reconfigure(QueueSetConfig),
    Advance,
}

impl Observed {
    fn new(limit: u32) -> Self {
        let o = Observed::default();
        o.max_limit.store(limit, SeqCst);
        o
    }

    fn begin(&self, seats: u32) {
        let now = self.executing_seats.fetch_add(seats, SeqCst) + seats;
        let limit = self.max_limit.load(SeqCst);
        assert!(
            now <= limit || now == seats,
            "{now} seats executing, limit {limit}"
        );
    }

    fn end(&self, seats: u32) {
        self.executing_seats.fetch_sub(seats, SeqCst);
    }

    /// No request the test holds as executing is listed as waiting.
    fn check(&self, qs: &QueueSet) {
        let dump = qs.dump(); // the core checks its own invariants too
                              // (A std lock: never held across a queueset call, which may switch
                              // tasks on this same OS thread.)
        let executing = self.executing_ids.lock().unwrap().clone();
        for w in &dump.waiting {
            assert!(
                !executing.contains(&w.id),
                "request {} both waiting and executing",
                w.id
            );
        }
        // Seats held (executing or lingering) were each taken within the
        // limit in force, so within the highest one configured; except that,
        // as in Kubernetes, a too-wide request may start when nothing
        // executes although finished requests' seats still linger.
        let stats = qs.stats();
        assert!(
            stats.seats_in_use <= self.max_limit.load(SeqCst) || stats.requests_executing <= 1,
            "{stats:?}"
        );
    }
}

/// One worker: `rounds` requests, each started, then finished, waited for,
/// or cancelled, as the scheduler's random numbers say.
fn worker(
    qs: &QueueSet,
    obs: &Observed,
    task: u64,
    rounds: u64,
    make: impl Fn(&mut shuttle::rand::rngs::ThreadRng, u64) -> Request,
) {
    let mut rng = shuttle::rand::thread_rng();
    for round in 0..rounds {
        let id = task * 100 + round;
        let req = make(&mut rng, id);
        obs.ops.lock().unwrap().insert(id, Op::Request(req));
        obs.started.fetch_add(1, SeqCst);
        history::set_current(id);
        let exec = match qs.admit(&req) {
            RawAdmission::Execute(exec) => {
                obs.outcomes.lock().unwrap().insert(id, Outcome::Execute);
                Some((exec, None))
            }
            RawAdmission::Rejected(r) => {
                obs.outcomes
                    .lock()
                    .unwrap()
                    .insert(id, Outcome::Rejected(r));
                None
            }
            RawAdmission::Queued(waiting) => {
                obs.outcomes.lock().unwrap().insert(id, Outcome::Queued);
                let seq = waiting.id();
                if rng.gen_bool(0.3) {
                    thread::yield_now();
                    let cancelled = qs.cancel_waiting(waiting);
                    obs.cancels.lock().unwrap().insert(id, cancelled);
                    None
                } else {
                    match qs.wait_for(waiting) {
                        Ok(exec) => {
                            obs.fates.lock().unwrap().insert(id, Event::Dispatched(id));
                            obs.executing_ids.lock().unwrap().insert(seq);
                            Some((exec, Some(seq)))
                        }
                        Err(r) => {
                            obs.fates.lock().unwrap().insert(id, Event::Rejected(id, r));
                            None
                        }
                    }
                }
            }
        };
        if let Some((mut exec, seq)) = exec {
            let seats = exec.estimate().max_seats();
            obs.begin(seats);
            obs.check(qs);
            thread::yield_now();
            let mut held = seats;
            if obs.early_release.load(SeqCst) && held > 0 && rng.gen_bool(0.5) {
                // Counted as free before the release gives them back, so
                // no check sees them both held here and taken by another.
                let release = rng.gen_range(1..=held);
                obs.end(release);
                qs.release_seats(&mut exec, release)
                    .expect("releases what it holds");
                held -= release;
                assert_eq!(exec.held_seats(), held);
                obs.check(qs);
                thread::yield_now();
            }
            obs.end(held);
            if let Some(seq) = seq {
                obs.executing_ids.lock().unwrap().remove(&seq);
            }
            qs.finish_execution(exec, qs.clock().now());
        }
    }
}

/// Advances the clock in 1 ms steps until every worker is done, so that
/// waits time out and lingering seats come back.
fn advancer(
    qs: &QueueSet,
    manual: &ManualClock,
    obs: &Observed,
    done: &AtomicUsize,
    workers: usize,
) {
    let id = 9_000;
    obs.ops.lock().unwrap().insert(id, Op::Advance);
    history::set_current(id);
    while done.load(SeqCst) < workers {
        manual.advance(Duration::from_millis(1));
        obs.check(qs);
        thread::yield_now();
    }
}

fn reconfigurer(qs: &QueueSet, obs: &Observed, cfgs: &[QueueSetConfig]) {
    for (i, cfg) in cfgs.iter().enumerate() {
        let id = 8_000 + i as u64;
        obs.max_limit.fetch_max(cfg.concurrency_limit, SeqCst);
        obs.ops
            .lock()
            .unwrap()
            .insert(id, Op::Reconfigure(cfg.clone()));
        history::set_current(id);
        qs.reconfigure(cfg.clone()).expect("valid config");
        obs.check(qs);
    }
}

/// Run `workers` workers plus a clock advancer and a reconfigurer on one
/// level, then finish everything and check the balance.
fn run(
    initial: QueueSetConfig,
    reconfigs: Vec<QueueSetConfig>,
    workers: u64,
    rounds: u64,
    make: fn(&mut shuttle::rand::rngs::ThreadRng, u64) -> Request,
) -> (Arc<QueueSet>, Arc<Observed>, ManualClock) {
    run_with(initial, reconfigs, workers, rounds, make, false)
}

/// [`run`], with `early_release`: executing requests may release seats.
fn run_with(
    initial: QueueSetConfig,
    reconfigs: Vec<QueueSetConfig>,
    workers: u64,
    rounds: u64,
    make: fn(&mut shuttle::rand::rngs::ThreadRng, u64) -> Request,
    early_release: bool,
) -> (Arc<QueueSet>, Arc<Observed>, ManualClock) {
    history::take();
    let (clock, manual) = Clock::manual();
    let qs = Arc::new(QueueSet::new(initial.clone(), clock).expect("valid config"));
    let obs = Arc::new(Observed::new(initial.concurrency_limit));
    obs.early_release.store(early_release, SeqCst);
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for task in 0..workers {
        let (qs, obs, done) = (qs.clone(), obs.clone(), done.clone());
        handles.push(thread::spawn(move || {
            worker(&qs, &obs, task, rounds, make);
            done.fetch_add(1, SeqCst);
        }));
    }
    {
        let (qs, obs, done, manual) = (qs.clone(), obs.clone(), done.clone(), manual.clone());
        handles.push(thread::spawn(move || {
            advancer(&qs, &manual, &obs, &done, workers as usize)
        }));
    }
    {
        let (qs, obs) = (qs.clone(), obs.clone());
        handles.push(thread::spawn(move || reconfigurer(&qs, &obs, &reconfigs)));
    }
    for h in handles {
        h.join().unwrap();
    }
    // Quiescence: let every lingering seat come back.
    history::set_current(9_000);
    manual.advance(Duration::from_secs(3600));
    let stats = qs.stats();
    assert_eq!(stats.seats_in_use, 0, "every seat given back: {stats:?}");
    assert_eq!(stats.requests_executing, 0, "{stats:?}");
    assert_eq!(stats.requests_waiting, 0, "{stats:?}");
    let rejected: u64 = stats.rejected.iter().sum();
    assert!(
        stats.dispatched_from_queues + rejected <= obs.started.load(SeqCst) as u64,
        "{stats:?}"
    );
    (qs, obs, manual)
}

/// Requests that take the slow path for every step: 0 initial seats (the
/// hot path leaves clamping to the slow path) and additional latency (the
/// finish must arm a timer). So every operation takes effect under the
/// level lock, where `history` records its order.
fn slow_request(rng: &mut shuttle::rand::rngs::ThreadRng, id: u64) -> Request {
    Request {
        flow_hash: [1, 7, 0x5555, u64::MAX][rng.gen_range(0..4)],
        estimate: WorkEstimate::new(
            0,
            rng.gen_range(0..3),
            Duration::from_micros(500 * rng.gen_range(1..4)),
        ),
        deadline: (id % 3 == 0).then(|| Instant::from_nanos(2_000_000)),
    }
}

/// Any request: hot or slow path, with or without additional latency.
fn any_request(rng: &mut shuttle::rand::rngs::ThreadRng, _id: u64) -> Request {
    let latency = if rng.gen_bool(0.5) { 0 } else { 700 };
    Request {
        flow_hash: rng.gen_range(0..8),
        estimate: WorkEstimate::new(
            rng.gen_range(0..3),
            rng.gen_range(0..2),
            Duration::from_micros(latency),
        ),
        deadline: None,
    }
}

/// Every operation through the lock, replayed in the lock's order into the
/// reference model: same decisions, same fates, same final state. (It found
/// that the core bounded a queue after each of several simultaneous
/// time-outs instead of once after all of them; see
/// `rules::requests_timing_out_together_leave_their_queue_unbounded_by_each_other`.)
#[test]
fn slow_path_matches_reference() {
    shuttle::check_random(
        || {
            let initial = config(2, 3, 2);
            let reconfigs = vec![config(3, 2, 2), config(1, 4, 3)];
            let (qs, obs, _manual) = run(initial.clone(), reconfigs, 4, 3, slow_request);
            let log = history::take();
            replay_and_compare(&qs, &obs, initial, &log);
        },
        iterations(),
    );
}

/// Replay the log into the reference model: each start must decide as the
/// queueset did, each cancellation find what it found, each waiter end as
/// it ended, and the final state be the same.
fn replay_and_compare(
    qs: &QueueSet,
    obs: &Observed,
    initial: QueueSetConfig,
    log: &[history::Entry],
) {
    let ops = obs.ops.lock().unwrap();
    let outcomes = obs.outcomes.lock().unwrap();
    let cancels = obs.cancels.lock().unwrap();
    let mut model = ReferenceQueueSet::new(initial, Instant::ZERO).expect("valid config");
    let mut events = Vec::new();
    let mut later = Vec::new();
    for (i, e) in log.iter().enumerate() {
        match (e.site, ops.get(&e.op)) {
            (Site::Start, Some(Op::Request(r))) => {
                let got = model.start(e.at, e.op, r.flow_hash, r.estimate, r.deadline);
                let observed = outcomes.get(&e.op).copied();
                match (got, observed) {
                    // Queued when the lock was released, then decided (by a
                    // later entry) before `admit` looked at its slot: the
                    // model must decide it the same way later.
                    (Outcome::Queued, Some(Outcome::Execute)) => {
                        later.push(Event::Dispatched(e.op))
                    }
                    (Outcome::Queued, Some(Outcome::Rejected(r))) => {
                        later.push(Event::Rejected(e.op, r))
                    }
                    _ => assert_eq!(Some(got), observed, "entry {i} {e:?}: start of {}", e.op),
                }
            }
            (Site::Finish, Some(Op::Request(_))) => model.finish(e.at, e.op),
            (Site::Cancel, Some(Op::Request(_))) => {
                let found = model.cancel(e.at, e.op);
                assert_eq!(Some(&found), cancels.get(&e.op), "entry {i} {e:?}: cancel");
            }
            (Site::Timer, _) => model.advance_to(e.at),
            (Site::Reconfigure, Some(Op::Reconfigure(cfg))) => {
                model.reconfigure(e.at, cfg.clone()).expect("valid config")
            }
            other => panic!("entry {i} {e:?}: unexpected {:?}", other.0),
        }
        events.extend(model.take_events());
    }
    for fate in &later {
        assert!(
            events.contains(fate),
            "{fate:?} decided after admit: model events {events:?}"
        );
    }
    // Every waiter that learnt its fate by waiting learnt the model's.
    for (id, fate) in obs.fates.lock().unwrap().iter() {
        assert!(
            events.contains(fate),
            "request {id}: {fate:?}, model events {events:?}"
        );
    }
    // A cancellation that found the request waiting is the model's too.
    for (id, &cancelled) in cancels.iter() {
        let model_cancelled = events.contains(&Event::Rejected(*id, RejectReason::Cancelled));
        assert_eq!(cancelled, model_cancelled, "cancel of {id}");
    }
    let stats = qs.stats();
    assert_eq!(
        (
            stats.seats_in_use,
            stats.requests_waiting,
            stats.requests_executing
        ),
        (
            model.seats_in_use(),
            model.requests_waiting(),
            model.requests_executing()
        )
    );
    assert_eq!(
        stats.clamped_estimates,
        model.clamped_estimates(),
        "clamped estimates"
    );
    assert_eq!(qs.current_r(), model.current_r(), "R");
    assert_eq!(qs.queue_states(), model.queue_states(), "queues");
}

/// Hot and slow paths mixed, at a queuing level: invariants only (the hot
/// path's starts take effect at the CAS, outside the lock's order).
#[test]
fn mixed_paths_keep_invariants() {
    shuttle::check_random(
        || {
            run(
                config(2, 2, 2),
                vec![config(3, 1, 1), config(1, 3, 2)],
                5,
                3,
                any_request,
            );
        },
        iterations(),
    );
}

/// The same at a level that does not queue (hot path against the slow
/// path's room check).
#[test]
fn non_queuing_level_keeps_invariants() {
    let exempt = |limit| QueueSetConfig {
        queues: 0,
        ..config(limit, 1, 1)
    };
    shuttle::check_random(
        move || {
            run(exempt(2), vec![exempt(3), exempt(1)], 5, 3, any_request);
        },
        iterations(),
    );
}

/// `config` under the flow fairness policy.
fn flow(cfg: QueueSetConfig) -> QueueSetConfig {
    QueueSetConfig {
        fairness: crate::queueset::Fairness::Flow,
        ..cfg
    }
}

/// [`slow_path_matches_reference`] under the flow fairness policy (flow
/// table, anticipation), with a reconfiguration back to Kubernetes' policy
/// and one to flow again.
#[test]
fn slow_path_matches_reference_under_flow() {
    shuttle::check_random(
        || {
            let initial = flow(config(2, 3, 2));
            let reconfigs = vec![config(3, 2, 2), flow(config(1, 4, 3))];
            let (qs, obs, _manual) = run(initial.clone(), reconfigs, 4, 3, slow_request);
            let log = history::take();
            replay_and_compare(&qs, &obs, initial, &log);
        },
        iterations(),
    );
}

/// [`mixed_paths_keep_invariants`] under the flow fairness policy: the hot
/// path records flow hashes and the replay chooses their queues.
#[test]
fn mixed_paths_keep_invariants_under_flow() {
    shuttle::check_random(
        || {
            run(
                flow(config(2, 2, 2)),
                vec![config(3, 1, 1), flow(config(1, 3, 2))],
                5,
                3,
                any_request,
            );
        },
        iterations(),
    );
}

/// `config` under `fairness`.
fn with_fairness(cfg: QueueSetConfig, fairness: Fairness) -> QueueSetConfig {
    QueueSetConfig { fairness, ..cfg }
}

/// Early releases (issue 11 part 3) on mixed hot and slow paths, under
/// each policy: a request gives back part or all of its seats while it
/// executes, racing admissions, dispatches, holds for flows, lingering
/// seats, time-outs and reconfigurations. Within the limit at every check,
/// the core's invariants after every operation, every seat back at the end.
#[test]
fn early_releases_keep_invariants_under_every_policy() {
    for fairness in Fairness::ALL {
        shuttle::check_random(
            move || {
                let at = |cfg| with_fairness(cfg, fairness);
                run_with(
                    at(config(2, 2, 2)),
                    vec![at(config(3, 1, 1)), at(config(1, 3, 2))],
                    4,
                    3,
                    any_request,
                    true,
                );
            },
            iterations() / 2,
        );
    }
}

/// [`slow_path_matches_reference`] under `flow-maxmin` (R at the water
/// level), with reconfigurations to Kubernetes' policy and back.
#[test]
fn slow_path_matches_reference_under_flow_maxmin() {
    shuttle::check_random(
        || {
            let initial = with_fairness(config(2, 3, 2), Fairness::FlowMaxMin);
            let reconfigs = vec![
                config(3, 2, 2),
                with_fairness(config(1, 4, 3), Fairness::FlowMaxMin),
            ];
            let (qs, obs, _manual) = run(initial.clone(), reconfigs, 4, 3, slow_request);
            let log = history::take();
            replay_and_compare(&qs, &obs, initial, &log);
        },
        iterations(),
    );
}
