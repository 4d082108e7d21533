//! The discrete-event loop: the real [`Dispatcher`] on a manual clock,
//! driven by the workload's arrivals, clients, service times, phases and
//! bursts.
//!
//! Time moves only here. Before each of its own events the loop advances
//! the clock to the dispatcher's next timer deadline, if that comes first,
//! so a wait-limit time-out or a seat freed after additional latency is
//! seen at its own instant. Queued requests are polled once with a waker
//! that records their slot; whatever the dispatcher decides inside a finish
//! or a timer is then collected from that list, without scanning the
//! waiting requests.

use super::histogram::Histogram;
use super::report::{FlowReport, LevelReport, Report, Series};
use super::workload::{Arrival, Flow, ServiceTime, Workload};
use crate::classification::{Classifier, RequestDigest};
use crate::clock::{duration_nanos, Clock, Instant, ManualClock};
use crate::config::Config;
use crate::dispatcher::{Dispatcher, DispatcherError, DispatcherOptions, Outcome};
use crate::level::{Level, RequestGuard, RequestTicket};
use crate::queueset::RejectReason;
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use crate::work_estimate::WorkEstimate;
use rand_distr::{Distribution, Exp1, StandardNormal};
use rand_pcg::rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// What a run measured about itself (wall-clock figures, so not part of
/// the deterministic [`Report`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunStats {
    /// Requests the dispatcher decided on.
    pub requests: u64,
    /// Events the loop handled (arrivals, finishes, client wake-ups, ...).
    pub events: u64,
    /// Wall-clock time of the event loop.
    pub wall: Duration,
    /// CPU time of the event loop's thread, where the system tells it
    /// (Linux): on a shared machine it is what one core took.
    pub cpu: Option<Duration>,
}

impl RunStats {
    /// Simulated requests per wall-clock second.
    pub fn requests_per_second(&self) -> f64 {
        self.requests as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Simulated requests per second of CPU time, if known.
    pub fn requests_per_cpu_second(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| self.requests as f64 / cpu.as_secs_f64().max(1e-9))
    }
}

/// The calling thread's CPU time so far, from Linux's scheduler statistics
/// (nanoseconds on the CPU, the first field of `/proc/thread-self/schedstat`).
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Why a simulation could not run.
#[derive(Debug)]
pub enum SimulationError {
    /// The configuration was refused.
    Config(DispatcherError),
}

impl std::fmt::Display for SimulationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimulationError::Config(e) => write!(f, "configuration: {e}"),
        }
    }
}

impl std::error::Error for SimulationError {}

impl From<DispatcherError> for SimulationError {
    fn from(e: DispatcherError) -> Self {
        SimulationError::Config(e)
    }
}

/// Runs `workload` against `config` with `seed`; `progress` is called with
/// the fraction of simulated time done, once per sample interval.
pub fn run(
    config: &Config,
    workload: &Workload,
    seed: u64,
    progress: &mut dyn FnMut(f64),
) -> Result<(Report, RunStats), SimulationError> {
    let options = DispatcherOptions {
        server_concurrency_limit: workload.server.concurrency_limit,
        service_time_guess: workload.server.service_time_guess,
        wait_limit: workload.server.wait_limit,
        borrowing_period: workload.server.borrowing_period,
    };
    let (clock, manual) = Clock::manual();
    let dispatcher = Dispatcher::new(config, options, clock)?;
    let valid = dispatcher
        .config()
        .validate()
        .map_err(DispatcherError::Config)?;
    let classifier = Classifier::new(&valid);

    // Every replica's strings, then the digests that borrow them: built
    // once, so issuing a request allocates nothing.
    let templates: Vec<_> = workload
        .flows
        .iter()
        .flat_map(|f| (0..f.replicas).map(move |i| f.request.instantiate(i)))
        .collect();
    let groups: Vec<Vec<&str>> = templates
        .iter()
        .map(|t| t.groups.iter().map(String::as_str).collect())
        .collect();
    let digests: Vec<RequestDigest<'_>> = templates
        .iter()
        .zip(&groups)
        .map(|(t, g)| RequestDigest {
            user: &t.user,
            groups: g,
            verb: &t.verb,
            is_resource_request: !t.non_resource,
            api_group: &t.api_group,
            resource: &t.resource,
            subresource: &t.subresource,
            namespace: &t.namespace,
            name: &t.name,
            path: &t.path,
        })
        .collect();

    let mut sim = Sim::new(&dispatcher, manual, &classifier, workload, &digests, seed);
    let cpu_before = thread_cpu_time();
    let started = std::time::Instant::now();
    sim.run(progress);
    let wall = started.elapsed();
    let cpu = match (cpu_before, thread_cpu_time()) {
        (Some(before), Some(after)) if after > before => Some(after - before),
        _ => None,
    };
    let stats = RunStats {
        requests: sim.requests,
        events: sim.events,
        wall,
        cpu,
    };
    let report = sim.report(&classifier);
    Ok((report, stats))
}

