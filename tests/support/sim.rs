//! The fairness simulation harness shared by `tests/queueset/fairness.rs` and
//! `tests/queueset/k8s_scenarios.rs`: closed-loop clients driven by a small
//! discrete-event simulator on the manual clock, each scenario run through
//! both the queueset and the reference model (which must agree event for
//! event), and the measures the scenarios assert on (average seats per
//! client, max-min fair allocations, the seat-demand integral).
//!
//! Included with `#[path]` by each test crate; not every crate uses every
//! helper.
#![allow(dead_code)]

use apf::classification::RequestDigest;
use apf::clock::{Clock, Instant, ManualClock};
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::level::RequestGuard;
use apf::queueset::reference::{Accounting, Event, Outcome, ReferenceQueueSet, WaitingOrder};
use apf::queueset::{
    Admission, Guard, QueueSet, QueueSetConfig, QueueSetStats, RejectReason, Request, Ticket,
};
use apf::stats::{IntegratorResults, SeatDemandHandle, SeatDemandIntegrator};
use apf::work_estimate::WorkEstimate;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

pub const SEC: u64 = 1_000_000_000;
pub const MS: u64 = 1_000_000;

// ----- scenario description ------------------------------------------------

/// A closed-loop client: `threads` simulated threads, each making `calls`
/// synchronous calls one after another.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub hash: u64,
    pub threads: u32,
    pub calls: u32,
    /// Execution time of each call, nanoseconds.
    pub exec: u64,
    /// Time from the end of one call's execution to the next call,
    /// nanoseconds; negative means the next call is issued that long before
    /// the current one ends (as Kubernetes' windup test does).
    pub think: i64,
    pub initial_seats: u32,
    pub final_seats: u32,
    /// Additional latency, nanoseconds: final seats stay occupied that long
    /// after execution; the client does not wait for it.
    pub latency: u64,
    /// When the client's threads start, nanoseconds.
    pub start: u64,
    /// Kubernetes' split clients: the second half of the threads (by
    /// index) start this much later and make half as many calls.
    pub split_at: Option<u64>,
    /// A watch-like request: it gives all its seats back this long after
    /// it starts, and executes on without seats until `exec` is over.
    pub release_after: Option<u64>,
}

impl Client {
    pub fn new(hash: u64, threads: u32, exec: u64, think: i64) -> Client {
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
            split_at: None,
            release_after: None,
        }
    }
    /// Each request releases all its seats `after` its start (a watch after
    /// its initial burst) and executes on until `exec` is over.
    pub fn release_early(mut self, after: u64) -> Client {
        self.release_after = Some(after);
        self
    }
    /// How long each request holds its seats.
    pub fn held(&self) -> u64 {
        self.release_after.map_or(self.exec, |r| r.min(self.exec))
    }
    /// Each thread makes `calls` calls, then stops.
    pub fn calls(mut self, calls: u32) -> Client {
        self.calls = calls;
        self
    }
    /// Threads `threads / 2 ..` start `at` later, with half the calls.
    pub fn split(mut self, at: u64) -> Client {
        self.split_at = Some(at);
        self
    }
    pub fn width(mut self, seats: u32) -> Client {
        self.initial_seats = seats;
        self
    }
    pub fn pad(mut self, final_seats: u32, latency: u64) -> Client {
        self.final_seats = final_seats;
        self.latency = latency;
        self
    }
    pub fn starting_at(mut self, start: u64) -> Client {
        self.start = start;
        self
    }
    pub fn estimate(&self) -> WorkEstimate {
        WorkEstimate::new(
            self.initial_seats,
            self.final_seats,
            Duration::from_nanos(self.latency),
        )
    }
    /// Kubernetes' demand formula: the seats this client would keep
    /// executing if it never waited.
    pub fn demand(&self) -> f64 {
        let cycle = self.exec as f64 + self.think as f64;
        self.threads as f64 * self.initial_seats as f64 * self.held() as f64 / cycle
    }
}

pub fn config(limit: u32, queues: u32, hand: u32, queue_length_limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "fairness".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit,
        service_time_guess: Duration::from_millis(3),
        wait_limit: Duration::from_secs(60),
        fairness: apf::queueset::Fairness::Kubernetes,
    }
}

// ----- the two systems under test -------------------------------------------

pub type Id = u64;

