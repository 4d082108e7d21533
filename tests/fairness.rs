#![cfg(not(loom))]
//! Fairness scenarios on the manual clock: closed-loop clients driven by a
//! small discrete-event simulator, each scenario run through both the
//! queueset and the reference model (which must agree event for event), and
//! each flow's average seats in use compared with the fair allocation of
//! the concurrency limit.
//!
//! The shapes follow Kubernetes' own queueset tests (uniform flows, unequal
//! demands, mixed widths, a request wider than the limit, padding with
//! additional latency, windup); the numbers are this file's own.
//!
//! # What "fair" means here
//! Kubernetes' queueset is fair among *queues*, not flows: a request goes to
//! the least-loaded queue of its flow's hand, so a flow with enough
//! concurrent requests occupies every queue of its hand and takes that many
//! queues' shares. With hand size 1 (or flows too thin to fill their
//! hands) that is plain max-min fairness among flows. [`queue_fair`]
//! computes the queue-level allocation; scenarios that depend on the
//! difference say so.

use apf::clock::{Clock, Instant, ManualClock};
use apf::dealer::Dealer;
use apf::queueset::reference::{Event, Outcome, ReferenceQueueSet};
use apf::queueset::{Admission, Guard, QueueSet, QueueSetConfig, RejectReason, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

// ----- scenario description ------------------------------------------------

/// A closed-loop client: `threads` simulated threads, each making `calls`
/// synchronous calls one after another.
#[derive(Debug, Clone, Copy)]
struct Client {
    hash: u64,
    threads: u32,
    calls: u32,
    /// Execution time of each call, nanoseconds.
    exec: u64,
    /// Time from the end of one call's execution to the next call,
    /// nanoseconds; negative means the next call is issued that long before
    /// the current one ends (as Kubernetes' windup test does).
    think: i64,
    initial_seats: u32,
    final_seats: u32,
    /// Additional latency, nanoseconds: final seats stay occupied that long
    /// after execution; the client does not wait for it.
    latency: u64,
    /// When the client's threads start, nanoseconds.
    start: u64,
}

impl Client {
    fn new(hash: u64, threads: u32, exec: u64, think: i64) -> Client {
        Client {
            hash,
            threads,
            calls: u32::MAX,
            exec,
            think,
            initial_seats: 1,
            final_seats: 0,
            latency: 0,
            start: 0,
        }
    }
    fn width(mut self, seats: u32) -> Client {
        self.initial_seats = seats;
        self
    }
    fn pad(mut self, final_seats: u32, latency: u64) -> Client {
        self.final_seats = final_seats;
        self.latency = latency;
        self
    }
    fn starting_at(mut self, start: u64) -> Client {
        self.start = start;
        self
    }
    fn estimate(&self) -> WorkEstimate {
        WorkEstimate::new(
            self.initial_seats,
            self.final_seats,
            Duration::from_nanos(self.latency),
        )
    }
    /// Kubernetes' demand formula: the seats this client would keep
    /// executing if it never waited.
    fn demand(&self) -> f64 {
        let cycle = self.exec as f64 + self.think as f64;
        self.threads as f64 * self.initial_seats as f64 * self.exec as f64 / cycle
    }
}

fn config(limit: u32, queues: u32, hand: u32, queue_length_limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "fairness".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_secs(60),
    }
}

// ----- the two systems under test -------------------------------------------

type Id = u64;

/// What the driver needs from a queueset: explicit times, requests by id.
trait System {
    /// Move time to `t`, running the system's timers on the way.
    fn advance_to(&mut self, t: Instant);
    fn start(&mut self, now: Instant, id: Id, flow_hash: u64, e: WorkEstimate) -> Outcome;
    fn finish(&mut self, now: Instant, id: Id);
    /// Requests decided since the last call (dispatched, or refused), in id
    /// order, with the estimate a dispatched request holds seats for.
    fn decisions(&mut self, now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)>;
    /// (seats in use, requests executing, requests waiting).
    fn counts(&mut self) -> (u32, u32, u32);
    fn clamped_estimates(&mut self) -> u64;
}

