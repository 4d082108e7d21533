//! Metrics and debug dumps: Kubernetes' API Priority and Fairness metrics
//! and client-go's workqueue metrics in the Prometheus/OpenMetrics text
//! format, and the text tables of Kubernetes'
//! `/debug/api_priority_and_fairness/dump_*` endpoints.
//!
//! # Where the numbers come from
//! Nothing here counts on the admission hot path. Each level tallies its
//! requests by flow schema where it already keeps its state (see
//! [`crate::level`] and [`crate::stats::TagStats`]); a scrape reads those
//! tallies (replaying each level's event ring first), the borrowing
//! adjuster's last report, and the registered workqueues' snapshots, and
//! only then formats them. So a scrape costs one short lock per level and
//! per workqueue, and the exposition always shows each level at one moment
//! (a level's counters, gauges and histograms agree with each other).
//!
//! # Cardinality
//! Labels are only the priority level, the flow schema and the rejection
//! reason (plus `execute`, `type`, `phase`, `request_kind`, `bound` and
//! `le`, which take a fixed few values),
//! and only the (level, schema) pairs the configuration routes requests
//! through appear (Kubernetes issue 108272), plus, until the level goes
//! away, pairs a reconfiguration left with counts. A series that cannot be
//! nonzero for a level is left out: exempt levels have no queues, waits or
//! rejections, a level that does not queue has no queue lengths. Histogram
//! series (16 each) appear once they have an observation, as in Kubernetes.
//! Kubernetes' built-in configuration (8 levels, 11 flow schemas, so 11
//! pairs) makes [`BUILTIN_CONFIG_SERIES`] (153) series on an idle server and
//! at most 1,298 once every pair has seen every kind of request and time
//! has passed at every level; `tests/metrics/cardinality.rs` counts them.
//!
//! # Time-weighted utilization
//! `priority_level_seat_utilization` and `priority_level_request_utilization`
//! are Kubernetes' timing-ratio histograms: the ratio (seats in use over the
//! level's current limit; requests executing over it; requests waiting over
//! queue length limit × queues) observed at the end of every nanosecond,
//! so a bucket counts nanoseconds and `_sum` is the ratio's integral over
//! nanoseconds. `rate(..._sum[5m]) / rate(..._count[5m])` is the mean
//! utilization. A level's core adds the time since its last change at each
//! change, under its lock (never on the hot path); a scrape adds the time
//! since then. A limit of 0 counts as 1 (Kubernetes uses a tenth of the
//! server's limit there).
//!
//! # Names and labels
//! By default the names are Kubernetes' (`apiserver_flowcontrol_...`,
//! `workqueue_...`). [`Exporter::with_options`] takes a prefix for every
//! name and constant labels for every series ([`ExpositionOptions`]), for a
//! service that is not an API server or runs several dispatchers.
//!
//! # Format
//! [`Dispatcher::metrics_text`] and [`Exporter::text`] write the
//! OpenMetrics 1.0 text format with the `prometheus-client` crate; serve it
//! with [`CONTENT_TYPE`]. Metric names and bucket bounds are Kubernetes';
//! counters are written as `<name>_total`, as Kubernetes names them.
//!
//! # Server-wide requests by kind
//! `read_vs_write_current_requests` is Kubernetes' timing-ratio histogram of
//! the server's requests waiting in queues and executing, by
//! `request_kind` (`readOnly` for the verbs `get`, `list` and `watch`,
//! `mutating` for every other, as Kubernetes decides), in raw counts as
//! under API Priority and Fairness. The kind rides in the request's tag
//! (see [`crate::stats::ReadWriteHandle`]), so the hot path pays nothing for
//! it; the levels report it when they replay their rings.
//!
//! # Virtual time and demand
//! `current_r`, `dispatch_r`, `latest_s`, `next_s_bounds` and
//! `next_discounted_s_bounds` (levels that queue; the last three from the
//! first dispatch on) are in seat-seconds; the bounds are computed at the
//! scrape, over the queues with waiting requests then.
//! `demand_seats` is the time-weighted seat demand (seats in use plus
//! seats waiting) over NominalCL, per level.
//!
//! # The adaptive limit
//! With [`crate::adaptive`] on, libapf's own gauges (not Kubernetes'):
//! `adaptive_server_concurrency_limit` (the total the levels share now),
//! `adaptive_limit_estimate` (the smoothed total a probe returns to),
//! `adaptive_min_latency_seconds` (the last probe's measure, once there is
//! one), `adaptive_latency_seconds` (the last window's mean execution time),
//! `adaptive_gradient`, `adaptive_probing` (1 during a probe), and the
//! counter `adaptive_probes`. None of them exist when it is off.
//!
//! # Left out
//! The deprecated `request_concurrency_limit` and
//! `request_concurrency_in_use` (use `nominal_limit_seats` and
//! `current_executing_seats`) and the metrics of request kinds libapf does
//! not know (`watch_count_samples`, `epoch_advance_total`).
//! `request_execution_seconds` has `type="regular"` only (libapf does not
//! tell watches apart).

