//! loom models of the queueset, one per configuration that has its own
//! protocol (issue 10): the full event ring's fallback, seats lingering for
//! additional latency, timer expiry, and reconfiguration, each racing the
//! admission and finish paths. Every model checks, at each step an executing
//! request can observe, an independent count of executing seats against the
//! limit, that a dispatched request is no longer listed as waiting, and at
//! the end that every seat is back and the counts balance. Run with
//! `scripts/loom.sh`; docs/verification.md lists the broken code each model
//! was checked to fail on.
use super::{lingering, request};
use crate::clock::{Instant, ManualClock};
use crate::queueset::{
    Execution, QueueSet, QueueSetConfig, QueueSetStats, RawAdmission, RejectReason, Request,
};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

/// The test's own count of seats held by executing requests: raised after a
/// start is granted, lowered before the finish. A plain std atomic, so it
/// adds no interleavings of its own to the model.
#[derive(Default)]
struct Executing(AtomicU32);

impl Executing {
    /// A request of `seats` starts while the limit is at most `limit`.
    fn begin(&self, seats: u32, limit: u32) {
        let now = self.0.fetch_add(seats, SeqCst) + seats;
        // Over the limit only as a too-wide request running alone.
        assert!(
            now <= limit || now == seats,
            "{now} seats executing, limit {limit}"
        );
    }
    fn end(&self, seats: u32) {
        self.0.fetch_sub(seats, SeqCst);
    }
}

/// A level of `limit` seats and `queues` queues (see [`super::config`])
/// whose waiters time out after a second.
fn config(limit: u32, queues: u32) -> QueueSetConfig {
    QueueSetConfig {
        wait_limit: Duration::from_secs(1),
        ..super::config(limit, queues)
    }
}

fn level(limit: u32, queues: u32) -> (Arc<QueueSet>, ManualClock) {
    super::level(config(limit, queues))
}

fn execute_now(qs: &QueueSet, req: &Request) -> Execution {
    match qs.admit(req) {
        RawAdmission::Execute(exec) => exec,
        other => panic!("expected to execute at once, got {other:?}"),
    }
}

/// A dispatched request must not be listed among the waiting any more.
fn assert_not_waiting(qs: &QueueSet, id: u64) {
    assert!(
        qs.dump().waiting.iter().all(|w| w.id != id),
        "request {id} both waiting and executing"
    );
}

/// Start (waiting if queued), count the seats while executing, finish.
fn run_counted(qs: &QueueSet, ex: &Executing, limit: u32, req: &Request) {
    let exec = match qs.admit(req) {
        RawAdmission::Execute(exec) => exec,
        RawAdmission::Queued(waiting) => {
            let id = waiting.id();
            let exec = qs.wait_for(waiting).expect("dispatched");
            assert_not_waiting(qs, id);
            exec
        }
        RawAdmission::Rejected(r) => panic!("rejected: {r}"),
    };
    let seats = exec.estimate().max_seats();
    ex.begin(seats, limit);
    ex.end(seats);
    qs.finish_execution(exec, qs.clock().now());
}

fn assert_balanced(stats: &QueueSetStats, started: u64) {
    assert_eq!(stats.seats_in_use, 0, "every seat given back: {stats:?}");
    assert_eq!(stats.requests_executing, 0, "{stats:?}");
    assert_eq!(stats.requests_waiting, 0, "{stats:?}");
    let rejected: u64 = stats.rejected.iter().sum();
    assert!(
        stats.dispatched_from_queues + rejected <= started,
        "more outcomes than requests: {stats:?}"
    );
}

/// (a) The event ring (capacity 2 under loom) overflows: two threads each
/// start and finish two requests on the hot path while a third replays the
/// ring. A record that does not fit is replayed under the lock instead; none
/// may be lost or replayed twice, and the core's counts must match the
/// admission word's.
#[test]
fn ring_full_fallback() {
    loom::model(|| {
        let (qs, _manual) = level(2, 2);
        let ex = std::sync::Arc::new(Executing::default());
        let spawn_worker = |flow: u64| {
            let (qs, ex) = (qs.clone(), ex.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    run_counted(&qs, &ex, 2, &request(flow, 1));
                }
            })
        };
        let a = spawn_worker(1);
        let b = spawn_worker(2);
        let mid = qs.stats();
        assert!(mid.seats_in_use <= 2, "{mid:?}");
        a.join().unwrap();
        b.join().unwrap();
        let stats = qs.stats();
        assert_balanced(&stats, 4);
        assert_eq!(stats.dispatched_from_queues, 0, "nothing ever waited");
    });
}