struct Real<'q> {
    qs: &'q QueueSet,
    manual: ManualClock,
    executing: BTreeMap<Id, Guard<'q>>,
    /// Waiting requests, with the estimate each asked for.
    waiting: BTreeMap<Id, (Ticket<'q>, WorkEstimate)>,
}

impl Real<'_> {
    /// The queueset holds seats for the estimate the driver expects.
    fn check_estimate(&self, id: Id, asked: WorkEstimate, held: WorkEstimate) {
        let limit = self.qs.config().concurrency_limit;
        assert_eq!(held, clamp(asked, limit), "estimate held by request {id}");
    }
}

impl System for Real<'_> {
    fn advance_to(&mut self, t: Instant) {
        self.manual.advance_to(t);
    }

    fn start(&mut self, now: Instant, id: Id, flow_hash: u64, e: WorkEstimate) -> Outcome {
        assert_eq!(self.qs.clock().now(), now);
        let request = Request {
            flow_hash,
            estimate: e,
            deadline: None,
        };
        match self.qs.start(&request) {
            Admission::Execute(g) => {
                assert_eq!(g.start_time(), now);
                self.check_estimate(id, e, g.estimate());
                self.executing.insert(id, g);
                Outcome::Execute
            }
            Admission::Queued(t) => {
                self.waiting.insert(id, (t, e));
                Outcome::Queued
            }
            Admission::Rejected(r) => Outcome::Rejected(r),
        }
    }

    fn finish(&mut self, now: Instant, id: Id) {
        let g = self
            .executing
            .remove(&id)
            .expect("finishing an executing request");
        g.finish_at(now);
    }

    fn decisions(&mut self, now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)> {
        let mut out = Vec::new();
        let ids: Vec<Id> = self.waiting.keys().copied().collect();
        for id in ids {
            let (ticket, asked) = self.waiting.get_mut(&id).expect("listed");
            let asked = *asked;
            match ticket.poll() {
                None => continue,
                Some(Ok(g)) => {
                    // Every timer of the queueset falls on an event time of
                    // the driver, so a dispatch is seen at its own instant.
                    assert_eq!(g.start_time(), now, "request {id} dispatched late");
                    self.check_estimate(id, asked, g.estimate());
                    out.push((id, Ok(g.estimate())));
                    self.executing.insert(id, g);
                }
                Some(Err(r)) => out.push((id, Err(r))),
            }
            self.waiting.remove(&id);
        }
        out
    }

    fn counts(&mut self) -> (u32, u32, u32) {
        let st = self.qs.stats();
        (st.seats_in_use, st.requests_executing, st.requests_waiting)
    }

    fn clamped_estimates(&mut self) -> u64 {
        self.qs.stats().clamped_estimates
    }
}

struct Model {
    rqs: ReferenceQueueSet,
}

impl System for Model {
    fn advance_to(&mut self, t: Instant) {
        self.rqs.advance_to(t);
    }

    fn start(&mut self, now: Instant, id: Id, flow_hash: u64, e: WorkEstimate) -> Outcome {
        self.rqs.start(now, id, flow_hash, e, None)
    }

    fn finish(&mut self, now: Instant, id: Id) {
        self.rqs.finish(now, id);
    }

    fn decisions(&mut self, _now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)> {
        let mut out: Vec<_> = self
            .rqs
            .take_events()
            .into_iter()
            .map(|e| match e {
                // The model does not hand estimates back: the driver's own
                // clamp supplies them (the real run checks that clamp).
                Event::Dispatched(id) => (id, Ok(WorkEstimate::default())),
                Event::Rejected(id, r) => (id, Err(r)),
            })
            .collect();
        out.sort_by_key(|&(id, _)| id);
        out
    }

    fn counts(&mut self) -> (u32, u32, u32) {
        (
            self.rqs.seats_in_use(),
            self.rqs.requests_executing(),
            self.rqs.requests_waiting(),
        )
    }

    fn clamped_estimates(&mut self) -> u64 {
        self.rqs.clamped_estimates()
    }
}

// ----- the driver -------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Thread `thread` of client `client` makes its call number `k`.
    Call { client: usize, thread: u32, k: u32 },
    /// Request `id` ends its execution.
    Finish { id: Id },
    /// Nothing to do: makes the clock stop at a system timer's instant
    /// (a lingering release or a wait deadline).
    Wake,
}

