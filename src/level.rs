//! A priority level: exempt (never queues, never rejects) or limited (a
//! [`QueueSet`]), with its counters, and the owned guard and ticket a
//! request holds while it waits or executes.

use crate::borrowing::SeatDemandHandle;
use crate::clock::{Clock, Instant};
use crate::queueset::{
    Execution, QueueSet, QueueSetStats, RawAdmission, RejectReason, Request, Waiting,
};
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};
use crate::work_estimate::WorkEstimate;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Counters of dispatches and rejections, for one level or one flow schema.
#[derive(Debug, Default)]
pub struct Counters {
    dispatched: CachePadded<AtomicU64>,
    rejected: [AtomicU64; 4],
}

impl Counters {
    pub(crate) fn note_dispatched(&self) {
        self.dispatched.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn note_rejected(&self, reason: RejectReason) {
        self.rejected[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Requests that started executing.
    pub fn dispatched(&self) -> u64 {
        self.dispatched.load(Ordering::Relaxed)
    }
    /// Requests rejected for `reason`.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.rejected[reason as usize].load(Ordering::Relaxed)
    }
}

/// A flow schema as requests see it: its identity and its counters.
#[derive(Debug)]
pub struct Schema {
    pub name: String,
    pub uid: Option<String>,
    pub counters: Counters,
}

pub(crate) enum LevelKind {
    Exempt(Box<ExemptSeats>),
    Limited(QueueSet),
}

/// Seats in use at an exempt level: counted (they take part in borrowing)
/// but never limited.
pub(crate) struct ExemptSeats {
    seats: CachePadded<AtomicU64>,
    executing: AtomicU64,
    demand: Mutex<Option<SeatDemandHandle>>,
}

/// One priority level.
pub struct Level {
    pub name: String,
    pub uid: Option<String>,
    pub(crate) kind: LevelKind,
    pub counters: Counters,
    /// Largest seats one request may hold here (Kubernetes' per-level cap).
    pub(crate) max_seats: AtomicU64,
    pub(crate) clock: Clock,
}

impl fmt::Debug for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Level")
            .field("name", &self.name)
            .field("exempt", &self.is_exempt())
            .finish()
    }
}

/// A level's gauges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LevelStats {
    pub exempt: bool,
    /// The queueset's figures; for an exempt level only the seats and
    /// executing requests are filled in.
    pub queueset: QueueSetStats,
}

impl Level {
    pub(crate) fn exempt(name: String, uid: Option<String>, clock: Clock) -> Level {
        let seats = ExemptSeats {
            seats: CachePadded::new(AtomicU64::new(0)),
            executing: AtomicU64::new(0),
            demand: Mutex::new(None),
        };
        Level::with_kind(name, uid, LevelKind::Exempt(Box::new(seats)), clock)
    }

    pub(crate) fn limited(name: String, uid: Option<String>, qs: QueueSet, clock: Clock) -> Level {
        Level::with_kind(name, uid, LevelKind::Limited(qs), clock)
    }

    fn with_kind(name: String, uid: Option<String>, kind: LevelKind, clock: Clock) -> Level {
        Level {
            name,
            uid,
            kind,
            counters: Counters::default(),
            max_seats: AtomicU64::new(u64::MAX),
            clock,
        }
    }

    pub fn is_exempt(&self) -> bool {
        matches!(self.kind, LevelKind::Exempt(_))
    }

    /// The level's queueset, if it is limited.
    pub fn queueset(&self) -> Option<&QueueSet> {
        match &self.kind {
            LevelKind::Limited(qs) => Some(qs),
            LevelKind::Exempt(_) => None,
        }
    }