// ----- events ------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// A request finishes executing.
    Finish { slot: u32 },
    /// An executing request gives back its seats early (the flow's
    /// `releaseSeatsAfter`), after finishes at the same instant.
    Release { slot: u32 },
    /// A flow enters one of its phases.
    Phase { flow: u32, phase: u32 },
    /// The next request(s) of a burst.
    Burst { burst: u32 },
    /// The end of a sample interval.
    Sample { index: u32 },
    /// An open-loop arrival; stale when the replica's generation (modulo
    /// 2^29) moved on.
    Arrival { replica: u32, generation: u32 },
    /// A closed-loop client sends its next request.
    Wake { client: u32 },
}

/// Events are packed into a `u64` so that a heap entry is one `u128`,
/// `time << 64 | event`: ordered by time, then by kind in the order above
/// (a finish frees its seats before an arrival at the same instant), then
/// by index. Bits: 63..61 kind, 60..29 first field, 28..0 second field.
const SECOND_BITS: u32 = 29;
const SECOND_MASK: u64 = (1 << SECOND_BITS) - 1;

impl Ev {
    fn pack(self) -> u64 {
        let (kind, a, b) = match self {
            Ev::Finish { slot } => (0u64, slot, 0),
            Ev::Release { slot } => (1, slot, 0),
            Ev::Phase { flow, phase } => (2, flow, phase),
            Ev::Burst { burst } => (3, burst, 0),
            Ev::Sample { index } => (4, index, 0),
            Ev::Arrival {
                replica,
                generation,
            } => (5, replica, generation),
            Ev::Wake { client } => (6, client, 0),
        };
        kind << 61 | (a as u64) << SECOND_BITS | (b as u64 & SECOND_MASK)
    }

    fn unpack(bits: u64) -> Ev {
        let a = (bits >> SECOND_BITS) as u32;
        let b = (bits & SECOND_MASK) as u32;
        match bits >> 61 {
            0 => Ev::Finish { slot: a },
            1 => Ev::Release { slot: a },
            2 => Ev::Phase { flow: a, phase: b },
            3 => Ev::Burst { burst: a },
            4 => Ev::Sample { index: a },
            5 => Ev::Arrival {
                replica: a,
                generation: b,
            },
            _ => Ev::Wake { client: a },
        }
    }
}

fn generation_bits(generation: u32) -> u32 {
    generation & SECOND_MASK as u32
}

// ----- state -------------------------------------------------------------------

const NO_CLIENT: u32 = u32::MAX;

/// Per replica (one flow of a flow entry).
struct Replica {
    flow: u32,
    level: u32,
    rng: Pcg64Mcg,
    /// What the flow asks for.
    estimate: WorkEstimate,
    /// What its requests hold at its level, for the seat-time accounting.
    held: WorkEstimate,
    /// Current phase scale.
    scale: f64,
    /// Bumped when the arrival rate changes, to drop the pending arrival.
    generation: u32,
    first_client: u32,
    /// Clients with an index below this one keep sending.
    active: u32,
    tally: Tally,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    arrived: u64,
    dispatched: u64,
    completed: u64,
    rejected: [u64; 4],
    seat_ns: f64,
    /// Real cost × execution time (the flow's `actualSeats`, or its
    /// initial seats when it gives none).
    cost_ns: f64,
}

struct Client {
    replica: u32,
    busy: bool,
}

enum State {
    Free,
    Waiting(RequestTicket),
    Running(RequestGuard),
}

/// A request in the server, waiting or executing.
struct Slot {
    replica: u32,
    client: u32,
    arrived: u64,
    service: u64,
    /// When it gave back its seats early (`u64::MAX`: it did not).
    released_at: u64,
    state: State,
}

struct BurstState {
    replica: u32,
    remaining: u32,
    spacing: u64,
}

/// Wakes record the slot of the decided request.
struct SlotWaker {
    slot: u32,
    ready: Arc<Ready>,
}

#[derive(Default)]
struct Ready {
    any: AtomicBool,
    slots: Mutex<Vec<u32>>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.ready.slots).push(self.slot);
        self.ready.any.store(true, Ordering::Release);
    }
}

struct Sim<'a> {
    dispatcher: &'a Dispatcher,
    manual: ManualClock,
    workload: &'a Workload,
    digests: &'a [RequestDigest<'a>],
    levels: Vec<Arc<Level>>,
    end: u64,
    /// Min-heap of `time << 64 | packed event`.
    heap: BinaryHeap<Reverse<u128>>,
    replicas: Vec<Replica>,
    /// Index of each flow entry's first replica.
    flow_first_replica: Vec<u32>,
    clients: Vec<Client>,
    slots: Vec<Slot>,
    wakers: Vec<Waker>,
    free: Vec<u32>,
    bursts: Vec<BurstState>,
    ready: Arc<Ready>,
    ready_buf: Vec<u32>,
    flow_waits: Vec<Histogram>,
    level_waits: Vec<Histogram>,
    series: Series,
    seed: u64,
    requests: u64,
    events: u64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Uniform in [0, 1).