/// One request's life, as observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Served {
    client: usize,
    start: u64,
    exec_end: u64,
    /// End of the additional latency (= `exec_end` when there is none).
    release: u64,
    initial_seats: u32,
    /// Seats held from start to release: max(initial, final) after clamping.
    seats: u32,
}

/// What a scenario produced.
#[derive(Debug, PartialEq)]
struct Trace {
    served: Vec<Served>,
    /// (client, reason) of every refused request.
    refused: Vec<(usize, RejectReason)>,
    /// Requests each client started (served, refused or still waiting).
    started: Vec<u64>,
    clamped: u64,
}

struct Pending {
    client: usize,
    thread: u32,
    k: u32,
    estimate: WorkEstimate,
}

/// The estimate the queueset holds seats for: at least one initial seat
/// (never capped at the limit: a wider request runs alone, at its width),
/// final seats over the limit reduced to it with the latency stretched to
/// keep the final work.
fn clamp(e: WorkEstimate, limit: u32) -> WorkEstimate {
    let mut e = WorkEstimate {
        initial_seats: e.initial_seats.max(1),
        ..e
    };
    if e.final_seats > limit && limit > 0 {
        let work = e.final_seats as u128 * e.additional_latency.as_nanos();
        let stretched = u64::try_from(work / limit as u128).unwrap_or(u64::MAX);
        e.additional_latency = Duration::from_nanos(stretched);
        e.final_seats = limit;
    }
    e
}

struct Driver<'s, S: System> {
    sys: &'s mut S,
    clients: &'s [Client],
    limit: u32,
    wait_limit: u64,
    horizon: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    next_id: Id,
    pending: BTreeMap<Id, Pending>,
    executing: BTreeMap<Id, Served>,
    lingering: Vec<Served>,
    trace: Trace,
}

impl<'s, S: System> Driver<'s, S> {
    fn run(sys: &'s mut S, cfg: &QueueSetConfig, clients: &'s [Client], horizon: u64) -> Trace {
        let mut d = Driver {
            sys,
            clients,
            limit: cfg.concurrency_limit,
            wait_limit: cfg.wait_limit.as_nanos() as u64,
            horizon,
            events: BinaryHeap::new(),
            seq: 0,
            next_id: 0,
            pending: BTreeMap::new(),
            executing: BTreeMap::new(),
            lingering: Vec::new(),
            trace: Trace {
                served: Vec::new(),
                refused: Vec::new(),
                started: vec![0; clients.len()],
                clamped: 0,
            },
        };
        for (client, c) in clients.iter().enumerate() {
            for thread in 0..c.threads {
                // Small distinct offsets so that no two threads call at
                // exactly the same instant.
                let at = c.start + 101 * thread as u64 + 17 * client as u64;
                d.schedule(
                    at,
                    Ev::Call {
                        client,
                        thread,
                        k: 0,
                    },
                );
            }
        }
        while let Some(Reverse((t, _, ev))) = d.events.pop() {
            if t > horizon {
                break;
            }
            let now = Instant::from_nanos(t);
            d.sys.advance_to(now);
            d.collect(t);
            match ev {
                Ev::Call { client, thread, k } => d.call(t, client, thread, k),
                Ev::Finish { id } => d.finish(t, id),
                Ev::Wake => {}
            }
            d.collect(t);
            d.check_counts(t);
        }
        d.trace.clamped = d.sys.clamped_estimates();
        d.trace
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        if at <= self.horizon {
            self.seq += 1;
            self.events.push(Reverse((at, self.seq, ev)));
        }
    }

