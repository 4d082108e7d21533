//! What an `apf_workqueue` pointer owns: one of the three queue kinds with
//! its limiter, its processing items' handles and its clock, and the
//! translation of the C calls' requests and results to the Rust queues.

use super::items::{Done, ItemSlab, Key};
use super::limiter::{Limiter, LimiterSpec, StateBounds};
use super::types::*;
use crate::cast::Castable;
use crate::slab::Stale;
use crate::status::{apf_status, fail};
use crate::sync::Arc;
use apf::clock::{duration_nanos, Clock, ManualClock};
use apf::metrics::{Exporter, WorkqueueSource};
use apf::workqueue::{
    Fifo, GetTimeoutError, Lane, PriorityQueue, QueueConfig, QueueStrategy, RateLimiter,
    RateLimitingQueue, TryGetError, TwoLane, WorkqueueMetrics,
};
use std::num::NonZeroUsize;
use std::time::Duration;

/// The three queue kinds behind one C type.
pub(super) enum Kind {
    Fifo(RateLimitingQueue<Key, Fifo>),
    TwoLane(RateLimitingQueue<Key, TwoLane>),
    Priority(PriorityQueue<Key>),
}

/// The limiter, shared between the queue and the ABI's own rate-limited
/// adds with an `after`.
struct SharedLimiter(Arc<Limiter>);

impl RateLimiter<Key> for SharedLimiter {
    fn when(&self, item: &Key) -> Duration {
        self.0.when(item)
    }
    fn forget(&self, item: &Key) {
        self.0.forget(item)
    }
    fn num_requeues(&self, item: &Key) -> u32 {
        self.0.num_requeues(item)
    }
}

/// A queue, its processing items' handles and its clock.
pub(crate) struct Core {
    pub(super) kind: Kind,
    pub(super) limiter: Arc<Limiter>,
    pub(super) items: ItemSlab,
    pub(super) manual: Option<ManualClock>,
}

/// What an `apf_workqueue` pointer points to.
pub(crate) struct FfiWorkqueue {
    pub(super) core: Arc<Core>,
}

impl Castable for apf_workqueue {
    type RustType = FfiWorkqueue;
}

/// What a get found, before it is given a handle.
pub(super) enum Got {
    Item(Key, u32, i32),
    None(apf_workqueue_get_result),
}

/// How long a get may wait.
#[derive(Clone, Copy)]
pub(super) enum Wait {
    Never,
    For(Duration),
    Forever,
}