fn unit(rng: &mut Pcg64Mcg) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A count of nanoseconds as an integer: 0 for NaN or negative values,
/// saturating at 10^18 (some thirty years), far below the end of time.
fn to_nanos(ns: f64) -> u64 {
    if ns.is_nan() || ns <= 0.0 {
        0
    } else {
        ns.min(1e18) as u64
    }
}

fn sample_service(s: &ServiceTime, rng: &mut Pcg64Mcg) -> u64 {
    match *s {
        ServiceTime::Constant(d) => duration_nanos(d),
        ServiceTime::Uniform { min, max } => {
            let (lo, hi) = (duration_nanos(min), duration_nanos(max));
            lo + to_nanos((hi - lo) as f64 * unit(rng))
        }
        ServiceTime::Exponential { mean } => {
            let e: f64 = Exp1.sample(rng);
            to_nanos(e * duration_nanos(mean) as f64)
        }
        ServiceTime::Lognormal { median, sigma } => {
            let z: f64 = StandardNormal.sample(rng);
            to_nanos(duration_nanos(median) as f64 * (sigma * z).exp())
        }
    }
}

/// The seats a request of `estimate` holds at `level`: capped at the
/// level's per-request maximum (Kubernetes' max seats), and at an exempt
/// level its widest phase, only while it executes.
fn held_seats(level: &Level, estimate: WorkEstimate) -> WorkEstimate {
    let max = level.max_seats.load(Ordering::Relaxed).min(u32::MAX as u64) as u32;
    if level.is_exempt() {
        return WorkEstimate::new(estimate.max_seats().min(max).max(1), 0, Duration::ZERO);
    }
    WorkEstimate::new(
        estimate.initial_seats.min(max),
        estimate.final_seats.min(max),
        estimate.additional_latency,
    )
}

/// A closed-loop client's cycle: mean service time plus think time.
fn cycle_nanos(flow: &Flow) -> f64 {
    let think = match flow.arrival {
        Arrival::Closed { think, .. } => duration_nanos(think) as f64,
        Arrival::Poisson { .. } => 0.0,
    };
    flow.service.mean_secs() * 1e9 + think
}

