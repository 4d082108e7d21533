//! A priority level: exempt (never queues, never rejects) or limited (a
//! [`QueueSet`]), and the owned guard and ticket a request holds while it
//! waits or executes.
//!
//! # Counting
//! Every request is tallied by its flow schema's id (its *tag*) where the
//! level already keeps its state: a limited level's queueset tallies under
//! its lock when it replays its event ring or on its slow path (the
//! lock-free hot path only carries the tag in its records), an exempt level
//! under the short lock it already takes for borrowing's seat demand. So
//! counting adds no atomic operation, no lock and no shared cache line to
//! the admission hot path. [`Level::tag_stats`] reads the tallies.

use crate::classification::RequestDigest;
use crate::clock::{Clock, Instant};
use crate::cost::{CostEstimator, CostKey};
use crate::queueset::{
    Execution, Joined, PendingRelease, QueueSet, QueueSetStats, RawAdmission, RejectReason,
    ReleaseError, Request, Waiting,
};
use crate::stats::{Phase, ReadWriteHandle, SeatDemandHandle, TagStats, Tallies};
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};
use crate::work_estimate::WorkEstimate;
use crossbeam_utils::CachePadded;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

mod lease;
mod shared;
pub use lease::{Lease, Leases};
pub use shared::SharedRequest;

/// A flow schema as requests see it: its identity.
#[derive(Debug)]
pub struct Schema {
    /// The flow schema's name.
    pub name: String,
    /// The flow schema's UID, if the configuration gave one.
    pub uid: Option<String>,
    /// The dispatcher's number for this schema name, stable across
    /// reconfigurations: the tag its requests are tallied under.
    pub id: u32,
    /// How its requests' seats are estimated (`apf.libapf.io/cost`).
    pub cost: crate::config::CostMode,
}

/// What a dump shows of a waiting request beyond the queueset's view: the
/// flow distinguisher and the request's attributes, kept in one string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingNote {
    text: String,
    /// End of each field in `text`, in [`WaitingNote::FIELDS`] order.
    ends: [u32; 9],
}

impl WaitingNote {
    /// The fields, in order.
    pub const FIELDS: [&'static str; 9] = [
        "flow_distinguisher",
        "user",
        "verb",
        "path",
        "namespace",
        "name",
        "api_group",
        "resource",
        "subresource",
    ];

    /// The note of a request of `d`'s attributes in the flow
    /// `flow_distinguisher` (what [`Level::admit`] keeps for a dump while
    /// the request waits).
    pub fn new(flow_distinguisher: &str, d: &RequestDigest<'_>) -> WaitingNote {
        let fields = [
            flow_distinguisher,
            d.user,
            d.verb,
            d.path,
            d.namespace,
            d.name,
            d.api_group,
            d.resource,
            d.subresource,
        ];
        let mut text = String::with_capacity(fields.iter().map(|f| f.len()).sum());
        let mut ends = [0u32; 9];
        for (end, field) in ends.iter_mut().zip(fields) {
            text.push_str(field);
            *end = text.len().min(u32::MAX as usize) as u32;
        }
        WaitingNote { text, ends }
    }