    pub fn stats(&self) -> LevelStats {
        match &self.kind {
            LevelKind::Limited(qs) => LevelStats {
                exempt: false,
                queueset: qs.stats(),
            },
            LevelKind::Exempt(e) => LevelStats {
                exempt: true,
                queueset: QueueSetStats {
                    seats_in_use: e.seats.load(Ordering::Relaxed) as u32,
                    requests_executing: e.executing.load(Ordering::Relaxed) as u32,
                    ..QueueSetStats::default()
                },
            },
        }
    }

    pub(crate) fn set_demand_observer(&self, observer: Option<SeatDemandHandle>) {
        match &self.kind {
            LevelKind::Limited(qs) => qs.set_demand_observer(observer),
            LevelKind::Exempt(e) => {
                if let Some(h) = &observer {
                    h.set(e.seats.load(Ordering::Relaxed) as u32, self.clock.now());
                }
                *lock(&e.demand) = observer;
            }
        }
    }

    /// Cap an estimate at the level's per-request maximum.
    fn cap(&self, mut e: WorkEstimate) -> WorkEstimate {
        let max = self.max_seats.load(Ordering::Relaxed).min(u32::MAX as u64) as u32;
        e.initial_seats = e.initial_seats.min(max);
        e.final_seats = e.final_seats.min(max);
        e
    }

    /// Admit a request at this level (`self` is kept alive by the outcome).
    pub(crate) fn admit(
        level: &Arc<Level>,
        schema: &Arc<Schema>,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> LevelOutcome {
        let estimate = level.cap(estimate);
        match &level.kind {
            LevelKind::Exempt(e) => {
                let seats = estimate.max_seats().max(1) as u64;
                e.seats.fetch_add(seats, Ordering::Relaxed);
                e.executing.fetch_add(1, Ordering::Relaxed);
                e.observe(level.clock.now(), seats as i64);
                LevelOutcome::Execute(RequestGuard {
                    level: level.clone(),
                    exec: Some(LevelExecution::Exempt {
                        seats,
                        start: level.clock.now(),
                    }),
                })
            }
            LevelKind::Limited(qs) => match qs.admit(&Request {
                flow_hash,
                estimate,
                deadline,
            }) {
                RawAdmission::Execute(exec) => LevelOutcome::Execute(RequestGuard {
                    level: level.clone(),
                    exec: Some(LevelExecution::Queued(exec)),
                }),
                RawAdmission::Queued(waiting) => LevelOutcome::Queued(RequestTicket {
                    level: level.clone(),
                    schema: schema.clone(),
                    waiting: Some(waiting),
                }),
                RawAdmission::Rejected(reason) => LevelOutcome::Rejected(reason),
            },
        }
    }

    fn finish(&self, exec: LevelExecution, end: Instant) {
        match (exec, &self.kind) {
            (LevelExecution::Exempt { seats, .. }, LevelKind::Exempt(e)) => {
                e.seats.fetch_sub(seats, Ordering::Relaxed);
                e.executing.fetch_sub(1, Ordering::Relaxed);
                e.observe(end, -(seats as i64));
            }
            (LevelExecution::Queued(exec), LevelKind::Limited(qs)) => {
                qs.finish_execution(exec, end)
            }
            _ => unreachable!("an execution finishes at the level that admitted it"),
        }
    }
}

impl ExemptSeats {
    /// Exempt seats enter borrowing's demand statistics; that takes the
    /// integrator's short lock (exempt levels carry little traffic).
    fn observe(&self, now: Instant, delta: i64) {
        if let Some(h) = lock(&self.demand).as_ref() {
            h.add(delta, now);
        }
    }
}

pub(crate) enum LevelOutcome {
    Execute(RequestGuard),
    Queued(RequestTicket),
    Rejected(RejectReason),
}

enum LevelExecution {
    Exempt { seats: u64, start: Instant },
    Queued(Execution),
}

/// An executing request. Dropping it finishes the request (a panicking
/// handler cannot leak seats); [`RequestGuard::finish_at`] gives the end.
#[must_use = "dropping the guard finishes the request at once"]
pub struct RequestGuard {
    level: Arc<Level>,
    exec: Option<LevelExecution>,
}

impl RequestGuard {
    /// When the request started executing.
    pub fn start_time(&self) -> Instant {
        match self.exec.as_ref() {
            Some(LevelExecution::Exempt { start, .. }) => *start,
            Some(LevelExecution::Queued(e)) => e.start_time(),
            None => Instant::ZERO,
        }
    }

