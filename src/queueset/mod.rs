//! One priority level's dispatcher: fair queuing for server requests.
//!
//! # Two paths
//! The **hot path** runs when the level has free seats and nothing waits:
//! the seats come from the calling thread's shard's budget (or the level's
//! admission word, with one compare-and-swap), and the request opens a slot
//! in its shard's ledger (`ledger.rs`); under Kubernetes' policy it takes
//! its offset into its flow's hand and its card, the one Kubernetes would
//! pick (with nothing waiting every queue of the hand is equally empty),
//! is dealt only when needed, at the merge (`shards::DEAL_LATER`).
//! Finishing closes the slot,
//! adding the request to the shard's order-free sums, and gives the seats
//! back to the budget. No level lock, no record to replay.
//!
//! The **slow path** (queuing, dispatch from queues, time-outs, cancellation,
//! seats lingering for additional latency, reconfiguration) runs under the
//! level's mutex. Before every decision, and at every observation, the lock
//! holder *merges* the shards' ledgers into the fair-queuing state: requests
//! still executing join their queues, and the time since the last merge is
//! accounted by the epoch rule (`core/epoch.rs`: service received while the
//! level had seats to spare costs no virtual time, a documented difference
//! from Kubernetes with its bound, docs/differences-from-kubernetes.md). A
//! saturated level is accounted event by event, exactly as Kubernetes'
//! queueset. The property tests check the queueset against the plain
//! reference model (`reference::ReferenceQueueSet`, built for tests only,
//! under the same rule) decision by decision.
//!
//! # The admission word
//! Seats in use, the limit and a `SLOW` flag (requests wait) share one
//! atomic word, `AdmissionWord` (`src/queueset/admission.rs`), the only
//! authority on seat availability: every path takes seats from it with one
//! compare-and-swap that re-checks the room, and the core mirrors them for
//! accounting. Its module documents the protocol: who may change each
//! field, the invariants, and why each memory ordering suffices. Each shard
//! draws seats from it in batches into a seat budget
//! (`src/queueset/budget.rs`), counted in the word as taken, so that on an
//! unsaturated level a start and a finish do not write the word's line.
//!
//! # A panic inside the level lock
//! The core's state is updated in several steps under the level lock. If
//! one of them panics (a bug: nothing that can panic by design, such as a
//! user's waker, runs under the lock), the state may be half-updated. The
//! next thread to take the lock finds it poisoned and marks the level
//! *failed* instead of deciding on inconsistent state (until then the hot
//! path may still admit within the limit: the admission word is never
//! half-updated, each change being one atomic operation): the admission word's
//! `FAILED` bit stops the hot path, every waiting request and every new one
//! is rejected with [`RejectReason::LevelFailed`], executing requests still
//! give their seats back (straight to the word), and [`QueueSet::failed`]
//! says so. A reconfiguration is refused; the dispatcher replaces a failed
//! level with a new one on its next reconfiguration.
//!
//! # Counting for metrics
//! A request may carry a caller's *tag* (the dispatcher's flow-schema id).
//! The hot path tallies it in its shard's ledger (counts and histograms
//! that add up); the core tallies it ([`TagStats`]: counts, gauges, wait,
//! execution and queue-length histograms) on the slow path, under the
//! level lock it holds anyway, and adds the ledgers' tallies at each merge.
//! Every observation merges first, so metrics are exact at a scrape; no
//! decision reads them.

mod admission;
mod budget;
mod config;
mod core;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod differential;
mod dump;
mod flows;
mod guard;
mod held;
#[cfg(shuttle)]
mod history;
mod ledger;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod order_memory_tests;
mod paths;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod reference;
mod shards;
#[cfg(all(test, shuttle))]
mod shuttle_tests;
mod standing;
mod utilization;
pub mod vtime;
mod wait;
mod waterlevel;

pub use self::core::dispatch_gauges::DispatchGauges;
pub use config::{
    Fairness, QueueSetConfig, QueueSetConfigError, MAX_ANTICIPATION, MAX_CONCURRENCY_LIMIT,
};
pub use dump::{QueueDump, QueueSetDump, WaitingDump};
pub use guard::{Guard, Ticket};