/// What the driver needs from a queueset: explicit times, requests by id.
pub trait System {
    /// Move time to `t`, running the system's timers on the way.
    fn advance_to(&mut self, t: Instant);
    fn start(&mut self, now: Instant, id: Id, flow_hash: u64, e: WorkEstimate) -> Outcome;
    fn finish(&mut self, now: Instant, id: Id);
    /// An executing request gives all its seats back and executes on.
    fn release(&mut self, _now: Instant, _id: Id) {
        unimplemented!("early release")
    }
    /// A new configuration.
    fn reconfigure(&mut self, _now: Instant, _cfg: &QueueSetConfig) {
        unimplemented!("reconfiguration")
    }
    /// Requests decided since the last call (dispatched, or refused), in id
    /// order, with the estimate a dispatched request holds seats for.
    fn decisions(&mut self, now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)>;
    /// (seats in use, requests executing, requests waiting).
    fn counts(&mut self) -> (u32, u32, u32);
    fn clamped_estimates(&mut self) -> u64;
    /// The system's own seat-demand integral since the start, if it keeps
    /// one the harness can read.
    fn demand(&mut self, now: Instant) -> Option<IntegratorResults>;
}

struct Real<'q> {
    qs: &'q QueueSet,
    manual: ManualClock,
    executing: BTreeMap<Id, Guard<'q>>,
    /// Waiting requests, with the estimate each asked for.
    waiting: BTreeMap<Id, (Ticket<'q>, WorkEstimate)>,
    /// Waiting requests whose ticket woke (decided): only these are polled,
    /// so a scenario with thousands waiting costs no poll of each per event.
    woken: Arc<Mutex<Vec<Id>>>,
    /// The queueset's seat-demand observer (as borrowing would attach).
    demand: SeatDemandHandle,
}

/// Wakes a waiting request's ticket: lists its id for the next poll.
struct WokenId {
    id: Id,
    woken: Arc<Mutex<Vec<Id>>>,
}

impl Wake for WokenId {
    fn wake(self: Arc<Self>) {
        self.woken.lock().expect("not poisoned").push(self.id);
    }
}

impl<'q> Real<'q> {
    /// Poll waiting request `id`'s ticket, leaving a waker that lists it
    /// when it is decided.
    fn poll_ticket(
        &self,
        id: Id,
        ticket: &mut Ticket<'q>,
    ) -> Poll<Result<Guard<'q>, RejectReason>> {
        let waker = Waker::from(Arc::new(WokenId {
            id,
            woken: self.woken.clone(),
        }));
        Pin::new(ticket).poll(&mut Context::from_waker(&waker))
    }

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
            Admission::Queued(mut t) => {
                if self.poll_ticket(id, &mut t).is_ready() {
                    panic!("request {id} decided before the queueset returned");
                }
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

    fn release(&mut self, _now: Instant, id: Id) {
        let g = self
            .executing
            .get_mut(&id)
            .expect("releasing an executing request");
        g.release_all_seats().expect("seats to release");
    }

    fn reconfigure(&mut self, _now: Instant, cfg: &QueueSetConfig) {
        self.qs.reconfigure(cfg.clone()).expect("valid config");
    }

    fn decisions(&mut self, now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)> {
        let mut out = Vec::new();
        let mut ids = std::mem::take(&mut *self.woken.lock().expect("not poisoned"));
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let Some((mut ticket, asked)) = self.waiting.remove(&id) else {
                continue;
            };
            match self.poll_ticket(id, &mut ticket) {
                Poll::Pending => {
                    self.waiting.insert(id, (ticket, asked));
                }
                Poll::Ready(Ok(g)) => {
                    // Every timer of the queueset falls on an event time of
                    // the driver, so a dispatch is seen at its own instant.
                    assert_eq!(g.start_time(), now, "request {id} dispatched late");
                    self.check_estimate(id, asked, g.estimate());
                    out.push((id, Ok(g.estimate())));
                    self.executing.insert(id, g);
                }
                Poll::Ready(Err(r)) => out.push((id, Err(r))),
            }
        }
        out
    }

    fn counts(&mut self) -> (u32, u32, u32) {
        // Seats held for a flow's next request (flow policy) belong to no
        // request the driver holds.
        let st = self.qs.stats();
        (
            st.seats_in_use - st.held_seats,
            st.requests_executing,
            st.requests_waiting,
        )
    }

    fn clamped_estimates(&mut self) -> u64 {
        self.qs.stats().clamped_estimates
    }

    fn demand(&mut self, now: Instant) -> Option<IntegratorResults> {
        // Hot-path changes reach the observer when the ring is replayed.
        self.qs.catch_up();
        Some(self.demand.results(now))
    }
}

