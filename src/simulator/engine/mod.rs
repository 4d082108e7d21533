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
//!
//! This module holds the loop, its events and its state; where requests
//! come from is in `arrivals`, what happens to them in the server in
//! `execution`, and the [`Report`] built from the tallies in `tally`.

mod arrivals;
mod execution;
mod tally;

use super::histogram::LogHistogram;
use super::report::{Report, Series};
use super::workload::{Arrival, Workload};
use crate::classification::{Classifier, OwnedDigest, RequestDigest};
use crate::clock::{duration_nanos, Clock, Instant, ManualClock};
use crate::config::Config;
use crate::dispatcher::{Dispatcher, DispatcherError, DispatcherOptions};
use crate::level::{Level, RequestGuard, RequestTicket};
use crate::sync::{lock, Arc, AtomicBool, Mutex, Ordering};
use crate::work_estimate::WorkEstimate;
use execution::held_seats;
use rand_pcg::rand_core::SeedableRng;
use rand_pcg::Pcg64Mcg;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::task::{Wake, Waker};
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
        adaptive: workload.server.adaptive,
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
        .flat_map(|f| (0..f.replicas).map(move |i| super::workload::replica(&f.request, i)))
        .collect();
    let groups: Vec<_> = templates.iter().map(OwnedDigest::group_refs).collect();
    let digests: Vec<RequestDigest<'_>> = templates
        .iter()
        .zip(&groups)
        .map(|(t, g)| t.as_digest(g))
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
    flow_waits: Vec<LogHistogram>,
    level_waits: Vec<LogHistogram>,
    /// Per flow entry, execution times of completed requests (what the
    /// backend's latency was).
    flow_execution: Vec<LogHistogram>,
    /// Requests executing in the backend now (every level's).
    in_backend: u64,
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
            server_limit: Vec::with_capacity(samples),
            backend_in_flight: Vec::with_capacity(samples),
            backend_capacity: Vec::with_capacity(samples),
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
                .chain(workload.backend.iter().flat_map(|b| {
                    b.phases.iter().map(|p| {
                        (
                            p.at.as_secs_f64(),
                            format!("backend capacity {}", p.capacity),
                        )
                    })
                }))
                .collect(),
        };
        Sim {
            dispatcher,
            manual,
            workload,
            digests,
            flow_waits: vec![LogHistogram::default(); workload.flows.len()],
            flow_execution: vec![LogHistogram::default(); workload.flows.len()],
            in_backend: 0,
            level_waits: vec![LogHistogram::default(); levels.len()],
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
        self.series
            .server_limit
            .push(self.dispatcher.server_concurrency_limit());
        self.series.backend_in_flight.push(self.in_backend);
        if let Some(b) = &self.workload.backend {
            let now = self.dispatcher.clock().now().as_nanos();
            self.series
                .backend_capacity
                .push(b.capacity_at(std::time::Duration::from_nanos(now)));
        }
    }
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
