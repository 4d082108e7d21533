//! One priority level's dispatcher: fair queuing for server requests.
//!
//! # Two paths
//! The **hot path** runs when the level has free seats and nothing waits:
//! one compare-and-swap on the level's admission word takes the seats, the
//! flow's queue is dealt (the card Kubernetes would pick, since with nothing
//! waiting every queue of the hand is equally empty), and a small record of
//! the start is pushed to the level's event ring. Finishing pushes a finish
//! record and gives the seats back with one atomic subtraction. No lock, no
//! allocation.
//!
//! The **slow path** (queuing, dispatch from queues, time-outs, cancellation,
//! seats lingering for additional latency, reconfiguration) runs under the
//! level's mutex. Before every decision it first *replays* the ring, so the
//! fair-queuing state (R, every queue's next-dispatch R and seats, the
//! round-robin position, the seat demand) is exactly what Kubernetes'
//! queueset would have after the same sequence of events: a request admitted
//! on the hot path still belongs to its flow's queue for every later dispatch
//! decision. The property tests check this against the plain
//! [`reference::ReferenceQueueSet`] decision by decision.
//!
//! # The admission word
//! One cache-padded `AtomicU64`:
//! - bits 0..=30: seats in use (held by executing or lingering requests);
//! - bits 31..=61: the concurrency limit;
//! - bit 62: spare;
//! - bit 63: `SLOW`: requests are waiting, so arrivals must queue behind them
//!   and finishes must dispatch them (both on the slow path).
//!
//! It is the only authority on seat availability; the slow path reserves
//! seats in it with the same atomics, and the core mirrors them for
//! accounting.
//!
//! # Counting for metrics
//! A request may carry a caller's *tag* (the dispatcher's flow-schema id).
//! The hot path only copies it into the request's ring records; the core
//! tallies it ([`tally`]: counts, gauges, wait, execution and queue-length
//! histograms) when the records are replayed and on the slow path, under
//! the level lock it holds anyway. So metrics add no atomic operation, lock
//! or shared cache line to the hot path, and no decision reads them.

pub mod config;
mod core;
#[doc(hidden)]
pub mod differential;
pub mod dump;
#[cfg(shuttle)]
#[doc(hidden)]
pub mod history;
pub mod reference;
pub mod tally;
pub mod vtime;
mod wait;

pub use config::{QueueSetConfig, QueueSetConfigError, MAX_CONCURRENCY_LIMIT};
pub use dump::{QueueDump, QueueSetDump, WaitingDump};
pub use tally::TagStats;

use self::core::{Core, Seats, NO_QUEUE};
use self::wait::{SlotState, WaitSlot};
use crate::borrowing::SeatDemandHandle;
use crate::clock::{Clock, Instant, Timer};
use crate::dealer::Dealer;
use crate::sync::{lock, Arc, AtomicPtr, AtomicU64, EventRing, Mutex, MutexGuard, Ordering};
use crate::work_estimate::WorkEstimate;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

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
    Rejected(RejectReason),
}

/// Counters and gauges of one queueset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSetStats {
    pub concurrency_limit: u32,
    pub seats_in_use: u32,
    pub requests_executing: u32,
    pub requests_waiting: u32,
    pub queues: usize,
    /// Requests dispatched from a queue (hot-path admissions not included).
    pub dispatched_from_queues: u64,
    /// Rejections by reason, indexed by `RejectReason as usize`.
    pub rejected: [u64; 4],
    /// Estimates whose seats were clamped (0 seats, or over the limit).
    pub clamped_estimates: u64,
}

// ----- the admission word --------------------------------------------------

const SEATS_BITS: u32 = 31;
const SEATS_MASK: u64 = (1 << SEATS_BITS) - 1;
const LIMIT_SHIFT: u32 = SEATS_BITS;
const LIMIT_MASK: u64 = ((1 << 31) - 1) << LIMIT_SHIFT;
const SLOW: u64 = 1 << 63;

#[inline]
fn word_seats(w: u64) -> u32 {
    (w & SEATS_MASK) as u32
}