mod dump;
mod encode;

use crate::borrowing::SeatDemandStats;
use crate::dispatcher::Dispatcher;
use crate::level::Level;
use crate::queueset::vtime::to_seat_seconds;
use crate::queueset::{DispatchGauges, RejectReason};
use crate::stats::{RatioHistogram, ReadVsWrite, TagStats, Utilization};
use crate::sync::{lock, Arc, Mutex};
use crate::workqueue::DelayingQueue;
use crate::workqueue::{
    Item, PriorityQueue, QueueStrategy, RateLimitingQueue, Workqueue, WorkqueueMetrics,
};
use std::fmt;
use std::sync::Weak;

/// The HTTP `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Series the exposition of an idle dispatcher on Kubernetes' built-in
/// configuration has (counted by `tests/metrics/cardinality.rs`; at most 1,298 when every
/// histogram has observations).
pub const BUILTIN_CONFIG_SERIES: usize = 153;

/// One priority level's figures at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelMetrics {
    /// The level's name (the `priority_level` label).
    pub name: String,
    /// Whether the level is exempt.
    pub exempt: bool,
    /// Whether the level queues (limited, with queues).
    pub queuing: bool,
    /// NominalCL, as borrowing computed it (seats).
    pub nominal_limit_seats: u32,
    /// MinCL: the seats the level never lends.
    pub lower_limit_seats: u32,
    /// MaxCL: NominalCL plus what it may borrow.
    pub upper_limit_seats: u32,
    /// CurrentCL: its concurrency limit now.
    pub current_limit_seats: u32,
    /// The seat-demand statistics of the last adjustment period.
    pub demand: SeatDemandStats,
    /// Borrowing's target for the level.
    pub target_seats: f64,
    /// The level's virtual time, in seat-seconds (levels that queue).
    pub current_r: Option<f64>,
    /// Kubernetes' other virtual-time gauges (levels that queue, once one
    /// of their requests was dispatched), in seat-seconds.
    pub dispatch: Option<DispatchMetrics>,
    /// Seat demand over NominalCL, time-weighted (`demand_seats`).
    pub demand_seats: Option<RatioHistogram<12>>,
    /// Time-weighted seat and request utilization (limited levels).
    pub utilization: Option<Utilization>,
    /// Per flow schema routed here (or that left counts here).
    pub schemas: Vec<SchemaMetrics>,
}

/// Kubernetes' virtual-time gauges of a level, in seat-seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatchMetrics {
    /// R at the last dispatch (`dispatch_r`).
    pub dispatch_r: f64,
    /// S of the last dispatched request (`latest_s`).
    pub latest_s: f64,
    /// Min and max over queues of their oldest waiting request's S
    /// (`next_s_bounds`).
    pub next_s_bounds: (f64, f64),
    /// The same less each queue's estimated work in progress
    /// (`next_discounted_s_bounds`).
    pub next_discounted_s_bounds: (f64, f64),
}

impl From<DispatchGauges> for DispatchMetrics {
    fn from(g: DispatchGauges) -> Self {
        let s = to_seat_seconds;
        DispatchMetrics {
            dispatch_r: s(g.dispatch_r),
            latest_s: s(g.latest_s),
            next_s_bounds: (s(g.next_s.0), s(g.next_s.1)),
            next_discounted_s_bounds: (s(g.next_discounted_s.0), s(g.next_discounted_s.1)),
        }
    }
}