    /// Field `i` of [`WaitingNote::FIELDS`].
    pub fn field(&self, i: usize) -> &str {
        let Some(&end) = self.ends.get(i) else {
            return "";
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// The flow distinguisher (user or namespace) of the waiting request, or
    /// `""`.
    pub fn flow_distinguisher(&self) -> &str {
        self.field(0)
    }
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
    locked: Mutex<ExemptLocked>,
}

#[derive(Default)]
struct ExemptLocked {
    demand: Option<SeatDemandHandle>,
    tallies: Tallies,
}

/// One priority level.
pub struct Level {
    /// The level's name.
    pub name: String,
    /// The level's UID, if the configuration gave one.
    pub uid: Option<String>,
    pub(crate) kind: LevelKind,
    /// Largest seats one request may hold here (Kubernetes' per-level cap).
    pub(crate) max_seats: AtomicU64,
    pub(crate) clock: Clock,
    /// Notes on the requests waiting here, by [`Waiting::id`], for dumps.
    notes: Mutex<HashMap<u64, WaitingNote>>,
    /// The costs servers reported as requests finished here.
    reported_costs: ReportedCosts,
}

/// The most seats one cost report counts for the adaptive limit.
const MAX_REPORTED_COST: f64 = 1e6;

/// The costs servers reported at finish ([`RequestGuard::finish_with_cost`])
/// at a limited level, for the adaptive limit, which divides its latency
/// samples by them ([`crate::adaptive`]): how many reports, and their sum
/// in millionths of a seat. Only a finish that reports a cost touches them
/// (two relaxed adds; a plain finish pays nothing); the adaptive limit
/// reads them every update interval, after replaying the level's ring, so
/// a report may be read one window before its completion, never after.
#[derive(Debug)]
struct ReportedCosts {
    reports: AtomicU64,
    micros: AtomicU64,
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
    /// Whether the level is exempt.
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
            locked: Mutex::new(ExemptLocked::default()),
        };
        Level::with_kind(name, uid, LevelKind::Exempt(Box::new(seats)), clock)
    }

    /// A limited level over `qs`, outside any dispatcher: for a caller that
    /// classifies requests itself and drives one queueset (the C ABI's
    /// `apf_queueset_*`). `clock` must be the clock `qs` was built with.
    pub fn limited(name: String, uid: Option<String>, qs: QueueSet, clock: Clock) -> Level {
        Level::with_kind(name, uid, LevelKind::Limited(qs), clock)
    }