use self::admission::AdmissionWord;
use self::core::Core;
use self::held::Held;
use self::paths::{Locked, Shared};
use self::shards::{Placement, Shards};
use self::wait::{SlotState, WaitSlot};
use crate::clock::{Clock, Instant};
use crate::stats::{ReadWriteHandle, SeatDemandHandle, TagStats, Utilization};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex};
use crate::work_estimate::WorkEstimate;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::task::Waker;

/// Identifies a request in the reference model and in tests.
pub type RequestId = u64;

/// Why a request was refused.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// Its queue was full and the level had no free seat.
    QueueFull = 0,
    /// It waited past the wait limit or its own deadline.
    TimeOut = 1,
    /// The caller gave up while it waited.
    Cancelled = 2,
    /// The level does not queue and had no room.
    ConcurrencyLimit = 3,
    /// The level failed: a panic inside its critical section left its state
    /// half-updated, so it decides nothing more (see the module
    /// documentation). Not one of Kubernetes' reasons: not in
    /// [`RejectReason::ALL`] and never counted in the per-reason tallies.
    LevelFailed = 4,
}

impl RejectReason {
    /// All reasons, in discriminant order.
    pub const ALL: [RejectReason; 4] = [
        RejectReason::QueueFull,
        RejectReason::TimeOut,
        RejectReason::Cancelled,
        RejectReason::ConcurrencyLimit,
    ];

    /// Kubernetes' label value for this reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::QueueFull => "queue-full",
            RejectReason::TimeOut => "time-out",
            RejectReason::Cancelled => "cancelled",
            RejectReason::ConcurrencyLimit => "concurrency-limit",
            RejectReason::LevelFailed => "level-failed",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request as the queueset sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The flow's 64-bit hash (shuffle sharding deals its hand from it).
    pub flow_hash: u64,
    /// Seats while executing and afterwards (clamped to 1..=the limit).
    pub estimate: WorkEstimate,
    /// The caller's own deadline for starting; the wait limit applies too.
    pub deadline: Option<Instant>,
}

/// The decision on a new request.
#[derive(Debug)]
#[must_use = "dropping an admission finishes or cancels the request"]
pub enum Admission<'q> {
    /// Execute now; dropping the guard finishes the request.
    Execute(Guard<'q>),
    /// Waiting in a queue: wait, poll or await the ticket, or cancel it.
    Queued(Ticket<'q>),
    /// Refused at once; the reason says why.
    Rejected(RejectReason),
}

/// A level's execution-time totals since it was created (less the tallies
/// of flow schemas forgotten since), with its seats in use and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LatencyTotals {
    /// Requests that finished executing.
    pub(crate) completed: u64,
    /// The sum of their execution times, nanoseconds.
    pub(crate) latency_nanos: u128,
    /// Seats held now (executing or lingering).
    pub(crate) seats_in_use: u64,
    /// Requests waiting in its queues now.
    pub(crate) waiting: u64,
    /// The level's concurrency limit now.
    pub(crate) limit: u32,
}
/// Counters and gauges of one queueset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSetStats {
    /// The level's concurrency limit in seats (CurrentCL).
    pub concurrency_limit: u32,
    /// Seats held now, by executing requests and by final seats lingering for
    /// their additional latency.
    pub seats_in_use: u32,
    /// Requests executing now.
    pub requests_executing: u32,
    /// Requests waiting in the queues now.
    pub requests_waiting: u32,
    /// Number of queues (0 for a level that does not queue).
    pub queues: usize,
    /// Requests dispatched from a queue (hot-path admissions not included).
    pub dispatched_from_queues: u64,
    /// Rejections by reason, indexed by `RejectReason as usize`.
    pub rejected: [u64; 4],
    /// Estimates whose seats were clamped (0 seats, or over the limit).
    pub clamped_estimates: u64,
    /// Seats held idle for a flow's next request (the flow policy's
    /// anticipation, at most G each); included in `seats_in_use`.
    pub held_seats: u32,
}