/// One (level, flow schema) pair's tallies.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaMetrics {
    /// The flow schema's name (the `flow_schema` label).
    pub name: String,
    /// Its requests' counts and histograms at this level.
    pub stats: TagStats,
}

/// The API Priority and Fairness figures of one dispatcher at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowcontrolMetrics {
    /// Borrowing's fair share of seats (Kubernetes' `seat_fair_frac`).
    pub seat_fair_frac: f64,
    /// Levels in configuration order.
    pub levels: Vec<LevelMetrics>,
    /// Every level's requests waiting and executing, by kind
    /// (`read_vs_write_current_requests`).
    pub read_vs_write: Option<ReadVsWrite>,
    /// The adaptive server concurrency limit, when it is on (the
    /// `adaptive_*` series; none otherwise).
    pub adaptive: Option<crate::adaptive::AdaptiveReport>,
}

impl Dispatcher {
    /// The figures every APF metric is made of, read now.
    pub fn metrics(&self) -> FlowcontrolMetrics {
        let report = self.borrowing().report();
        let (levels, routes) = self.routing();
        let levels = levels
            .iter()
            .enumerate()
            .map(|(i, level)| {
                let borrowing = report.levels.iter().find(|l| l.name == level.name);
                let routed: Vec<u32> = routes
                    .iter()
                    .filter(|(_, l)| *l == i)
                    .map(|(id, _)| *id)
                    .collect();
                let queuing = level.queueset().filter(|qs| qs.config().queues > 0);
                LevelMetrics {
                    name: level.name.clone(),
                    exempt: level.is_exempt(),
                    queuing: queuing.is_some(),
                    nominal_limit_seats: borrowing.map_or(0, |b| b.limits.nominal_cl),
                    lower_limit_seats: borrowing.map_or(0, |b| b.limits.min_cl()),
                    upper_limit_seats: borrowing.map_or(0, |b| b.limits.max_cl()),
                    current_limit_seats: borrowing.map_or(0, |b| b.current_cl),
                    demand: borrowing.map(|b| b.stats).unwrap_or_default(),
                    target_seats: borrowing.map_or(0.0, |b| b.target),
                    current_r: queuing.map(|qs| to_seat_seconds(qs.current_r())),
                    dispatch: queuing.and_then(|qs| qs.dispatch_gauges()).map(Into::into),
                    demand_seats: self
                        .borrowing()
                        .seat_demand_by_name(&level.name)
                        .map(|d| d.with(|d| d.demand_ratio_at(self.clock().now()))),
                    utilization: level.queueset().map(|qs| qs.utilization()),
                    schemas: self.schema_metrics(level, &routed),
                }
            })
            .collect();
        FlowcontrolMetrics {
            seat_fair_frac: report.fair_prop,
            levels,
            // After the levels: reading them replayed their rings, which
            // reported their changes.
            read_vs_write: Some(self.read_write.snapshot(self.clock().now())),
            adaptive: self.adaptive(),
        }
    }

    /// The exposition of this dispatcher's metrics (OpenMetrics text; see
    /// the [module documentation](crate::metrics)).
    pub fn metrics_text(&self) -> String {
        encode::text(Some(&self.metrics()), &[], &ExpositionOptions::default())
    }

    /// The exposition with a name prefix and constant labels (see
    /// [`ExpositionOptions`]); an invalid option is an error naming it.
    pub fn metrics_text_with(&self, options: &ExpositionOptions) -> Result<String, String> {
        options.validate()?;
        Ok(encode::text(Some(&self.metrics()), &[], options))
    }

    /// The pairs of `level`: the schemas routed to it, and any other schema
    /// that left counts there.
    fn schema_metrics(&self, level: &Level, routed: &[u32]) -> Vec<SchemaMetrics> {
        let mut tallies = level.tag_stats();
        for &id in routed {
            if !tallies.iter().any(|(tag, _)| *tag == id) {
                tallies.push((id, TagStats::default()));
            }
        }
        tallies.retain(|(tag, stats)| routed.contains(tag) || !stats.is_untouched());
        tallies.sort_by_key(|(tag, _)| *tag);
        tallies
            .into_iter()
            .map(|(tag, stats)| SchemaMetrics {
                name: self
                    .schema_name(tag)
                    .unwrap_or_else(|| format!("unknown-{tag}")),
                stats,
            })
            .collect()
    }
}

