//! Behaviour tests for the whole family, on the manual clock. Threads appear
//! only where blocking is the behaviour under test; nothing sleeps.

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::sync::{thread, Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use std::time::Duration;

fn manual() -> (QueueConfig, ManualClock) {
    let (clock, manual) = Clock::manual();
    (QueueConfig::with_clock(clock).named("test"), manual)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Spin (yielding) until `cond` holds; fails the test after 30 s of real
/// time instead of hanging.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        thread::yield_now();
    }
}

/// Joining a test thread, failing instead of hanging if it never ends.
trait JoinWithin<R> {
    fn join_within(self) -> R;
}

impl<R> JoinWithin<R> for thread::JoinHandle<R> {
    fn join_within(self) -> R {
        wait_until("thread finishes", || self.is_finished());
        self.join().expect("thread panicked")
    }
}

fn drain<T: Item, S: QueueStrategy<T>>(q: &Workqueue<T, S>) -> Vec<T> {
    let mut out = Vec::new();
    while let Ok(x) = q.try_get() {
        q.done(&x).unwrap();
        out.push(x);
    }
    out
}

mod delaying;
mod model;
mod priority;
mod rate_limiting;
mod stress;
mod two_lane;
mod workqueue;