// ----- the queueset ----------------------------------------------------------

/// One priority level's dispatcher. See the module documentation.
pub struct QueueSet {
    shared: Arc<Shared>,
}

impl fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.shared.word.load();
        f.debug_struct("QueueSet")
            .field("seats_in_use", &w.seats_in_use)
            .field("limit", &w.limit)
            .field("waiting", &w.slow)
            .finish()
    }
}

impl QueueSet {
    /// A queueset with `cfg`, timed by `clock`.
    ///
    /// Fails with [`QueueSetConfigError`] (naming the level) when the queues
    /// and hand size cannot deal, a queuing level's queue length limit is 0,
    /// the service-time guess is zero, or the concurrency limit is above
    /// [`MAX_CONCURRENCY_LIMIT`].
    pub fn new(cfg: QueueSetConfig, clock: Clock) -> Result<QueueSet, QueueSetConfigError> {
        let dealer = cfg.validate()?;
        let now = clock.now();
        let limit = cfg.concurrency_limit;
        let cfg_fairness = cfg.fairness;
        let core = Core::new(cfg, dealer.clone(), now);
        let locked = Locked {
            core,
            timer: None,
            next_seq: 0,
            folded: Vec::new(),
            completed: Default::default(),
            standing: Default::default(),
            dealt: Default::default(),
        };
        let shards = Shards::new(&Placement::of(&dealer, cfg_fairness));
        let shared = Arc::new(Shared {
            word: AdmissionWord::new(limit, budget::batch_for(limit, shards.len())),
            enqueues: CachePadded::new(AtomicU64::new(0)),
            shards,
            locked: Mutex::new(locked),
            failed: AtomicBool::new(false),
            clock: clock.clone(),
        });
        let for_timer = shared.clone();
        // Registering the timer may start the clock's timer thread: do it
        // before taking the level lock, never under it.
        let timer = clock.timer(move |at| for_timer.on_timer(at));
        shared.lock().timer = Some(timer);
        Ok(QueueSet { shared })
    }

    /// Whether the level failed (see the module documentation): it then
    /// rejects every request with [`RejectReason::LevelFailed`].
    pub fn failed(&self) -> bool {
        self.shared.is_failed()
    }