    /// The clock the level reads request start and end times from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn with_kind(name: String, uid: Option<String>, kind: LevelKind, clock: Clock) -> Level {
        Level {
            name,
            uid,
            kind,
            max_seats: AtomicU64::new(u64::MAX),
            clock,
            notes: Mutex::new(HashMap::new()),
            reported_costs: ReportedCosts {
                reports: AtomicU64::new(0),
                micros: AtomicU64::new(0),
            },
        }
    }

    /// The costs reported at finish here so far: (reports, sum in
    /// millionths of a seat), for the adaptive limit.
    pub(crate) fn reported_costs(&self) -> (u64, u64) {
        let c = &self.reported_costs;
        (
            c.reports.load(Ordering::Relaxed),
            c.micros.load(Ordering::Relaxed),
        )
    }

    fn note_cost(&self, cost: f64) {
        if self.is_exempt() {
            return; // exempt levels' latencies are not sampled
        }
        // Finite and non-negative (checked). One report counts at most a
        // million seats, so a window's sum cannot wrap (the reader takes
        // wrapping differences anyway).
        let micros = (cost.min(MAX_REPORTED_COST) * 1e6 + 0.5) as u64; // rounded
        let c = &self.reported_costs;
        c.reports.fetch_add(1, Ordering::Relaxed);
        c.micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Whether the level is exempt (executes every request at once).
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

    /// The level's gauges now: seats in use, executing and waiting requests.
    pub fn stats(&self) -> LevelStats {
        match &self.kind {
            LevelKind::Limited(qs) => LevelStats {
                exempt: false,
                queueset: qs.stats(),
            },
            LevelKind::Exempt(e) => LevelStats {
                exempt: true,
                queueset: QueueSetStats {
                    // Saturated, not wrapped; `seats_in_use` has the full sum.
                    seats_in_use: saturate(e.seats.load(Ordering::Relaxed)),
                    requests_executing: saturate(e.executing.load(Ordering::Relaxed)),
                    ..QueueSetStats::default()
                },
            },
        }
    }

    /// Seats held here now, without truncation (an exempt level counts them
    /// in 64 bits).
    pub fn seats_in_use(&self) -> u64 {
        match &self.kind {
            LevelKind::Limited(qs) => u64::from(qs.stats().seats_in_use),
            LevelKind::Exempt(e) => e.seats.load(Ordering::Relaxed),
        }
    }

    /// Whether no request executes, waits or holds seats here.
    pub fn is_idle(&self) -> bool {
        let st = self.stats().queueset;
        st.requests_executing == 0 && st.requests_waiting == 0 && st.seats_in_use == 0
    }

    /// What each flow schema's requests did here, by schema id (see
    /// [`TagStats`]). Exempt levels never queue nor reject, and their waits
    /// are not observed (as in Kubernetes).
    pub fn tag_stats(&self) -> Vec<(u32, TagStats)> {
        match &self.kind {
            LevelKind::Limited(qs) => qs.tag_stats(),
            LevelKind::Exempt(e) => lock(&e.locked).tallies.snapshot(),
        }
    }

    /// Whether a request of the flow schema with id `tag` waits or executes
    /// here.
    pub(crate) fn tag_busy(&self, tag: u32) -> bool {
        match &self.kind {
            LevelKind::Limited(qs) => qs.tag_busy(tag),
            LevelKind::Exempt(e) => lock(&e.locked).tallies.is_busy(tag),
        }
    }

    /// Drop what the flow schema with id `tag` left here (its id is about
    /// to be reused).
    pub(crate) fn forget_tag(&self, tag: u32) {
        match &self.kind {
            LevelKind::Limited(qs) => qs.forget_tag(tag),
            LevelKind::Exempt(e) => lock(&e.locked).tallies.remove(tag),
        }
    }

    /// Requests dispatched at this level, over all flow schemas.
    pub fn dispatched(&self) -> u64 {
        self.tag_stats().iter().map(|(_, t)| t.dispatched).sum()
    }

    /// Requests rejected at this level for `reason`, over all flow schemas.
    pub fn rejected(&self, reason: crate::queueset::RejectReason) -> u64 {
        self.tag_stats()
            .iter()
            .map(|(_, t)| t.rejected[reason as usize])
            .sum()
    }

    /// The note taken when the request `id` was queued, if it still waits.
    pub fn waiting_note(&self, id: u64) -> Option<WaitingNote> {
        lock(&self.notes).get(&id).cloned()
    }

    /// See [`QueueSet::catch_up`]; an exempt level reports its demand at
    /// every change already.
    pub(crate) fn catch_up(&self) {
        if let LevelKind::Limited(qs) = &self.kind {
            qs.catch_up();
        }
    }

    /// See [`QueueSet::set_read_write_observer`]; an exempt level reports
    /// its starts and ends under its own short lock.
    pub(crate) fn set_read_write_observer(&self, handle: Option<ReadWriteHandle>) {
        match &self.kind {
            LevelKind::Limited(qs) => qs.set_read_write_observer(handle),
            LevelKind::Exempt(e) => lock(&e.locked).tallies.set_read_write(handle),
        }
    }

    pub(crate) fn set_demand_observer(&self, observer: Option<SeatDemandHandle>) {
        match &self.kind {
            LevelKind::Limited(qs) => qs.set_demand_observer(observer),
            LevelKind::Exempt(e) => {
                if let Some(h) = &observer {
                    h.set(e.seats.load(Ordering::Relaxed) as u32, self.clock.now());
                }
                lock(&e.locked).demand = observer;
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

    /// Admit a request at this level (`self` is kept alive by the outcome),
    /// tallied under `tag` (its flow schema's id, with the
    /// [`READ_ONLY_TAG`](crate::stats::READ_ONLY_TAG) bit for
    /// a read-only request). `note` is taken only if the request has to wait.
    /// The outcome holds a [`Lease`] of its own (one allocation): a caller
    /// that admits many requests keeps the level's [`Leases`] and calls
    /// [`Level::admit_with_leases`].
    pub fn admit(
        level: &Arc<Level>,
        tag: u32,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
        note: impl FnOnce() -> WaitingNote,
    ) -> Outcome {
        Level::admit_leased(
            Lease::new(level.clone()),
            tag,
            flow_hash,
            estimate,
            deadline,
            note,
            None,
        )
    }

    /// [`Level::admit`] at the level of `leases` (made once with
    /// [`Leases::new`]): the outcome clones the calling thread's shard's
    /// lease, so a request allocates nothing and writes no reference count
    /// that other cores write (the C ABI's `apf_queueset_start`).
    pub fn admit_with_leases(
        leases: &Leases<Level>,
        tag: u32,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
        note: impl FnOnce() -> WaitingNote,
    ) -> Outcome {
        Level::admit_leased(
            leases.mine().clone(),
            tag,
            flow_hash,
            estimate,
            deadline,
            note,
            None,
        )
    }

    /// [`Level::admit`], the outcome keeping `level` (a [`Lease`]: the
    /// dispatcher's are per shard, so holding one writes no reference
    /// count that other cores write) and reporting its cost at the finish
    /// to `learn`, if any (built in place: no copy of the outcome to set
    /// it afterwards). Both dropped on a rejection.
    #[inline]
    pub(crate) fn admit_leased(
        level: Lease<Level>,
        tag: u32,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
        note: impl FnOnce() -> WaitingNote,
        learn: Option<Learn>,
    ) -> Outcome {
        Level::admit_into(
            level,
            tag,
            flow_hash,
            estimate,
            deadline,
            note,
            learn,
            |outcome| outcome,
        )
    }

    /// [`Level::admit_leased`], the outcome handed to `wrap` on each path
    /// (the dispatcher builds its `Decision` there). So the hot path's
    /// held request goes from the queueset's fast start straight into the
    /// caller's value, not through an outcome common to every path (which
    /// the compiler kept in memory and copied twice more: ~30
    /// instructions per request).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit_into<R>(
        level: Lease<Level>,
        tag: u32,
        flow_hash: u64,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
        note: impl FnOnce() -> WaitingNote,
        learn: Option<Learn>,
        wrap: impl FnOnce(Outcome) -> R,
    ) -> R {
        let estimate = level.cap(estimate);
        match &level.kind {
            LevelKind::Exempt(e) => {
                let seats = estimate.max_seats().max(1) as u64;
                e.seats.fetch_add(seats, Ordering::Relaxed);
                e.executing.fetch_add(1, Ordering::Relaxed);
                let start = level.clock.now();
                e.started(tag, start, seats);
                wrap(Outcome::Execute(RequestGuard {
                    level,
                    learn,
                    exec: Some(LevelExecution::Exempt { seats, start, tag }),
                }))
            }
            LevelKind::Limited(qs) => {
                let request = Request {
                    flow_hash,
                    estimate,
                    deadline,
                };
                if let Some(exec) = qs.fast_admit_tagged(&request, tag) {
                    return wrap(Outcome::Execute(RequestGuard {
                        level,
                        learn,
                        exec: Some(LevelExecution::Queued(exec)),
                    }));
                }
                wrap(match qs.slow_admit_tagged(&request, tag) {
                    RawAdmission::Execute(exec) => Outcome::Execute(RequestGuard {
                        level,
                        learn,
                        exec: Some(LevelExecution::Queued(exec)),
                    }),
                    RawAdmission::Queued(waiting) => {
                        let note = note();
                        lock(&level.notes).insert(waiting.id(), note);
                        Outcome::Queued(RequestTicket {
                            level,
                            learn,
                            waiting: Some(waiting),
                        })
                    }
                    RawAdmission::Rejected(reason) => Outcome::Rejected(reason),
                })
            }
        }
    }

    /// Finish `exec` now, in place: the guard that holds it is going away
    /// and gives it up afterwards (so it is finished exactly once), and
    /// the held request is read where it lies instead of being moved out
    /// and down the finish. A limited level's queueset reads the clock
    /// for it, so the finish reads it once, not once here and again in the
    /// queueset.
    fn finish_now(&self, exec: &LevelExecution) {
        match (exec, &self.kind) {
            (&LevelExecution::Exempt { seats, start, tag }, _) => self.finish(
                LevelExecution::Exempt { seats, start, tag },
                self.clock.now(),
            ),
            (LevelExecution::Queued(exec), LevelKind::Limited(qs)) => {
                qs.finish_execution_in_place(exec)
            }
            _ => unreachable!("an execution finishes at the level that admitted it"),
        }
    }

    fn finish(&self, exec: LevelExecution, end: Instant) {
        match (exec, &self.kind) {
            (LevelExecution::Exempt { seats, start, tag }, LevelKind::Exempt(e)) => {
                e.seats.fetch_sub(seats, Ordering::Relaxed);
                e.executing.fetch_sub(1, Ordering::Relaxed);
                e.finished(tag, start, end, seats);
            }
            (LevelExecution::Queued(exec), LevelKind::Limited(qs)) => {
                qs.finish_execution(exec, end)
            }
            _ => unreachable!("an execution finishes at the level that admitted it"),
        }
    }
}

impl ExemptSeats {
    /// Exempt seats enter borrowing's demand statistics, and the request is
    /// tallied, under one short lock (exempt levels carry little traffic).
    fn started(&self, tag: u32, now: Instant, seats: u64) {
        let mut st = lock(&self.locked);
        if let Some(h) = st.demand.as_ref() {
            h.add(seats as i64, now);
        }
        st.tallies
            .get(tag)
            .begin_unobserved(seats.min(u32::MAX as u64) as u32);
        st.tallies.note(Phase::Executing, tag, 1, now);
    }

    fn released(&self, tag: u32, now: Instant, seats: u32) {
        let mut st = lock(&self.locked);
        if let Some(h) = st.demand.as_ref() {
            h.add(-i64::from(seats), now);
        }
        st.tallies.get(tag).release(seats);
    }

    fn finished(&self, tag: u32, start: Instant, end: Instant, seats: u64) {
        let mut st = lock(&self.locked);
        if let Some(h) = st.demand.as_ref() {
            h.add(-(seats as i64), end);
        }
        let tally = st.tallies.get(tag);
        tally.end(start, end);
        tally.release(seats.min(u32::MAX as u64) as u32);
        st.tallies.note(Phase::Executing, tag, -1, end);
    }
}

/// The checks of [`QueueSet::release_seats`] for an exempt request that
/// holds `held` seats.
fn check_release(held: u64, seats: u32) -> Result<(), ReleaseError> {
    if seats == 0 {
        Err(ReleaseError::ZeroSeats)
    } else if held == 0 {
        Err(ReleaseError::NothingHeld)
    } else if u64::from(seats) > held {
        Err(ReleaseError::MoreThanHeld {
            held: saturate(held),
            requested: seats,
        })
    } else {
        Ok(())
    }
}

pub(crate) fn saturate(x: u64) -> u32 {
    x.min(u64::from(u32::MAX)) as u32
}

/// A reported cost that is not a finite number of seats, 0 or more.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostError {
    /// The cost reported.
    pub cost: f64,
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cost: {} is not a finite number of seats, 0 or more",
            self.cost
        )
    }
}

