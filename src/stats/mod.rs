//! The measuring floor: the statistics a level keeps about itself, which
//! borrowing decides from and metrics expose.
//!
//! Every type here is a plain accumulator over the crate's [`Instant`]s:
//! it knows nothing of queues, levels, flow schemas or Prometheus, and
//! imports only `clock` and `sync`. The queueset feeds them (under its
//! level lock, while it replays its event ring or on the slow path, never
//! on the lock-free hot path), `level` and the dispatcher own the handles
//! shared between levels, `borrowing` reads seat demand, and `metrics`
//! encodes all of them. Each is used from above, so nothing here points
//! up (Kubernetes, too, keeps its seat-demand integrator and its
//! timing-ratio histograms in packages below its queueset).
//!
//! - [`SeatDemandIntegrator`] / [`SeatDemandHandle`]: a level's seat
//!   demand over time, exact integer integrals, read by borrowing each
//!   adjustment period;
//! - [`RatioHistogram`] and [`Utilization`]: time-weighted ratio histograms
//!   (seat and request utilization, the demand ratio);
//! - [`TagStats`] and [`BucketHistogram`]: what a level's requests did, tallied
//!   by the caller's tag (the dispatcher's flow schema);
//! - [`ReadWriteHandle`] / [`ReadVsWrite`]: requests waiting and executing,
//!   mutating and read-only, over all levels.
//!
//! [`Instant`]: crate::clock::Instant

mod read_write;
mod seat_demand;
mod tally;
mod utilization;

pub use read_write::{ReadVsWrite, ReadWriteHandle, READ_ONLY_TAG, READ_VS_WRITE_BUCKETS};
pub use seat_demand::{
    IntegratorResults, SeatDemandHandle, SeatDemandIntegrator, DEMAND_SEATS_BUCKETS,
};
pub use tally::{
    BucketHistogram, DurationHistogram, LengthHistogram, SeatsHistogram, TagStats,
    DURATION_BUCKETS_SECONDS, MAX_TAG, QUEUE_LENGTH_BUCKETS, WORK_SEATS_BUCKETS,
};
pub use utilization::{
    RatioHistogram, Utilization, REQUEST_UTILIZATION_BUCKETS, SEAT_UTILIZATION_BUCKETS,
};

pub(crate) use read_write::{tag_for_verb, Phase};
pub(crate) use tally::Tallies;
pub(crate) use utilization::Occupancy;