/// Anything that reports client-go's workqueue metrics.
pub trait WorkqueueSource: Send + Sync {
    /// The queue's metrics now (depth, adds, latencies, ...), labelled with its
    /// name.
    fn workqueue_metrics(&self) -> WorkqueueMetrics;
}

impl<T: Item, S: QueueStrategy<T>> WorkqueueSource for Workqueue<T, S>
where
    Self: Send + Sync,
{
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.metrics()
    }
}

impl<T: Item, S: QueueStrategy<T>> WorkqueueSource for DelayingQueue<T, S>
where
    Self: Send + Sync,
{
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.metrics()
    }
}

impl<T: Item, S: QueueStrategy<T>> WorkqueueSource for RateLimitingQueue<T, S>
where
    Self: Send + Sync,
{
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.metrics()
    }
}

impl<T: Item> WorkqueueSource for PriorityQueue<T>
where
    Self: Send + Sync,
{
    fn workqueue_metrics(&self) -> WorkqueueMetrics {
        self.metrics()
    }
}

/// Why a workqueue could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The queue has no name (client-go exports no metrics for unnamed
    /// queues: the name is their only label).
    Unnamed,
    /// A live queue of this name is already registered.
    Duplicate(String),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::Unnamed => f.write_str("a workqueue needs a name to export metrics"),
            RegisterError::Duplicate(name) => {
                write!(f, "a workqueue named {name:?} is already registered")
            }
        }
    }
}

impl std::error::Error for RegisterError {}

struct Registered {
    name: String,
    queue: Weak<dyn WorkqueueSource>,
}

/// How an [`Exporter`] names and labels its series: a service embedding
/// libapf is not an API server, and may run several dispatchers in one
/// process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpositionOptions {
    /// Prepended, with `_`, to every metric name: `shop` gives
    /// `shop_apiserver_flowcontrol_rejected_requests_total` and
    /// `shop_workqueue_depth`. Letters, digits and `_`, not starting with a
    /// digit.
    pub prefix: Option<String>,
    /// Labels with fixed values added to every series (`instance_role="api"`,
    /// `dispatcher="public"`), so cardinality does not grow. Names as
    /// Prometheus allows them, and none of the labels the metrics use
    /// themselves.
    pub const_labels: Vec<(String, String)>,
}

/// The labels the exposition uses itself; a constant label may not take
/// one of these names.
const OWN_LABELS: [&str; 10] = [
    "priority_level",
    "phase",
    "request_kind",
    "bound",
    "flow_schema",
    "reason",
    "execute",
    "type",
    "le",
    "name",
];

impl ExpositionOptions {
    /// Checks the prefix and every constant label; the error names the one
    /// at fault.
    pub fn validate(&self) -> Result<(), String> {
        fn valid_name(name: &str) -> bool {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        if let Some(prefix) = &self.prefix {
            if !valid_name(prefix) {
                return Err(format!(
                    "metrics prefix {:?}: must be letters, digits and _, not starting with a digit",
                    crate::input::clip(prefix, 64)
                ));
            }
        }
        let mut seen = Vec::new();
        for (name, _) in &self.const_labels {
            let quoted = crate::input::clip(name, 64);
            if !valid_name(name) || name.starts_with("__") {
                return Err(format!(
                    "constant label {quoted:?}: must be letters, digits and _, not starting with a digit or __"
                ));
            }
            if OWN_LABELS.contains(&name.as_str()) {
                return Err(format!(
                    "constant label {quoted:?}: the metrics use this label themselves"
                ));
            }
            if seen.contains(&name) {
                return Err(format!("constant label {quoted:?}: given twice"));
            }
            seen.push(name);
        }
        Ok(())
    }
}

/// Exports a dispatcher's metrics and the metrics of named workqueues in
/// one exposition. Workqueues are held weakly: a dropped queue leaves the
/// exposition at the next scrape.
#[derive(Default)]
pub struct Exporter {
    dispatcher: Option<Arc<Dispatcher>>,
    queues: Mutex<Vec<Registered>>,
    options: ExpositionOptions,
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = lock(&self.queues).iter().map(|r| r.name.clone()).collect();
        f.debug_struct("Exporter")
            .field("dispatcher", &self.dispatcher.is_some())
            .field("workqueues", &names)
            .finish()
    }
}

