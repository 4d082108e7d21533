//! How much work a request brings: its seats while it executes, its seats
//! afterwards, and how long those later seats stay taken.
//!
//! The estimate is the caller's to give. [`WorkEstimator`] is Kubernetes'
//! default estimator as a helper, with inputs as plain facts about the
//! request (verb kind, object count and size, list options, number of
//! watchers) instead of an HTTP request:
//! - LIST (and WATCH that sends its initial events, like a LIST): seats
//!   from the objects the request will touch, by their size (Kubernetes'
//!   default since 1.34, `SizeBasedListCostEstimate`, maximum 100 seats)
//!   or by their count (maximum 10 seats);
//! - create, update, patch, delete: one seat while executing, then seats
//!   for the watchers the change will notify, held for a short extra time;
//! - anything else: the minimum.
//!
//! Every result is capped by the priority level's max seats
//! ([`level_max_seats`]) and by the configured maximum for its kind.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Seats a request occupies in its two phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkEstimate {
    /// Seats occupied while the request executes.
    pub initial_seats: u32,
    /// Seats occupied once it has finished, during `additional_latency`
    /// (zero for none).
    pub final_seats: u32,
    /// How long the final seats stay occupied after the request finished;
    /// the client does not wait for it.
    pub additional_latency: Duration,
}

impl WorkEstimate {
    /// An estimate of `initial_seats` while executing, then `final_seats` for
    /// `additional_latency`. Zero initial seats are taken as one when the request
    /// is admitted (every request occupies a seat).
    pub const fn new(initial_seats: u32, final_seats: u32, additional_latency: Duration) -> Self {
        WorkEstimate {
            initial_seats,
            final_seats,
            additional_latency,
        }
    }

    /// The most seats the request holds at any one time.
    pub const fn max_seats(&self) -> u32 {
        if self.initial_seats >= self.final_seats {
            self.initial_seats
        } else {
            self.final_seats
        }
    }

    const fn seats(initial_seats: u32) -> Self {
        WorkEstimate::new(initial_seats, 0, Duration::ZERO)
    }
}

/// Least seats any request occupies.
pub const DEFAULT_MINIMUM_SEATS: u32 = 1;
/// Most seats a LIST occupies under the size-based cost (the default).
pub const DEFAULT_MAXIMUM_LIST_SEATS: u32 = 100;
/// Most seats a LIST occupies under the count-based cost.
pub const COUNT_BASED_MAXIMUM_LIST_SEATS: u32 = 10;
/// Most seats a mutating request occupies.
pub const DEFAULT_MAXIMUM_MUTATING_SEATS: u32 = 10;
/// Count-based LIST cost: objects per seat.
pub const DEFAULT_OBJECTS_PER_SEAT: f64 = 100.0;
/// Size-based LIST cost: bytes held in memory per seat.
pub const DEFAULT_BYTES_PER_SEAT: u64 = 100_000;
/// Size-based LIST cost: a LIST served from the watch cache streams, so it
/// never counts more than this many bytes.
pub const DEFAULT_CACHE_MAX_MEMORY_BYTES: u64 = 1_000_000;
/// Size-based LIST cost: the object size assumed when none is known (the
/// largest request etcd accepts by default).
pub const DEFAULT_MAX_OBJECT_SIZE_BYTES: u64 = 1_500_000;
/// Object count assumed when the count went stale.
pub const STALE_OBJECT_COUNT: u64 = 1_000_000_000;
/// Mutating requests: watchers per final seat.
pub const DEFAULT_WATCHES_PER_SEAT: f64 = 10.0;
/// Mutating requests: extra time per notified event at one seat.
pub const DEFAULT_EVENT_ADDITIONAL_DURATION: Duration = Duration::from_millis(5);
/// The seats one request may hold at an exempt level: the most Kubernetes'
/// work estimator ever gives one request. Kubernetes tracks no per-level
/// cap for exempt levels, so its estimator falls back to its kind maximum
/// (LIST or mutating); an estimate handed to libapf from elsewhere is
/// capped the same way, so one request cannot claim billions of seats.
pub const EXEMPT_MAX_SEATS: u32 = if DEFAULT_MAXIMUM_LIST_SEATS > DEFAULT_MAXIMUM_MUTATING_SEATS {
    DEFAULT_MAXIMUM_LIST_SEATS
} else {
    DEFAULT_MAXIMUM_MUTATING_SEATS
};
/// A level's max seats are at most this fraction of its NominalCL.
pub const LEVEL_MAX_SEATS_FRACTION: f64 = 0.15;

