//! The C ABI, called from Rust exactly as C calls it: the header's version
//! and names, NULL pointers, invalid UTF-8, stale handles, the request
//! protocol's misuse, the panic boundary, reconfiguration errors, the
//! manual clock, completion notification, and threads. One module a
//! concept; the set-up is tests/support/ffi.rs.
#![cfg(not(loom))]

#[path = "../support/ffi.rs"]
mod support;
use apf_capi::*;
use support::*;

mod abi;
mod arguments;
mod completion;
mod protocol;
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
