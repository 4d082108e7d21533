//! Seats held past a request's end: for its additional latency (Kubernetes'
//! final seats), or for its flow's next request (the flow policy's
//! anticipation, see `flows`).
//!
//! # Invariants (checked by `Core::check_invariants` in debug builds)
//! 1. `seats` is the sum of the seats of the entries: the seats in the
//!    admission word held by requests that no longer execute. Changed only
//!    under the level lock, so the lock holder knows exactly whether any
//!    request executes (word seats == lingering seats).
//! 2. `holds` counts the entries held for a flow.
//! 3. Every entry leaves exactly once (`pop_due`, `take_hold_for`,
//!    `take_holds`), and its seats go back to the word by the caller,
//!    once (`Core::end_lingering`).

use crate::clock::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Seats held past a request's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Lingering {
    pub(crate) until: Instant,
    pub(crate) seq: u64,
    pub(crate) queue: u32,
    pub(crate) tag: u32,
    pub(crate) seats: u32,
    /// The flow of the request that left them, if a flow policy admitted
    /// it (they count in its state until they are free).
    pub(crate) flow: Option<u64>,
    /// Seats held for this flow's next request (the flow policy's
    /// anticipation, see `flows`), rather than for an additional latency.
    pub(crate) for_flow: Option<u64>,
}

/// Every entry of a level, earliest end first (see the module
/// documentation).
#[derive(Debug, Default)]
pub(crate) struct LingeringSeats {
    heap: BinaryHeap<Reverse<Lingering>>,
    seats: u64,
    holds: u32,
    seq: u64,
}

impl LingeringSeats {
    /// Seats held by entries (invariant 1).
    #[inline]
    pub(crate) fn seats(&self) -> u64 {
        self.seats
    }

    /// Entries held for a flow (invariant 2).
    #[inline]
    pub(crate) fn holds(&self) -> u32 {
        self.holds
    }

    /// Hold `seats` of `queue` until `until`, for an additional latency or
    /// for `for_flow`'s next request.
    pub(crate) fn push(
        &mut self,
        until: Instant,
        queue: u32,
        tag: u32,
        seats: u32,
        flow: Option<u64>,
        for_flow: Option<u64>,
    ) {
        self.seq += 1;
        self.seats += u64::from(seats);
        self.holds += u32::from(for_flow.is_some());
        self.heap.push(Reverse(Lingering {
            until,
            seq: self.seq,
            queue,
            tag,
            seats,
            flow,
            for_flow,
        }));
    }

    /// When the earliest entry ends.
    pub(crate) fn next_end(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(l)| l.until)
    }

    /// The earliest entry, if it ends at or before `at`.
    pub(crate) fn pop_due(&mut self, at: Instant) -> Option<Lingering> {
        if self.heap.peek().is_some_and(|Reverse(l)| l.until <= at) {
            let Reverse(l) = self.heap.pop().expect("peeked");
            return Some(self.left(l));
        }
        None
    }

    /// The earliest entry held for `flow`, taken out.
    pub(crate) fn take_hold_for(&mut self, flow: u64) -> Option<Lingering> {
        if self.holds == 0 {
            return None;
        }
        let key = self
            .heap
            .iter()
            .filter(|Reverse(l)| l.for_flow == Some(flow))
            .map(|Reverse(l)| (l.until, l.seq))
            .min()?;
        let mut claimed = None;
        self.heap.retain(|Reverse(l)| {
            if (l.until, l.seq) == key {
                claimed = Some(*l);
                return false;
            }
            true
        });
        claimed.map(|l| self.left(l))
    }

    /// Every entry held for a flow, taken out.
    pub(crate) fn take_holds(&mut self) -> Vec<Lingering> {
        if self.holds == 0 {
            return Vec::new();
        }
        let mut held = Vec::new();
        self.heap.retain(|Reverse(l)| {
            if l.for_flow.is_some() {
                held.push(*l);
                return false;
            }
            true
        });
        for l in &held {
            self.left(*l);
        }
        held
    }

    /// Seats held for flows' next requests.
    pub(crate) fn held_for_flows(&self) -> u64 {
        if self.holds == 0 {
            return 0;
        }
        self.heap
            .iter()
            .filter(|Reverse(l)| l.for_flow.is_some())
            .map(|Reverse(l)| u64::from(l.seats))
            .sum()
    }

    /// Every entry, in no particular order (for checks and dumps).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lingering> + '_ {
        self.heap.iter().map(|Reverse(l)| l)
    }

    /// `l` is out of the heap: take it out of the totals.
    fn left(&mut self, l: Lingering) -> Lingering {
        self.seats -= u64::from(l.seats);
        self.holds -= u32::from(l.for_flow.is_some());
        l
    }
}
