//! Where requests come from: open-loop (Poisson) arrivals, closed-loop
//! clients with think time and retries, rate phases and bursts.

use super::{generation_bits, BurstState, Ev, Sim, State, NO_CLIENT};
use crate::clock::{duration_nanos, Instant};
use crate::dispatcher::Outcome;
use crate::queueset::RejectReason;
use crate::simulator::report::Series;
use crate::simulator::workload::{Arrival, Flow, ServiceTime};
use crate::sync::Arc;
use rand_distr::{Distribution, Exp1, StandardNormal};
use rand_pcg::rand_core::Rng;
use rand_pcg::Pcg64Mcg;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Uniform in [0, 1).
pub(super) fn unit(rng: &mut Pcg64Mcg) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A count of nanoseconds as an integer: 0 for NaN or negative values,
/// saturating at 10^18 (some thirty years), far below the end of time.
pub(super) fn to_nanos(ns: f64) -> u64 {
    if ns.is_nan() || ns <= 0.0 {
        0
    } else {
        ns.min(1e18) as u64
    }
}

pub(super) fn sample_service(s: &ServiceTime, rng: &mut Pcg64Mcg) -> u64 {
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

/// A closed-loop client's cycle: mean service time plus think time.
pub(super) fn cycle_nanos(flow: &Flow) -> f64 {
    let think = match flow.arrival {
        Arrival::Closed { think, .. } => duration_nanos(think) as f64,
        Arrival::Poisson { .. } => 0.0,
    };
    flow.service.mean_secs() * 1e9 + think
}

impl Sim<'_> {
    pub(super) fn schedule_start(&mut self) {
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
    pub(super) fn start_client(&mut self, client: u32, now: u64) {
        let r = self.clients[client as usize].replica as usize;
        let cycle = cycle_nanos(&self.workload.flows[self.replicas[r].flow as usize]);
        let offset = to_nanos(cycle * unit(&mut self.replicas[r].rng));
        self.clients[client as usize].busy = true;
        self.push(now.saturating_add(offset), Ev::Wake { client });
    }

    pub(super) fn schedule_arrival(&mut self, r: u32, now: u64) {
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

    pub(super) fn enter_phase(&mut self, flow: u32, phase: u32, now: u64) {
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

    pub(super) fn burst(&mut self, burst: u32, now: u64) {
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

    /// One request of `replica` arrives now.
    pub(super) fn issue(&mut self, r: u32, client: u32, now: u64) {
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
            decision.priority_level.arc(),
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

    pub(super) fn count_rejection(&mut self, r: u32, reason: RejectReason, now: u64) {
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
    pub(super) fn retry(&mut self, r: u32, client: u32, now: u64) {
        if client != NO_CLIENT {
            let flow = &self.workload.flows[self.replicas[r as usize].flow as usize];
            let at = now.saturating_add(duration_nanos(flow.retry_after));
            self.push(at, Ev::Wake { client });
        }
    }
}