    fn call(&mut self, t: u64, client: usize, thread: u32, k: u32) {
        let c = &self.clients[client];
        if k >= c.calls {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let estimate = c.estimate();
        self.trace.started[client] += 1;
        self.pending.insert(
            id,
            Pending {
                client,
                thread,
                k,
                estimate,
            },
        );
        match self.sys.start(Instant::from_nanos(t), id, c.hash, estimate) {
            Outcome::Execute => {
                let p = self.pending.remove(&id).expect("just inserted");
                self.begin(t, id, p);
            }
            Outcome::Queued => self.schedule(t + self.wait_limit, Ev::Wake),
            Outcome::Rejected(r) => {
                self.pending.remove(&id);
                // Like Kubernetes' test clients, a refused thread stops.
                self.trace.refused.push((client, r));
            }
        }
    }

    fn finish(&mut self, t: u64, id: Id) {
        let s = self.executing.remove(&id).expect("executing");
        self.sys.finish(Instant::from_nanos(t), id);
        assert_eq!(s.exec_end, t);
        if s.release > t {
            self.schedule(s.release, Ev::Wake);
            self.lingering.push(s);
        }
    }

    /// Take the system's decisions: start what was dispatched.
    fn collect(&mut self, t: u64) {
        let now = Instant::from_nanos(t);
        let decided = self.sys.decisions(now);
        for (id, d) in decided {
            let p = self
                .pending
                .remove(&id)
                .expect("decided request was pending");
            match d {
                Ok(_) => self.begin(t, id, p),
                Err(r) => self.trace.refused.push((p.client, r)),
            }
        }
    }

    fn begin(&mut self, t: u64, id: Id, p: Pending) {
        let c = self.clients[p.client];
        let e = clamp(p.estimate, self.limit);
        let exec_end = t + c.exec;
        let s = Served {
            client: p.client,
            start: t,
            exec_end,
            release: exec_end + e.additional_latency.as_nanos() as u64,
            initial_seats: e.initial_seats,
            seats: e.max_seats(),
        };
        self.executing.insert(id, s);
        self.trace.served.push(s);
        self.schedule(exec_end, Ev::Finish { id });
        let next = (exec_end as i64 + c.think).max(t as i64 + 1) as u64;
        self.schedule(
            next,
            Ev::Call {
                client: p.client,
                thread: p.thread,
                k: p.k + 1,
            },
        );
    }

    /// Seats in use equal the seats of executing and lingering requests.
    fn check_counts(&mut self, t: u64) {
        self.lingering.retain(|s| s.release > t);
        let seats: u32 = self
            .executing
            .values()
            .chain(self.lingering.iter())
            .map(|s| s.seats)
            .sum();
        assert_eq!(
            self.sys.counts(),
            (
                seats,
                self.executing.len() as u32,
                self.pending.len() as u32
            ),
            "(seats, executing, waiting) at t={t}"
        );
    }
}

// ----- running and measuring ----------------------------------------------------

/// Run a scenario through the queueset and through the reference model;
/// both must serve the same requests at the same instants.
fn simulate(cfg: &QueueSetConfig, clients: &[Client], horizon: u64) -> Trace {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg.clone(), clock).expect("valid config");
    let mut real = Real {
        qs: &qs,
        manual,
        executing: BTreeMap::new(),
        waiting: BTreeMap::new(),
    };
    let got = Driver::run(&mut real, cfg, clients, horizon);
    drop(real);
    let mut model = Model {
        rqs: ReferenceQueueSet::new(cfg.clone(), Instant::ZERO).expect("valid config"),
    };
    let expected = Driver::run(&mut model, cfg, clients, horizon);
    assert_eq!(got.served.len(), expected.served.len(), "requests served");
    if let Some(i) = (0..got.served.len()).find(|&i| got.served[i] != expected.served[i]) {
        panic!(
            "queueset and reference model diverge at request {i}: {:?} vs {:?}",
            got.served[i], expected.served[i]
        );
    }
    assert_eq!(got, expected);
    got
}

/// Average over `[from, to)` of each client's seats, where `seats` says
/// which seats of a request count over which interval.
fn averages(
    trace: &Trace,
    clients: usize,
    from: u64,
    to: u64,
    seats: impl Fn(&Served) -> (u64, u64, u32),
) -> Vec<f64> {
    let mut integral = vec![0u128; clients];
    for s in &trace.served {
        let (a, b, n) = seats(s);
        let (a, b) = (a.max(from), b.min(to));
        if b > a {
            integral[s.client] += (b - a) as u128 * n as u128;
        }
    }
    integral
        .into_iter()
        .map(|i| i as f64 / (to - from) as f64)
        .collect()
}