impl<'a> Sim<'a> {
    fn new(
        dispatcher: &'a Dispatcher,
        manual: ManualClock,
        classifier: &Classifier,
        workload: &'a Workload,
        digests: &'a [RequestDigest<'a>],
        seed: u64,
    ) -> Sim<'a> {
        let levels = dispatcher.levels();
        let mut replicas = Vec::with_capacity(digests.len());
        let mut clients = Vec::new();
        for (f, flow) in workload.flows.iter().enumerate() {
            for i in 0..flow.replicas {
                let r = replicas.len();
                let level = classifier.classify(&digests[r]).level_index as u32;
                let stream = splitmix(seed ^ splitmix(((f as u64) << 32) | i as u64));
                let (first_client, count) = match flow.arrival {
                    Arrival::Closed { clients: n, .. } => (clients.len() as u32, n),
                    Arrival::Poisson { .. } => (0, 0),
                };
                for _ in 0..count {
                    clients.push(Client {
                        replica: r as u32,
                        busy: false,
                    });
                }
                let estimate = WorkEstimate::new(
                    flow.initial_seats,
                    flow.final_seats,
                    flow.additional_latency,
                );
                replicas.push(Replica {
                    flow: f as u32,
                    level,
                    rng: Pcg64Mcg::seed_from_u64(stream),
                    estimate,
                    held: held_seats(&levels[level as usize], estimate),
                    scale: 1.0,
                    generation: 0,
                    first_client,
                    active: count,
                    tally: Tally::default(),
                });
            }
        }
        let end = duration_nanos(workload.duration);
        let interval = duration_nanos(workload.sample_interval).max(1);
        let samples = end.div_ceil(interval) as usize;
        let series = Series {
            interval: workload.sample_interval,
            times: (0..samples)
                .map(|k| ((k as u64 + 1) * interval).min(end) as f64 / 1e9)
                .collect(),
            flow_seat_seconds: vec![vec![0.0; samples]; workload.flows.len()],
            level_queue_length: vec![Vec::with_capacity(samples); levels.len()],
            level_seats_in_use: vec![Vec::with_capacity(samples); levels.len()],
            level_limit: vec![Vec::with_capacity(samples); levels.len()],
            flow_arrived: vec![vec![0; samples]; workload.flows.len()],
            flow_completed: vec![vec![0; samples]; workload.flows.len()],
            rejected: std::array::from_fn(|_| vec![0; samples]),
            phase_changes: workload
                .flows
                .iter()
                .flat_map(|f| {
                    f.phases
                        .iter()
                        .map(|p| (p.at.as_secs_f64(), format!("{} ×{}", f.name, p.scale)))
                })
                .collect(),
        };
        Sim {
            dispatcher,
            manual,
            workload,
            digests,
            flow_waits: vec![Histogram::default(); workload.flows.len()],
            level_waits: vec![Histogram::default(); levels.len()],
            levels,
            end,
            heap: BinaryHeap::new(),
            flow_first_replica: workload
                .flows
                .iter()
                .scan(0u32, |next, f| {
                    let first = *next;
                    *next += f.replicas;
                    Some(first)
                })
                .collect(),
            replicas,
            clients,
            slots: Vec::new(),
            wakers: Vec::new(),
            free: Vec::new(),
            bursts: Vec::new(),
            ready: Arc::new(Ready::default()),
            ready_buf: Vec::new(),
            series,
            seed,
            requests: 0,
            events: 0,
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.heap
            .push(Reverse((at as u128) << 64 | ev.pack() as u128));
    }

    fn schedule_start(&mut self) {
        for r in 0..self.replicas.len() {
            let flow = &self.workload.flows[self.replicas[r].flow as usize];
            match flow.arrival {
                Arrival::Poisson { .. } => self.schedule_arrival(r as u32, 0),
                Arrival::Closed { .. } => {
                    let first = self.replicas[r].first_client;
                    for c in first..first + self.replicas[r].active {
                        self.start_client(c, 0);
                    }
                }
            }
        }
        for (f, flow) in self.workload.flows.iter().enumerate() {
            for (p, phase) in flow.phases.iter().enumerate() {
                self.push(
                    duration_nanos(phase.at),
                    Ev::Phase {
                        flow: f as u32,
                        phase: p as u32,
                    },
                );
            }
        }
        let mut r = 0;
        for flow in &self.workload.flows {
            for replica in r..r + flow.replicas {
                for b in &flow.bursts {
                    let spacing = match b.requests {
                        0 => 0,
                        n => duration_nanos(b.over) / n as u64,
                    };
                    self.bursts.push(BurstState {
                        replica,
                        remaining: b.requests,
                        spacing,
                    });
                    let burst = self.bursts.len() as u32 - 1;
                    self.push(duration_nanos(b.at), Ev::Burst { burst });
                }
            }
            r += flow.replicas;
        }
        let interval = duration_nanos(self.workload.sample_interval).max(1);
        for index in 0..self.series.times.len() {
            let at = (index as u64 + 1).saturating_mul(interval).min(self.end);
            self.push(
                at,
                Ev::Sample {
                    index: index as u32,
                },
            );
        }
    }

    /// A client starts a cycle at a random point of it, so that clients
    /// started together do not send in lockstep.
    fn start_client(&mut self, client: u32, now: u64) {
        let r = self.clients[client as usize].replica as usize;
        let cycle = cycle_nanos(&self.workload.flows[self.replicas[r].flow as usize]);
        let offset = to_nanos(cycle * unit(&mut self.replicas[r].rng));
        self.clients[client as usize].busy = true;
        self.push(now.saturating_add(offset), Ev::Wake { client });
    }

    fn schedule_arrival(&mut self, r: u32, now: u64) {
        let replica = &mut self.replicas[r as usize];
        let Arrival::Poisson { rate } = self.workload.flows[replica.flow as usize].arrival else {
            return;
        };
        let rate = rate * replica.scale;
        if rate <= 0.0 {
            return;
        }
        let e: f64 = Exp1.sample(&mut replica.rng);
        let at = now.saturating_add(to_nanos(e * 1e9 / rate));
        let generation = generation_bits(replica.generation);
        self.push(
            at,
            Ev::Arrival {
                replica: r,
                generation,
            },
        );
    }

    fn run(&mut self, progress: &mut dyn FnMut(f64)) {
        self.schedule_start();
        loop {
            let event_at = self.heap.peek().map_or(u64::MAX, |e| (e.0 >> 64) as u64);
            let timer_at = self
                .manual
                .next_deadline()
                .map_or(u64::MAX, Instant::as_nanos);
            if timer_at <= event_at && timer_at <= self.end {
                self.manual.advance_to(Instant::from_nanos(timer_at));
                self.collect_decisions();
                continue;
            }
            if event_at > self.end {
                break;
            }
            let Some(Reverse(entry)) = self.heap.pop() else {
                break;
            };
            let (at, ev) = ((entry >> 64) as u64, Ev::unpack(entry as u64));
            self.manual.advance_to(Instant::from_nanos(at));
            self.events += 1;
            self.handle(at, ev, progress);
            self.collect_decisions();
        }
        self.manual.advance_to(Instant::from_nanos(self.end));
        self.collect_decisions();
        self.close_out();
    }

    fn handle(&mut self, now: u64, ev: Ev, progress: &mut dyn FnMut(f64)) {
        match ev {
            Ev::Arrival {
                replica,
                generation,
            } => {
                if generation_bits(self.replicas[replica as usize].generation) == generation {
                    self.issue(replica, NO_CLIENT, now);
                    self.schedule_arrival(replica, now);
                }
            }
            Ev::Wake { client } => {
                let c = &self.clients[client as usize];
                let replica = &self.replicas[c.replica as usize];
                if client - replica.first_client < replica.active {
                    self.issue(c.replica, client, now);
                } else {
                    self.clients[client as usize].busy = false;
                }
            }
            Ev::Finish { slot } => self.finish(slot, now),
            Ev::Release { slot } => self.release(slot, now),
            Ev::Phase { flow, phase } => self.enter_phase(flow, phase, now),
            Ev::Burst { burst } => self.burst(burst, now),
            Ev::Sample { index } => {
                self.sample(index as usize);
                progress(now as f64 / self.end.max(1) as f64);
            }
        }
    }

    fn enter_phase(&mut self, flow: u32, phase: u32, now: u64) {
        let spec = &self.workload.flows[flow as usize];
        let scale = spec.phases[phase as usize].scale;
        let first = self.flow_first_replica[flow as usize];
        for r in first..first + spec.replicas {
            let replica = &mut self.replicas[r as usize];
            replica.scale = scale;
            match spec.arrival {
                Arrival::Poisson { .. } => {
                    // Memoryless: drawing afresh from now is exact.
                    replica.generation = replica.generation.wrapping_add(1);
                    self.schedule_arrival(r, now);
                }
                Arrival::Closed { clients, .. } => {
                    let active = (clients as f64 * scale).round() as u32;
                    replica.active = active;
                    let first = replica.first_client;
                    for c in first..first + active.min(clients) {
                        if !self.clients[c as usize].busy {
                            self.start_client(c, now);
                        }
                    }
                }
            }
        }
    }

    fn burst(&mut self, burst: u32, now: u64) {
        let b = &mut self.bursts[burst as usize];
        let replica = b.replica;
        if b.spacing == 0 {
            let n = std::mem::take(&mut b.remaining);
            for _ in 0..n {
                self.issue(replica, NO_CLIENT, now);
                self.collect_decisions();
            }
            return;
        }
        b.remaining -= 1;
        let more = b.remaining > 0;
        let next = now.saturating_add(b.spacing);
        self.issue(replica, NO_CLIENT, now);
        if more {
            self.push(next, Ev::Burst { burst });
        }
    }

    fn alloc_slot(&mut self, replica: u32, client: u32, arrived: u64, service: u64) -> u32 {
        let slot = Slot {
            replica,
            client,
            arrived,
            service,
            released_at: u64::MAX,
            state: State::Free,
        };
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = slot;
            return i;
        }
        let i = self.slots.len() as u32;
        self.slots.push(slot);
        self.wakers.push(Waker::from(Arc::new(SlotWaker {
            slot: i,
            ready: self.ready.clone(),
        })));
        i
    }

    /// One request of `replica` arrives now.
    fn issue(&mut self, r: u32, client: u32, now: u64) {
        self.requests += 1;
        let replica = &mut self.replicas[r as usize];
        replica.tally.arrived += 1;
        let f = replica.flow as usize;
        Series::count(self.series.interval, &mut self.series.flow_arrived[f], now);
        let flow = &self.workload.flows[f];
        let service = sample_service(&flow.service, &mut replica.rng);
        let deadline = flow
            .timeout
            .map(|t| Instant::from_nanos(now).saturating_add(t));
        let estimate = replica.estimate;
        let decision = self
            .dispatcher
            .start_request(&self.digests[r as usize], estimate, deadline);
        debug_assert!(Arc::ptr_eq(
            &decision.priority_level,
            &self.levels[replica.level as usize]
        ));
        match decision.outcome {
            Outcome::Execute(guard) => {
                let slot = self.alloc_slot(r, client, now, service);
                self.started(slot, guard, now);
            }
            Outcome::Queued(mut ticket) => {
                let slot = self.alloc_slot(r, client, now, service);
                let mut cx = Context::from_waker(&self.wakers[slot as usize]);
                match Pin::new(&mut ticket).poll(&mut cx) {
                    Poll::Pending => self.slots[slot as usize].state = State::Waiting(ticket),
                    Poll::Ready(Ok(guard)) => self.started(slot, guard, now),
                    Poll::Ready(Err(reason)) => self.rejected(slot, reason, now),
                }
            }
            Outcome::Rejected(reason) => {
                self.count_rejection(r, reason, now);
                self.retry(r, client, now);
            }
        }
    }

    fn started(&mut self, slot: u32, guard: RequestGuard, now: u64) {
        let start = guard.start_time().as_nanos().min(now);
        let s = &mut self.slots[slot as usize];
        let wait = start.saturating_sub(s.arrived);
        let at = start.saturating_add(s.service);
        s.state = State::Running(guard);
        let release = self.workload.flows[self.replicas[s.replica as usize].flow as usize]
            .release_seats_after
            .map(|d| start.saturating_add(duration_nanos(d)))
            .filter(|&r| r < at);
        let replica = &mut self.replicas[s.replica as usize];
        replica.tally.dispatched += 1;
        self.flow_waits[replica.flow as usize].record(wait);
        self.level_waits[replica.level as usize].record(wait);
        self.push(at, Ev::Finish { slot });
        if let Some(r) = release {
            // Before the finish (r < at), so the slot still runs this request.
            self.push(r, Ev::Release { slot });
        }
    }

    /// The request in `slot` gives back all its seats and keeps executing.
    fn release(&mut self, slot: u32, now: u64) {
        let s = &mut self.slots[slot as usize];
        if let State::Running(guard) = &mut s.state {
            if guard.release_all_seats().is_ok() {
                s.released_at = now;
            }
        }
    }

    fn rejected(&mut self, slot: u32, reason: RejectReason, now: u64) {
        let s = &mut self.slots[slot as usize];
        s.state = State::Free;
        let (r, client) = (s.replica, s.client);
        self.free.push(slot);
        self.count_rejection(r, reason, now);
        self.retry(r, client, now);
    }

    fn count_rejection(&mut self, r: u32, reason: RejectReason, now: u64) {
        if let Some(counts) = self.series.rejected.get_mut(reason as usize) {
            Series::count(self.series.interval, counts, now);
        }
        // Only Kubernetes' four reasons are tallied; a failed level (a bug
        // in the core, never expected here) is not one of them.
        if let Some(count) = self.replicas[r as usize]
            .tally
            .rejected
            .get_mut(reason as usize)
        {
            *count += 1;
        }
    }

    /// A closed-loop client tries again after the flow's retry delay.
    fn retry(&mut self, r: u32, client: u32, now: u64) {
        if client != NO_CLIENT {
            let flow = &self.workload.flows[self.replicas[r as usize].flow as usize];
            let at = now.saturating_add(duration_nanos(flow.retry_after));
            self.push(at, Ev::Wake { client });
        }
    }

    fn finish(&mut self, slot: u32, now: u64) {
        let s = &mut self.slots[slot as usize];
        let State::Running(guard) = std::mem::replace(&mut s.state, State::Free) else {
            return;
        };
        let start = guard.start_time().as_nanos();
        let r = s.replica;
        let flow = self.replicas[r as usize].flow as usize;
        let actual = self.workload.flows[flow].actual_seats;
        let end = Instant::from_nanos(now);
        match actual {
            // A workload's cost is checked finite and non-negative.
            Some(cost) => {
                if let Err((guard, _)) = guard.finish_at_with_cost(end, cost) {
                    guard.finish_at(end);
                }
            }
            None => guard.finish_at(end),
        }
        let (client, released_at) = (s.client, s.released_at);
        self.free.push(slot);
        let replica = &mut self.replicas[r as usize];
        replica.tally.completed += 1;
        let mut e = replica.held;
        let cost = actual.unwrap_or(f64::from(e.initial_seats));
        replica.tally.cost_ns += cost * now.saturating_sub(start) as f64;
        // Seats released early were held until then, and none linger.
        let held_until = now.min(released_at);
        if released_at != u64::MAX {
            e.final_seats = 0;
        }
        Series::count(
            self.series.interval,
            &mut self.series.flow_completed[flow],
            now,
        );
        let latency = duration_nanos(e.additional_latency);
        let seat_ns = e.initial_seats as f64 * held_until.saturating_sub(start) as f64
            + e.final_seats as f64 * latency as f64;
        replica.tally.seat_ns += seat_ns;
        self.add_seat_time(flow, e.initial_seats, start, held_until);
        if e.final_seats > 0 {
            self.add_seat_time(flow, e.final_seats, now, now.saturating_add(latency));
        }
        if client != NO_CLIENT {
            let think = match self.workload.flows[flow].arrival {
                Arrival::Closed { think, .. } => duration_nanos(think),
                Arrival::Poisson { .. } => 0,
            };
            self.push(now.saturating_add(think), Ev::Wake { client });
        }
    }

    /// Credits `seats` over [from, to) to the flow's sample intervals.
    fn add_seat_time(&mut self, flow: usize, seats: u32, from: u64, to: u64) {
        let to = to.min(self.end);
        if to <= from {
            return;
        }
        let interval = duration_nanos(self.workload.sample_interval).max(1);
        let buckets = &mut self.series.flow_seat_seconds[flow];
        let mut t = from;
        while t < to {
            let k = (t / interval) as usize;
            let bucket_end = ((k as u64 + 1) * interval).min(to);
            if let Some(b) = buckets.get_mut(k) {
                *b += seats as f64 * (bucket_end - t) as f64 / 1e9;
            }
            t = bucket_end;
        }
    }

    /// Takes the decisions the dispatcher made since the last call.
    fn collect_decisions(&mut self) {
        // Single-threaded: a plain load first spares the common empty case
        // a locked instruction.
        while self.ready.any.load(Ordering::Acquire) {
            self.ready.any.store(false, Ordering::Relaxed);
            let mut batch = std::mem::take(&mut self.ready_buf);
            std::mem::swap(&mut *lock(&self.ready.slots), &mut batch);
            let now = self.dispatcher.clock().now().as_nanos();
            for &slot in &batch {
                let State::Waiting(ticket) = &mut self.slots[slot as usize].state else {
                    continue;
                };
                match ticket.poll() {
                    None => {}
                    Some(Ok(guard)) => self.started(slot, guard, now),
                    Some(Err(reason)) => self.rejected(slot, reason, now),
                }
            }
            batch.clear();
            self.ready_buf = batch;
        }
    }

    fn sample(&mut self, index: usize) {
        if index >= self.series.times.len() {
            return;
        }
        for (l, level) in self.levels.iter().enumerate() {
            let stats = level.stats().queueset;
            self.series.level_queue_length[l].push(stats.requests_waiting);
            self.series.level_seats_in_use[l].push(stats.seats_in_use);
            self.series.level_limit[l].push(stats.concurrency_limit);
        }
    }

    /// Seat time of requests still executing at the end.
    fn close_out(&mut self) {
        let end = self.end;
        for i in 0..self.slots.len() {
            let State::Running(guard) = &self.slots[i].state else {
                continue;
            };
            let start = guard.start_time().as_nanos();
            let r = self.slots[i].replica as usize;
            let e = self.replicas[r].held;
            let flow = self.replicas[r].flow as usize;
            let held_until = end.min(self.slots[i].released_at);
            let cost = self.workload.flows[flow]
                .actual_seats
                .unwrap_or(f64::from(e.initial_seats));
            self.replicas[r].tally.cost_ns += cost * end.saturating_sub(start) as f64;
            self.replicas[r].tally.seat_ns +=
                e.initial_seats as f64 * held_until.saturating_sub(start) as f64;
            self.add_seat_time(flow, e.initial_seats, start, held_until);
        }
        // Cancel what still waits before finishing what runs: finishing first
        // would hand the freed seats to waiters the run never sees start (and
        // they to the next, as each is dropped), so the dispatcher's own
        // counters would count dispatches after the end.
        for slot in &mut self.slots {
            if matches!(slot.state, State::Waiting(_)) {
                slot.state = State::Free;
            }
        }
        // Dropping the slots finishes what is left, at the end.
        self.slots.clear();
    }

    fn report(&self, classifier: &Classifier) -> Report {
        let w = self.workload;
        let secs = w.duration.as_secs_f64();
        let mut flows = Vec::with_capacity(w.flows.len());
        let mut level_tally = vec![Tally::default(); self.levels.len()];
        let mut r = 0usize;
        for (f, flow) in w.flows.iter().enumerate() {
            let members = &self.replicas[r..r + flow.replicas as usize];
            let mut total = Tally::default();
            let mut demand = 0.0;
            let mut worst: f64 = f64::INFINITY;
            let mut least_demand: f64 = f64::INFINITY;
            for replica in members {
                add(&mut total, &replica.tally);
                add(&mut level_tally[replica.level as usize], &replica.tally);
                let want = self.replica_demand(flow, &replica.tally);
                demand += want;
                least_demand = least_demand.min(want);
                if want > 0.0 {
                    worst = worst.min(served(flow, replica.tally.dispatched, want));
                }
            }
            // Below a hundred requests a replica's share is mostly noise.
            let worst_replica_served =
                (flow.replicas > 1 && least_demand >= 100.0 && worst.is_finite()).then_some(worst);
            let first = &self.replicas[r];
            let c = classifier.classify(&self.digests[r]);
            flows.push(FlowReport {
                name: flow.name.clone(),
                replicas: flow.replicas,
                schema: c.schema.name.clone(),
                level: c.level.name.clone(),
                distinguisher: c.flow_distinguisher.to_string(),
                expect: flow.expect,
                arrived: total.arrived,
                dispatched: total.dispatched,
                completed: total.completed,
                demand,
                demand_per_second: demand / secs,
                throughput: total.completed as f64 / secs,
                served: served(flow, total.dispatched, demand),
                worst_replica_served,
                seat_seconds: total.seat_ns / 1e9,
                seat_share: 0.0,
                cost_seconds: total.cost_ns / 1e9,
                cost_share: 0.0,
                wait: self.flow_waits[f].clone(),
                rejected: total.rejected,
            });
            debug_assert_eq!(first.flow as usize, f);
            r += flow.replicas as usize;
        }
        let all_seat_seconds: f64 = flows.iter().map(|f| f.seat_seconds).sum();
        let all_cost_seconds: f64 = flows.iter().map(|f| f.cost_seconds).sum();
        for f in &mut flows {
            f.seat_share = ratio(f.seat_seconds, all_seat_seconds);
            f.cost_share = ratio(f.cost_seconds, all_cost_seconds);
        }
        let nominal = self.dispatcher.borrowing().report();
        let levels = self
            .levels
            .iter()
            .enumerate()
            .map(|(l, level)| {
                let t = &level_tally[l];
                let limits = &self.series.level_limit[l];
                let seat_seconds = t.seat_ns / 1e9;
                LevelReport {
                    name: level.name.clone(),
                    exempt: level.is_exempt(),
                    nominal_limit: nominal
                        .levels
                        .iter()
                        .find(|n| n.name == level.name)
                        .filter(|_| !level.is_exempt())
                        .map(|n| n.limits.nominal_cl),
                    mean_limit: if level.is_exempt() || limits.is_empty() {
                        None
                    } else {
                        Some(limits.iter().map(|&x| x as f64).sum::<f64>() / limits.len() as f64)
                    },
                    arrived: t.arrived,
                    dispatched: t.dispatched,
                    completed: t.completed,
                    throughput: t.completed as f64 / secs,
                    seat_seconds,
                    seat_share: ratio(seat_seconds, all_seat_seconds),
                    mean_seats: seat_seconds / secs,
                    wait: self.level_waits[l].clone(),
                    rejected: t.rejected,
                    max_queue_length: self.series.level_queue_length[l]
                        .iter()
                        .copied()
                        .max()
                        .unwrap_or(0),
                    dispatcher_dispatched: level.dispatched(),
                    queue_capacity: level
                        .queueset()
                        .map(|qs| qs.config())
                        .filter(|c| c.queues > 0)
                        .map(|c| c.queues.saturating_mul(c.queue_length_limit)),
                }
            })
            .collect();
        Report {
            workload: w.name.clone(),
            description: w.description.clone(),
            seed: self.seed,
            duration: w.duration,
            server_concurrency_limit: w.server.concurrency_limit,
            served_fraction: w.served_fraction,
            requests: self.requests,
            flows,
            levels,
            series: self.series.clone(),
        }
    }

    /// Requests the replica wanted to start: its arrivals (open loop), or
    /// what its clients would send if they never waited (closed loop).
    fn replica_demand(&self, flow: &Flow, tally: &Tally) -> f64 {
        match flow.arrival {
            Arrival::Poisson { .. } => tally.arrived as f64,
            Arrival::Closed { clients, .. } => {
                let cycle = cycle_nanos(flow) / 1e9;
                let bursts: u64 = flow.bursts.iter().map(|b| b.requests as u64).sum();
                let client_seconds = active_client_seconds(flow, clients, self.workload.duration);
                bursts as f64
                    + if cycle > 0.0 {
                        client_seconds / cycle
                    } else {
                        0.0
                    }
            }
        }
    }
}