struct Model {
    rqs: ReferenceQueueSet,
    /// The driver's time (under `Accounting::Epoch`, an observation merges
    /// the model's ledger then, as the queueset's observations merge its
    /// ledgers).
    now: Instant,
}

impl Model {
    fn new(rqs: ReferenceQueueSet) -> Model {
        Model {
            rqs,
            now: Instant::ZERO,
        }
    }
}

impl System for Model {
    fn advance_to(&mut self, t: Instant) {
        self.now = t;
        self.rqs.advance_to(t);
    }

    fn start(&mut self, now: Instant, id: Id, flow_hash: u64, e: WorkEstimate) -> Outcome {
        self.now = now;
        self.rqs.start(now, id, flow_hash, e, None)
    }

    fn finish(&mut self, now: Instant, id: Id) {
        self.now = now;
        self.rqs.finish(now, id);
    }

    fn release(&mut self, now: Instant, id: Id) {
        self.now = now;
        assert!(self.rqs.release(now, id, 0), "seats to release");
    }

    fn reconfigure(&mut self, now: Instant, cfg: &QueueSetConfig) {
        self.now = now;
        self.rqs
            .reconfigure(now, cfg.clone())
            .expect("valid config");
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
        self.rqs.merge(self.now);
        (
            self.rqs.seats_in_use() - self.rqs.held_seats(),
            self.rqs.requests_executing(),
            self.rqs.requests_waiting(),
        )
    }

    fn clamped_estimates(&mut self) -> u64 {
        self.rqs.merge(self.now);
        self.rqs.clamped_estimates()
    }

    fn demand(&mut self, now: Instant) -> Option<IntegratorResults> {
        self.rqs.merge(now);
        None
    }
}

// ----- the driver -------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Thread `thread` of client `client` makes its call number `k`.
    Call { client: usize, thread: u32, k: u32 },
    /// Request `id` ends its execution.
    Finish { id: Id },
    /// Request `id` gives its seats back early.
    Release { id: Id },
    /// The `i`-th reconfiguration of the run options.
    Reconfigure { i: usize },
    /// Nothing to do: makes the clock stop at a system timer's instant
    /// (a lingering release or a wait deadline).
    Wake,
    /// Compare the system's seat-demand integral with the driver's.
    Checkpoint,
}

/// One request's life, as observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub client: usize,
    pub start: u64,
    pub exec_end: u64,
    /// End of the additional latency (= `exec_end` when there is none).
    pub release: u64,
    /// When it gave its seats back: its early release, or `exec_end`.
    pub held_until: u64,
    pub initial_seats: u32,
    /// Seats held from start to release: max(initial, final) after clamping.
    pub seats: u32,
}

/// What a scenario produced.
#[derive(Debug, PartialEq)]
pub struct Trace {
    pub served: Vec<Served>,
    /// (client, reason) of every refused request.
    pub refused: Vec<(usize, RejectReason)>,
    /// Requests each client started (served, refused or still waiting).
    pub started: Vec<u64>,
    pub clamped: u64,
    /// (seats in use, requests executing, requests waiting) once the
    /// scenario ended.
    pub final_counts: (u32, u32, u32),
    /// Seat-demand checkpoints compared with the queueset's integrator.
    pub demand_checks: usize,
    /// The queueset's counters at the end (filled in by [`simulate`] after
    /// comparing the two runs; `None` for the model).
    pub stats: Option<QueueSetStats>,
}

struct Pending {
    client: usize,
    thread: u32,
    k: u32,
    estimate: WorkEstimate,
}

/// The estimate the queueset holds seats for: at least one initial seat,
/// never capped at the limit (as in Kubernetes, a wider request runs alone
/// at its width), final seats over the limit reduced to it with the latency
/// stretched to keep the final work. The harness checks every dispatch
/// against this rule.
pub fn clamp(e: WorkEstimate, limit: u32) -> WorkEstimate {
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

/// How a scenario is run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Events after this instant are not run (`u64::MAX`: run until every
    /// client's calls are done).
    pub horizon: u64,
    /// Thread `j` of client `i` makes its first call at
    /// `start + j * stagger.0 + i * stagger.1` nanoseconds, so that no two
    /// threads call at exactly the same instant.
    pub stagger: (u64, u64),
    /// Instants at which the queueset's seat-demand integral must equal the
    /// one the driver keeps from the requests it holds.
    pub checkpoints: Vec<u64>,
    /// New configurations and when they apply.
    pub reconfigure: Vec<(u64, QueueSetConfig)>,
}

