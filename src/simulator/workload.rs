//! The workload file: what clients send to the simulated server, in YAML.
//! The format is documented in `docs/workload-format.md`; this module reads
//! it into a checked [`Workload`], or says which field is wrong and why.
//!
//! Reading happens in two steps: the YAML is read into a tree and serde
//! decodes that into the `raw` types (unknown fields are errors, so a typo
//! never passes silently; the error names the field's path), then
//! [`Workload::from_raw`] checks values and ranges, collecting every error
//! with its field path.

use crate::classification::OwnedDigest;
use crate::input::{self, clip};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// Upper bounds that keep a workload file from asking for more memory or
/// time than a simulator run can give, checked before anything is built.
pub mod limits {
    use std::time::Duration;
    /// Simulated time.
    pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
    /// Flow entries in one file.
    pub const MAX_FLOWS: usize = 10_000;
    /// Replicas over all flows.
    pub const MAX_REPLICAS: u64 = 1_000_000;
    /// Closed-loop clients over all flows and replicas.
    pub const MAX_CLIENTS: u64 = 10_000_000;
    /// Requests of all bursts, over all replicas.
    pub const MAX_BURST_REQUESTS: u64 = 100_000_000;
    /// Bursts over all replicas (each replica keeps its own state per burst).
    pub const MAX_BURSTS: u64 = 1_000_000;
    /// Points of each time series (duration / sample interval).
    pub const MAX_SAMPLES: u64 = 100_000;
    /// Phases or bursts of one flow.
    pub const MAX_EVENTS_PER_FLOW: usize = 10_000;
    /// Arrival rate of one replica, requests per second.
    pub const MAX_RATE: f64 = 1e9;
    /// Seats of one request.
    pub const MAX_SEATS: u32 = 1_000_000;
    /// Server concurrency limit.
    pub const MAX_CONCURRENCY: u32 = 1_000_000;
}

/// A checked workload, ready to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Empty when the file gives none.
    pub name: String,
    /// Free text, printed with the report.
    pub description: String,
    /// Simulated time.
    pub duration: Duration,
    /// Seed of every random choice; `apf simulate --seed` overrides it.
    pub seed: u64,
    /// The dispatcher's settings.
    pub server: Server,
    /// How the backend's latency grows with the requests it executes;
    /// `None`: service times do not depend on load.
    pub backend: Option<Backend>,
    /// Resolution of the time series (charts).
    pub sample_interval: Duration,
    /// A flow with `expect: served` passes when it got at least this
    /// fraction of its demand.
    pub served_fraction: f64,
    /// The flow entries, in file order (at least one).
    pub flows: Vec<Flow>,
}

/// The server's settings (the dispatcher's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Seats shared by all levels (`DispatcherOptions::server_concurrency_limit`).
    pub concurrency_limit: u32,
    /// Fair queuing's initial service-time guess G.
    pub service_time_guess: Duration,
    /// The longest a request waits in a queue before it is rejected.
    pub wait_limit: Duration,
    /// How often borrowing between levels recomputes their limits.
    pub borrowing_period: Duration,
    /// The adaptive server concurrency limit (`DispatcherOptions::adaptive`),
    /// if on; `concurrencyLimit` is then the total it starts from.
    pub adaptive: Option<crate::adaptive::AdaptiveOptions>,
}

/// A backend that slows down under concurrency: with `n` requests
/// executing (every level's, exempt ones included) and capacity `K`, a
/// request that starts takes its sampled service time × `slowdown(n)`:
/// 1 for `n ≤ K`, else `n/K × (1 + overload × (n/K − 1))`. With `overload`
/// 0 that is processor sharing (throughput flat beyond K, latency growing
/// with n); above 0 the backend also loses throughput to contention, as a
/// server thrashing on locks, memory or a saturated dependency does. The
/// slowdown is fixed when the request starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// K: the requests it executes at full speed.
    pub capacity: u32,
    /// The extra slowdown per unit of `n/K − 1` (0 ..= 100).
    pub overload: f64,
    /// Capacity changes over time, in increasing order of `at`.
    pub phases: Vec<BackendPhase>,
}

/// From `at` on, the backend's capacity is `capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendPhase {
    /// Simulated time the phase starts at.
    pub at: Duration,
    /// K from then on.
    pub capacity: u32,
}

impl Backend {
    /// The capacity at `at`.
    pub fn capacity_at(&self, at: Duration) -> u32 {
        self.phases
            .iter()
            .rev()
            .find(|p| p.at <= at)
            .map_or(self.capacity, |p| p.capacity)
    }

    /// How many times its unloaded service time a request takes that
    /// starts with `n` requests executing (itself included) at capacity `k`.
    pub fn slowdown(&self, n: u64, k: u32) -> f64 {
        let k = f64::from(k.max(1));
        let x = n as f64 / k;
        if x <= 1.0 {
            1.0
        } else {
            x * (1.0 + self.overload * (x - 1.0))
        }
    }
}

