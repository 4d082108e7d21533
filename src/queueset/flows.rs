//! The flow table of the `flow` fairness policy: which queue each busy flow
//! keeps to.
//!
//! Under [`Fairness::Flow`](super::Fairness::Flow) a flow with requests
//! waiting or executing sends every new request to the queue it already
//! occupies, so a flow with many concurrent requests competes as one queue
//! (one flow) instead of spreading over its whole hand. An idle flow has no
//! entry: the table holds at most one entry per request in the system, so
//! millions of distinct flows cost nothing while idle. Touched only under
//! the level lock (the hot path records the flow hash and the queue is
//! chosen when its record is replayed).

use super::core::{Core, Ended, FLOW_QUEUE, NO_QUEUE};
use crate::clock::Instant;
use crate::dealer::Dealer;
use crate::work_estimate::WorkEstimate;
use std::collections::HashMap;

/// A busy flow: its queue and its requests waiting or executing there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    queue: u32,
    requests: u32,
}

/// Busy flows by flow hash. See the module documentation.
#[derive(Default)]
pub(crate) struct FlowTable {
    flows: HashMap<u64, Entry>,
}

impl std::fmt::Debug for FlowTable {
    /// The entries by flow hash, so two tables with the same entries print
    /// the same (a `HashMap` iterates in a per-instance random order).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut entries: Vec<_> = self.flows.iter().collect();
        entries.sort_unstable_by_key(|&(flow, _)| *flow);
        f.debug_map().entries(entries).finish()
    }
}

impl FlowTable {
    /// The queue a busy flow keeps to.
    pub(crate) fn queue_of(&self, flow: u64) -> Option<usize> {
        self.flows.get(&flow).map(|e| e.queue as usize)
    }

    /// A request of `flow` enters queue `queue` (waiting or executing).
    /// A busy flow's requests all share its queue, so `queue` must be the
    /// flow's own when it is busy.
    pub(crate) fn join(&mut self, flow: u64, queue: usize) {
        let entry = self.flows.entry(flow).or_insert(Entry {
            queue: queue as u32,
            requests: 0,
        });
        debug_assert_eq!(
            entry.queue as usize, queue,
            "flow {flow:#x} keeps its queue"
        );
        entry.requests += 1;
    }

    /// A request of `flow` leaves the system (finished, rejected after
    /// waiting, or cancelled). Returns the flow's queue, or None if the
    /// flow had no request (a bug, reported in debug builds).
    pub(crate) fn leave(&mut self, flow: u64) -> Option<usize> {
        let Some(entry) = self.flows.get_mut(&flow) else {
            debug_assert!(false, "flow {flow:#x} left without a request in the table");
            return None;
        };
        let queue = entry.queue as usize;
        entry.requests -= 1;
        if entry.requests == 0 {
            self.flows.remove(&flow);
            // Give memory back after a burst of distinct flows, so the
            // table stays proportional to the requests in the system.
            if self.flows.capacity() > 64 && self.flows.len() * 4 < self.flows.capacity() {
                self.flows.shrink_to(self.flows.len() * 2);
            }
        }
        Some(queue)
    }

    /// Busy flows.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    /// Requests counted in the table (waiting or executing under `flow`).
    pub(crate) fn requests(&self) -> u64 {
        self.flows.values().map(|e| u64::from(e.requests)).sum()
    }

    /// (flow, queue) of every busy flow, for invariant checks.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.flows.iter().map(|(&f, e)| (f, e.queue as usize))
    }
}

impl Core {
    /// The queue for a new request of `flow` under the flow policy: the
    /// one a busy flow keeps to; for an idle flow, the least-loaded queue
    /// of its hand counting seats waiting *and* held (a queue busy with
    /// executing requests belongs to flows that are using their share),
    /// ties going to the earlier card.
    pub(crate) fn flow_queue(&self, dealer: &Dealer, flow: u64) -> usize {
        if let Some(q) = self.flows.queue_of(flow) {
            return q;
        }
        let load = |q: usize| {
            self.queues.get(q).map_or(0, |queue| {
                queue.waiting_seats + u64::from(queue.seats_in_use)
            })
        };
        let hand = dealer.deal_into_hand(flow);
        hand.iter()
            .map(|&card| card as usize)
            .min_by_key(|&q| load(q))
            .unwrap_or(0)
    }