impl RunOptions {
    pub fn until(horizon: u64) -> RunOptions {
        RunOptions {
            horizon,
            stagger: (101, 17),
            checkpoints: Vec::new(),
            reconfigure: Vec::new(),
        }
    }
}

struct Driver<'s, S: System> {
    sys: &'s mut S,
    clients: &'s [Client],
    limit: u32,
    wait_limit: u64,
    /// Under the flow policy, how long a finished request's seats may be
    /// held for its flow's next request (G): a timer the driver must wake
    /// the system for.
    anticipation: Option<u64>,
    horizon: u64,
    reconfigure: Vec<(u64, QueueSetConfig)>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    next_id: Id,
    pending: BTreeMap<Id, Pending>,
    executing: BTreeMap<Id, Served>,
    lingering: Vec<Served>,
    /// Seats asked for by requests waiting or holding seats, integrated
    /// over time: what the queueset's demand observer must report.
    demand: SeatDemandIntegrator,
    trace: Trace,
}

impl<'s, S: System> Driver<'s, S> {
    fn run(
        sys: &'s mut S,
        cfg: &QueueSetConfig,
        clients: &'s [Client],
        opts: &RunOptions,
    ) -> Trace {
        let horizon = opts.horizon;
        let mut d = Driver {
            sys,
            clients,
            limit: cfg.concurrency_limit,
            wait_limit: cfg.wait_limit.as_nanos() as u64,
            anticipation: cfg.anticipation().map(|d| d.as_nanos() as u64),
            horizon,
            reconfigure: opts.reconfigure.clone(),
            events: BinaryHeap::new(),
            seq: 0,
            next_id: 0,
            pending: BTreeMap::new(),
            executing: BTreeMap::new(),
            lingering: Vec::new(),
            demand: SeatDemandIntegrator::new(Instant::ZERO),
            trace: Trace {
                served: Vec::new(),
                refused: Vec::new(),
                started: vec![0; clients.len()],
                clamped: 0,
                final_counts: (0, 0, 0),
                demand_checks: 0,
                stats: None,
            },
        };
        for &at in &opts.checkpoints {
            d.schedule(at, Ev::Checkpoint);
        }
        for (i, &(at, _)) in opts.reconfigure.iter().enumerate() {
            d.schedule(at, Ev::Reconfigure { i });
        }
        for (client, c) in clients.iter().enumerate() {
            for thread in 0..c.threads {
                let mut at =
                    c.start + opts.stagger.0 * thread as u64 + opts.stagger.1 * client as u64;
                if let Some(later) = c.split_at.filter(|_| thread >= c.threads / 2) {
                    at += later;
                }
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
                Ev::Release { id } => d.release(t, id),
                Ev::Reconfigure { i } => {
                    let cfg = d.reconfigure[i].1.clone();
                    d.sys.reconfigure(now, &cfg);
                    d.limit = cfg.concurrency_limit;
                    d.wait_limit = cfg.wait_limit.as_nanos() as u64;
                    d.anticipation = cfg.anticipation().map(|d| d.as_nanos() as u64);
                }
                Ev::Wake => {}
                Ev::Checkpoint => d.check_demand(t),
            }
            d.collect(t);
            d.check_counts(t);
        }
        d.trace.clamped = d.sys.clamped_estimates();
        d.trace.final_counts = d.sys.counts();
        d.trace
    }

    /// The system's seat-demand integral equals the driver's: same length,
    /// same mean and deviation (Kubernetes compares them to 1e-10).
    fn check_demand(&mut self, t: u64) {
        let now = Instant::from_nanos(t);
        let Some(got) = self.sys.demand(now) else {
            return;
        };
        let want = self.demand.results(now);
        let close = |a: f64, b: f64| {
            let den = a.abs().max(b.abs());
            den == 0.0 || (a - b).abs() / den < 1e-10
        };
        assert!(
            got.duration == want.duration
                && close(got.average, want.average)
                && close(got.std_dev, want.std_dev),
            "seat demand at t={t}: queueset {got:?}, expected {want:?}"
        );
        self.trace.demand_checks += 1;
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        if at <= self.horizon {
            self.seq += 1;
            self.events.push(Reverse((at, self.seq, ev)));
        }
    }