/// Seats held while executing (initial seats), as Kubernetes' tests measure.
fn exec_seats(trace: &Trace, clients: usize, from: u64, to: u64) -> Vec<f64> {
    averages(trace, clients, from, to, |s| {
        (s.start, s.exec_end, s.initial_seats)
    })
}

/// Seats occupied from dispatch to the end of the additional latency.
fn occupied_seats(trace: &Trace, clients: usize, from: u64, to: u64) -> Vec<f64> {
    averages(trace, clients, from, to, |s| (s.start, s.release, s.seats))
}

/// Max-min fair allocation of `capacity` to `demands` (water filling).
fn fair_alloc(demands: &[f64], capacity: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    let mut alloc = vec![0.0; demands.len()];
    let mut left = capacity;
    for (n, &i) in order.iter().enumerate() {
        let share = left / (order.len() - n) as f64;
        alloc[i] = demands[i].min(share);
        left -= alloc[i];
    }
    alloc
}

/// Kubernetes' allocation: max-min among queues. A client with `threads`
/// concurrent calls spreads them over min(threads, hand size) queues of its
/// hand (each with an equal part of its demand). Hands must not overlap.
fn queue_fair(cfg: &QueueSetConfig, clients: &[Client], demands: &[f64]) -> Vec<f64> {
    let dealer = Dealer::new(cfg.queues, cfg.hand_size).expect("valid dealer");
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    let mut queue_demands = Vec::new();
    let mut queue_client = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let hand = dealer.deal_into_hand(c.hash);
        for &q in hand.iter() {
            if let Some(other) = owner.insert(q, i) {
                assert_eq!(
                    other, i,
                    "clients {other} and {i} share queue {q}: pick other hashes"
                );
            }
        }
        let k = c.threads.min(cfg.hand_size);
        for _ in 0..k {
            queue_demands.push(demands[i] / k as f64);
            queue_client.push(i);
        }
    }
    let per_queue = fair_alloc(&queue_demands, cfg.concurrency_limit as f64);
    let mut alloc = vec![0.0; clients.len()];
    for (a, &i) in per_queue.iter().zip(&queue_client) {
        alloc[i] += a;
    }
    alloc
}

#[track_caller]
fn assert_within(what: &str, got: &[f64], expected: &[f64], tolerance: f64) {
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let off = if e > 0.0 { (g - e).abs() / e } else { g.abs() };
        assert!(
            off <= tolerance,
            "{what}: client {i} got {g:.4} seats, expected {e:.4} (off by {:.2}%, tolerance {:.1}%)\n  all: got {got:.4?}, expected {expected:.4?}",
            off * 100.0,
            tolerance * 100.0
        );
    }
    eprintln!("{what}: got {got:.4?}, expected {expected:.4?}");
}

fn no_refusals(trace: &Trace) {
    assert!(trace.refused.is_empty(), "refused: {:?}", trace.refused);
}

fn demands(clients: &[Client]) -> Vec<f64> {
    clients.iter().map(Client::demand).collect()
}

// ----- scenarios --------------------------------------------------------------------

/// `n` flow hashes whose hands (for `queues` and `hand`) are pairwise
/// disjoint, found by a fixed search so every run uses the same ones.
fn disjoint_flows(queues: u32, hand: u32, n: usize) -> Vec<u64> {
    let dealer = Dealer::new(queues, hand).expect("valid dealer");
    let mut used = vec![false; queues as usize];
    let mut out = Vec::new();
    for i in 1u64.. {
        let h = i.wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(17);
        let cards = dealer.deal_into_hand(h);
        if cards.iter().all(|&q| !used[q as usize]) {
            cards.iter().for_each(|&q| used[q as usize] = true);
            out.push(h);
            if out.len() == n {
                break;
            }
        }
    }
    out
}

/// The average of clients `ids` together (a flow made of several clients).
fn sum_of(averages: &[f64], ids: &[usize]) -> f64 {
    ids.iter().map(|&i| averages[i]).sum()
}

