//! Requests in the server: slots, their start, early seat release,
//! rejection, finish, and the seat and cost time they account for.

use super::{Ev, Sim, Slot, SlotWaker, State, NO_CLIENT};
use crate::clock::{duration_nanos, Instant};
use crate::level::{Level, RequestGuard};
use crate::queueset::RejectReason;
use crate::simulator::report::Series;
use crate::simulator::workload::Arrival;
use crate::sync::{Arc, Ordering};
use crate::work_estimate::WorkEstimate;
use std::task::Waker;
use std::time::Duration;

/// The seats a request of `estimate` holds at `level`: capped at the
/// level's per-request maximum (Kubernetes' max seats), and at an exempt
/// level its widest phase, only while it executes.
pub(super) fn held_seats(level: &Level, estimate: WorkEstimate) -> WorkEstimate {
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

impl Sim<'_> {
    pub(super) fn alloc_slot(
        &mut self,
        replica: u32,
        client: u32,
        arrived: u64,
        service: u64,
    ) -> u32 {
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

    pub(super) fn started(&mut self, slot: u32, guard: RequestGuard, now: u64) {
        let start = guard.start_time().as_nanos().min(now);
        // The backend's slowdown is fixed as the request starts.
        self.in_backend += 1;
        if let Some(b) = &self.workload.backend {
            let k = b.capacity_at(std::time::Duration::from_nanos(start));
            let slowdown = b.slowdown(self.in_backend, k);
            let s = &mut self.slots[slot as usize];
            s.service = super::arrivals::to_nanos(s.service as f64 * slowdown);
        }
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
    pub(super) fn release(&mut self, slot: u32, now: u64) {
        let s = &mut self.slots[slot as usize];
        if let State::Running(guard) = &mut s.state {
            if guard.release_all_seats().is_ok() {
                s.released_at = now;
            }
        }
    }

    pub(super) fn rejected(&mut self, slot: u32, reason: RejectReason, now: u64) {
        let s = &mut self.slots[slot as usize];
        s.state = State::Free;
        let (r, client) = (s.replica, s.client);
        self.free.push(slot);
        self.count_rejection(r, reason, now);
        self.retry(r, client, now);
    }

    pub(super) fn finish(&mut self, slot: u32, now: u64) {
        let s = &mut self.slots[slot as usize];
        let State::Running(guard) = std::mem::replace(&mut s.state, State::Free) else {
            return;
        };
        let start = guard.start_time().as_nanos();
        let r = s.replica;
        let flow = self.replicas[r as usize].flow as usize;
        self.in_backend -= 1;
        self.flow_execution[flow].record(now.saturating_sub(start));
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
    pub(super) fn add_seat_time(&mut self, flow: usize, seats: u32, from: u64, to: u64) {
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

    /// Seat time of requests still executing at the end.
    pub(super) fn close_out(&mut self) {
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
}