    fn call(&mut self, t: u64, client: usize, thread: u32, k: u32) {
        let c = &self.clients[client];
        let late_half = c.split_at.is_some() && thread >= c.threads / 2;
        if k >= if late_half { c.calls / 2 } else { c.calls } {
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
        let seats = clamp(estimate, self.limit).max_seats();
        match self.sys.start(Instant::from_nanos(t), id, c.hash, estimate) {
            Outcome::Execute => {
                self.demand.add(seats.into(), Instant::from_nanos(t));
                let p = self.pending.remove(&id).expect("just inserted");
                self.begin(t, id, p);
            }
            Outcome::Queued => {
                self.demand.add(seats.into(), Instant::from_nanos(t));
                self.schedule(t.saturating_add(self.wait_limit), Ev::Wake)
            }
            Outcome::Rejected(r) => {
                self.pending.remove(&id);
                // Like Kubernetes' test clients, a refused thread stops.
                self.trace.refused.push((client, r));
            }
        }
    }

    /// Request `id` gives all its seats back, if it still executes.
    fn release(&mut self, t: u64, id: Id) {
        let Some(s) = self.executing.get_mut(&id) else {
            return;
        };
        let seats = s.seats;
        s.seats = 0;
        self.sys.release(Instant::from_nanos(t), id);
        self.demand.add(-i64::from(seats), Instant::from_nanos(t));
        if let Some(g) = self.anticipation {
            self.schedule(t + g, Ev::Wake);
        }
    }

    fn finish(&mut self, t: u64, id: Id) {
        let s = self.executing.remove(&id).expect("executing");
        self.sys.finish(Instant::from_nanos(t), id);
        assert_eq!(s.exec_end, t);
        if let Some(g) = self.anticipation {
            self.schedule(t + g, Ev::Wake);
        }
        if s.release > t {
            self.schedule(s.release, Ev::Wake);
            self.lingering.push(s);
        } else {
            self.demand.add(-i64::from(s.seats), Instant::from_nanos(t));
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
                Err(r) => {
                    let seats = clamp(p.estimate, self.limit).max_seats();
                    self.demand.add(-i64::from(seats), now);
                    self.trace.refused.push((p.client, r));
                }
            }
        }
    }

    fn begin(&mut self, t: u64, id: Id, p: Pending) {
        let c = self.clients[p.client];
        let e = clamp(p.estimate, self.limit);
        let exec_end = t + c.exec;
        let held_until = c.release_after.map_or(exec_end, |r| exec_end.min(t + r));
        let s = Served {
            client: p.client,
            start: t,
            exec_end,
            held_until,
            release: exec_end + e.additional_latency.as_nanos() as u64,
            initial_seats: e.initial_seats,
            seats: e.max_seats(),
        };
        self.executing.insert(id, s);
        self.trace.served.push(s);
        if held_until < exec_end {
            self.schedule(held_until, Ev::Release { id });
        }
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
        let released: i64 = self
            .lingering
            .iter()
            .filter(|s| s.release <= t)
            .map(|s| i64::from(s.seats))
            .sum();
        self.demand.add(-released, Instant::from_nanos(t));
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
pub fn simulate(cfg: &QueueSetConfig, clients: &[Client], horizon: u64) -> Trace {
    simulate_with(cfg, clients, &RunOptions::until(horizon))
}

/// [`simulate`] with explicit run options.
pub fn simulate_with(cfg: &QueueSetConfig, clients: &[Client], opts: &RunOptions) -> Trace {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg.clone(), clock).expect("valid config");
    let demand = SeatDemandHandle::new(Instant::ZERO);
    qs.set_demand_observer(Some(demand.clone()));
    let mut real = Real {
        qs: &qs,
        manual,
        executing: BTreeMap::new(),
        waiting: BTreeMap::new(),
        woken: Arc::new(Mutex::new(Vec::new())),
        demand,
    };
    let mut got = Driver::run(&mut real, cfg, clients, opts);
    drop(real);
    // The queueset accounts hot-path requests by the epoch rule
    // (src/queueset/core/epoch.rs): so does the model it is checked against.
    let mut model = Model::new(
        ReferenceQueueSet::new(cfg.clone(), Instant::ZERO)
            .expect("valid config")
            .with_accounting(Accounting::Epoch),
    );
    let mut expected = Driver::run(&mut model, cfg, clients, opts);
    // The model keeps no seat-demand integral to check.
    expected.demand_checks = got.demand_checks;
    assert_eq!(got.served.len(), expected.served.len(), "requests served");
    if let Some(i) = (0..got.served.len()).find(|&i| got.served[i] != expected.served[i]) {
        panic!(
            "queueset and reference model diverge at request {i}: {:?} vs {:?}",
            got.served[i], expected.served[i]
        );
    }
    assert_eq!(got, expected);
    got.stats = Some(qs.stats());
    got
}

/// Run a scenario through the queueset alone, without the reference model
/// (whose work per event grows with the flows waiting: for scenarios with
/// thousands of flows, which the differential tests cover at smaller
/// scale).
pub fn simulate_queueset(cfg: &QueueSetConfig, clients: &[Client], opts: &RunOptions) -> Trace {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg.clone(), clock).expect("valid config");
    let demand = SeatDemandHandle::new(Instant::ZERO);
    qs.set_demand_observer(Some(demand.clone()));
    let mut real = Real {
        qs: &qs,
        manual,
        executing: BTreeMap::new(),
        waiting: BTreeMap::new(),
        woken: Arc::new(Mutex::new(Vec::new())),
        demand,
    };
    let mut got = Driver::run(&mut real, cfg, clients, opts);
    drop(real);
    got.stats = Some(qs.stats());
    got
}