// Tolerances. Kubernetes' queueset tests allow 1% for uniform flows with
// hand size 1, 3% with hand size 3, 15.5% for mixed widths and 35% for a
// request wider than the limit. The deviations come from the scenario, not
// from arithmetic: a flow's count of requests inside the window differs by
// one from another's depending on its phase (1 s of one seat out of 120 s
// of six seats is 0.8%), and a wide request waiting for enough free seats
// leaves the others idle. Every comment below quotes the numbers that
// k8s.io/apiserver v0.37.2's queueset gave for the very same scenario (same
// hashes, same clients, its own test harness and fake clock), so each
// tolerance can be judged against both implementations.

const THINK: i64 = 999 * MS as i64; // just under the execution time

#[test]
fn uniform_flows_get_equal_shares_with_hand_size_1() {
    let cfg = config(6, 16, 1, 50);
    let clients: Vec<Client> = disjoint_flows(16, 1, 3)
        .into_iter()
        .map(|h| Client::new(h, 6, SEC, THINK))
        .collect();
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Ours: 2.000, 1.983, 2.017. Kubernetes: the same.
    assert_within(
        "uniform, hand 1",
        &exec_seats(&t, 3, 0, horizon),
        &fair_alloc(&demands(&clients), 6.0),
        0.01,
    );
}

#[test]
fn uniform_flows_get_equal_shares_with_hand_size_3() {
    let cfg = config(6, 16, 3, 50);
    let clients: Vec<Client> = disjoint_flows(16, 3, 3)
        .into_iter()
        .map(|h| Client::new(h, 8, SEC, THINK))
        .collect();
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    let d = demands(&clients);
    // Every flow fills its three queues, so queue-level and flow-level
    // fairness agree.
    assert_eq!(queue_fair(&cfg, &clients, &d), fair_alloc(&d, 6.0));
    // Ours: 2.017, 1.958, 2.025. Kubernetes: 1.967, 1.975, 2.058.
    assert_within(
        "uniform, hand 3",
        &exec_seats(&t, 3, 0, horizon),
        &fair_alloc(&d, 6.0),
        0.03,
    );
}

#[test]
fn one_greedy_flow_leaves_light_flows_their_full_demand() {
    // Twelve greedy threads against five one-thread flows that think three
    // times as long as they execute (demand 0.25 each): max-min gives the
    // light flows all they ask for. A light request arrives while the level
    // is full; it must be chosen ahead of the greedy flow's queued requests
    // at the next free seat, or its thread falls behind (first come, first
    // served would make it wait behind the greedy flow's backlog).
    for hand in [1, 4] {
        let cfg = config(8, 64, hand, 50);
        let flows = disjoint_flows(64, hand, 6);
        let mut clients = vec![Client::new(flows[0], 12, SEC, 0)];
        clients.extend(
            flows[1..]
                .iter()
                .map(|&h| Client::new(h, 1, SEC, 3 * SEC as i64)),
        );
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let d = demands(&clients);
        // The greedy flow spreads over its hand, but the light flows ask for
        // less than one queue's share, so the queue-level split is the same.
        assert_eq!(queue_fair(&cfg, &clients, &d), fair_alloc(&d, 8.0));
        // Ours and Kubernetes': 6.75 and 0.25 each, exactly.
        assert_within(
            &format!("greedy vs light, hand {hand}"),
            &exec_seats(&t, clients.len(), 0, horizon),
            &fair_alloc(&d, 8.0),
            0.01,
        );
    }
}

#[test]
fn widths_one_and_two_share_seats_fairly() {
    for (hand, flows) in [(1, disjoint_flows(32, 1, 2)), (4, disjoint_flows(32, 4, 2))] {
        let cfg = config(6, 32, hand, 50);
        let clients = vec![
            Client::new(flows[0], 10, SEC, THINK),
            Client::new(flows[1], 6, SEC, THINK).width(2),
        ];
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        // Both ask for more than half. Seats go idle while a two-seat head
        // waits for a second free seat, mostly at the one-seat flow's cost.
        // Hand 1 — ours: 2.892, 3.000; Kubernetes: the same.
        // Hand 4 — ours: 2.775, 2.950; Kubernetes: 2.725, 2.967.
        assert_within(
            &format!("widths 1 and 2, hand {hand}"),
            &exec_seats(&t, 2, 0, horizon),
            &fair_alloc(&demands(&clients), 6.0),
            0.15,
        );
    }
}

