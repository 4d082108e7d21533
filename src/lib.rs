//! libapf: API Priority and Fairness (KEP-1040) and the client-go workqueue
//! family, embeddable through a C ABI.
//!
//! # Guide
//!
//! A [`dispatcher::Dispatcher`] holds a configuration of FlowSchemas and
//! PriorityLevelConfigurations (Kubernetes' built-in one, or your own from
//! YAML/JSON through [`config::Config`]). For each request it classifies
//! the request's [`classification::RequestDigest`] into a flow schema and a
//! priority level and decides: execute now (a [`level::RequestGuard`] that
//! gives the seats back when dropped), wait in a fair queue (a
//! [`level::RequestTicket`]), or reject.
//!
//! ```
//! use apf::classification::RequestDigest;
//! use apf::clock::Clock;
//! use apf::dispatcher::{Dispatcher, Outcome};
//! use apf::work_estimate::WorkEstimate;
//!
//! let dispatcher = Dispatcher::builtin(Default::default(), Clock::real());
//! let digest = RequestDigest {
//!     user: "alice",
//!     verb: "get",
//!     path: "/healthz",
//!     ..Default::default()
//! };
//! let decision = dispatcher.start_request(&digest, WorkEstimate::new(1, 0, Default::default()), None);
//! match decision.outcome {
//!     Outcome::Execute(guard) => {
//!         // ... serve the request, then give its seats back:
//!         guard.finish();
//!     }
//!     Outcome::Queued(_ticket) => { /* wait on the ticket, then execute */ }
//!     Outcome::Rejected(reason) => println!("rejected: {reason:?}"),
//! }
//! ```
//!
//! The rest of the crate: [`workqueue`] (client-go's rate-limited,
//! delaying, two-lane and priority work queues), [`metrics`] (Kubernetes'
//! APF metrics and debug dumps), the `tower` feature's layer for HTTP
//! servers and what every libapf middleware shares ([`rejection`], the 429;
//! [`observe`], `/metrics` and the dumps over HTTP; [`uid`], stable UIDs),
//! the `simulator` feature's workload simulator, and [`ffi`], the
//! C ABI behind `include/apf.h` and the C, C++, Go and Python bindings.
//! Installing for each language: `docs/install.md` in the repository.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

pub mod borrowing;
pub mod classification;
pub mod clock;
pub mod config;
pub mod dealer;
pub mod dispatcher;
pub mod ffi;
pub mod input;
pub mod level;
#[cfg(not(loom))]
pub mod metrics;
#[cfg(not(loom))]
pub mod observe;
pub mod queueset;
pub mod rejection;
pub mod retry_after;
#[cfg(all(feature = "simulator", not(loom)))]
pub mod simulator;
pub mod sync;
#[cfg(all(feature = "tower", not(loom)))]
pub mod tower;
pub mod uid;
pub mod work_estimate;
pub mod workqueue;