/// Run a scenario through the reference model alone, ordering waiting
/// requests by `order` (the queueset implements the default,
/// [`WaitingOrder::Flows`]; the other is the order before issue 22).
pub fn simulate_reference(
    cfg: &QueueSetConfig,
    clients: &[Client],
    opts: &RunOptions,
    order: WaitingOrder,
) -> Trace {
    let mut model = Model::new(
        ReferenceQueueSet::new(cfg.clone(), Instant::ZERO)
            .expect("valid config")
            .with_waiting_order(order),
    );
    Driver::run(&mut model, cfg, clients, opts)
}

// ----- an exempt level ----------------------------------------------------------

/// The built-in `exempt` level of a dispatcher: what Kubernetes' no-restraint
/// and exempt queuesets stand for (everything executes at once).
struct Exempt {
    dispatcher: Dispatcher,
    manual: ManualClock,
    executing: BTreeMap<Id, RequestGuard>,
}

/// A request the built-in configuration sends to `exempt`.
fn privileged() -> RequestDigest<'static> {
    RequestDigest {
        user: "admin",
        groups: &["system:masters", "system:authenticated"],
        verb: "get",
        is_resource_request: true,
        resource: "pods",
        namespace: "default",
        path: "/api/v1/namespaces/default/pods",
        ..RequestDigest::default()
    }
}

impl System for Exempt {
    fn advance_to(&mut self, t: Instant) {
        self.manual.advance_to(t);
    }

    fn start(&mut self, _now: Instant, id: Id, _flow_hash: u64, e: WorkEstimate) -> Outcome {
        let d = self.dispatcher.start_request(&privileged(), e, None);
        assert_eq!(d.priority_level.name, "exempt");
        match d.outcome {
            apf::dispatcher::Outcome::Execute(g) => {
                self.executing.insert(id, g);
                Outcome::Execute
            }
            other => panic!("an exempt request was not executed at once: {other:?}"),
        }
    }

    fn finish(&mut self, now: Instant, id: Id) {
        let g = self.executing.remove(&id).expect("executing");
        g.finish_at(now);
    }

    fn decisions(&mut self, _now: Instant) -> Vec<(Id, Result<WorkEstimate, RejectReason>)> {
        Vec::new()
    }

    fn counts(&mut self) -> (u32, u32, u32) {
        let st = self.dispatcher.level("exempt").expect("built in").stats();
        let q = st.queueset;
        (q.seats_in_use, q.requests_executing, q.requests_waiting)
    }

    fn clamped_estimates(&mut self) -> u64 {
        0
    }

    fn demand(&mut self, _now: Instant) -> Option<IntegratorResults> {
        None
    }
}

/// Run a scenario at the built-in `exempt` level of a dispatcher whose
/// server concurrency limit is `server_limit`.
pub fn simulate_exempt(server_limit: u32, clients: &[Client], opts: &RunOptions) -> Trace {
    let (clock, manual) = Clock::manual();
    let options = DispatcherOptions {
        server_concurrency_limit: server_limit,
        ..DispatcherOptions::default()
    };
    let mut sys = Exempt {
        dispatcher: Dispatcher::builtin(options, clock),
        manual,
        executing: BTreeMap::new(),
    };
    // Nothing is limited: the driver's clamp must leave estimates alone.
    let cfg = QueueSetConfig {
        concurrency_limit: u32::MAX,
        ..config(1, 0, 1, 1)
    };
    Driver::run(&mut sys, &cfg, clients, opts)
}
