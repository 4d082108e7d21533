//! libapf as a service runs it: the real-thread soak of a level and of the
//! built-in dispatcher (also run under ThreadSanitizer by scripts/tsan.sh),
//! the operator assets (Grafana dashboard, Prometheus rules) against a real
//! exposition, and, with the `tower` feature, the tower layer in a real
//! HTTP server on loopback and against the middleware expectations every
//! binding shares.
#![cfg(not(loom))]

#[path = "../support/openmetrics.rs"]
mod openmetrics;
#[path = "../support/two_levels.rs"]
mod two_levels;

mod adaptive_tower;
mod deploy_assets;
mod middleware_expectations;
mod soak;
mod tower_load;