    /// Poison the level lock as a panic inside the critical section would
    /// (unit tests only: no code path of the core panics by design).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn poison_for_test(&self) {
        std::thread::scope(|s| {
            let poisoner = s.spawn(|| {
                let _held = self.shared.locked.lock();
                panic!("a bug inside the critical section (provoked by a test)");
            });
            assert!(poisoner.join().is_err());
        });
    }

    /// The clock this queueset runs on.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// Decide on a new request: execute now, queue, or reject. The guard
    /// and the ticket borrow the queueset; see [`QueueSet::admit`] for the
    /// owned form.
    #[inline]
    pub fn start(&self, request: &Request) -> Admission<'_> {
        // The hot path builds the guard straight from the held request
        // (one move of it fewer than through `RawAdmission`).
        if let Some(held) = self.shared.try_fast_start(request, 0) {
            return Admission::Execute(Guard {
                qs: self,
                exec: Some(Execution { held }),
            });
        }
        match self.shared.slow_start(request, 0) {
            RawAdmission::Execute(exec) => Admission::Execute(Guard {
                qs: self,
                exec: Some(exec),
            }),
            RawAdmission::Queued(waiting) => Admission::Queued(Ticket {
                qs: self,
                waiting: Some(waiting),
            }),
            RawAdmission::Rejected(reason) => Admission::Rejected(reason),
        }
    }

    /// The decision on a new request, in owned parts: an [`Execution`] must
    /// be given to [`QueueSet::finish_execution`] exactly once, and a
    /// [`Waiting`] to [`QueueSet::wait_for`], [`QueueSet::poll_waiting`] or
    /// [`QueueSet::cancel_waiting`]. For holders that keep the queueset
    /// alive themselves (the dispatcher, the C ABI).
    #[inline]
    pub fn admit(&self, request: &Request) -> RawAdmission {
        self.admit_tagged(request, 0)
    }

    /// [`QueueSet::admit`] for a request counted under `tag` in
    /// [`QueueSet::tag_stats`] (the dispatcher tags requests by flow
    /// schema). Tags should be small and dense: the tallies are indexed by
    /// them.
    #[inline]
    pub(crate) fn admit_tagged(&self, request: &Request, tag: u32) -> RawAdmission {
        match self.fast_admit_tagged(request, tag) {
            Some(exec) => RawAdmission::Execute(exec),
            None => self.slow_admit_tagged(request, tag),
        }
    }

    /// The lock-free half of [`QueueSet::admit_tagged`]: the execution if
    /// the request took seats without the level lock; None sends it to
    /// [`QueueSet::slow_admit_tagged`]. Split so that a caller can build
    /// its own value around the hot path's execution directly.
    #[inline]
    pub(crate) fn fast_admit_tagged(&self, request: &Request, tag: u32) -> Option<Execution> {
        self.shared
            .try_fast_start(request, tag)
            .map(|held| Execution { held })
    }

    /// The locked half of [`QueueSet::admit_tagged`], for a request that
    /// [`QueueSet::fast_admit_tagged`] turned away (and only for one).
    pub(crate) fn slow_admit_tagged(&self, request: &Request, tag: u32) -> RawAdmission {
        self.shared.slow_start(request, tag)
    }

    /// Finish an execution at `end`; seats held for additional latency are
    /// counted from it. An `end` before the start counts as the start, and
    /// one after now as now: a caller's clock that runs ahead (or a bogus
    /// time) must not hold the final seats beyond their real latency.
    pub fn finish_execution(&self, exec: Execution, end: Instant) {
        let end = end.min(self.shared.clock.now());
        self.finish_execution_now(&exec, end);
    }

    /// Finish now, by reference, for an owner that is going away and
    /// gives the execution up afterwards (it is finished exactly once):
    /// the held request is read where it lies, not moved out first.
    #[inline]
    pub(crate) fn finish_execution_in_place(&self, exec: &Execution) {
        self.finish_execution_now(exec, self.shared.clock.now());
    }

    /// Finish at `now`, a time just read from this queueset's clock. By
    /// reference: the held request is read where it lies (a guard's, or
    /// the caller's), not moved down the finish. The caller gives up the
    /// execution afterwards (it is finished exactly once).
    #[inline]
    fn finish_execution_now(&self, exec: &Execution, now: Instant) {
        let end = now.max(exec.held.start);
        self.shared.finish(&exec.held, end);
    }

    /// The queue an executing request belongs to, if the level queues
    /// (None under the flow fairness policies for a request admitted
    /// lock-free until its shard's ledger is merged). Under Kubernetes'
    /// policy a request admitted lock-free has its card dealt when first
    /// needed: here, or when the level next merges the shards' ledgers
    /// (the hot path deals nothing; the card is the one Kubernetes picks).
    pub fn execution_queue(&self, exec: &Execution) -> Option<u32> {
        self.shared.queue_of(&exec.held)
    }

    /// Give back `seats` of an executing request's seats now, while it
    /// keeps executing (a watch after its initial burst): waiting requests
    /// that now fit are dispatched, the request's queue is charged for
    /// those seats only the time they were held, and its finish gives back
    /// only what it still holds. Errors leave the request as it was.
    pub fn release_seats(&self, exec: &mut Execution, seats: u32) -> Result<(), ReleaseError> {
        let pending = exec.begin_release(seats)?;
        self.complete_release(pending);
        Ok(())
    }

    /// Give back the seats of a release begun with
    /// [`Execution::begin_release`]. Takes the level lock and may wake
    /// waiters (which can run user code): call it holding no lock of yours.
    pub(crate) fn complete_release(&self, p: PendingRelease) {
        self.shared.release_early(&p.before, p.seats);
    }

    /// Give back every seat the request still holds (see
    /// [`QueueSet::release_seats`]); [`ReleaseError::NothingHeld`] if it
    /// already gave them all back.
    pub fn release_all_seats(&self, exec: &mut Execution) -> Result<(), ReleaseError> {
        match exec.held_seats() {
            0 => Err(ReleaseError::NothingHeld),
            held => self.release_seats(exec, held),
        }
    }

    /// Without blocking: the decision on a waiting request, if there is one
    /// (taken once; later polls return None). `waker`, if given, is woken
    /// at the decision.
    pub fn poll_waiting(
        &self,
        waiting: &Waiting,
        waker: Option<&Waker>,
    ) -> Option<Result<Execution, RejectReason>> {
        waiting.slot.try_take(waker).map(decision_result)
    }

    /// Block until the waiting request is dispatched or rejected.
    pub fn wait_for(&self, waiting: Waiting) -> Result<Execution, RejectReason> {
        decision_result(waiting.slot.wait_and_take())
    }

    /// Give up waiting. Returns false if the request had already been
    /// decided; if it had been dispatched it is finished at once.
    pub fn cancel_waiting(&self, waiting: Waiting) -> bool {
        self.shared.cancel(&waiting.slot);
        match waiting.slot.try_take(None) {
            Some(SlotState::Rejected(RejectReason::Cancelled)) => true,
            Some(SlotState::Dispatched(held)) => {
                self.finish_execution_now(&Execution { held }, self.shared.clock.now());
                false
            }
            _ => false,
        }
    }

    /// Apply a new configuration. On error the old one stays in force.
    /// Executing requests are never aborted; queues beyond the new count
    /// take no new requests and disappear once drained.
    pub fn reconfigure(&self, cfg: QueueSetConfig) -> Result<(), QueueSetConfigError> {
        self.shared.reconfigure(cfg)
    }

    /// Change only the concurrency limit (as borrowing does).
    pub fn set_concurrency_limit(&self, limit: u32) -> Result<(), QueueSetConfigError> {
        let mut cfg = self.config();
        cfg.concurrency_limit = limit;
        self.shared.reconfigure(cfg)
    }

    /// Merge the hot path's ledgers now, so whatever reads this level's
    /// demand observer next (borrowing, at the end of its period) sees
    /// every change up to this instant rather than the last merge.
    pub fn catch_up(&self) {
        drop(self.shared.lock_and_merge());
    }

    /// What the adaptive limit reads of this level each update interval
    /// (see [`crate::adaptive`]): the ledgers merged first, then the
    /// execution-time tallies, summed over tags.
    /// The hot path pays nothing for it.
    pub(crate) fn latency_totals(&self) -> LatencyTotals {
        let st = self.shared.lock_and_merge();
        let core = &st.core;
        let (completed, latency_nanos) = core.tallies.iter().fold((0u64, 0u128), |(n, sum), t| {
            (n + t.execution.count(), sum + t.execution.sum())
        });
        LatencyTotals {
            completed,
            latency_nanos,
            seats_in_use: core.seats.in_use,
            waiting: u64::from(core.requests_waiting()),
            limit: core.cfg.concurrency_limit,
        }
    }

    /// Report this level's seat demand (seats in use plus seats waiting,
    /// at every change, with its time) to `observer`, as borrowing needs.
    /// The hot path never touches it: changes reach it when the ledgers are
    /// merged.
    pub fn set_demand_observer(&self, observer: Option<SeatDemandHandle>) {
        self.shared
            .lock_and_merge()
            .core
            .set_demand_observer(observer);
    }

    /// Report requests joining and leaving queues and starting and ending
    /// execution, by kind (the [`READ_ONLY_TAG`](crate::stats::READ_ONLY_TAG) bit of their
    /// tag), to `handle` from now on (see [`ReadWriteHandle`]). Like the seat
    /// demand, this is fed when the ledgers are merged, never by the hot path.
    pub fn set_read_write_observer(&self, handle: Option<ReadWriteHandle>) {
        self.shared
            .lock_and_merge()
            .core
            .tallies
            .set_read_write(handle);
    }

    /// The configuration in force.
    pub fn config(&self) -> QueueSetConfig {
        self.shared.lock().core.cfg.clone()
    }

    /// A consistent snapshot of the counters.
    pub fn stats(&self) -> QueueSetStats {
        let mut st = self.shared.lock_and_merge();
        // Seats parked in budgets are free seats: back to the word, so that
        // the snapshot counts only seats that requests hold.
        self.shared.shards.sweep(&self.shared.word);
        let w = self.shared.word.load();
        let core = &mut st.core;
        if !self.shared.is_failed() {
            core.check_invariants();
        }
        QueueSetStats {
            concurrency_limit: w.limit,
            seats_in_use: w.seats_in_use,
            requests_executing: core.requests_executing(),
            requests_waiting: core.requests_waiting(),
            queues: core.queues.len(),
            dispatched_from_queues: core.counters.dispatched,
            rejected: core.counters.rejected,
            clamped_estimates: core.counters.clamped_estimates,
            held_seats: core.held_seats(),
        }
    }

    /// Each queue's (next-dispatch R, waiting, executing, seats in use), for
    /// dumps and for the tests that compare with the reference model.
    pub fn queue_states(&self) -> Vec<(vtime::VTime, usize, u32, u32)> {
        let st = self.shared.lock_and_merge();
        st.core
            .queues
            .iter()
            .map(|q| {
                (
                    q.next_dispatch_r,
                    q.waiting.len(),
                    q.executing,
                    q.seats_in_use,
                )
            })
            .collect()
    }

    /// The level's virtual time R, in [`vtime::VTime`] units (2^-20
    /// seat-nanoseconds; [`vtime::to_seat_seconds`] converts).
    pub fn current_r(&self) -> vtime::VTime {
        self.shared.lock_and_merge().core.r()
    }

    /// Kubernetes' virtual-time gauges as of the last dispatch from a queue
    /// (bounds over the queues waiting now), with the ledgers merged first;
    /// `None` before the first dispatch.
    pub fn dispatch_gauges(&self) -> Option<DispatchGauges> {
        self.shared.lock_and_merge().core.dispatch_gauges()
    }

    /// The level's time-weighted utilization up to now, with the ledgers
    /// merged first.
    pub fn utilization(&self) -> Utilization {
        let now = self.shared.clock.now();
        self.shared.lock_and_merge().core.utilization_at(now)
    }

    /// Every tag's tallies (counts, gauges and histograms), by tag, with
    /// the ledgers merged first.
    pub fn tag_stats(&self) -> Vec<(u32, TagStats)> {
        self.shared.lock_and_merge().core.tallies.snapshot()
    }

    /// Whether a request tagged `tag` waits or executes here (ledgers merged
    /// first, so requests admitted lock-free count).
    pub(crate) fn tag_busy(&self, tag: u32) -> bool {
        self.shared.lock_and_merge().core.tallies.is_busy(tag)
    }

    /// Drop the tallies of `tag` (see `Tallies::remove`).
    pub(crate) fn forget_tag(&self, tag: u32) {
        self.shared.lock_and_merge().core.tallies.remove(tag);
    }

    /// The queues and waiting requests, with the ledgers merged first.
    pub fn dump(&self) -> QueueSetDump {
        self.shared.lock_and_merge().core.dump()
    }
}

