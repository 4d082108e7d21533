#![cfg(not(loom))]
//! One deterministic test (or more) per rule of the queueset's semantics
//! (issue 2, "Semantics" 1-7 and "Bad input"), all on the manual clock.
//!
//! Queue indices are never hard-coded: a flow's hand comes from the public
//! [`Dealer`], so these tests stay right whatever the dealer's arithmetic.

use apf::clock::{Clock, Instant, ManualClock};
use apf::dealer::{Dealer, DealerError};
use apf::queueset::vtime::{seats_times, VTime};
use apf::queueset::{
    Admission, Guard, QueueSet, QueueSetConfig, QueueSetConfigError, RejectReason, Request, Ticket,
    MAX_CONCURRENCY_LIMIT,
};
use apf::work_estimate::WorkEstimate;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

// ----- fixtures ------------------------------------------------------------

const MS: Duration = Duration::from_millis(1);
const G: Duration = Duration::from_millis(3);

fn cfg(limit: u32, queues: u32, hand: u32, queue_length_limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "rules".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit,
        service_time_guess: G,
        wait_limit: Duration::from_secs(60),
        fairness: apf::queueset::Fairness::Kubernetes,
    }
}

struct Level {
    qs: QueueSet,
    clock: Clock,
    manual: ManualClock,
}

fn level(cfg: QueueSetConfig) -> Level {
    let (clock, manual) = Clock::manual();
    let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
    Level { qs, clock, manual }
}

impl Level {
    fn start(&self, flow: u64, estimate: WorkEstimate) -> Admission<'_> {
        self.start_with_deadline(flow, estimate, None)
    }

    fn start_with_deadline(
        &self,
        flow: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> Admission<'_> {
        self.qs.start(&Request {
            flow_hash: flow,
            estimate,
            deadline,
        })
    }

    fn exec(&self, flow: u64, estimate: WorkEstimate) -> Guard<'_> {
        executes(self.start(flow, estimate))
    }

    fn queue(&self, flow: u64, estimate: WorkEstimate) -> Ticket<'_> {
        queued(self.start(flow, estimate))
    }

    fn at(&self, ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn advance_ms(&self, ms: u64) {
        self.manual.advance(Duration::from_millis(ms));
    }

    /// R as of now. `current_r()` reports R as of the level's last event
    /// (as Kubernetes' dump does); re-applying the same configuration is an
    /// event that changes nothing else.
    fn r_now(&self) -> VTime {
        self.qs.reconfigure(self.qs.config()).expect("same config");
        self.qs.current_r()
    }

    /// Next-dispatch R of queue `q`.
    fn ndr(&self, q: u32) -> VTime {
        self.qs.queue_states()[q as usize].0
    }

    fn waiting_in(&self, q: u32) -> usize {
        self.qs.queue_states()[q as usize].1
    }

    /// Check the seat and request counts against what the test holds:
    /// executing guards, plus seats the test knows are lingering.
    fn check(&self, executing: &[&Guard<'_>], lingering_seats: u32, waiting: u32) {
        let st = self.qs.stats();
        let held: u32 = executing.iter().map(|g| g.estimate().max_seats()).sum();
        assert_eq!(
            st.seats_in_use,
            held + lingering_seats,
            "seats in use = executing + lingering"
        );
        assert_eq!(st.requests_executing as usize, executing.len(), "executing");
        assert_eq!(st.requests_waiting, waiting, "waiting");
    }
}

fn est(initial: u32) -> WorkEstimate {
    WorkEstimate::new(initial, 0, Duration::ZERO)
}

fn est_lat(initial: u32, final_seats: u32, latency: Duration) -> WorkEstimate {
    WorkEstimate::new(initial, final_seats, latency)
}

#[track_caller]
fn executes(a: Admission<'_>) -> Guard<'_> {
    match a {
        Admission::Execute(g) => g,
        other => panic!("expected Execute, got {other:?}"),
    }
}

#[track_caller]
fn queued(a: Admission<'_>) -> Ticket<'_> {
    match a {
        Admission::Queued(t) => t,
        other => panic!("expected Queued, got {other:?}"),
    }
}

#[track_caller]
fn rejected(a: Admission<'_>) -> RejectReason {
    match a {
        Admission::Rejected(r) => r,
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[track_caller]
fn pending(t: &mut Ticket<'_>) {
    assert!(t.poll().is_none(), "ticket should still be waiting");
}

#[track_caller]
fn dispatched<'q>(t: &mut Ticket<'q>) -> Guard<'q> {
    match t.poll() {
        Some(Ok(g)) => g,
        other => panic!("expected a dispatch, got {other:?}"),
    }
}

#[track_caller]
fn refused(t: &mut Ticket<'_>) -> RejectReason {
    match t.poll() {
        Some(Err(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// A flow hash whose hand (of the level's dealer) starts with queue `q`:
/// with hand size 1, the flow's only queue.
fn flow_to(queues: u32, hand: u32, q: u32) -> u64 {
    let dealer = Dealer::new(queues, hand).expect("valid dealer");
    (0..100_000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995)
        .find(|&h| dealer.deal_into_hand(h)[0] == q)
        .expect("some hash lands on every queue")
}

fn hand_of(queues: u32, hand: u32, flow: u64) -> Vec<u32> {
    Dealer::new(queues, hand)
        .expect("valid dealer")
        .deal_into_hand(flow)
        .to_vec()
}

/// The nanosecond before `t`.
fn before(t: Instant) -> Instant {
    Instant::from_nanos(t.as_nanos() - 1)
}

fn seat_s(seats: u32, d: Duration) -> VTime {
    seats_times(seats, d)
}

mod invariants;
mod reconfiguration;
mod rejection;
mod seats;
mod sharding_and_virtual_time;
mod waiting;
