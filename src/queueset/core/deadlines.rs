//! The deadlines of waiting requests, earliest first, for the level's timer.
//!
//! # Invariants
//! 1. Every waiting request has an entry `(deadline, seq, queue)`.
//! 2. Entries of requests no longer waiting (dispatched, cancelled) are
//!    dropped lazily: when they reach the top ([`Deadlines::discard_stale`])
//!    or, when they pile up beyond `max(64, 2 × waiting)`, by a rebuild
//!    from the waiting requests; so the heap stays proportional to the
//!    requests waiting.

use crate::clock::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
}

impl Deadlines {
    /// Request `seq`, waiting in queue `q`, times out at `deadline`.
    pub(crate) fn push(&mut self, deadline: Instant, seq: u64, q: usize) {
        self.heap.push(Reverse((deadline, seq, q)));
    }

    /// The earliest entry (it may be stale: call `discard_stale` first).
    pub(crate) fn peek(&self) -> Option<(Instant, u64, usize)> {
        self.heap.peek().map(|&Reverse(e)| e)
    }

    /// The earliest entry, taken out, if it is due at `at`.
    pub(crate) fn pop_due(&mut self, at: Instant) -> Option<(Instant, u64, usize)> {
        let due = self.peek().filter(|&(deadline, _, _)| deadline <= at)?;
        self.heap.pop();
        Some(due)
    }

    /// Drop stale entries from the top (`live(seq, queue)` says whether the
    /// request still waits there), and rebuild from `all` (every waiting
    /// request's entry) when stale entries pile up (invariant 2).
    pub(crate) fn discard_stale<I>(
        &mut self,
        waiting: u32,
        live: impl Fn(u64, usize) -> bool,
        all: impl FnOnce() -> I,
    ) where
        I: Iterator<Item = (Instant, u64, usize)>,
    {
        while let Some((_, seq, q)) = self.peek() {
            if live(seq, q) {
                break;
            }
            self.heap.pop();
        }
        if self.heap.len() > 64 && self.heap.len() > 2 * waiting as usize {
            self.heap = all().map(Reverse).collect();
        }
    }
}