#[inline]
fn word_limit(w: u64) -> u32 {
    ((w & LIMIT_MASK) >> LIMIT_SHIFT) as u32
}

/// The admission word as the core sees it, under the level lock.
struct WordSeats<'a>(&'a AtomicU64);

impl Seats for WordSeats<'_> {
    fn in_use(&self) -> u32 {
        word_seats(self.0.load(Ordering::Acquire))
    }
    fn limit(&self) -> u32 {
        word_limit(self.0.load(Ordering::Acquire))
    }
    fn take(&self, seats: u32) {
        let prev = self.0.fetch_add(seats as u64, Ordering::AcqRel);
        debug_assert!(
            word_seats(prev) as u64 + seats as u64 <= SEATS_MASK,
            "seat count overflow"
        );
    }
    fn give_back(&self, seats: u32) {
        let prev = self.0.fetch_sub(seats as u64, Ordering::AcqRel);
        debug_assert!(word_seats(prev) >= seats, "gave back more seats than held");
    }
}

// ----- the event ring --------------------------------------------------------

/// A hot-path event, replayed into the core in ring order. The tag rides
/// along so the replay can tally the request (see `tally`); to keep a
/// record at 40 bytes, a start carries its estimate's fields loose (a
/// `WorkEstimate` would pad them to 24 bytes).
#[derive(Debug, Clone, Copy)]
enum Record {
    Start {
        queue: u32,
        tag: u32,
        initial_seats: u32,
        final_seats: u32,
        latency_secs: u64,
        latency_subsec_nanos: u32,
        at: Instant,
    },
    Finish {
        queue: u32,
        tag: u32,
        initial_seats: u32,
        seats: u32,
        start: Instant,
        at: Instant,
    },
}

// Two under loom, so a model with a few hot-path events fills the ring and
// exercises the full-ring fallback (tests/loom_configs.rs).
const RING_CAPACITY: usize = if cfg!(loom) { 2 } else { 256 };

// A ring slot is a record plus crossbeam's 8-byte stamp: keep records small.
const _: () = assert!(std::mem::size_of::<Record>() <= 40);

// ----- the queueset ----------------------------------------------------------

/// One priority level's dispatcher. See the module documentation.
pub struct QueueSet {
    shared: Arc<Shared>,
}

struct Shared {
    word: CachePadded<AtomicU64>,
    enqueues: CachePadded<AtomicU64>,
    /// The current dealer, or null when the level does not queue. Points
    /// into `Locked::dealers`, which never frees a dealer while the
    /// queueset lives.
    dealer: AtomicPtr<Dealer>,
    ring: EventRing<Record>,
    locked: Mutex<Locked>,
    clock: Clock,
}

struct Locked {
    core: Core,
    timer: Option<Timer>,
    /// Every dealer this level has used, boxed so their addresses stay put
    /// when the vector grows (the hot path holds pointers to them).
    #[allow(clippy::vec_box)]
    dealers: Vec<Box<Dealer>>,
    next_seq: u64,
}

impl fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.shared.word.load(Ordering::Relaxed);
        f.debug_struct("QueueSet")
            .field("seats_in_use", &word_seats(w))
            .field("limit", &word_limit(w))
            .field("waiting", &(w & SLOW != 0))
            .finish()
    }
}