#[test]
fn a_request_wider_than_the_limit_is_served_among_narrow_ones() {
    let cfg = config(5, 32, 3, 50);
    let flows = disjoint_flows(32, 3, 4);
    let mut clients: Vec<Client> = flows[..3]
        .iter()
        .map(|&h| Client::new(h, 8, SEC, THINK))
        .collect();
    clients.push(Client::new(flows[3], 4, SEC, THINK).width(8));
    let horizon = 240 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Eight seats over a limit of five: as in Kubernetes, not clamped: each
    // such request waits until nothing executes, then runs alone holding
    // all eight seats.
    assert_eq!(t.clamped, 0, "no wide request is clamped");
    let wide: Vec<&Served> = t.served.iter().filter(|s| s.client == 3).collect();
    assert!(wide.iter().all(|s| s.initial_seats == 8));
    assert!(wide.len() >= 40, "wide requests served: {}", wide.len());
    // Draining the level for each wide request idles seats that the narrow
    // flows would have used, and the wide flow, served in whole-level
    // chunks and counted at eight seats, comes out ahead, as in Kubernetes
    // (measured there on this scenario: 1.088, 1.042, 1.038 and 2.133).
    let got = exec_seats(&t, 4, 0, horizon);
    eprintln!("too wide: {got:?}");
    assert_within("too wide", &got, &[1.088, 1.042, 1.038, 2.133], 0.10);
}

#[test]
fn additional_latency_counts_as_seats_in_use() {
    // Alone, exactly (as Kubernetes' separation tests): one thread, 1 s
    // execution, no think time, one final seat for 1 s more, limit 1: each
    // call waits for the previous call's final seat, so it executes half the
    // time. Two such flows: a quarter each.
    for n in [1usize, 2] {
        let cfg = config(1, 16, 1, 50);
        let clients: Vec<Client> = disjoint_flows(16, 1, n)
            .into_iter()
            .map(|h| Client::new(h, 1, SEC, 0).pad(1, SEC))
            .collect();
        let horizon = 24 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let expected = vec![0.5 / n as f64; n];
        assert_within(
            &format!("padded alone, {n} flows"),
            &exec_seats(&t, n, 0, horizon),
            &expected,
            1e-6,
        );
    }

    // Competing: flow 0 holds a final seat for 1 s after each 1 s call,
    // flow 1 does not. Fair queuing charges the final seats too, so the
    // flows get equal *occupied* seats (2 each of 4), and flow 0 executes
    // half as much. Ours: executing 1.000, 2.008, occupied 1.992, 2.008;
    // Kubernetes (executing): 1.017, 1.992.
    let cfg = config(4, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 4, SEC, 0).pad(1, SEC),
        Client::new(flows[1], 4, SEC, 0),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Occupancy demand per thread: (1 s + 1 s) of seats per 1 s cycle.
    let occupancy_demand = [8.0, 4.0];
    let occupied = fair_alloc(&occupancy_demand, 4.0);
    assert_within(
        "with latency, occupied",
        &occupied_seats(&t, 2, 0, horizon),
        &occupied,
        0.02,
    );
    assert_within(
        "with latency, executing",
        &exec_seats(&t, 2, 0, horizon),
        &[occupied[0] / 2.0, occupied[1]],
        0.02,
    );
}

#[test]
fn a_flow_returning_after_a_long_idle_gets_no_credit_for_it() {
    // Flow 1 is idle for the first minute while flow 0 uses the whole level
    // and R advances. Its queue restarts at the current R, so it comes back
    // to half the level, not to a minute's worth of catching up (which
    // would give it all four seats for a long while). Two rules each
    // prevent that credit here: the restart of an idle queue and the
    // anti-windup bound; this scenario fails only when both are removed
    // (checked by hand), the unit tests pin each one alone.
    let cfg = config(4, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 8, SEC, 0),
        Client::new(flows[1], 8, SEC, 0).starting_at(60 * SEC),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    assert_within(
        "alone",
        &exec_seats(&t, 2, 0, 60 * SEC),
        &fair_alloc(&[8.0, 0.0], 4.0),
        0.01,
    );
    // The first seconds back: flow 0's last requests are charged when they
    // finish, so flow 1 takes the seats they free, then the two alternate.
    // Ours: 1.8 and 2.2 over the first 5 s.
    let back = exec_seats(&t, 2, 60 * SEC, 65 * SEC);
    assert!(
        back[1] <= 2.0 * 1.15,
        "flow 1 right after its return: {back:?}"
    );
    assert_within(
        "after the return",
        &exec_seats(&t, 2, 60 * SEC, horizon),
        &fair_alloc(&demands(&clients), 4.0),
        0.01,
    );
}