impl std::error::Error for CostError {}

/// Seats a request counts as released and its level has not yet been
/// given back: [`LevelRelease::complete`] gives them back.
///
/// For a caller that keeps requests in a table behind a lock (as the C
/// ABI's request handles do): [`RequestGuard::begin_release`] runs under
/// that lock, `complete` after it is dropped, since giving seats back can
/// dispatch waiters whose callbacks may call back into the table. See
/// [`SharedRequest`] for making such a release exclusive with the finish.
#[must_use = "the seats are given back only by LevelRelease::complete"]
pub struct LevelRelease {
    level: Lease<Level>,
    kind: ReleaseKind,
}

enum ReleaseKind {
    Queued(PendingRelease),
    Exempt { tag: u32, seats: u32 },
}

impl fmt::Debug for LevelRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LevelRelease")
            .field("level", &self.level.name)
            .finish_non_exhaustive()
    }
}

impl LevelRelease {
    /// Give the seats back (may dispatch waiters and wake them: hold no
    /// lock of yours).
    /// The second half of a release (see [`RequestGuard::begin_release`]).
    pub fn complete(self) {
        match (self.kind, &self.level.kind) {
            (ReleaseKind::Queued(p), LevelKind::Limited(qs)) => qs.complete_release(p),
            (ReleaseKind::Exempt { tag, seats }, LevelKind::Exempt(e)) => {
                e.seats.fetch_sub(u64::from(seats), Ordering::Relaxed);
                e.released(tag, self.level.clock.now(), seats);
            }
            _ => unreachable!("a release completes at the level that admitted it"),
        }
    }
}

