//! The core's debug-build invariant checks (a child module of `core`, so
//! it reads the running totals it checks without widening their
//! visibility).

use super::Core;

impl Core {
    /// Debug-build invariant checks.
    pub(crate) fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let waiting: usize = self.queues.iter().map(|q| q.waiting.len()).sum();
        debug_assert_eq!(waiting, self.requests_waiting() as usize, "waiting count");
        let active = self.queues.iter().filter(|q| q.is_active()).count();
        debug_assert_eq!(active, self.queues.active() as usize, "active queues");
        let ready = self.queues.iter().filter(|q| !q.waiting.is_empty()).count();
        debug_assert_eq!(ready, self.queues.ready_len(), "ready index");
        // Every queue with waiting requests is indexed under its virtual
        // finish time: next-dispatch R plus its head's work, no stale key.
        for (i, q) in self.queues.iter().enumerate() {
            let key = q.waiting.front().map(|head| q.next_dispatch_r + head.work);
            debug_assert_eq!(q.ready_key, key, "queue {i}: ready-index key");
            if let Some(key) = key {
                debug_assert!(self.queues.is_ready(key, i), "queue {i} indexed");
            }
        }
        let lingering: u64 = self.lingering.iter().map(|l| u64::from(l.seats)).sum();
        debug_assert_eq!(lingering, self.lingering.seats(), "lingering seats");
        let holds = self
            .lingering
            .iter()
            .filter(|l| l.for_flow.is_some())
            .count();
        debug_assert_eq!(holds, self.lingering.holds() as usize, "holds");
        let seats: u64 = self.queues.iter().map(|q| q.seats_in_use as u64).sum();
        debug_assert_eq!(seats, self.queues.executing_seats(), "queued seats");
        self.check_queue_seats();
        let wseats: u64 = self.queues.iter().map(|q| q.waiting_seats).sum();
        debug_assert_eq!(wseats, self.queues.waiting_seats(), "waiting seats");
        let sum =
            |f: fn(&crate::stats::TagStats) -> u64| -> u64 { self.tallies.iter().map(f).sum() };
        debug_assert_eq!(
            sum(|t| t.waiting as u64),
            self.requests_waiting() as u64,
            "tallied waiting"
        );
        debug_assert_eq!(
            sum(|t| t.waiting_seats),
            self.queues.waiting_seats(),
            "tallied waiting seats"
        );
        debug_assert_eq!(
            sum(|t| t.executing as u64),
            self.requests_executing() as u64,
            "tallied executing"
        );
        debug_assert_eq!(sum(|t| t.seats_in_use), self.seats.in_use, "tallied seats");
        self.check_order_invariants();
        self.check_flow_invariants();
    }

    /// The queues' seats against the level's (issue 22: a release that
    /// reached the level after its request's finish lowered the level's
    /// seats but not its queue's). The queues hold part of the level's
    /// seats (the rest belong to requests of no queue), and a queue with
    /// no executing request holds only the seats lingering on it; so on
    /// an idle level every queue holds none.
    fn check_queue_seats(&self) {
        debug_assert!(
            self.queues.executing_seats() <= self.seats.in_use,
            "the queues' seats ({}) within the level's ({})",
            self.queues.executing_seats(),
            self.seats.in_use
        );
        let mut lingering = vec![0u64; self.queues.len()];
        for l in self.lingering.iter() {
            if let Some(seats) = lingering.get_mut(l.queue as usize) {
                *seats += u64::from(l.seats);
            }
        }
        for (i, q) in self.queues.iter().enumerate() {
            if q.executing == 0 {
                debug_assert_eq!(
                    u64::from(q.seats_in_use),
                    lingering[i],
                    "queue {i}: seats in use with no executing request are lingering seats"
                );
            }
        }
    }
}
