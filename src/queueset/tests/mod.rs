//! The queueset's unit tests that need its crate-internal parts, one file
//! a concept: a failed level (`failure`), the core's invariant checks
//! (`invariants`) and the reference model's per-flow order
//! (`reference_order`). Everything of the queueset is in scope here, so
//! each file reaches it through `super::`.
#[allow(unused_imports)] // what each file needs of the queueset, through super::
use super::*;

mod failure;
// `Core::check_invariants` checks only in builds with debug assertions
// (it walks every queue on each slow-path step), so its tests exist only
// there: in a release build there is nothing for them to catch.
#[cfg(debug_assertions)]
mod invariants;
mod reference_order;