/// One flow entry: `replicas` flows alike but for `{i}` in their strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// The entry's name in the report (unique in the workload).
    pub name: String,
    /// How many flows the entry stands for (1 or more).
    pub replicas: u32,
    /// Who sends and what: classification's input, with `{i}` standing
    /// for the replica's index (0-based) in every string; the path is
    /// derived from the other fields for a resource request.
    pub request: OwnedDigest,
    /// How its requests arrive: open or closed loop.
    pub arrival: Arrival,
    /// How long a closed-loop client waits after a rejection before it
    /// tries again (Kubernetes answers 429 with `Retry-After: 1`).
    pub retry_after: Duration,
    /// How long a request executes once it has its seats.
    pub service: ServiceTime,
    /// Seats a request holds while it executes (1 or more).
    pub initial_seats: u32,
    /// Seats it keeps for `additional_latency` after it finished.
    pub final_seats: u32,
    /// How long the final seats stay held after the request finished
    /// (Kubernetes' estimate for notifying watchers of a write); the client does
    /// not wait for it.
    pub additional_latency: Duration,
    /// The server gives back all the request's seats this long after it
    /// starts executing, while it keeps executing (a watch after its
    /// initial burst; `RequestGuard::release_seats`). None: never.
    pub release_seats_after: Option<Duration>,
    /// What each request really costs, in seats, reported when it finishes
    /// (`RequestGuard::finish_with_cost`; a flow schema annotated
    /// `apf.libapf.io/cost: learned` learns from it). None: nothing is
    /// reported, and the cost counted is the initial seats.
    pub actual_seats: Option<f64>,
    /// The client's own deadline for starting, if any.
    pub timeout: Option<Duration>,
    /// Load changes over time, in increasing order of `at`.
    pub phases: Vec<Phase>,
    /// Extra open-loop requests at given times.
    pub bursts: Vec<Burst>,
    /// What the verdict checks about this flow, if anything.
    pub expect: Option<Expectation>,
}

impl Flow {
    /// The request replica `i` (0-based) of this flow sends: every `{i}` in
    /// the request's strings replaced by `i`.
    pub fn replica_request(&self, i: u32) -> OwnedDigest {
        replica(&self.request, i)
    }
}

/// Replica `i` of a flow's request: every `{i}` in its strings replaced by
/// `i` (0-based).
pub(crate) fn replica(template: &OwnedDigest, i: u32) -> OwnedDigest {
    let s = |t: &str| {
        if t.contains("{i}") {
            t.replace("{i}", &i.to_string())
        } else {
            t.to_string()
        }
    };
    OwnedDigest {
        user: s(&template.user),
        groups: template.groups.iter().map(|g| s(g)).collect(),
        verb: s(&template.verb),
        is_resource_request: template.is_resource_request,
        api_group: s(&template.api_group),
        resource: s(&template.resource),
        subresource: s(&template.subresource),
        namespace: s(&template.namespace),
        name: s(&template.name),
        path: s(&template.path),
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Open loop: a Poisson process of `rate` requests per second per
    /// replica, whatever happens to earlier requests.
    Poisson {
        /// Requests per second per replica (0 ..= [`limits::MAX_RATE`]).
        rate: f64,
    },
    /// Closed loop: `clients` per replica, each sending one request, waiting
    /// for it to finish, thinking, and sending the next.
    Closed {
        /// Clients per replica.
        clients: u32,
        /// Time between an answer and the client's next request.
        think: Duration,
    },
}

/// How long a request executes once it has its seats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceTime {
    /// Always this long.
    Constant(Duration),
    /// Uniformly distributed between `min` and `max`.
    Uniform {
        /// The shortest service time.
        min: Duration,
        /// The longest service time.
        max: Duration,
    },
    /// Exponentially distributed.
    Exponential {
        /// The mean service time.
        mean: Duration,
    },
    /// `median` is e^μ of the underlying normal distribution; `sigma` its σ.
    Lognormal {
        /// The median, e^μ.
        median: Duration,
        /// σ of the underlying normal distribution (0..=10).
        sigma: f64,
    },
}

impl ServiceTime {
    /// The mean, in seconds.
    pub fn mean_secs(&self) -> f64 {
        match *self {
            ServiceTime::Constant(d) => d.as_secs_f64(),
            ServiceTime::Uniform { min, max } => (min.as_secs_f64() + max.as_secs_f64()) / 2.0,
            ServiceTime::Exponential { mean } => mean.as_secs_f64(),
            ServiceTime::Lognormal { median, sigma } => {
                median.as_secs_f64() * (sigma * sigma / 2.0).exp()
            }
        }
    }
}

/// From `at` on, the flow's load is `scale` times its base: the arrival
/// rate (open loop) or the number of active clients, rounded (closed loop).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Simulated time the phase starts at.
    pub at: Duration,
    /// Load factor from then on (0 switches the flow off).
    pub scale: f64,
}