/// The decision proper: what a level decided about a request (the
/// dispatcher hands it on in its [`Decision`](crate::dispatcher::Decision)).
#[derive(Debug)]
#[must_use = "dropping a guard finishes the request, dropping a ticket cancels it"]
pub enum Outcome {
    /// Seats were free: serve the request now; the guard gives them back when
    /// it is finished or dropped.
    Execute(RequestGuard),
    /// The request waits in a queue: wait on the ticket (blocking or as a
    /// future) for a guard or a rejection; dropping it cancels.
    Queued(RequestTicket),
    /// Refused at once; the reason says why (its queue was full, no room at
    /// a level that does not queue, ...).
    Rejected(RejectReason),
}

/// The learned-cost table and the key a request's reported cost goes to.
#[derive(Debug, Clone)]
pub(crate) struct Learn {
    pub(crate) costs: Arc<CostEstimator>,
    pub(crate) key: CostKey,
}

enum LevelExecution {
    Exempt {
        seats: u64,
        start: Instant,
        tag: u32,
    },
    Queued(Execution),
}

/// An executing request. Dropping it finishes the request (a panicking
/// handler cannot leak seats); [`RequestGuard::finish_at`] gives the end.
#[must_use = "dropping the guard finishes the request at once"]
pub struct RequestGuard {
    level: Lease<Level>,
    /// Where the cost reported at the finish is learned, if its flow
    /// schema learns (`apf.libapf.io/cost: learned`).
    learn: Option<Learn>,
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