    /// A request admitted lock-free under the flow policy: choose its
    /// queue now (with nothing waiting when it started, only accounting
    /// depends on the choice) and count it in the flow table.
    pub(crate) fn replay_start_flow(
        &mut self,
        flow: u64,
        tag: u32,
        estimate: WorkEstimate,
        at: Instant,
    ) {
        let q = self.replayed_flow_queue(flow);
        self.flows.join(flow, q);
        self.replay_start(q as u32, tag, estimate, at);
        self.order_start_at_once(flow, &estimate, at);
    }

    /// The queue of a flow-policy request admitted lock-free, chosen when
    /// its start is replayed.
    fn replayed_flow_queue(&self, flow: u64) -> usize {
        // The level stopped queuing since the start (a reconfiguration
        // between the hot path's read of the dealer and this replay): keep
        // the flow's queue if busy, else queue 0, which drains away.
        match &self.dealer {
            Some(dealer) => self.flow_queue(dealer, flow),
            None => self.flows.queue_of(flow).unwrap_or(0),
        }
    }

    /// A flow-policy start followed at once by a finish of the same flow
    /// and tag (see `Core::replay_start_finish`): the same state as
    /// `replay_start_flow` then `replay_finish_flow`. The start joins the
    /// flow table and the finish leaves it, finding the queue the start
    /// chose (the flow is in the table in between), so the table's counts
    /// end as they began and nothing in between reads them: neither is
    /// done.
    pub(crate) fn replay_start_finish_flow(
        &mut self,
        flow: u64,
        tag: u32,
        estimate: WorkEstimate,
        at: Instant,
        end: Ended,
        midway: impl FnOnce(&Core),
    ) {
        if self.order.is_on() && !self.order.pair_fuses(flow) {
            // Per-flow order follows the flow between the two records.
            self.replay_start_flow(flow, tag, estimate, at);
            midway(self);
            self.replay_finish_flow(flow, tag, end.initial_seats, end.seats, end.start, end.at);
            return;
        }
        let q = self.replayed_flow_queue(flow);
        if !self.order.is_on() {
            self.replay_start_finish(q as u32, tag, estimate, at, end, midway);
            return;
        }
        // A flow without a state: its state would be made at the start and
        // forgotten at the finish. What outlives the pair is the turns it
        // took and the level's last service time; in between, it counts
        // as an active flow for R (from the start's sync on).
        self.sync(at);
        let slot = self.order.begin_pair();
        self.index_pair(slot, Some(u64::from(estimate.max_seats())));
        self.replay_start_finish(q as u32, tag, estimate, at, end, midway);
        self.index_pair(slot, None);
        self.order
            .end_pair(end.at.as_nanos().saturating_sub(end.start.as_nanos()));
    }

    /// A flow-policy request finished lock-free: its queue is its flow's.
    pub(crate) fn replay_finish_flow(
        &mut self,
        flow: u64,
        tag: u32,
        initial_seats: u32,
        seats: u32,
        start: Instant,
        at: Instant,
    ) {
        let queue = self.flow_leaves(FLOW_QUEUE, Some(flow));
        self.replay_finish(queue, tag, initial_seats, seats, start, at);
        self.order_end(flow, initial_seats, start, at);
        self.order_release_seats(flow, seats);
        self.order_forget_if_idle(flow);
    }

    /// A request of `queue` (and, under the flow policy, of `flow`)
    /// finishes: it leaves the flow table. Returns its queue, resolved
    /// from the table when it was admitted lock-free.
    pub(crate) fn flow_leaves(&mut self, queue: u32, flow: Option<u64>) -> u32 {
        let Some(flow) = flow else { return queue };
        let of_flow = self.flows.leave(flow);
        if queue != FLOW_QUEUE {
            debug_assert_eq!(of_flow, Some(queue as usize), "flow {flow:#x}'s queue");
            return queue;
        }
        of_flow.map_or(NO_QUEUE, |q| q as u32)
    }