/// `requests` extra requests per replica, spread evenly over `over`
/// starting at `at` (all at once when `over` is zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    /// Simulated time the burst starts at.
    pub at: Duration,
    /// Extra requests per replica.
    pub requests: u32,
    /// Time they are spread over evenly (zero: all at once).
    pub over: Duration,
}

/// What the verdict checks about a flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expectation {
    /// `expect: served`: the flow gets at least
    /// [`Workload::served_fraction`] of its demand.
    Served,
    /// `expect: {served: 0.9, waitP99: 200ms}`: at least `served` of its
    /// demand (when given) and a wait p99 of at most `wait_p99` (when
    /// given); at least one of the two is.
    Bounds {
        /// The least fraction (0..=1) of its demand the flow must get, if checked.
        served: Option<f64>,
        /// The longest 99th-percentile queue wait allowed, if checked.
        wait_p99: Option<Duration>,
    },
}

impl Expectation {
    /// The least fraction of its demand the flow must get, if checked.
    pub fn served_fraction(&self, default: f64) -> Option<f64> {
        match self {
            Expectation::Served => Some(default),
            Expectation::Bounds { served, .. } => *served,
        }
    }

    /// The longest wait p99 the flow may see, if checked.
    pub fn wait_p99(&self) -> Option<Duration> {
        match self {
            Expectation::Served => None,
            Expectation::Bounds { wait_p99, .. } => *wait_p99,
        }
    }
}

/// One problem in a workload file: where (a field path such as
/// `flows[2].service.lognormal.sigma`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    /// The field's path, such as `flows[2].service.lognormal.sigma` (empty or
    /// `.` for the whole file).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Quotes are clipped: a 50 MB flow name is not echoed whole.
        let message = clip(&self.message, 512);
        if self.path.is_empty() || self.path == "." {
            write!(f, "{message}")
        } else {
            write!(f, "{}: {message}", clip(&self.path, 256))
        }
    }
}

/// Every problem found (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadErrors(pub Vec<WorkloadError>);

impl fmt::Display for WorkloadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for WorkloadErrors {}

impl Workload {
    /// Reads a workload from YAML text (JSON is YAML too).
    pub fn from_yaml_str(text: &str) -> Result<Workload, WorkloadErrors> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if text.len() > input::MAX_INPUT_BYTES {
            return Err(WorkloadErrors(vec![WorkloadError {
                path: String::new(),
                message: input::too_large(Some(text.len())),
            }]));
        }
        let tree: serde_json::Value =
            serde_saphyr::from_str_with_options(text, input::yaml_options()).map_err(|e| {
                WorkloadErrors(vec![WorkloadError {
                    path: String::new(),
                    message: input::yaml_error(&e),
                }])
            })?;
        let raw: raw::Workload = serde_path_to_error::deserialize(tree).map_err(|e| {
            WorkloadErrors(vec![WorkloadError {
                path: e.path().to_string(),
                message: e.into_inner().to_string(),
            }])
        })?;
        Workload::from_raw(raw)
    }

    /// Reads a workload from bytes, which must be UTF-8.
    pub fn from_slice(bytes: &[u8]) -> Result<Workload, WorkloadErrors> {
        if bytes.len() > input::MAX_INPUT_BYTES {
            return Err(WorkloadErrors(vec![WorkloadError {
                path: String::new(),
                message: input::too_large(Some(bytes.len())),
            }]));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            WorkloadErrors(vec![WorkloadError {
                path: String::new(),
                message: format!("not UTF-8: {e}"),
            }])
        })?;
        Workload::from_yaml_str(text)
    }

    /// The same workload over another simulated time, with the sample
    /// interval derived afresh (phases and bursts past the end never come).
    pub fn with_duration(mut self, duration: Duration) -> Result<Workload, WorkloadError> {
        if duration.is_zero() || duration > limits::MAX_DURATION {
            return Err(WorkloadError {
                path: "duration".into(),
                message: format!("must be positive and at most {:?}", limits::MAX_DURATION),
            });
        }
        self.duration = duration;
        self.sample_interval = default_sample_interval(duration);
        Ok(self)
    }
}

/// Parses `1.5s`, `250ms`, `100us` (or `µs`), `20ns`, `2m`, `1h`, or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .ok_or_else(|| format!("{text:?} lacks a unit (ns, us, ms, s, m, h)"))?;
    let (number, unit) = t.split_at(split);
    let nanos_per_unit: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        other => return Err(format!("unknown unit {other:?} in {text:?}")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration"))?;
    let nanos = (value * nanos_per_unit).round();
    if !nanos.is_finite() || nanos < 0.0 || nanos > u64::MAX as f64 / 2.0 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Checking the decoded file (workload/check.rs).
mod check;
/// The serde shapes of the file (workload/raw.rs).
mod raw;
use check::default_sample_interval;

#[cfg(all(test, not(loom)))]
mod tests;