    /// The seats the request holds (the most of its initial and final
    /// seats, after the level's caps, less those it released early).
    pub fn seats(&self) -> u64 {
        match self.exec.as_ref() {
            Some(LevelExecution::Exempt { seats, .. }) => *seats,
            Some(LevelExecution::Queued(e)) => u64::from(e.held_seats()),
            None => 0,
        }
    }

    /// Give back `seats` of its seats now while it keeps executing (a
    /// watch after its initial burst); its finish gives back only the rest.
    /// See [`QueueSet::release_seats`]. At an exempt level the seats only
    /// leave the demand statistics.
    pub fn release_seats(&mut self, seats: u32) -> Result<(), ReleaseError> {
        self.begin_release(seats).map(LevelRelease::complete)
    }

    /// The first half of [`RequestGuard::release_seats`] (see
    /// `Execution::begin_release`): cheap, no lock of the level's. The
    /// seats count as released at once; [`LevelRelease::complete`] gives
    /// them back to the level.
    pub fn begin_release(&mut self, seats: u32) -> Result<LevelRelease, ReleaseError> {
        let kind = match self.exec.as_mut() {
            None => return Err(ReleaseError::NothingHeld),
            Some(LevelExecution::Queued(exec)) => ReleaseKind::Queued(exec.begin_release(seats)?),
            Some(LevelExecution::Exempt {
                seats: held, tag, ..
            }) => {
                check_release(*held, seats)?;
                *held -= u64::from(seats);
                ReleaseKind::Exempt { tag: *tag, seats }
            }
        };
        Ok(LevelRelease {
            level: self.level.clone(),
            kind,
        })
    }

    /// Give back every seat it still holds, while it keeps executing.
    pub fn release_all_seats(&mut self) -> Result<(), ReleaseError> {
        match self.seats() {
            0 => Err(ReleaseError::NothingHeld),
            held => self.release_seats(saturate(held)),
        }
    }

    /// Finish now.
    pub fn finish(self) {}

    /// The name of the level it holds (the lease model's checks).
    #[cfg(all(test, loom))]
    pub(crate) fn level_name(&self) -> &str {
        &self.level.name
    }

    /// The seats in use at the level it holds (the lease model's checks).
    #[cfg(all(test, loom))]
    pub(crate) fn level_seats(&self) -> u64 {
        self.level.seats_in_use()
    }

    /// The lease model's broken protocol: the request lets go of its own
    /// lease and takes the one of the configuration in force.
    #[cfg(all(test, loom))]
    pub(crate) fn find_level_again(&mut self, level: Lease<Level>) {
        self.level = level;
    }