/// How a LIST's cost is derived from the objects it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListCostModel {
    /// One seat per `objects_per_seat` objects processed (Kubernetes before
    /// 1.34, or with `SizeBasedListCostEstimate` off).
    ObjectCount,
    /// One seat per `bytes_per_seat` bytes held in memory at once
    /// (Kubernetes' default since 1.34).
    #[default]
    ObjectSize,
}

/// Parameters of the estimator, with Kubernetes' defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkEstimatorConfig {
    /// Least seats any request occupies (at least 1; Kubernetes: 1).
    pub minimum_seats: u32,
    /// Most seats a LIST or an initialising WATCH occupies, before the level's
    /// own cap (at least 1).
    pub maximum_list_seats: u32,
    /// Most final seats of a mutating request, before the level's own cap (at
    /// least 1).
    pub maximum_mutating_seats: u32,
    /// Whether a LIST costs by object count or by bytes in memory.
    pub list_cost_model: ListCostModel,
    /// Count-based LIST cost: objects processed per seat (finite, positive).
    pub objects_per_seat: f64,
    /// Size-based LIST cost: bytes held in memory per seat (at least 1).
    pub bytes_per_seat: u64,
    /// Size-based LIST cost: the most bytes a LIST served from the watch cache
    /// is counted for (it streams).
    pub cache_max_memory_bytes: u64,
    /// Size-based LIST cost: the object size assumed when the average is
    /// unknown or the count is stale.
    pub max_object_size_bytes: u64,
    /// Whether mutating requests get final seats for their watchers.
    pub mutating_enabled: bool,
    /// Mutating requests: watchers per final seat (finite, positive).
    pub watches_per_seat: f64,
    /// Mutating requests: how long one seat stays occupied per notified watch
    /// event; the final seats' additional latency is derived from it.
    pub event_additional_duration: Duration,
    /// Whether a WATCH that sends initial events costs like a LIST
    /// (Kubernetes' `WatchList` feature, on by default since 1.34); when
    /// off, every WATCH costs the minimum.
    pub watch_initialization_cost: bool,
    /// Whether the watch cache serves consistent (no resourceVersion)
    /// LISTs. Kubernetes decides this from what etcd supports; off here,
    /// which costs such LISTs as reads from storage.
    pub consistent_reads_from_cache: bool,
}

impl Default for WorkEstimatorConfig {
    fn default() -> Self {
        WorkEstimatorConfig {
            minimum_seats: DEFAULT_MINIMUM_SEATS,
            maximum_list_seats: DEFAULT_MAXIMUM_LIST_SEATS,
            maximum_mutating_seats: DEFAULT_MAXIMUM_MUTATING_SEATS,
            list_cost_model: ListCostModel::ObjectSize,
            objects_per_seat: DEFAULT_OBJECTS_PER_SEAT,
            bytes_per_seat: DEFAULT_BYTES_PER_SEAT,
            cache_max_memory_bytes: DEFAULT_CACHE_MAX_MEMORY_BYTES,
            max_object_size_bytes: DEFAULT_MAX_OBJECT_SIZE_BYTES,
            mutating_enabled: true,
            watches_per_seat: DEFAULT_WATCHES_PER_SEAT,
            event_additional_duration: DEFAULT_EVENT_ADDITIONAL_DURATION,
            watch_initialization_cost: true,
            consistent_reads_from_cache: false,
        }
    }
}