impl Exporter {
    /// An exporter of workqueues only.
    pub fn new() -> Exporter {
        Exporter::default()
    }

    /// An exporter of `dispatcher`'s metrics (and of the workqueues
    /// registered later).
    pub fn with_dispatcher(dispatcher: Arc<Dispatcher>) -> Exporter {
        Exporter {
            dispatcher: Some(dispatcher),
            queues: Mutex::new(Vec::new()),
            options: ExpositionOptions::default(),
        }
    }

    /// This exporter with a name prefix and constant labels (see
    /// [`ExpositionOptions`]); an invalid option is an error naming it.
    pub fn with_options(mut self, options: ExpositionOptions) -> Result<Exporter, String> {
        options.validate()?;
        self.options = options;
        Ok(self)
    }

    /// Export `queue`'s metrics under the name it was built with.
    pub fn register_workqueue<Q: WorkqueueSource + 'static>(
        &self,
        queue: &Arc<Q>,
    ) -> Result<(), RegisterError> {
        let name = queue.workqueue_metrics().name;
        if name.is_empty() {
            return Err(RegisterError::Unnamed);
        }
        let mut queues = lock(&self.queues);
        queues.retain(|r| r.queue.strong_count() > 0);
        if queues.iter().any(|r| r.name == name) {
            return Err(RegisterError::Duplicate(name));
        }
        let weak: Weak<Q> = Arc::downgrade(queue);
        queues.push(Registered { name, queue: weak });
        Ok(())
    }

    /// Stop exporting the queue called `name`; false if none was.
    pub fn unregister_workqueue(&self, name: &str) -> bool {
        let mut queues = lock(&self.queues);
        let before = queues.len();
        queues.retain(|r| r.name != name);
        queues.len() != before
    }

    /// The names of the live registered workqueues.
    pub fn workqueue_names(&self) -> Vec<String> {
        let mut queues = lock(&self.queues);
        queues.retain(|r| r.queue.strong_count() > 0);
        queues.iter().map(|r| r.name.clone()).collect()
    }

    /// The exposition (OpenMetrics text; see the
    /// [module documentation](crate::metrics)).
    pub fn text(&self) -> String {
        let flow = self.dispatcher.as_ref().map(|d| d.metrics());
        // Take the snapshots outside the registry's lock: each takes its
        // queue's lock.
        let sources: Vec<Arc<dyn WorkqueueSource>> = {
            let mut queues = lock(&self.queues);
            queues.retain(|r| r.queue.strong_count() > 0);
            queues.iter().filter_map(|r| r.queue.upgrade()).collect()
        };
        let queues: Vec<WorkqueueMetrics> = sources.iter().map(|q| q.workqueue_metrics()).collect();
        encode::text(flow.as_ref(), &queues, &self.options)
    }
}

/// The rejection reasons whose series a level shows even at zero: those it
/// can produce.
fn possible_reasons(level: &LevelMetrics) -> &'static [RejectReason] {
    match (level.exempt, level.queuing) {
        (true, _) => &[],
        (false, true) => &[
            RejectReason::QueueFull,
            RejectReason::TimeOut,
            RejectReason::Cancelled,
        ],
        (false, false) => &[RejectReason::ConcurrencyLimit],
    }
}

/// The bucket bounds of the APF duration histograms, in seconds.
pub const DURATION_BUCKETS_SECONDS: [f64; 13] = crate::stats::DURATION_BUCKETS_SECONDS;

/// The bucket bounds of the queue-length histogram.
pub const QUEUE_LENGTH_BUCKETS: [f64; 8] = crate::stats::QUEUE_LENGTH_BUCKETS;

/// The bucket bounds of `work_estimated_seats`.
pub const WORK_SEATS_BUCKETS: [f64; 4] = crate::stats::WORK_SEATS_BUCKETS;

/// The bucket bounds of `priority_level_seat_utilization`.
pub const SEAT_UTILIZATION_BUCKETS: [f64; 13] = crate::stats::SEAT_UTILIZATION_BUCKETS;

/// The bucket bounds of `priority_level_request_utilization`.
pub const REQUEST_UTILIZATION_BUCKETS: [f64; 10] = crate::stats::REQUEST_UTILIZATION_BUCKETS;
