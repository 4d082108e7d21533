//! An adaptive server concurrency limit: the total seats APF shares among
//! priority levels follow the backend's measured latency instead of a
//! fixed `server_concurrency_limit` (issue 26). Off by default.
//!
//! - [`GradientController`] (`controller.rs`): the pure controller, a
//!   gradient on the ratio of a probed minimum latency to each window's
//!   mean latency, with bounds and smoothing; no clock, no lock.
//! - [`AdaptiveOptions`] (`options.rs`): its tuning, validated.
//! - `runtime.rs`: the controller at work in a dispatcher (one window per
//!   update interval, read from what the levels' replays already tally;
//!   the total handed to borrowing); its state is an [`AdaptiveReport`].
//!
//! Turn it on with `DispatcherOptions::adaptive`; the dispatcher's
//! `server_concurrency_limit` is then the total it starts from.
//!
//! Design, tuning and measurements: `docs/adaptive-limit.md`.

mod controller;
mod options;
mod runtime;

pub use controller::{
    ControllerPhase, GradientController, Window, MAX_GRADIENT, MIN_GRADIENT, STUCK_AT_MIN_WINDOWS,
};
pub use options::{AdaptiveConfigError, AdaptiveOptions, MIN_UPDATE_INTERVAL};
pub(crate) use runtime::AdaptiveLimit;
pub use runtime::AdaptiveReport;

#[cfg(all(test, not(loom)))]
mod tests;