fn add(into: &mut Tally, t: &Tally) {
    into.arrived += t.arrived;
    into.dispatched += t.dispatched;
    into.completed += t.completed;
    for (a, b) in into.rejected.iter_mut().zip(t.rejected) {
        *a += b;
    }
    into.seat_ns += t.seat_ns;
    into.cost_ns += t.cost_ns;
}

/// Dispatched over demand. A closed loop's demand is an estimate from mean
/// times, which a lucky run can beat by a hair; that is still 100%.
fn served(flow: &Flow, dispatched: u64, demand: f64) -> f64 {
    let fraction = ratio(dispatched as f64, demand);
    match flow.arrival {
        Arrival::Closed { .. } => fraction.min(1.0),
        Arrival::Poisson { .. } => fraction,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// ∫ active clients dt over `[0, duration)`, for one replica: the base
/// count before the first phase, then each phase's rounded count.
fn active_client_seconds(flow: &Flow, clients: u32, duration: Duration) -> f64 {
    let end = duration.as_secs_f64();
    let mut total = 0.0;
    let mut from = 0.0;
    let mut active = clients as f64;
    for p in &flow.phases {
        let at = p.at.as_secs_f64().min(end);
        total += active * (at - from).max(0.0);
        from = from.max(at);
        active = (clients as f64 * p.scale).round();
    }
    total + active * (end - from).max(0.0)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn events_pack_and_unpack() {
        let events = [
            Ev::Finish { slot: u32::MAX },
            Ev::Phase {
                flow: 3,
                phase: 9_999,
            },
            Ev::Burst { burst: 7 },
            Ev::Sample { index: 119 },
            Ev::Arrival {
                replica: 123_456,
                generation: generation_bits(u32::MAX),
            },
            Ev::Wake { client: 0 },
        ];
        for ev in events {
            assert_eq!(Ev::unpack(ev.pack()), ev);
        }
        // At one instant a finish comes before an arrival.
        assert!(events[0].pack() < events[4].pack());
    }
}