    /// Finish now, reporting what the request really cost, in seats (e.g.
    /// CPU time over the execution time, or objects processed over the
    /// objects one seat is worth). If its flow schema learns
    /// (`apf.libapf.io/cost: learned`), later requests of the same schema,
    /// verb and resource get seats from these reports (see docs/cost.md);
    /// otherwise the cost is ignored. A cost that is not a finite number
    /// of 0 or more is refused and the request is not finished.
    pub fn finish_with_cost(self, cost: f64) -> Result<(), (RequestGuard, CostError)> {
        let now = self.level.clock.now();
        self.finish_at_with_cost(now, cost)
    }

    /// [`RequestGuard::finish_with_cost`] with the actual end of execution.
    pub fn finish_at_with_cost(
        self,
        end: Instant,
        cost: f64,
    ) -> Result<(), (RequestGuard, CostError)> {
        if !cost.is_finite() || cost < 0.0 {
            return Err((self, CostError { cost }));
        }
        if let Some(learn) = &self.learn {
            learn.costs.record(learn.key, cost);
        }
        // Before the finish reaches the ring (see `ReportedCosts`).
        self.level.note_cost(cost);
        self.finish_at(end);
        Ok(())
    }

    /// Finish with `end` as the actual end of execution (an end after now
    /// counts as now).
    pub fn finish_at(mut self, end: Instant) {
        if let Some(exec) = self.exec.take() {
            self.level.finish(exec, end);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        // By reference (no `take`, which would move the held request out
        // first): the guard is going away, so its execution is given up
        // here.
        if let Some(exec) = &self.exec {
            self.level.finish_now(exec);
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
    level: Lease<Level>,
    learn: Option<Learn>,
    waiting: Option<Waiting>,
}

impl RequestTicket {
    fn qs(&self) -> &QueueSet {
        self.level.queueset().expect("only limited levels queue")
    }

    fn guard(&self, exec: Execution) -> RequestGuard {
        RequestGuard {
            level: self.level.clone(),
            learn: self.learn.clone(),
            exec: Some(LevelExecution::Queued(exec)),
        }
    }

    /// The request's arrival number in its level ([`Waiting::id`]), while it
    /// waits: what dumps list waiting requests by.
    pub fn waiting_id(&self) -> Option<u64> {
        self.waiting.as_ref().map(Waiting::id)
    }

    /// While it waits: its queue's length and the level's R when it joined
    /// the queue (what Kubernetes' queue-length and R metrics observe).
    pub fn joined(&self) -> Option<Joined> {
        self.waiting.as_ref().map(Waiting::joined)
    }

    /// Block until the request is dispatched (the guard) or rejected while
    /// waiting: [`RejectReason::TimeOut`] at the wait limit or the
    /// request's own deadline (on a manual clock, when the clock is advanced
    /// past it), [`RejectReason::LevelFailed`] if the level failed.
    pub fn wait(mut self) -> Result<RequestGuard, RejectReason> {
        let waiting = self.waiting.take().expect("a live ticket is waiting");
        self.forget_note(&waiting);
        self.qs().wait_for(waiting).map(|exec| self.guard(exec))
    }

    fn forget_note(&self, waiting: &Waiting) {
        lock(&self.level.notes).remove(&waiting.id());
    }

    /// Without blocking: the decision, if there is one. It is returned
    /// once; later calls return `None`.
    pub fn poll(&mut self) -> Option<Result<RequestGuard, RejectReason>> {
        self.poll_with(None)
    }

    fn poll_with(
        &mut self,
        waker: Option<&std::task::Waker>,
    ) -> Option<Result<RequestGuard, RejectReason>> {
        let decision = self.qs().poll_waiting(self.waiting.as_ref()?, waker)?;
        if let Some(waiting) = self.waiting.take() {
            self.forget_note(&waiting);
        }
        Some(decision.map(|exec| self.guard(exec)))
    }

    /// Give up waiting; false if it had already been decided (a dispatched
    /// request is then finished at once).
    pub fn cancel(mut self) -> bool {
        let Some(waiting) = self.waiting.take() else {
            return false;
        };
        self.forget_note(&waiting);
        self.qs().cancel_waiting(waiting)
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
            self.forget_note(&waiting);
            self.qs().cancel_waiting(waiting);
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