impl WorkEstimatorConfig {
    /// Kubernetes' defaults with the size-based LIST cost switched off:
    /// count-based cost, LISTs capped at 10 seats.
    pub fn count_based() -> Self {
        WorkEstimatorConfig {
            list_cost_model: ListCostModel::ObjectCount,
            maximum_list_seats: COUNT_BASED_MAXIMUM_LIST_SEATS,
            ..WorkEstimatorConfig::default()
        }
    }

    fn validate(&self) -> Result<(), WorkEstimatorConfigError> {
        use WorkEstimatorConfigError::*;
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if self.minimum_seats == 0 {
            return Err(ZeroMinimumSeats);
        }
        if self.maximum_list_seats == 0 || self.maximum_mutating_seats == 0 {
            return Err(ZeroMaximumSeats);
        }
        if !positive(self.objects_per_seat) {
            return Err(ObjectsPerSeat(self.objects_per_seat));
        }
        if !positive(self.watches_per_seat) {
            return Err(WatchesPerSeat(self.watches_per_seat));
        }
        if self.bytes_per_seat == 0 {
            return Err(ZeroBytesPerSeat);
        }
        Ok(())
    }
}

/// A [`WorkEstimatorConfig`] the estimator cannot use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WorkEstimatorConfigError {
    /// `minimum_seats` is 0.
    ZeroMinimumSeats,
    /// `maximum_list_seats` or `maximum_mutating_seats` is 0.
    ZeroMaximumSeats,
    /// `objects_per_seat` must be finite and positive.
    ObjectsPerSeat(f64),
    /// `watches_per_seat` must be finite and positive.
    WatchesPerSeat(f64),
    /// `bytes_per_seat` is 0.
    ZeroBytesPerSeat,
}

impl fmt::Display for WorkEstimatorConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use WorkEstimatorConfigError::*;
        match self {
            ZeroMinimumSeats => f.write_str("work estimator: minimum_seats must be at least 1"),
            ZeroMaximumSeats => f.write_str(
                "work estimator: maximum_list_seats and maximum_mutating_seats must be at least 1",
            ),
            ObjectsPerSeat(x) => write!(
                f,
                "work estimator: objects_per_seat must be finite and positive, not {x}"
            ),
            WatchesPerSeat(x) => write!(
                f,
                "work estimator: watches_per_seat must be finite and positive, not {x}"
            ),
            ZeroBytesPerSeat => f.write_str("work estimator: bytes_per_seat must be at least 1"),
        }
    }
}

impl Error for WorkEstimatorConfigError {}

/// What is known of the objects of the listed resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectStats {
    /// A recent count and average object size.
    Known {
        /// Objects of the resource.
        count: u64,
        /// Their average size in bytes; 0 when unknown (then
        /// `max_object_size_bytes` is assumed).
        average_size_bytes: u64,
    },
    /// The count stopped being updated: a sign of trouble, so assume the
    /// worst.
    Stale,
    /// No count: possibly a resource another server serves, so assume the
    /// least.
    NotFound,
    /// The count could not be read for another reason: assume the worst.
    Unavailable,
}

/// `resourceVersion` of a LIST or WATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResourceVersion {
    /// Not given: a consistent (most recent) read.
    #[default]
    Unset,
    /// `"0"`: any version.
    Zero,
    /// Any other value.
    Specific,
}

/// `resourceVersionMatch` of a LIST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResourceVersionMatch {
    /// Not given.
    #[default]
    Unset,
    /// `Exact`: exactly the given `resourceVersion` (read from storage).
    Exact,
    /// `NotOlderThan`: any version at least as new (the watch cache may serve
    /// it).
    NotOlderThan,
    /// A value the server does not know; the request will fail later.
    Unrecognized,
}