/// (b) Seats lingering for additional latency race a finish and a dispatch:
/// at limit 2, A (1 seat, 1 s additional latency) and C (1 seat) execute and
/// B (2 seats) waits. One thread finishes A at time 0 and then advances the
/// clock past A's latency; the main thread finishes C; another waits for B.
/// B may start only once both seats are free: C finished and A's latency
/// over.
#[test]
fn lingering_against_finish_and_dispatch() {
    loom::model(|| {
        // B must not time out while A's seat lingers.
        let (qs, manual) = super::level(QueueSetConfig {
            wait_limit: Duration::from_secs(10),
            fairness: crate::queueset::Fairness::Kubernetes,
            ..config(2, 1)
        });
        let ex = std::sync::Arc::new(Executing::default());
        let a = execute_now(&qs, &lingering(1, 1, Duration::from_secs(1)));
        let c = execute_now(&qs, &request(2, 1));
        ex.begin(1, 2);
        ex.begin(1, 2);
        let RawAdmission::Queued(b) = qs.admit(&request(3, 2)) else {
            panic!("B must wait for two seats")
        };
        let waiter = {
            let (qs, ex) = (qs.clone(), ex.clone());
            thread::spawn(move || {
                let id = b.id();
                let exec = qs.wait_for(b).expect("B is dispatched");
                assert!(
                    qs.clock().now() >= Instant::from_nanos(1_000_000_000),
                    "B started while A's seat still lingered"
                );
                assert_not_waiting(&qs, id);
                ex.begin(2, 2);
                ex.end(2);
                qs.finish_execution(exec, qs.clock().now());
            })
        };
        let timer = {
            let (qs, ex) = (qs.clone(), ex.clone());
            thread::spawn(move || {
                ex.end(1);
                qs.finish_execution(a, Instant::ZERO);
                manual.advance(Duration::from_secs(1));
            })
        };
        ex.end(1);
        qs.finish_execution(c, qs.clock().now());
        timer.join().unwrap();
        waiter.join().unwrap();
        let stats = qs.stats();
        assert_balanced(&stats, 3);
        assert_eq!(stats.dispatched_from_queues, 1);
    });
}

/// (c) A waiting request's time-out (the clock advanced past its wait limit
/// by one thread) races the finish that would dispatch it (another thread)
/// and its cancellation (the main thread). Exactly one of the three decides
/// it; if it was dispatched, the cancellation finishes it.
#[test]
fn expiry_against_finish_and_cancel() {
    loom::model(|| {
        let (qs, manual) = level(1, 1);
        let ex = std::sync::Arc::new(Executing::default());
        let a = execute_now(&qs, &request(1, 1));
        ex.begin(1, 1);
        let RawAdmission::Queued(b) = qs.admit(&request(2, 1)) else {
            panic!("B must wait")
        };
        let timer = thread::spawn(move || manual.advance(Duration::from_secs(1)));
        let finisher = {
            let (qs, ex) = (qs.clone(), ex.clone());
            thread::spawn(move || {
                ex.end(1);
                qs.finish_execution(a, qs.clock().now());
            })
        };
        let cancelled = qs.cancel_waiting(b);
        timer.join().unwrap();
        finisher.join().unwrap();
        let stats = qs.stats();
        assert_balanced(&stats, 2);
        let timed_out = stats.rejected[RejectReason::TimeOut as usize];
        let cancels = stats.rejected[RejectReason::Cancelled as usize];
        assert_eq!(cancels, u64::from(cancelled), "{stats:?}");
        assert_eq!(
            stats.dispatched_from_queues + timed_out + cancels,
            1,
            "B decided exactly once: {stats:?}"
        );
    });
}

/// (d) Reconfiguration races admission: while H executes at limit 1, one
/// thread raises the limit to 2 (one queue), then lowers it to 1 (three
/// queues); another admits B, which runs at once, waits, or is dispatched by
/// the raise; the main thread finishes H. Executing seats never exceed the
/// highest limit in force, the limit word ends at the last configuration's,
/// and no seat is lost to a racing update of the admission word.
#[test]
fn reconfigure_against_admission() {
    loom::model(|| {
        let (qs, _manual) = level(1, 2);
        let ex = std::sync::Arc::new(Executing::default());
        let h = execute_now(&qs, &request(1, 1));
        ex.begin(1, 1);
        let worker = {
            let (qs, ex) = (qs.clone(), ex.clone());
            thread::spawn(move || run_counted(&qs, &ex, 2, &request(2, 1)))
        };
        let reconfigurer = {
            let qs = qs.clone();
            thread::spawn(move || {
                qs.reconfigure(config(2, 1)).expect("valid");
                qs.reconfigure(config(1, 3)).expect("valid");
            })
        };
        ex.end(1);
        qs.finish_execution(h, qs.clock().now());
        reconfigurer.join().unwrap();
        worker.join().unwrap();
        let stats = qs.stats();
        assert_balanced(&stats, 2);
        assert_eq!(stats.concurrency_limit, 1, "{stats:?}");
        assert_eq!(stats.queues, 3, "{stats:?}");
    });
}
