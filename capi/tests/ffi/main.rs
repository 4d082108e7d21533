//! The C ABI of dispatchers, requests and queuesets, called from Rust
//! exactly as C calls it (the workqueue family is `ffi_workqueue`). One
//! module a concept:
//! - `abi`: the header's version and names, the owned error object;
//! - `arguments`: NULL pointers, invalid UTF-8, option structs;
//! - `protocol`: the request protocol and its misuse, stale handles, the
//!   panic boundary, reconfiguration, the manual clock;
//! - `completion`, `threads`: completion notification, threads;
//! - `cross`: one request lifecycle across dispatchers and queuesets
//!   (owners checked, handles unique, handles outliving their owner), and
//!   hostile cross-dispatcher calls;
//! - `queueset`: a queueset driven directly;
//! - `release`: releasing seats early, `apf_finish_with_cost`;
//! - `ids`: decisions by id; `http`: what every middleware shares;
//!   `observe`: metrics and dumps, parsed back; `adaptive`: the adaptive
//!   limit's options and state.
//!
//! The set-up is capi/tests/support/ffi.rs; the dump and exposition
//! parsers are the Rust crate's tests' (tests/support/).
#![cfg(not(loom))]

#[allow(dead_code)] // not every dump's column is read here
#[path = "../../../tests/support/dumps.rs"]
mod dumps;
#[path = "../../../tests/support/openmetrics.rs"]
mod openmetrics;
#[path = "../support/ffi.rs"]
mod support;
use apf_capi::*;
use support::*;

mod abi;
mod adaptive;
mod arguments;
mod completion;
mod cross;
mod http;
mod ids;
mod observe;
mod protocol;
mod queueset;
mod release;
mod threads;

/// `get` of pod `p` in namespace `ns` by authenticated `user`: the request
/// of every test here (alice's go to `tiny`, anyone else's to catch-all).
fn pod(user: &str) -> Request<'_> {
    Request {
        namespace: "ns",
        name: "p",
        path: "/api/v1/namespaces/ns/pods/p",
        ..Request::resource(user, "get", "pods")
    }
}

/// Starts `user`'s [`pod`] request, which must succeed.
fn start(d: &D, user: &str) -> apf_decision {
    support::start(d, &pod(user))
}