/// The list options that matter to the cost of a LIST or WATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// `resourceVersion`.
    pub resource_version: ResourceVersion,
    /// `resourceVersionMatch`.
    pub resource_version_match: ResourceVersionMatch,
    /// `limit`; 0 for none.
    pub limit: u64,
    /// Whether a `continue` token was given.
    pub has_continue: bool,
    /// Whether a label or field selector was given.
    pub has_selector: bool,
    /// `sendInitialEvents` of a WATCH, if given.
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Whether a LIST with these options goes to storage rather than the
    /// watch cache (Kubernetes' delegation rules for a cache without
    /// snapshots).
    pub fn reads_from_storage(&self, consistent_reads_from_cache: bool) -> bool {
        match self.resource_version_match {
            ResourceVersionMatch::Exact | ResourceVersionMatch::Unrecognized => true,
            ResourceVersionMatch::NotOlderThan => false,
            ResourceVersionMatch::Unset => {
                if self.has_continue {
                    return true;
                }
                match self.resource_version {
                    // An exact version with a limit: served from storage.
                    ResourceVersion::Specific => self.limit > 0,
                    ResourceVersion::Zero => false,
                    ResourceVersion::Unset => !consistent_reads_from_cache,
                }
            }
        }
    }

    /// Whether a WATCH with these options starts by sending the current
    /// objects: asked for explicitly, or a legacy watch from version 0 or
    /// from no version.
    pub fn watch_sends_initial_events(&self) -> bool {
        self.send_initial_events == Some(true)
            || matches!(
                self.resource_version,
                ResourceVersion::Unset | ResourceVersion::Zero
            )
    }
}

/// A LIST, or a WATCH that may start like one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListRequest {
    /// Its list options (they decide between watch cache and storage).
    pub options: ListOptions,
    /// The query could not be parsed into list options; the request will
    /// fail validation, and costs the maximum until then.
    pub malformed_options: bool,
    /// The request names one object (`metadata.name`), so storage reads
    /// just that one.
    pub single_object: bool,
    /// What is known of the resource's objects.
    pub stats: ObjectStats,
}

impl ListRequest {
    /// A LIST of every object of a resource with these stats.
    pub fn new(stats: ObjectStats) -> Self {
        ListRequest {
            options: ListOptions::default(),
            malformed_options: false,
            single_object: false,
            stats,
        }
    }
}

/// A create, update, patch or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutatingRequest {
    /// Watchers that may be interested in the change.
    pub watchers: u64,
    /// The request produces no watch event (see
    /// [`produces_no_watch_event`]).
    pub produces_no_event: bool,
}

/// The request kinds the estimator distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRequest {
    /// A LIST.
    List(ListRequest),
    /// A WATCH (costs like a LIST while it sends initial events, if enabled).
    Watch(ListRequest),
    /// A create, update, patch or delete: final seats for its watchers.
    Mutating(MutatingRequest),
    /// Any other verb (get, proxy, non-resource requests...).
    Other,
    /// Nothing is known of the request: it costs the maximum.
    Unknown,
}

/// Kubernetes' exception to watch-event costs: creating a service account
/// token changes no stored object.
pub fn produces_no_watch_event(resource: &str, subresource: &str) -> bool {
    resource == "serviceaccounts" && subresource == "token"
}

/// A priority level's cap on the seats of one request:
/// max(1, min(ceil(0.15 · NominalCL), NominalCL / handSize)), so one
/// request never holds more than a hand's fair part of the level. A hand
/// size of zero counts as one. Kubernetes tracks no cap (0 here) for
/// levels that do not queue.
pub fn level_max_seats(nominal_cl: u32, hand_size: u32) -> u32 {
    let by_fraction = (f64::from(nominal_cl) * LEVEL_MAX_SEATS_FRACTION).ceil();
    let by_hand = f64::from(nominal_cl / hand_size.max(1));
    by_fraction.min(by_hand).max(1.0) as u32
}

