//! libapf: API Priority and Fairness (KEP-1040) and the client-go workqueue
//! family, embeddable through a C ABI.
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
pub mod queueset;
pub mod retry_after;
#[cfg(all(feature = "simulator", not(loom)))]
pub mod simulator;
pub mod sync;
#[cfg(all(feature = "tower", not(loom)))]
pub mod tower;
pub mod work_estimate;
pub mod workqueue;