fn from_try<H>(r: Result<(Key, H), TryGetError>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Ok((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        Err(TryGetError::Empty) => Got::None(apf_workqueue_get_result::APF_WORKQUEUE_EMPTY),
        Err(TryGetError::ShutDown) => Got::None(apf_workqueue_get_result::APF_WORKQUEUE_SHUT_DOWN),
    }
}

fn from_timed<H>(r: Result<(Key, H), GetTimeoutError>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Ok((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        Err(GetTimeoutError::TimedOut) => {
            Got::None(apf_workqueue_get_result::APF_WORKQUEUE_TIMED_OUT)
        }
        Err(GetTimeoutError::ShutDown) => {
            Got::None(apf_workqueue_get_result::APF_WORKQUEUE_SHUT_DOWN)
        }
    }
}

fn from_blocking<H>(r: Option<(Key, H)>, hint: impl Fn(H) -> (u32, i32)) -> Got {
    match r {
        Some((key, h)) => {
            let (lane, priority) = hint(h);
            Got::Item(key, lane, priority)
        }
        None => Got::None(apf_workqueue_get_result::APF_WORKQUEUE_SHUT_DOWN),
    }
}

fn lane_code(lane: Lane) -> u32 {
    match lane {
        Lane::Fast => apf_workqueue_lane::APF_WORKQUEUE_LANE_FAST as u32,
        Lane::Slow => apf_workqueue_lane::APF_WORKQUEUE_LANE_SLOW as u32,
    }
}

/// What an add asks for, checked against the queue's kind.
pub(super) struct AddRequest {
    pub(super) after: u64,
    pub(super) rate_limited: bool,
    pub(super) lane: Lane,
    pub(super) priority: Option<i32>,
}

/// A delayed or rate-limited add on a FIFO or two-lane queue, as
/// client-go's `AddAfter`/`AddRateLimited` (both count a retry), with
/// `after` capping the limiter's delay as the priority queue does.
fn add_client_go<S: QueueStrategy<Key>>(
    q: &RateLimitingQueue<Key, S>,
    limiter: &Limiter,
    key: Key,
    request: &AddRequest,
    hint: S::Hint,
) {
    if !request.rate_limited {
        if request.after == 0 {
            q.add_with(key, hint);
        } else {
            q.add_after_with(key, Duration::from_nanos(request.after), hint);
        }
        return;
    }
    // The limiter counts a failure: not for an add that will be ignored.
    if q.shutting_down() {
        return;
    }
    let mut delay = limiter.when(&key);
    if request.after > 0 && duration_nanos(delay) > request.after {
        delay = Duration::from_nanos(request.after);
    }
    q.add_after_with(key, delay, hint);
}

impl Core {
    pub(super) fn new(options: &apf_workqueue_options) -> Result<Core, apf_status> {
        // SAFETY: the `(name, name_len)` pair is readable per apf_workqueue_new's
        // contract.
        let name = match unsafe { crate::cast::str_from_raw(options.name, options.name_len) } {
            Ok(s) => s,
            Err(e) => return Err(fail(e.status(), format_args!("name {}", e.describe()))),
        };
        // SAFETY: NULL or a live description (apf_workqueue_new's contract).
        let spec = match unsafe { crate::cast::try_from(options.limiter) } {
            Some(spec) => LimiterSpec::clone(spec),
            None => LimiterSpec::default_controller(),
        };
        let bounds = StateBounds {
            capacity: NonZeroUsize::new(
                usize::try_from(options.limiter_state_capacity).unwrap_or(usize::MAX),
            ),
            idle_expiry: (options.limiter_idle_expiry_nanos > 0)
                .then(|| Duration::from_nanos(options.limiter_idle_expiry_nanos)),
        };
        let (clock, manual) = if options.manual_clock {
            let (clock, manual) = Clock::manual();
            (clock, Some(manual))
        } else {
            (Clock::real(), None)
        };
        let mut config = QueueConfig::with_clock(clock.clone()).named(name);
        // The index pre-sizes to this; cap it so a typo cannot ask for
        // terabytes up front.
        config.capacity = usize::try_from(options.capacity.min(1 << 28)).unwrap_or(1 << 28);
        let limiter = Arc::new(spec.build(&clock, bounds));
        let shared = || SharedLimiter(limiter.clone());
        let kind = match options.kind {
            k if k == apf_workqueue_kind::APF_WORKQUEUE_FIFO as u32 => Kind::Fifo(
                RateLimitingQueue::with_strategy(config, Fifo::default(), shared()),
            ),
            k if k == apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE as u32 => Kind::TwoLane(
                RateLimitingQueue::with_strategy(config, TwoLane::default(), shared()),
            ),
            k if k == apf_workqueue_kind::APF_WORKQUEUE_PRIORITY as u32 => {
                Kind::Priority(PriorityQueue::with_rate_limiter(config, shared()))
            }
            other => {
                return Err(fail(
                    apf_status::APF_ERR_INVALID_PARAMETER,
                    format_args!("kind must be an apf_workqueue_kind (0, 1 or 2), not {other}"),
                ))
            }
        };
        Ok(Core {
            kind,
            limiter,
            items: ItemSlab::default(),
            manual,
        })
    }

    pub(super) fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Fifo(_) => "a FIFO queue",
            Kind::TwoLane(_) => "a two-lane queue",
            Kind::Priority(_) => "a priority queue",
        }
    }

    /// Check an add's options against the queue's kind.
    pub(super) fn request(
        &self,
        opts: &apf_workqueue_add_options,
    ) -> Result<AddRequest, apf_status> {
        let lane = match opts.lane {
            l if l == apf_workqueue_lane::APF_WORKQUEUE_LANE_FAST as u32 => Lane::Fast,
            l if l == apf_workqueue_lane::APF_WORKQUEUE_LANE_SLOW as u32 => Lane::Slow,
            other => {
                return Err(fail(
                    apf_status::APF_ERR_INVALID_PARAMETER,
                    format_args!("lane must be an apf_workqueue_lane (0 or 1), not {other}"),
                ))
            }
        };
        if lane == Lane::Slow && !matches!(self.kind, Kind::TwoLane(_)) {
            return Err(fail(
                apf_status::APF_ERR_WORKQUEUE_WRONG_KIND,
                format_args!("lane APF_WORKQUEUE_LANE_SLOW given to {}", self.kind_name()),
            ));
        }
        if opts.has_priority && !matches!(self.kind, Kind::Priority(_)) {
            return Err(fail(
                apf_status::APF_ERR_WORKQUEUE_WRONG_KIND,
                format_args!("has_priority given to {}", self.kind_name()),
            ));
        }
        Ok(AddRequest {
            after: opts.after_nanos,
            rate_limited: opts.rate_limited,
            lane,
            priority: opts.has_priority.then_some(opts.priority),
        })
    }

    pub(super) fn add(&self, key: Key, request: &AddRequest) {
        let limiter = &*self.limiter;
        match &self.kind {
            Kind::Fifo(q) => add_client_go(q, limiter, key, request, ()),
            Kind::TwoLane(q) => add_client_go(q, limiter, key, request, request.lane),
            Kind::Priority(q) => q.add_with_opts(
                key,
                apf::workqueue::AddOpts {
                    after: Duration::from_nanos(request.after),
                    rate_limited: request.rate_limited,
                    priority: request.priority.unwrap_or(0),
                },
            ),
        }
    }

    pub(super) fn add_after(&self, key: Key, delay: u64) {
        let delay = Duration::from_nanos(delay);
        each!(&self.kind, q => q.add_after(key, delay))
    }

    pub(super) fn add_rate_limited(&self, key: Key) {
        each!(&self.kind, q => q.add_rate_limited(key))
    }

    pub(super) fn get(&self, wait: Wait) -> Got {
        let fifo = |_: ()| (0, 0);
        let lanes = |l: Lane| (lane_code(l), 0);
        let prio = |p: i32| (0, p);
        match (&self.kind, wait) {
            (Kind::Fifo(q), Wait::Never) => from_try(q.try_get_with_hint(), fifo),
            (Kind::Fifo(q), Wait::For(t)) => from_timed(q.get_with_hint_timeout(t), fifo),
            (Kind::Fifo(q), Wait::Forever) => from_blocking(q.get_with_hint(), fifo),
            (Kind::TwoLane(q), Wait::Never) => from_try(q.try_get_with_hint(), lanes),
            (Kind::TwoLane(q), Wait::For(t)) => from_timed(q.get_with_hint_timeout(t), lanes),
            (Kind::TwoLane(q), Wait::Forever) => from_blocking(q.get_with_hint(), lanes),
            (Kind::Priority(q), Wait::Never) => from_try(q.try_get_with_priority(), prio),
            (Kind::Priority(q), Wait::For(t)) => from_timed(q.get_with_priority_timeout(t), prio),
            (Kind::Priority(q), Wait::Forever) => from_blocking(q.get_with_priority(), prio),
        }
    }

    /// Give a got item a handle, or put it back if none is left.
    pub(super) fn hand_out(&self, got: Got) -> Result<apf_workqueue_item, apf_status> {
        let (key, lane, priority) = match got {
            Got::Item(key, lane, priority) => (key, lane, priority),
            Got::None(result) => return Ok(apf_workqueue_item::none(result)),
        };
        let (ptr, len) = (key.as_ptr(), key.len());
        match self.items.insert(key.clone()) {
            Ok(handle) => Ok(apf_workqueue_item {
                result: apf_workqueue_get_result::APF_WORKQUEUE_ITEM as u32,
                item: handle,
                key: ptr,
                key_len: len,
                lane,
                priority,
            }),
            Err(_) => {
                // Undo the get: done, then add again where it was.
                let _ = each!(&self.kind, q => q.done(&key));
                let request = AddRequest {
                    after: 0,
                    rate_limited: false,
                    lane: if lane == apf_workqueue_lane::APF_WORKQUEUE_LANE_SLOW as u32 {
                        Lane::Slow
                    } else {
                        Lane::Fast
                    },
                    priority: Some(priority),
                };
                self.add(key, &request);
                Err(fail(
                    apf_status::APF_ERR_TOO_MANY_REQUESTS,
                    "too many items processing at once (2^32): the item was queued again",
                ))
            }
        }
    }

    pub(super) fn done(&self, handle: u64) -> apf_status {
        let key = match self.items.remove(handle, Done) {
            Ok(key) => key,
            Err(Stale::Retired(Done)) => {
                return fail(
                    apf_status::APF_ERR_INVALID_HANDLE,
                    format_args!("item handle {handle:#x} is already done"),
                )
            }
            Err(Stale::Unknown) => {
                return fail(
                    apf_status::APF_ERR_INVALID_HANDLE,
                    format_args!(
                        "item handle {handle:#x} is unknown (never issued by this queue, or stale)"
                    ),
                )
            }
        };
        match each!(&self.kind, q => q.done(&key)) {
            Ok(()) => apf_status::APF_OK,
            // A live handle means its key is processing: this is a bug.
            Err(e) => fail(
                apf_status::APF_ERR_INVALID_HANDLE,
                format_args!("done: {e}"),
            ),
        }
    }

    pub(super) fn metrics(&self) -> WorkqueueMetrics {
        each!(&self.kind, q => q.metrics())
    }
}

/// A snapshot registered with a one-off exporter, so the text is exactly
/// what [`Exporter`] writes for a Rust workqueue.
struct Snapshot(WorkqueueMetrics);

impl WorkqueueSource for Snapshot {
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.0.clone()
    }
}

pub(super) fn metrics_text(metrics: WorkqueueMetrics) -> String {
    let exporter = Exporter::new();
    if !metrics.name.is_empty() {
        let snapshot = Arc::new(Snapshot(metrics));
        // A fresh exporter has no duplicate; an unnamed queue exports
        // nothing, as in client-go.
        let _ = exporter.register_workqueue(&snapshot);
        return exporter.text();
    }
    exporter.text()
}