impl Drop for QueueSet {
    fn drop(&mut self) {
        // The timer's callback holds the shared state: unregister it so the
        // state can be freed.
        let timer = self.shared.lock().timer.take();
        drop(timer);
    }
}

/// The decision on a new request, in owned parts (see [`QueueSet::admit`]).
#[derive(Debug)]
#[must_use = "an execution must be finished and a waiting request resolved"]
pub enum RawAdmission {
    /// Execute now: finish the execution with [`QueueSet::finish_execution`].
    Execute(Execution),
    /// Waiting in a queue: resolve it with [`QueueSet::wait_for`],
    /// [`QueueSet::poll_waiting`] or [`QueueSet::cancel_waiting`].
    Queued(Waiting),
    /// Refused at once; the reason says why.
    Rejected(RejectReason),
}

/// A request holding seats. Give it to [`QueueSet::finish_execution`]
/// exactly once (it is deliberately neither `Clone` nor `Copy`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an execution holds seats until it is finished"]
pub struct Execution {
    /// The request and the seats it holds (`held.rs`).
    held: Held,
}

impl Execution {
    /// When the request started executing.
    pub fn start_time(&self) -> Instant {
        self.held.start
    }
    /// The work estimate it holds seats for (after clamping).
    pub fn estimate(&self) -> WorkEstimate {
        self.held.estimate()
    }
    /// The queue it belongs to, if the level queues and the queue is
    /// known to the execution alone: a request admitted lock-free has its
    /// queue chosen later, when its shard's ledger is merged (under the
    /// flow fairness policies), or its card dealt when first needed (under
    /// Kubernetes' policy), and this is None;
    /// [`QueueSet::execution_queue`] answers for those too.
    pub fn queue(&self) -> Option<u32> {
        self.held.known_queue()
    }
    /// The seats it still holds: its estimate's, less those released.
    pub fn held_seats(&self) -> u32 {
        self.held.seats()
    }