impl QueueSet {
    /// A queueset with `cfg`, timed by `clock`.
    pub fn new(cfg: QueueSetConfig, clock: Clock) -> Result<QueueSet, QueueSetConfigError> {
        let dealer = cfg.validate()?;
        let now = clock.now();
        let limit = cfg.concurrency_limit;
        let core = Core::new(cfg, dealer.clone(), now);
        let mut locked = Locked {
            core,
            timer: None,
            dealers: Vec::new(),
            next_seq: 0,
        };
        let dealer_ptr = locked.intern_dealer(dealer);
        let shared = Arc::new(Shared {
            word: CachePadded::new(AtomicU64::new((limit as u64) << LIMIT_SHIFT)),
            enqueues: CachePadded::new(AtomicU64::new(0)),
            dealer: AtomicPtr::new(dealer_ptr),
            ring: EventRing::new(RING_CAPACITY),
            locked: Mutex::new(locked),
            clock: clock.clone(),
        });
        let for_timer = shared.clone();
        let timer = clock.timer(move |at| for_timer.on_timer(at));
        lock(&shared.locked).timer = Some(timer);
        Ok(QueueSet { shared })
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
        match self.admit(request) {
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
        match self.shared.try_fast_start(request, tag) {
            Some((queue, start)) => RawAdmission::Execute(Execution {
                queue,
                tag,
                estimate: request.estimate,
                start,
            }),
            None => self.shared.slow_start(request, tag),
        }
    }

    /// Finish an execution at `end` (not before its start); seats held for
    /// additional latency are counted from it.
    pub fn finish_execution(&self, exec: Execution, end: Instant) {
        self.shared.finish(
            exec.queue,
            exec.tag,
            exec.estimate,
            exec.start,
            end.max(exec.start),
        );
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
            Some(SlotState::Dispatched {
                queue,
                tag,
                estimate,
                start,
            }) => {
                self.finish_execution(
                    Execution {
                        queue,
                        tag,
                        estimate,
                        start,
                    },
                    self.shared.clock.now(),
                );
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

    /// Replay the hot path's pending events now, so whatever reads this
    /// level's demand observer next (borrowing, at the end of its period)
    /// sees every change up to this instant rather than the last replay.
    pub fn catch_up(&self) {
        drop(self.shared.lock_and_drain());
    }

    /// Report this level's seat demand (seats in use plus seats waiting,
    /// at every change, with its time) to `observer`, as borrowing needs.
    /// The hot path never touches it: changes reach it when the event ring
    /// is replayed, at their own timestamps.
    pub fn set_demand_observer(&self, observer: Option<SeatDemandHandle>) {
        self.shared
            .lock_and_drain()
            .core
            .set_demand_observer(observer);
    }

    /// The configuration in force.
    pub fn config(&self) -> QueueSetConfig {
        lock(&self.shared.locked).core.cfg.clone()
    }

    /// A consistent snapshot of the counters.
    pub fn stats(&self) -> QueueSetStats {
        let mut st = self.shared.lock_and_drain();
        let w = self.shared.word.load(Ordering::Acquire);
        let core = &mut st.core;
        core.check_invariants();
        QueueSetStats {
            concurrency_limit: word_limit(w),
            seats_in_use: word_seats(w),
            requests_executing: core.requests_executing,
            requests_waiting: core.requests_waiting,
            queues: core.queues.len(),
            dispatched_from_queues: core.dispatched_total,
            rejected: core.rejected_total,
            clamped_estimates: core.clamped_estimates,
        }
    }

    /// Each queue's (next-dispatch R, waiting, executing, seats in use), for
    /// dumps and for the tests that compare with the reference model.
    pub fn queue_states(&self) -> Vec<(vtime::VTime, usize, u32, u32)> {
        let st = self.shared.lock_and_drain();
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

    /// The level's virtual time R.
    pub fn current_r(&self) -> vtime::VTime {
        self.shared.lock_and_drain().core.r
    }

    /// Every tag's tallies (counts, gauges and histograms), by tag, with
    /// the event ring replayed first.
    pub fn tag_stats(&self) -> Vec<(u32, TagStats)> {
        self.shared.lock_and_drain().core.tallies.snapshot()
    }

    /// The queues and waiting requests, with the event ring replayed first.
    pub fn dump(&self) -> QueueSetDump {
        self.shared.lock_and_drain().core.dump()
    }
}

impl Drop for QueueSet {
    fn drop(&mut self) {
        // The timer's callback holds the shared state: unregister it so the
        // state can be freed.
        let timer = lock(&self.shared.locked).timer.take();
        drop(timer);
    }
}

/// The decision on a new request, in owned parts (see [`QueueSet::admit`]).
#[derive(Debug)]
#[must_use = "an execution must be finished and a waiting request resolved"]
pub enum RawAdmission {
    Execute(Execution),
    Queued(Waiting),
    Rejected(RejectReason),
}

/// A request holding seats. Give it to [`QueueSet::finish_execution`]
/// exactly once (it is deliberately neither `Clone` nor `Copy`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an execution holds seats until it is finished"]
pub struct Execution {
    queue: u32,
    tag: u32,
    estimate: WorkEstimate,
    start: Instant,
}

impl Execution {
    /// When the request started executing.
    pub fn start_time(&self) -> Instant {
        self.start
    }
    /// The work estimate it holds seats for (after clamping).
    pub fn estimate(&self) -> WorkEstimate {
        self.estimate
    }
    /// The queue it belongs to, if the level queues.
    pub fn queue(&self) -> Option<u32> {
        (self.queue != NO_QUEUE).then_some(self.queue)
    }
}

/// A request waiting in a queue (see [`QueueSet::admit`]).
#[derive(Debug)]
#[must_use = "a waiting request must be waited for, polled to a decision, or cancelled"]
pub struct Waiting {
    slot: Arc<WaitSlot>,
}

impl Waiting {
    /// Its arrival number in the level, unique while the queueset lives
    /// ([`WaitingDump::id`] in dumps).
    pub fn id(&self) -> u64 {
        self.slot.seq
    }
}

fn decision_result(decision: SlotState) -> Result<Execution, RejectReason> {
    match decision {
        SlotState::Dispatched {
            queue,
            tag,
            estimate,
            start,
        } => Ok(Execution {
            queue,
            tag,
            estimate,
            start,
        }),
        SlotState::Rejected(reason) => Err(reason),
        SlotState::Waiting(_) | SlotState::Taken => Err(RejectReason::Cancelled),
    }
}

impl Locked {
    /// The stable address of a dealer equal to `dealer`, boxing it the first
    /// time it is seen.
    fn intern_dealer(&mut self, dealer: Option<Dealer>) -> *mut Dealer {
        let Some(dealer) = dealer else {
            return std::ptr::null_mut();
        };
        let same = |d: &&mut Box<Dealer>| {
            d.deck_size() == dealer.deck_size() && d.hand_size() == dealer.hand_size()
        };
        if let Some(existing) = self.dealers.iter_mut().find(same) {
            return &mut **existing;
        }
        self.dealers.push(Box::new(dealer));
        let last = self.dealers.last_mut().expect("just pushed");
        &mut **last
    }
}

impl Shared {
    /// The hot path: take seats with one CAS if nothing waits and they fit.
    /// Returns the request's queue and start time.
    #[inline]
    fn try_fast_start(&self, request: &Request, tag: u32) -> Option<(u32, Instant)> {
        let estimate = request.estimate;
        if estimate.initial_seats == 0 {
            return None; // the slow path clamps and counts it
        }
        let seats = estimate.max_seats() as u64;
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if w & SLOW != 0 || (w & SEATS_MASK) + seats > word_limit(w) as u64 {
                return None;
            }
            match self.word.compare_exchange_weak(
                w,
                w + seats,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        let queue = self.deal_queue(request.flow_hash);
        let at = self.clock.now();
        self.record(Record::Start {
            queue,
            tag,
            initial_seats: estimate.initial_seats,
            final_seats: estimate.final_seats,
            latency_secs: estimate.additional_latency.as_secs(),
            latency_subsec_nanos: estimate.additional_latency.subsec_nanos(),
            at,
        });
        Some((queue, at))
    }

    /// The queue Kubernetes picks when no queue has waiting work: the card
    /// at the rotating offset of the flow's hand.
    #[inline]
    fn deal_queue(&self, flow_hash: u64) -> u32 {
        let dealer = self.dealer.load(Ordering::Acquire);
        if dealer.is_null() {
            return NO_QUEUE;
        }
        // SAFETY: a non-null `dealer` points into `Locked::dealers`, whose
        // boxes are (1) only ever appended, never removed or replaced, and
        // (2) dropped only with `Shared`, which `self` keeps alive; the
        // Acquire load pairs with the Release store that published it after
        // the box was initialised; `Dealer` is immutable once built.
        let dealer = unsafe { &*dealer };
        let n = self.enqueues.fetch_add(1, Ordering::Relaxed);
        dealer.card_at(flow_hash, (n % dealer.hand_size() as u64) as u32)
    }

    /// Push a hot-path record; if the ring is full, replay it (and this
    /// record) under the lock instead.
    #[inline]
    fn record(&self, record: Record) {
        if let Err(record) = self.ring.push(record) {
            let mut st = self.lock_and_drain();
            Self::replay(&mut st.core, record);
        }
    }

    fn lock_and_drain(&self) -> MutexGuard<'_, Locked> {
        let mut st = lock(&self.locked);
        self.drain(&mut st.core);
        st
    }

    fn drain(&self, core: &mut Core) {
        let Some(first) = self.ring.pop() else { return };
        // Feed the demand observer under one lock for the whole batch.
        let Some(observer) = core.take_demand_observer() else {
            Self::apply(core, first);
            while let Some(record) = self.ring.pop() {
                Self::apply(core, record);
            }
            return;
        };
        observer.with(|demand| {
            let mut record = Some(first);
            while let Some(r) = record {
                Self::apply(core, r);
                demand.set(core.demand(), core.last_sync());
                record = self.ring.pop();
            }
        });
        core.set_demand_observer_quietly(observer);
    }

    fn replay(core: &mut Core, record: Record) {
        Self::apply(core, record);
        core.observe_demand();
    }

    fn apply(core: &mut Core, record: Record) {
        match record {
            Record::Start {
                queue,
                tag,
                initial_seats,
                final_seats,
                latency_secs,
                latency_subsec_nanos,
                at,
            } => {
                let estimate = WorkEstimate {
                    initial_seats,
                    final_seats,
                    additional_latency: Duration::new(latency_secs, latency_subsec_nanos),
                };
                core.replay_start(queue, tag, estimate, at)
            }
            Record::Finish {
                queue,
                tag,
                initial_seats,
                seats,
                start,
                at,
            } => core.replay_finish(queue, tag, initial_seats, seats, start, at),
        }
    }

    fn slow_start(&self, request: &Request, tag: u32) -> RawAdmission {
        let mut st = self.lock_and_drain();
        let now = self.clock.now();
        #[cfg(shuttle)]
        history::note(history::Site::Start, now);
        let word = WordSeats(&self.word);
        st.core.sync(now);
        let estimate = st.core.clamp(request.estimate);
        let seats = estimate.max_seats();
        let Some(dealer) = st.core.dealer.clone() else {
            if !st.core.can_accommodate(seats, &word) {
                st.core.reject_at_once(tag, RejectReason::ConcurrencyLimit);
                return RawAdmission::Rejected(RejectReason::ConcurrencyLimit);
            }
            word.take(seats);
            st.core.replay_start(NO_QUEUE, tag, estimate, now);
            return RawAdmission::Execute(Execution {
                queue: NO_QUEUE,
                tag,
                estimate,
                start: now,
            });
        };
        let n = self.enqueues.fetch_add(1, Ordering::Relaxed);
        let q = st.core.choose_queue(&dealer, request.flow_hash, n);
        if st.core.must_reject(q, &word) {
            st.core.reject_at_once(tag, RejectReason::QueueFull);
            return RawAdmission::Rejected(RejectReason::QueueFull);
        }
        let wait_deadline = now.saturating_add(st.core.cfg.wait_limit);
        let deadline = request
            .deadline
            .map_or(wait_deadline, |d| d.min(wait_deadline));
        st.next_seq += 1;
        let slot = Arc::new(WaitSlot::new(st.next_seq, q as u32, tag));
        st.core.enqueue(q, slot.clone(), estimate, now, deadline);
        self.word.fetch_or(SLOW, Ordering::AcqRel);
        st.core.dispatch_as_much_as_possible(now, &word);
        self.settle_and_unlock(st);
        match slot.try_take(None) {
            Some(decision) => match decision_result(decision) {
                Ok(exec) => RawAdmission::Execute(exec),
                Err(reason) => RawAdmission::Rejected(reason),
            },
            None => RawAdmission::Queued(Waiting { slot }),
        }
    }

    /// After a slow-path operation: clear `SLOW` if nothing waits any more,
    /// and arm the timer for the next deadline or lingering release.
    /// Finish a slow-path operation: settle the level, release the lock,
    /// then wake the async waiters it decided (wakers never run under the
    /// level lock).
    fn settle_and_unlock(&self, mut st: MutexGuard<'_, Locked>) {
        self.settle(&mut st);
        let wakers = st.core.take_wakers();
        drop(st);
        for waker in wakers {
            waker.wake();
        }
    }

    fn settle(&self, st: &mut Locked) {
        st.core.observe_demand();
        if st.core.requests_waiting == 0 {
            self.word.fetch_and(!SLOW, Ordering::AcqRel);
        }
        let next = st.core.next_timer();
        if let Some(timer) = &st.timer {
            match next {
                Some(at) => timer.set(at),
                None => timer.cancel(),
            }
        }
        st.core.check_invariants();
    }

    fn finish(&self, queue: u32, tag: u32, estimate: WorkEstimate, start: Instant, end: Instant) {
        let fast =
            estimate.additional_latency.is_zero() && self.word.load(Ordering::Relaxed) & SLOW == 0;
        if fast {
            let seats = estimate.max_seats();
            let record = Record::Finish {
                queue,
                tag,
                initial_seats: estimate.initial_seats,
                seats,
                start,
                at: end,
            };
            if self.ring.push(record).is_ok() {
                // The record is in the ring before the seats are free, so
                // whoever sees the free seats replays the finish first.
                let prev = self.word.fetch_sub(seats as u64, Ordering::Release);
                debug_assert!(word_seats(prev) >= seats, "gave back more seats than held");
                if prev & SLOW != 0 {
                    self.dispatch_waiting();
                }
                return;
            }
        }
        self.slow_finish(queue, tag, estimate, start, end);
    }

    fn slow_finish(
        &self,
        queue: u32,
        tag: u32,
        estimate: WorkEstimate,
        start: Instant,
        end: Instant,
    ) {
        let mut st = self.lock_and_drain();
        #[cfg(shuttle)]
        history::note(history::Site::Finish, end);
        st.core.sync(end);
        let word = WordSeats(&self.word);
        let freed = st.core.finish(queue, tag, estimate, start, end);
        word.give_back(freed);
        st.core.dispatch_as_much_as_possible(end, &word);
        self.settle_and_unlock(st);
    }

    /// Seats were freed while requests wait: dispatch them.
    fn dispatch_waiting(&self) {
        let mut st = self.lock_and_drain();
        let now = self.clock.now();
        st.core.sync(now);
        st.core
            .dispatch_as_much_as_possible(now, &WordSeats(&self.word));
        self.settle_and_unlock(st);
    }

    fn cancel(&self, slot: &Arc<WaitSlot>) {
        let mut st = self.lock_and_drain();
        let now = self.clock.now();
        #[cfg(shuttle)]
        history::note(history::Site::Cancel, now);
        st.core.sync(now);
        if st.core.remove_waiting(slot, RejectReason::Cancelled, now) {
            st.core
                .dispatch_as_much_as_possible(now, &WordSeats(&self.word));
            self.settle_and_unlock(st);
        }
    }

    fn on_timer(&self, at: Instant) {
        let mut st = self.lock_and_drain();
        #[cfg(shuttle)]
        history::note(history::Site::Timer, at);
        let word = WordSeats(&self.word);
        while let Some(due) = st.core.next_timer().filter(|&t| t <= at) {
            st.core.sync(due);
            let (freed, _expired) = st.core.expire(due);
            word.give_back(freed);
            st.core.dispatch_as_much_as_possible(due, &word);
        }
        self.settle_and_unlock(st);
    }

    fn reconfigure(&self, cfg: QueueSetConfig) -> Result<(), QueueSetConfigError> {
        let dealer = cfg.validate()?;
        let mut st = self.lock_and_drain();
        let now = self.clock.now();
        #[cfg(shuttle)]
        history::note(history::Site::Reconfigure, now);
        st.core.sync(now);
        let ptr = st.intern_dealer(dealer.clone());
        let limit = cfg.concurrency_limit as u64;
        st.core.reconfigure(cfg, dealer);
        self.dealer.store(ptr, Ordering::Release);
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            let new = (w & !LIMIT_MASK) | (limit << LIMIT_SHIFT);
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        st.core
            .dispatch_as_much_as_possible(now, &WordSeats(&self.word));
        self.settle_and_unlock(st);
        Ok(())
    }
}

// ----- guards and tickets ----------------------------------------------------

/// An executing request. Dropping it finishes the request (so a panicking
/// handler cannot leak seats); [`Guard::finish_at`] finishes it with an
/// explicit end time.
#[must_use = "dropping the guard finishes the request at once"]
pub struct Guard<'q> {
    qs: &'q QueueSet,
    exec: Option<Execution>,
}

impl Guard<'_> {
    fn exec(&self) -> &Execution {
        self.exec
            .as_ref()
            .expect("a live guard holds its execution")
    }

    /// When the request started executing.
    pub fn start_time(&self) -> Instant {
        self.exec().start
    }

    /// The work estimate it holds seats for (after clamping).
    pub fn estimate(&self) -> WorkEstimate {
        self.exec().estimate
    }

    /// The queue it belongs to, if the level queues.
    pub fn queue(&self) -> Option<u32> {
        self.exec().queue()
    }

    /// Finish now.
    pub fn finish(self) {}

    /// Finish with `end` as the actual end of execution (not before the
    /// start); seats held for additional latency are counted from it.
    pub fn finish_at(mut self, end: Instant) {
        if let Some(exec) = self.exec.take() {
            self.qs.finish_execution(exec, end);
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(exec) = self.exec.take() {
            let now = self.qs.shared.clock.now();
            self.qs.finish_execution(exec, now);
        }
    }
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("execution", &self.exec)
            .finish()
    }
}

/// A request waiting in a queue. Wait for it ([`Ticket::wait`]), poll it
/// ([`Ticket::poll`]) or `.await` it; dropping it cancels the request.
#[must_use = "dropping the ticket cancels the request"]
pub struct Ticket<'q> {
    qs: &'q QueueSet,
    waiting: Option<Waiting>,
}

impl<'q> Ticket<'q> {
    /// Block until the request is dispatched or rejected.
    pub fn wait(mut self) -> Result<Guard<'q>, RejectReason> {
        let waiting = self.waiting.take().expect("a live ticket is waiting");
        let qs = self.qs;
        qs.wait_for(waiting).map(|exec| Guard {
            qs,
            exec: Some(exec),
        })
    }

    /// Without blocking: the decision if there is one.
    pub fn poll(&mut self) -> Option<Result<Guard<'q>, RejectReason>> {
        self.poll_with(None)
    }

    fn poll_with(&mut self, waker: Option<&Waker>) -> Option<Result<Guard<'q>, RejectReason>> {
        let qs = self.qs;
        let decision = qs.poll_waiting(self.waiting.as_ref()?, waker)?;
        self.waiting = None;
        Some(decision.map(|exec| Guard {
            qs,
            exec: Some(exec),
        }))
    }

    /// Give up waiting. Returns false if the request had already been
    /// dispatched (it is then finished at once) or rejected.
    pub fn cancel(mut self) -> bool {
        self.waiting
            .take()
            .is_some_and(|w| self.qs.cancel_waiting(w))
    }
}

impl<'q> Future for Ticket<'q> {
    type Output = Result<Guard<'q>, RejectReason>;

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

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            self.qs.cancel_waiting(waiting);
        }
    }
}

impl fmt::Debug for Ticket<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("pending", &self.waiting.is_some())
            .finish()
    }
}