/// Kubernetes' default work estimator (see the module documentation).
///
/// ```
/// use apf::work_estimate::*;
///
/// let estimator = WorkEstimator::default();
/// // A LIST of 2 000 objects of 5 kB each from the watch cache
/// // (resourceVersion=0): 10 MB, streamed, counted as 1 MB, 10 seats.
/// let mut list = ListRequest::new(ObjectStats::Known { count: 2_000, average_size_bytes: 5_000 });
/// list.options.resource_version = ResourceVersion::Zero;
/// let level_cap = level_max_seats(98, 6); // node-high at 600 seats: 15
/// assert_eq!(estimator.estimate(&WorkRequest::List(list), level_cap).initial_seats, 10);
/// // An update that 45 watchers will hear of: 5 final seats for 5 ms.
/// let update = WorkRequest::Mutating(MutatingRequest { watchers: 45, produces_no_event: false });
/// let w = estimator.estimate(&update, level_cap);
/// assert_eq!((w.initial_seats, w.final_seats), (1, 5));
/// assert_eq!(w.additional_latency, std::time::Duration::from_millis(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WorkEstimator {
    config: WorkEstimatorConfig,
}

impl WorkEstimator {
    /// An estimator with `config`, or the first reason it is unusable (zero
    /// seats or bytes per seat, a non-finite or non-positive ratio).
    pub fn new(config: WorkEstimatorConfig) -> Result<Self, WorkEstimatorConfigError> {
        config.validate()?;
        Ok(WorkEstimator { config })
    }

    /// The parameters it estimates with.
    pub fn config(&self) -> &WorkEstimatorConfig {
        &self.config
    }

    /// The estimate for `request` at a priority level whose max seats
    /// ([`level_max_seats`]) are `level_max_seats`; 0 means no level cap.
    pub fn estimate(&self, request: &WorkRequest, level_max_seats: u32) -> WorkEstimate {
        match request {
            WorkRequest::List(list) => self.list(list, level_max_seats),
            WorkRequest::Watch(watch) => self.watch(watch, level_max_seats),
            WorkRequest::Mutating(m) => self.mutating(m, level_max_seats),
            WorkRequest::Other => WorkEstimate::seats(self.config.minimum_seats),
            WorkRequest::Unknown => {
                let limit = self
                    .config
                    .maximum_list_seats
                    .max(self.config.maximum_mutating_seats);
                WorkEstimate::seats(cap(level_max_seats, limit))
            }
        }
    }

    /// The estimate for a LIST.
    pub fn list(&self, request: &ListRequest, level_max_seats: u32) -> WorkEstimate {
        let from_cache = !request
            .options
            .reads_from_storage(self.config.consistent_reads_from_cache);
        self.list_like(request, from_cache, level_max_seats)
    }

    /// The estimate for a WATCH: like a LIST served from the cache while it
    /// sends initial events, the minimum otherwise.
    pub fn watch(&self, request: &ListRequest, level_max_seats: u32) -> WorkEstimate {
        let minimum = WorkEstimate::seats(self.config.minimum_seats);
        if !self.config.watch_initialization_cost {
            return minimum;
        }
        if !request.malformed_options && !request.options.watch_sends_initial_events() {
            return minimum;
        }
        self.list_like(request, true, level_max_seats)
    }

    fn list_like(&self, request: &ListRequest, from_cache: bool, level_max: u32) -> WorkEstimate {
        let min_seats = u64::from(self.config.minimum_seats);
        let max_seats = cap(level_max, self.config.maximum_list_seats);
        if request.malformed_options {
            return WorkEstimate::seats(max_seats);
        }
        let (count, average_size_bytes) = match request.stats {
            ObjectStats::Known {
                count,
                average_size_bytes,
            } => (count, average_size_bytes),
            ObjectStats::NotFound => return WorkEstimate::seats(self.config.minimum_seats),
            ObjectStats::Stale | ObjectStats::Unavailable => {
                (STALE_OBJECT_COUNT, self.config.max_object_size_bytes)
            }
        };
        let seats = match self.config.list_cost_model {
            ListCostModel::ObjectCount => self.seats_by_object_count(
                count,
                &request.options,
                from_cache,
                request.single_object,
            ),
            ListCostModel::ObjectSize => self.seats_by_object_size(
                count,
                average_size_bytes,
                &request.options,
                from_cache,
                request.single_object,
            ),
        };
        let seats = seats.max(min_seats).min(u64::from(max_seats));
        WorkEstimate::seats(seats as u32)
    }