#[test]
fn windup_of_an_underusing_flow_is_only_partly_bounded_as_in_kubernetes() {
    // Kubernetes' windup case: flow 1 is active but can use only one seat
    // of the 1.5 it is entitled to during the first minute, so its queue
    // falls behind in virtual time; in the second minute it can use more
    // and gets more than half. The anti-windup bound (a queue never starts
    // before its oldest request's arrival) removes part of that credit, not
    // all: Kubernetes' own test requires the second-half error to lie
    // between 10% and 26%. Flow 1 is two clients of one hash: one thread
    // throughout and one from the second minute. Each thread calls again
    // 1 ns before its call ends.
    let cfg = config(3, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 2, SEC, -1),
        Client::new(flows[1], 1, SEC, -1),
        Client::new(flows[1], 1, SEC, -1).starting_at(60 * SEC),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    let first = exec_seats(&t, 3, 0, 60 * SEC);
    assert_within(
        "windup, first minute",
        &[first[0], sum_of(&first, &[1, 2])],
        &fair_alloc(&[2.0, 1.0], 3.0),
        0.01,
    );
    // Ours: 1.25 and 1.75. Kubernetes: the same.
    let second = exec_seats(&t, 3, 60 * SEC, horizon);
    let (f0, f1) = (second[0], sum_of(&second, &[1, 2]));
    let off = (f1 - 1.5) / 1.5;
    assert!(
        (0.10..=0.26).contains(&off) && (f0 + f1 - 3.0).abs() < 0.03,
        "windup, second minute: {f0:.4} and {f1:.4} (flow 1 off by {:.1}%)",
        off * 100.0
    );
}

#[test]
fn a_many_threaded_flow_spreads_over_its_hand_as_in_kubernetes() {
    // Queues, not flows, compete fairly. Sixteen threads of flow 0 fill all
    // six queues of its hand; flow 1's single thread holds one queue. Max-
    // min fairness among flows would give 3 and 1; fairness among the seven
    // queues would give 3.43 and 0.57. Kubernetes lands in between, and so
    // must we: flow 1's queue competes while its request waits, but between
    // its calls it is empty and its request then waits for the next seat.
    // Kubernetes on these very scenarios: 3.275/0.725 (16 queues) and
    // 3.292/0.708 (64 queues). Ours: 3.283/0.717 for both.
    for (queues, kubernetes) in [(16, [3.275, 0.725]), (64, [3.292, 0.708])] {
        let cfg = config(4, queues, 6, 50);
        let flows = disjoint_flows(queues, 6, 2);
        let clients = vec![
            Client::new(flows[0], 16, SEC, 0),
            Client::new(flows[1], 1, SEC, 0),
        ];
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let got = exec_seats(&t, 2, 0, horizon);
        let d = demands(&clients);
        let (flow_fair, queue_level) = (fair_alloc(&d, 4.0), queue_fair(&cfg, &clients, &d));
        assert!(
            queue_level[1] < got[1] && got[1] < 0.8 * flow_fair[1],
            "flow 1 got {:.4}: expected between the queue-level {:.4} and 80% of the flow-level {:.4}",
            got[1],
            queue_level[1],
            flow_fair[1]
        );
        // Within 3% of Kubernetes' numbers (the two differ in how they order
        // events of the same instant and in R's arithmetic, fixed point here
        // against floating point there).
        assert_within(
            &format!("spread over the hand, {queues} queues"),
            &got,
            &kubernetes,
            0.03,
        );
    }
}
