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
use super::shards::{deferred_offset, ANY_SHARD};
use super::ReleaseError;
use crate::clock::Instant;
use crate::work_estimate::WorkEstimate;
use std::time::Duration;

/// A request holding seats (see the module documentation).
///
/// Laid out flat (64 bytes rather than the 80 of its fields as options
/// and a [`WorkEstimate`] with its `Duration`): every start moves it into
/// the guard and every finish and release reads it, so the presence of the
/// ticket and the flow are flags beside plain values, and the estimate's
/// latency is kept as its seconds and nanoseconds, rebuilt exactly by
/// [`Held::estimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// The shard whose ledger holds its start ([`ANY_SHARD`] when the
    /// slow path accounted its start): its finish closes the slot there.
    pub(crate) shard: u32,
    /// Its queue; [`FLOW_QUEUE`] when the flow policy admitted it lock-free
    /// (the queue is then chosen at the fold and found in the flow table);
    /// under Kubernetes' policy, admitted lock-free, the offset into its
    /// flow's hand with the card still to deal (`shards::DEAL_LATER`:
    /// dealt at the fold, found then in the level's table of dealt
    /// cards); [`NO_QUEUE`] at a level that does not queue.
    pub(crate) queue: u32,
    /// The caller's tag (see `tally`).
    pub(crate) tag: u32,
    /// Seats already given back early.
    pub(crate) released: u32,
    /// The estimate's seats (after clamping and capping).
    initial_seats: u32,
    final_seats: u32,
    /// The estimate's additional latency, as `Duration` keeps it.
    latency_nanos: u32,
    /// Its slot in that ledger, when `has_ticket` (otherwise the slow path
    /// accounted its start). A slot folded into the core meanwhile no
    /// longer answers to it: the finish then goes through the core.
    ticket: LedgerTicket,
    latency_secs: u64,
    /// The flow's hash: when `has_flow`, a flow fairness policy admitted
    /// it, and it counts in the level's flow table until it finishes;
    /// kept for every hot start (a card dealt later needs it).
    flow_hash: u64,
    /// When it started executing.
    pub(crate) start: Instant,
    has_ticket: bool,
    has_flow: bool,
}

impl Held {
    /// A request holding seats for `estimate` since `start`, accounted on
    /// `shard` at `ticket` (or by the slow path: `ANY_SHARD`, no ticket).
    #[inline]
    pub(crate) fn new(
        shard: u32,
        ticket: Option<LedgerTicket>,
        queue: u32,
        flow: Option<u64>,
        tag: u32,
        estimate: WorkEstimate,
        start: Instant,
    ) -> Held {
        Held {
            shard,
            queue,
            tag,
            released: 0,
            initial_seats: estimate.initial_seats,
            final_seats: estimate.final_seats,
            latency_nanos: estimate.additional_latency.subsec_nanos(),
            ticket: ticket.unwrap_or_default(),
            latency_secs: estimate.additional_latency.as_secs(),
            flow_hash: flow.unwrap_or_default(),
            start,
            has_ticket: ticket.is_some(),
            has_flow: flow.is_some(),
        }
    }

    /// A request started on the hot path of shard `shard`, at `ticket`:
    /// its flow's hash is kept whatever the policy, and counts as its flow
    /// under a flow policy ([`FLOW_QUEUE`]).
    #[inline]
    pub(crate) fn hot(
        shard: u32,
        ticket: LedgerTicket,
        queue: u32,
        flow_hash: u64,
        tag: u32,
        estimate: WorkEstimate,
        start: Instant,
    ) -> Held {
        Held {
            shard,
            queue,
            tag,
            released: 0,
            initial_seats: estimate.initial_seats,
            final_seats: estimate.final_seats,
            latency_nanos: estimate.additional_latency.subsec_nanos(),
            ticket,
            latency_secs: estimate.additional_latency.as_secs(),
            flow_hash,
            start,
            has_ticket: true,
            has_flow: queue == FLOW_QUEUE,
        }
    }

    /// The same request in `queue` (its card, once dealt).
    #[inline]
    pub(crate) fn in_queue(mut self, queue: u32) -> Held {
        self.queue = queue;
        self
    }

    /// A request dispatched from a queue (or admitted by the slow path):
    /// its start is accounted under the level lock, so it has no shard.
    pub(crate) fn dispatched(
        queue: u32,
        flow: Option<u64>,
        tag: u32,
        estimate: WorkEstimate,
        start: Instant,
    ) -> Held {
        Held::new(ANY_SHARD, None, queue, flow, tag, estimate, start)
    }

    /// Its slot in its shard's ledger (None: the slow path accounted its
    /// start).
    #[inline]
    pub(crate) fn ticket(&self) -> Option<LedgerTicket> {
        self.has_ticket.then_some(self.ticket)
    }

    /// The flow's hash when a flow fairness policy admitted it.
    #[inline]
    pub(crate) fn flow(&self) -> Option<u64> {
        self.has_flow.then_some(self.flow_hash)
    }

    /// The estimate it holds seats for (after clamping and capping),
    /// exactly as it was given.
    #[inline]
    pub(crate) fn estimate(&self) -> WorkEstimate {
        WorkEstimate {
            initial_seats: self.initial_seats,
            final_seats: self.final_seats,
            additional_latency: Duration::new(self.latency_secs, self.latency_nanos),
        }
    }

    /// Whether its final seats stay taken after it finishes (a non-zero
    /// additional latency).
    #[inline]
    pub(crate) fn lingers(&self) -> bool {
        self.latency_secs != 0 || self.latency_nanos != 0
    }

    /// The most seats it holds at any one time (its estimate's).
    #[inline]
    fn max_seats(&self) -> u32 {
        self.initial_seats.max(self.final_seats)
    }

    /// The seats it still holds: its estimate's, less those released.
    #[inline]
    pub(crate) fn seats(&self) -> u32 {
        self.max_seats() - self.released
    }

    /// The initial seats it is still charged for: its initial seats, fewer
    /// once it released some (a request holds the most of its initial and
    /// final seats; it gives up the final-only ones first).
    #[inline]
    pub(crate) fn charged_seats(&self) -> u32 {
        self.initial_seats.min(self.seats())
    }

    /// Its queue, if the level queues and the queue was chosen at
    /// admission (not at a fold under the flow policy, nor a card still to
    /// deal under Kubernetes' policy).
    pub(crate) fn known_queue(&self) -> Option<u32> {
        (self.queue != NO_QUEUE
            && self.queue != FLOW_QUEUE
            && deferred_offset(self.queue).is_none())
        .then_some(self.queue)
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
