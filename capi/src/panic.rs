//! The panic boundary: no Rust panic unwinds into C.
//!
//! Every exported body runs inside [`ffi_panic_boundary!`]. A caught panic
//! becomes the function's fallback value ([`PanicFallback`]): `APF_ERR_PANIC`
//! for functions that return a status, nothing for `void` functions.
//! Functions that take an `apf_error **out_error` put the panic message
//! there (`error::with_error`); the others leave it to the panic hook,
//! which prints it to stderr. Locks poisoned by the
//! panic are recovered by `crate::sync::lock`, so the library stays usable.

use super::status::apf_status;
use std::any::Any;

/// What an exported function returns when its body panicked.
pub(crate) trait PanicFallback {
    fn on_panic(payload: Box<dyn Any + Send>) -> Self;
}

impl PanicFallback for apf_status {
    fn on_panic(_payload: Box<dyn Any + Send>) -> Self {
        apf_status::APF_ERR_PANIC
    }
}

impl PanicFallback for () {
    fn on_panic(_payload: Box<dyn Any + Send>) -> Self {}
}

impl PanicFallback for u32 {
    fn on_panic(_payload: Box<dyn Any + Send>) -> Self {
        0
    }
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Run the body, turning a panic into the return type's fallback.
///
/// The body is a closure, so `return` inside it (and in the early-return
/// macros of `cast`) returns from the exported function's body.
macro_rules! ffi_panic_boundary {
    ( $($body:tt)* ) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(move || { $($body)* })) {
            Ok(value) => value,
            Err(payload) => $crate::panic::PanicFallback::on_panic(payload),
        }
    };
}