    /// Count-based LIST seats before the minimum and maximum apply: one
    /// seat per `objects_per_seat` objects the request processes.
    pub fn seats_by_object_count(
        &self,
        count: u64,
        options: &ListOptions,
        from_cache: bool,
        single_object: bool,
    ) -> u64 {
        let returned = limited(count, options.limit);
        let processed = if single_object {
            1
        } else if from_cache {
            count
        } else if options.has_selector {
            // Storage reads everything and filters, page after page.
            count.saturating_add(returned)
        } else {
            returned.saturating_mul(2)
        };
        (processed as f64 / self.config.objects_per_seat).ceil() as u64
    }

    /// Size-based LIST seats before the minimum and maximum apply: one seat
    /// per `bytes_per_seat` bytes the request holds in memory at once.
    pub fn seats_by_object_size(
        &self,
        count: u64,
        average_size_bytes: u64,
        options: &ListOptions,
        from_cache: bool,
        single_object: bool,
    ) -> u64 {
        let size = if average_size_bytes == 0 && count != 0 {
            self.config.max_object_size_bytes
        } else {
            average_size_bytes
        };
        let returned = limited(count, options.limit);
        let in_memory = if single_object {
            1
        } else if !from_cache && options.has_selector {
            returned.max(count / 2)
        } else {
            returned
        };
        let mut bytes = u128::from(in_memory) * u128::from(size);
        if from_cache {
            bytes = bytes.min(u128::from(self.config.cache_max_memory_bytes));
        }
        let seats = bytes.div_ceil(u128::from(self.config.bytes_per_seat));
        u64::try_from(seats).unwrap_or(u64::MAX)
    }

    /// The estimate for a create, update, patch or delete: one seat while
    /// executing; then, once enough watchers listen, one seat per
    /// `watches_per_seat` watchers for `event_additional_duration`, the
    /// same work reshaped narrower and longer when the seats are capped.
    pub fn mutating(&self, request: &MutatingRequest, level_max_seats: u32) -> WorkEstimate {
        let minimum = WorkEstimate::seats(self.config.minimum_seats);
        if !self.config.mutating_enabled || request.produces_no_event {
            return minimum;
        }
        let max_seats = cap(level_max_seats, self.config.maximum_mutating_seats);
        let per_seat = self.config.watches_per_seat;
        // Kubernetes compares with the whole part of watches_per_seat.
        if (request.watchers as f64) < per_seat.trunc() {
            return WorkEstimate::new(1, 0, Duration::ZERO);
        }
        let seats = (request.watchers as f64 / per_seat).ceil();
        let work = seat_seconds(seats, self.config.event_additional_duration);
        let final_seats = seats.min(f64::from(max_seats));
        // Kubernetes' executing phase is one seat here, whatever the
        // configured minimum.
        WorkEstimate::new(1, final_seats as u32, duration_per_seat(work, final_seats))
    }
}

/// The level's cap if it has one and it is lower than `limit`.
fn cap(level_max_seats: u32, limit: u32) -> u32 {
    if level_max_seats == 0 || level_max_seats > limit {
        limit
    } else {
        level_max_seats
    }
}

fn limited(count: u64, limit: u64) -> u64 {
    if limit > 0 && limit < count {
        limit
    } else {
        count
    }
}

/// Work in Kubernetes' fixed-point seat-seconds (units of 1e-8), rounded
/// as Kubernetes rounds, so the reshaped latency matches it to the
/// nanosecond.
fn seat_seconds(seats: f64, d: Duration) -> f64 {
    (seats * d.as_nanos() as f64 / 10.0).round()
}

fn duration_per_seat(seat_seconds: f64, seats: f64) -> Duration {
    if seats <= 0.0 {
        return Duration::ZERO;
    }
    // Truncated to whole nanoseconds, as Go's conversion does.
    Duration::from_nanos((seat_seconds / seats * 10.0) as u64)
}

#[cfg(all(test, not(loom)))]
mod tests;
