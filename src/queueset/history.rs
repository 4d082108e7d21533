//! Test-only (`--cfg shuttle`): the order in which slow-path operations took
//! effect, for the shuttle tests that replay a concurrent run into the
//! reference model (src/queueset/shuttle_tests/paths.rs).
//!
//! Each slow-path operation notes itself while it holds the level lock, at
//! the instant it read for its decision, so the log is the order in which
//! the core saw the operations: a linearisation of the run. The thread
//! (shuttle task) that runs an operation names it first with
//! [`set_current`]; a timer's firing is noted under the name of the
//! operation that advanced the clock. Shuttle runs all tasks of a test on
//! the test's own OS thread, so the log lives in a thread-local and tests
//! running side by side do not mix.
// The reading side (`set_current`, `take`) is for the shuttle tests alone:
// the library itself, built under --cfg shuttle as their dependency, only
// notes.
#![cfg_attr(not(test), allow(dead_code))]

use crate::clock::Instant;
use shuttle::current::TaskId;
use std::cell::RefCell;
use std::collections::HashMap;

/// Where an operation took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// `QueueSet::admit` on the slow path, after the ring was replayed.
    Start,
    /// A finish on the slow path.
    Finish,
    /// The cancellation of a waiting request.
    Cancel,
    /// The level's timer fired.
    Timer,
    /// A reconfiguration.
    Reconfigure,
}

/// One operation as the core saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The caller's name for the operation (see [`set_current`]).
    pub op: u64,
    pub site: Site,
    /// The time the operation decided at.
    pub at: Instant,
}

#[derive(Default)]
struct Log {
    current: HashMap<TaskId, u64>,
    entries: Vec<Entry>,
}

thread_local! {
    static LOG: RefCell<Log> = RefCell::new(Log::default());
}

/// Name the operations the calling shuttle task runs from now on.
pub fn set_current(op: u64) {
    let me = shuttle::current::me();
    LOG.with(|log| log.borrow_mut().current.insert(me, op));
}

/// The entries noted since the last call, in order; clears the log and the
/// names.
pub fn take() -> Vec<Entry> {
    LOG.with(|log| {
        let mut log = log.borrow_mut();
        log.current.clear();
        std::mem::take(&mut log.entries)
    })
}

/// Note that the calling task's current operation took effect at `site`.
/// Called with the level lock held; uses no shuttle primitive, so no other
/// task runs in between.
pub(crate) fn note(site: Site, at: Instant) {
    let me = shuttle::current::me();
    LOG.with(|log| {
        let mut log = log.borrow_mut();
        let op = log.current.get(&me).copied().unwrap_or(u64::MAX);
        log.entries.push(Entry { op, site, at });
    });
}
