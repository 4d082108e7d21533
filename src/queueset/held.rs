//! The held request: one value that carries a request holding seats from
//! its admission, through its early releases, to its finish.
//!
//! Every path that ends or shrinks a request (the hot finish, the slow
//! finish, an early release, a dispatched request cancelled by its own
//! ticket) reads the same fields: where the request's start is accounted
//! (its shard), where it belongs (its queue, or its flow under the flow
//! policies), its tag, its estimate, its start and what it already gave
//! back. They travel together in a [`Held`] instead of as seven or eight
//! loose arguments.
//!
//! # Invariants
//! - `released < estimate.max_seats()` while the request is executing
//!   with seats, `released == estimate.max_seats()` once it gave them all
//!   back early; never more ([`Held::begin_release`] refuses).
//! - A `Held` is owned by exactly one [`Execution`](super::Execution),
//!   which is neither `Clone` nor `Copy` and is consumed by its finish, so
//!   the request's seats are given back exactly once: its releases (each
//!   with a copy of the `Held` as it was before the release) and then its
//!   finish, of `seats()` only. The copies a release takes are snapshots
//!   for the core's accounting, never a second owner.

use super::core::{FLOW_QUEUE, NO_QUEUE};
use super::ledger::LedgerTicket;
use super::shards::ANY_SHARD;
use super::ReleaseError;
use crate::clock::Instant;
use crate::work_estimate::WorkEstimate;

/// A request holding seats (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// The shard whose ledger holds its start ([`ANY_SHARD`] when the
    /// slow path accounted its start): its finish closes the slot there.
    pub(crate) shard: u32,
    /// Its slot in that ledger (None: the slow path accounted its start).
    /// A slot folded into the core meanwhile no longer answers to it: the
    /// finish then goes through the core.
    pub(crate) ticket: Option<LedgerTicket>,
    /// Its queue; [`FLOW_QUEUE`] when the flow policy admitted it lock-free
    /// (the queue is then chosen at the fold and found in the flow table);
    /// [`NO_QUEUE`] at a level that does not queue.
    pub(crate) queue: u32,
    /// The flow's hash when a flow fairness policy admitted it: the
    /// request counts in the level's flow table until it finishes.
    pub(crate) flow: Option<u64>,
    /// The caller's tag (see `tally`).
    pub(crate) tag: u32,
    /// The estimate it holds seats for (after clamping and capping).
    pub(crate) estimate: WorkEstimate,
    /// When it started executing.
    pub(crate) start: Instant,
    /// Seats already given back early.
    pub(crate) released: u32,
}

impl Held {
    /// A request dispatched from a queue (or admitted by the slow path):
    /// its start is accounted under the level lock, so it has no shard.
    pub(crate) fn dispatched(
        queue: u32,
        flow: Option<u64>,
        tag: u32,
        estimate: WorkEstimate,
        start: Instant,
    ) -> Held {
        Held {
            shard: ANY_SHARD,
            ticket: None,
            queue,
            flow,
            tag,
            estimate,
            start,
            released: 0,
        }
    }

    /// The seats it still holds: its estimate's, less those released.
    #[inline]
    pub(crate) fn seats(&self) -> u32 {
        self.estimate.max_seats() - self.released
    }

    /// The initial seats it is still charged for: its initial seats, fewer
    /// once it released some (a request holds the most of its initial and
    /// final seats; it gives up the final-only ones first).
    #[inline]
    pub(crate) fn charged_seats(&self) -> u32 {
        self.estimate.initial_seats.min(self.seats())
    }

    /// Its queue, if the level queues and the queue was chosen at
    /// admission (not at a fold under the flow policy).
    pub(crate) fn known_queue(&self) -> Option<u32> {
        (self.queue != NO_QUEUE && self.queue != FLOW_QUEUE).then_some(self.queue)
    }

    /// Check a release of `seats` and count them as given back; returns
    /// the request as it was before (the core charges the release from
    /// that). Errors leave it as it was.
    pub(crate) fn begin_release(&mut self, seats: u32) -> Result<Held, ReleaseError> {
        let held = self.seats();
        if seats == 0 {
            return Err(ReleaseError::ZeroSeats);
        }
        if held == 0 {
            return Err(ReleaseError::NothingHeld);
        }
        if seats > held {
            return Err(ReleaseError::MoreThanHeld {
                held,
                requested: seats,
            });
        }
        let before = *self;
        self.released += seats;
        Ok(before)
    }
}