    /// The first half of a release: check it and count the seats as no
    /// longer held (so its finish gives back only the rest); the returned
    /// release must be given to [`QueueSet::complete_release`]. Split so a
    /// holder can check under its own lock and give the seats back after
    /// dropping it (the C ABI's request table).
    pub(crate) fn begin_release(&mut self, seats: u32) -> Result<PendingRelease, ReleaseError> {
        let before = self.held.begin_release(seats)?;
        Ok(PendingRelease { before, seats })
    }
}

/// Seats counted released by [`Execution::begin_release`] and not yet
/// given back: give it to [`QueueSet::complete_release`].
#[derive(Debug)]
#[must_use = "the seats are given back only by QueueSet::complete_release"]
pub(crate) struct PendingRelease {
    /// The request as it was before the release.
    before: Held,
    /// The seats it gives back.
    seats: u32,
}

/// Why [`QueueSet::release_seats`] refused: nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseError {
    /// Asked to release 0 seats.
    ZeroSeats,
    /// The request already gave back every seat (a second release).
    NothingHeld,
    /// Asked to release more seats than the request holds.
    MoreThanHeld {
        /// The seats the request still holds.
        held: u32,
        /// The seats asked for.
        requested: u32,
    },
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::ZeroSeats => f.write_str("seats: 0 seats to release (ask for 1 or more)"),
            ReleaseError::NothingHeld => {
                f.write_str("seats: the request already released every seat it held")
            }
            ReleaseError::MoreThanHeld { held, requested } => write!(
                f,
                "seats: asked to release {requested} seats but the request holds {held}"
            ),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// A request waiting in a queue (see [`QueueSet::admit`]).
#[derive(Debug)]
#[must_use = "a waiting request must be waited for, polled to a decision, or cancelled"]
pub struct Waiting {
    slot: Arc<WaitSlot>,
    joined: Joined,
}

/// The state of the level when a request joined its queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Joined {
    /// The length of the queue it joined, itself included.
    pub queue_length: u32,
    /// The index of that queue.
    pub queue: u32,
    /// The level's virtual time R then.
    pub current_r: vtime::VTime,
}

impl Waiting {
    /// The level's state when the request joined its queue.
    pub fn joined(&self) -> Joined {
        self.joined
    }

    /// Its arrival number in the level, unique while the queueset lives
    /// ([`WaitingDump::id`] in dumps).
    pub fn id(&self) -> u64 {
        self.slot.seq
    }
}

fn decision_result(decision: SlotState) -> Result<Execution, RejectReason> {
    match decision {
        SlotState::Dispatched(held) => Ok(Execution { held }),
        SlotState::Rejected(reason) => Err(reason),
        SlotState::Waiting(_) | SlotState::Taken => Err(RejectReason::Cancelled),
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