    /// Finish now.
    pub fn finish(self) {}

    /// Finish with `end` as the actual end of execution.
    pub fn finish_at(mut self, end: Instant) {
        if let Some(exec) = self.exec.take() {
            self.level.finish(exec, end);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if let Some(exec) = self.exec.take() {
            let now = self.level.clock.now();
            self.level.finish(exec, now);
        }
    }
}

impl fmt::Debug for RequestGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestGuard")
            .field("level", &self.level.name)
            .finish()
    }
}

/// A request waiting in a queue: wait, poll, `.await`, or cancel; dropping
/// it cancels the request.
#[must_use = "dropping the ticket cancels the request"]
pub struct RequestTicket {
    level: Arc<Level>,
    schema: Arc<Schema>,
    waiting: Option<Waiting>,
}

impl RequestTicket {
    fn qs(&self) -> &QueueSet {
        self.level.queueset().expect("only limited levels queue")
    }

    fn guard(&self, exec: Execution) -> RequestGuard {
        RequestGuard {
            level: self.level.clone(),
            exec: Some(LevelExecution::Queued(exec)),
        }
    }

    /// Block until the request is dispatched or rejected.
    pub fn wait(mut self) -> Result<RequestGuard, RejectReason> {
        let waiting = self.waiting.take().expect("a live ticket is waiting");
        let result = self.qs().wait_for(waiting).map(|exec| self.guard(exec));
        self.count(&result);
        result
    }

    /// Without blocking: the decision, if there is one.
    pub fn poll(&mut self) -> Option<Result<RequestGuard, RejectReason>> {
        self.poll_with(None)
    }

    fn poll_with(
        &mut self,
        waker: Option<&std::task::Waker>,
    ) -> Option<Result<RequestGuard, RejectReason>> {
        let decision = self.qs().poll_waiting(self.waiting.as_ref()?, waker)?;
        self.waiting = None;
        let result = decision.map(|exec| self.guard(exec));
        self.count(&result);
        Some(result)
    }

    /// Give up waiting; false if it had already been decided (a dispatched
    /// request is then finished at once).
    pub fn cancel(mut self) -> bool {
        let Some(waiting) = self.waiting.take() else {
            return false;
        };
        let cancelled = self.qs().cancel_waiting(waiting);
        if cancelled {
            self.level.counters.note_rejected(RejectReason::Cancelled);
            self.schema.counters.note_rejected(RejectReason::Cancelled);
        }
        cancelled
    }

    fn count(&self, result: &Result<RequestGuard, RejectReason>) {
        for counters in [&self.level.counters, &self.schema.counters] {
            match result {
                Ok(_) => counters.note_dispatched(),
                Err(reason) => counters.note_rejected(*reason),
            }
        }
    }
}

impl Future for RequestTicket {
    type Output = Result<RequestGuard, RejectReason>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.waiting.is_none() {
            return Poll::Ready(Err(RejectReason::Cancelled));
        }
        match self.poll_with(Some(cx.waker())) {
            Some(result) => Poll::Ready(result),
            None => Poll::Pending,
        }
    }
}

impl Drop for RequestTicket {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            if self.qs().cancel_waiting(waiting) {
                self.level.counters.note_rejected(RejectReason::Cancelled);
                self.schema.counters.note_rejected(RejectReason::Cancelled);
            }
        }
    }
}

impl fmt::Debug for RequestTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestTicket")
            .field("level", &self.level.name)
            .field("pending", &self.waiting.is_some())
            .finish()
    }
}