    /// The queue of an executing request of `queue` (and, under the flow
    /// policy, of `flow`) that keeps executing: resolved from the flow
    /// table when it was admitted lock-free, the request staying in it.
    /// The flow is in the table while the request executes, as long as
    /// its finish comes after its releases (issue 22's race broke that: see
    /// `level::SharedRequest`); missing, it is a bug, reported in debug
    /// builds.
    pub(crate) fn executing_queue(&self, queue: u32, flow: Option<u64>) -> u32 {
        match flow {
            Some(flow) if queue == FLOW_QUEUE => {
                let q = self.flows.queue_of(flow);
                debug_assert!(q.is_some(), "executing flow {flow:#x} in the flow table");
                q.map_or(NO_QUEUE, |q| q as u32)
            }
            _ => queue,
        }
    }

    /// Seats held for flows' next requests.
    pub(crate) fn held_seats(&self) -> u32 {
        self.lingering.held_for_flows().min(u64::from(u32::MAX)) as u32
    }

    /// A new request of `flow` arrives under the flow policy: seats held
    /// for it (the earliest hold) are released first, so that it competes
    /// for them as a newly active queue. Returns the seats to give back
    /// to the admission word.
    pub(crate) fn claim_hold(&mut self, flow: u64) -> u32 {
        match self.lingering.take_hold_for(flow) {
            Some(l) => self.end_lingering(&l),
            None => 0,
        }
    }

    /// Once nothing waits, seats held for flows' next requests are free
    /// again: there is no other flow left to keep them from, and the hot
    /// path (which runs only while nothing waits) never meets a hold.
    /// Returns the seats to give back to the admission word.
    pub(crate) fn release_holds_if_idle(&mut self) -> u32 {
        if self.lingering.holds() == 0 || self.requests_waiting() > 0 {
            return 0;
        }
        let held = self.lingering.take_holds();
        let freed = held.iter().map(|l| self.end_lingering(l)).sum();
        for l in &held {
            if let Some(flow) = l.flow {
                self.order_forget_if_idle(flow);
            }
        }
        freed
    }

    /// Debug-build checks of the flow table: every waiting flow-policy
    /// request sits in its flow's queue, and every busy flow's queue is
    /// active (it holds that flow's requests).
    pub(crate) fn check_flow_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut waiting = 0u64;
        for (q, queue) in self.queues.iter().enumerate() {
            for w in &queue.waiting {
                if let Some(flow) = w.slot.flow {
                    waiting += 1;
                    debug_assert_eq!(
                        self.flows.queue_of(flow),
                        Some(q),
                        "flow {flow:#x}'s waiter"
                    );
                }
            }
        }
        debug_assert!(
            self.flows.requests() >= waiting,
            "flow table counts waiters"
        );
        for (flow, q) in self.flows.iter() {
            let active = self
                .queues
                .get(q)
                .is_some_and(|queue| !queue.waiting.is_empty() || queue.executing > 0);
            debug_assert!(active, "busy flow {flow:#x}'s queue {q} is active");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_flow_keeps_its_queue_until_its_last_request_leaves() {
        let mut t = FlowTable::default();
        t.join(7, 3);
        t.join(7, 3);
        assert_eq!(t.queue_of(7), Some(3));
        assert_eq!(t.leave(7), Some(3));
        assert_eq!(t.queue_of(7), Some(3));
        assert_eq!(t.leave(7), Some(3));
        assert_eq!(t.queue_of(7), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn memory_follows_busy_flows_not_flows_ever_seen() {
        let mut t = FlowTable::default();
        for f in 0..100_000u64 {
            t.join(f, (f % 64) as usize);
        }
        for f in 0..100_000u64 {
            t.leave(f);
        }
        assert_eq!(t.len(), 0);
        assert!(t.flows.capacity() <= 128, "capacity {}", t.flows.capacity());
    }
}
