//! Building the [`Report`] from the per-replica tallies, histograms and
//! series the run collected.

use super::arrivals::cycle_nanos;
use super::{Sim, Tally};
use crate::classification::Classifier;
use crate::simulator::report::{FlowReport, LevelReport, Report};
use crate::simulator::workload::{Arrival, Flow};
use std::time::Duration;

impl Sim<'_> {
    pub(super) fn report(&self, classifier: &Classifier) -> Report {
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
                execution: self.flow_execution[f].clone(),
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
            adaptive: w.server.adaptive.is_some(),
            backend: w.backend.is_some(),
            served_fraction: w.served_fraction,
            requests: self.requests,
            flows,
            levels,
            series: self.series.clone(),
        }
    }

    /// Requests the replica wanted to start: its arrivals (open loop), or
    /// what its clients would send if they never waited (closed loop).
    pub(super) fn replica_demand(&self, flow: &Flow, tally: &Tally) -> f64 {
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

pub(super) fn add(into: &mut Tally, t: &Tally) {
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
pub(super) fn served(flow: &Flow, dispatched: u64, demand: f64) -> f64 {
    let fraction = ratio(dispatched as f64, demand);
    match flow.arrival {
        Arrival::Closed { .. } => fraction.min(1.0),
        Arrival::Poisson { .. } => fraction,
    }
}

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// ∫ active clients dt over `[0, duration)`, for one replica: the base
/// count before the first phase, then each phase's rounded count.
pub(super) fn active_client_seconds(flow: &Flow, clients: u32, duration: Duration) -> f64 {
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
