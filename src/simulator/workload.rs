//! The workload file: what clients send to the simulated server, in YAML.
//! The format is documented in `docs/workload-format.md`; this module reads
//! it into a checked [`Workload`], or says which field is wrong and why.
//!
//! Reading happens in two steps: the YAML is read into a tree and serde
//! decodes that into the `raw` types (unknown fields are errors, so a typo
//! never passes silently; the error names the field's path), then
//! [`Workload::from_raw`] checks values and ranges, collecting every error
//! with its field path.

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
    pub description: String,
    /// Simulated time.
    pub duration: Duration,
    /// Seed of every random choice; `apf simulate --seed` overrides it.
    pub seed: u64,
    pub server: Server,
    /// Resolution of the time series (charts).
    pub sample_interval: Duration,
    /// A flow with `expect: served` passes when it got at least this
    /// fraction of its demand.
    pub served_fraction: f64,
    pub flows: Vec<Flow>,
}

/// The server's settings (the dispatcher's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub concurrency_limit: u32,
    pub service_time_guess: Duration,
    pub wait_limit: Duration,
    pub borrowing_period: Duration,
}

/// One flow entry: `replicas` flows alike but for `{i}` in their strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    pub name: String,
    pub replicas: u32,
    pub request: RequestTemplate,
    pub arrival: Arrival,
    /// How long a closed-loop client waits after a rejection before it
    /// tries again (Kubernetes answers 429 with `Retry-After: 1`).
    pub retry_after: Duration,
    pub service: ServiceTime,
    pub initial_seats: u32,
    pub final_seats: u32,
    pub additional_latency: Duration,
    /// The client's own deadline for starting, if any.
    pub timeout: Option<Duration>,
    pub phases: Vec<Phase>,
    pub bursts: Vec<Burst>,
    pub expect: Option<Expectation>,
}

/// Who sends the requests and what they ask for: a
/// [`crate::classification::RequestDigest`] with `{i}` standing for the
/// replica's index (0-based) in every string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestTemplate {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    pub non_resource: bool,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub path: String,
}

impl RequestTemplate {
    /// The strings of replica `i`: every `{i}` replaced by `i`.
    pub fn instantiate(&self, i: u32) -> RequestTemplate {
        let s = |t: &str| {
            if t.contains("{i}") {
                t.replace("{i}", &i.to_string())
            } else {
                t.to_string()
            }
        };
        RequestTemplate {
            user: s(&self.user),
            groups: self.groups.iter().map(|g| s(g)).collect(),
            verb: s(&self.verb),
            non_resource: self.non_resource,
            api_group: s(&self.api_group),
            resource: s(&self.resource),
            subresource: s(&self.subresource),
            namespace: s(&self.namespace),
            name: s(&self.name),
            path: s(&self.path),
        }
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Open loop: a Poisson process of this many requests per second per
    /// replica, whatever happens to earlier requests.
    Poisson { rate: f64 },
    /// Closed loop: `clients` per replica, each sending one request, waiting
    /// for it to finish, thinking, and sending the next.
    Closed { clients: u32, think: Duration },
}

/// How long a request executes once it has its seats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceTime {
    Constant(Duration),
    Uniform {
        min: Duration,
        max: Duration,
    },
    Exponential {
        mean: Duration,
    },
    /// `median` is e^μ of the underlying normal distribution; `sigma` its σ.
    Lognormal {
        median: Duration,
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
    pub at: Duration,
    pub scale: f64,
}

/// `requests` extra requests per replica, spread evenly over `over`
/// starting at `at` (all at once when `over` is zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    pub at: Duration,
    pub requests: u32,
    pub over: Duration,
}

/// What the verdict checks about a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// The flow gets at least [`Workload::served_fraction`] of its demand.
    Served,
}

/// One problem in a workload file: where (a field path such as
/// `flows[2].service.lognormal.sigma`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
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
        let tree: serde_json::Value = serde_saphyr::from_str_with_options(text, yaml_options())
            .map_err(|e| {
                WorkloadErrors(vec![WorkloadError {
                    path: String::new(),
                    message: e.to_string(),
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

    fn from_raw(raw: raw::Workload) -> Result<Workload, WorkloadErrors> {
        let mut c = Checker::default();
        let duration = raw.duration.0;
        c.check(duration > Duration::ZERO, "duration", "must be positive");
        c.check(
            duration <= limits::MAX_DURATION,
            "duration",
            format!("at most {:?}", limits::MAX_DURATION),
        );
        let server = check_server(&mut c, raw.server.unwrap_or_default());
        let sample_interval = match raw.sample_interval {
            Some(d) => d.0,
            None => default_sample_interval(duration),
        };
        c.check(
            sample_interval > Duration::ZERO,
            "sampleInterval",
            "must be positive",
        );
        if sample_interval > Duration::ZERO {
            let samples = duration.as_nanos().div_ceil(sample_interval.as_nanos());
            c.check(
                samples <= limits::MAX_SAMPLES as u128,
                "sampleInterval",
                format!(
                    "gives {samples} samples; at most {} (make it longer)",
                    limits::MAX_SAMPLES
                ),
            );
        }
        let served_fraction = raw.served_fraction.unwrap_or(0.95);
        c.check(
            (0.0..=1.0).contains(&served_fraction),
            "servedFraction",
            "must be between 0 and 1",
        );
        c.check(!raw.flows.is_empty(), "flows", "at least one flow");
        c.check(
            raw.flows.len() <= limits::MAX_FLOWS,
            "flows",
            format!("at most {} flows", limits::MAX_FLOWS),
        );
        let mut flows = Vec::with_capacity(raw.flows.len().min(limits::MAX_FLOWS));
        for (i, f) in raw.flows.into_iter().take(limits::MAX_FLOWS).enumerate() {
            let at = format!("flows[{i}]");
            if flows.iter().any(|g: &Flow| g.name == f.name) {
                c.error(
                    format!("{at}.name"),
                    format!("duplicate flow name {:?}", f.name),
                );
            }
            flows.push(check_flow(&mut c, &at, f, duration));
        }
        let replicas: u64 = flows.iter().map(|f| f.replicas as u64).sum();
        c.check(
            replicas <= limits::MAX_REPLICAS,
            "flows",
            format!(
                "{replicas} replicas in all; at most {}",
                limits::MAX_REPLICAS
            ),
        );
        let clients: u64 = flows
            .iter()
            .map(|f| match f.arrival {
                Arrival::Closed { clients, .. } => f.replicas as u64 * clients as u64,
                Arrival::Poisson { .. } => 0,
            })
            .sum();
        c.check(
            clients <= limits::MAX_CLIENTS,
            "flows",
            format!("{clients} clients in all; at most {}", limits::MAX_CLIENTS),
        );
        let burst_requests: u64 = flows
            .iter()
            .map(|f| {
                let per_replica: u64 = f.bursts.iter().map(|b| b.requests as u64).sum();
                per_replica.saturating_mul(f.replicas as u64)
            })
            .sum();
        let bursts: u64 = flows
            .iter()
            .map(|f| f.bursts.len() as u64 * f.replicas as u64)
            .sum();
        c.check(
            bursts <= limits::MAX_BURSTS,
            "flows",
            format!(
                "{bursts} bursts over all replicas; at most {}",
                limits::MAX_BURSTS
            ),
        );
        c.check(
            burst_requests <= limits::MAX_BURST_REQUESTS,
            "flows",
            format!(
                "{burst_requests} burst requests in all; at most {}",
                limits::MAX_BURST_REQUESTS
            ),
        );
        c.finish(Workload {
            name: raw.name.unwrap_or_default(),
            description: raw.description.unwrap_or_default(),
            duration,
            seed: raw.seed.unwrap_or(1),
            server,
            sample_interval,
            served_fraction,
            flows,
        })
    }
}

/// YAML 1.2 scalars (`n`, `no` and `0755` stay strings) and low caps on
/// nodes and alias expansion, as for configurations: a workload is small,
/// and hostile input (alias bombs) fails fast.
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.alias_limits.max_total_replayed_events = 100_000;
    if let Some(budget) = options.budget.as_mut() {
        budget.max_nodes = 200_000;
    }
    options
}

/// About 120 points per chart, on a round number of milliseconds.
fn default_sample_interval(duration: Duration) -> Duration {
    let ms = (duration.as_millis() / 120).max(1);
    Duration::from_millis(ms as u64)
}

fn check_server(c: &mut Checker, s: raw::Server) -> Server {
    let defaults = crate::dispatcher::DispatcherOptions::default();
    let server = Server {
        concurrency_limit: s
            .concurrency_limit
            .unwrap_or(defaults.server_concurrency_limit),
        service_time_guess: s
            .service_time_guess
            .map_or(defaults.service_time_guess, |d| d.0),
        wait_limit: s.wait_limit.map_or(defaults.wait_limit, |d| d.0),
        borrowing_period: s
            .borrowing_period
            .map_or(defaults.borrowing_period, |d| d.0),
    };
    c.check(
        (1..=limits::MAX_CONCURRENCY).contains(&server.concurrency_limit),
        "server.concurrencyLimit",
        format!("must be between 1 and {}", limits::MAX_CONCURRENCY),
    );
    c.check(
        server.borrowing_period >= crate::borrowing::MIN_ADJUSTMENT_PERIOD,
        "server.borrowingPeriod",
        format!(
            "must be at least {:?}",
            crate::borrowing::MIN_ADJUSTMENT_PERIOD
        ),
    );
    c.check(
        server.wait_limit > Duration::ZERO,
        "server.waitLimit",
        "must be positive",
    );
    server
}

fn check_flow(c: &mut Checker, at: &str, f: raw::Flow, duration: Duration) -> Flow {
    c.check(
        !f.name.is_empty(),
        format!("{at}.name"),
        "must not be empty",
    );
    let replicas = f.replicas.unwrap_or(1);
    c.check(
        replicas >= 1,
        format!("{at}.replicas"),
        "must be at least 1",
    );
    let arrival = match (f.rate, f.clients) {
        (Some(rate), None) => {
            c.check(
                rate.is_finite() && (0.0..=limits::MAX_RATE).contains(&rate),
                format!("{at}.rate"),
                format!("must be between 0 and {:e} per second", limits::MAX_RATE),
            );
            if f.think.is_some() {
                c.error(
                    format!("{at}.think"),
                    "only closed-loop flows (clients) think",
                );
            }
            Arrival::Poisson { rate }
        }
        (None, Some(clients)) => Arrival::Closed {
            clients,
            think: f.think.map_or(Duration::ZERO, |d| d.0),
        },
        (Some(_), Some(_)) => {
            c.error(
                at.to_string(),
                "give either rate (open loop) or clients (closed loop), not both",
            );
            Arrival::Poisson { rate: 0.0 }
        }
        (None, None) => {
            if f.bursts.is_empty() {
                c.error(
                    at.to_string(),
                    "give rate (open loop), clients (closed loop) or bursts",
                );
            }
            Arrival::Poisson { rate: 0.0 }
        }
    };
    let service = f
        .service
        .map_or(ServiceTime::Constant(Duration::from_millis(10)), |s| s.0);
    check_service(c, &format!("{at}.service"), &service);
    let (initial_seats, final_seats) = match f.seats.unwrap_or_default() {
        raw::Seats::Count(n) => (n, 0),
        raw::Seats::Split { initial, r#final } => (initial.unwrap_or(1), r#final.unwrap_or(0)),
    };
    c.check(
        (1..=limits::MAX_SEATS).contains(&initial_seats),
        format!("{at}.seats.initial"),
        format!("must be between 1 and {}", limits::MAX_SEATS),
    );
    c.check(
        final_seats <= limits::MAX_SEATS,
        format!("{at}.seats.final"),
        format!("at most {}", limits::MAX_SEATS),
    );
    let mut request = RequestTemplate {
        user: f.user,
        groups: f.groups.unwrap_or_default(),
        verb: f.verb.unwrap_or_else(|| "get".into()),
        non_resource: f.non_resource.unwrap_or(false),
        api_group: f.api_group.unwrap_or_default(),
        resource: f.resource.unwrap_or_default(),
        subresource: f.subresource.unwrap_or_default(),
        namespace: f.namespace.unwrap_or_default(),
        name: f.object_name.unwrap_or_default(),
        path: f.path.unwrap_or_default(),
    };
    if request.non_resource {
        c.check(
            request.path.starts_with('/'),
            format!("{at}.path"),
            "a non-resource request needs a path starting with /",
        );
    } else {
        c.check(
            !request.resource.is_empty(),
            format!("{at}.resource"),
            "a resource request needs a resource (or set nonResource: true)",
        );
        if request.path.is_empty() {
            request.path = resource_path(&request);
        }
    }
    let phases: Vec<Phase> = f
        .phases
        .unwrap_or_default()
        .into_iter()
        .map(|p| Phase {
            at: p.at.0,
            scale: p.scale,
        })
        .collect();
    check_phases(c, at, &phases, &arrival);
    let bursts: Vec<Burst> = f
        .bursts
        .into_iter()
        .map(|b| Burst {
            at: b.at.0,
            requests: b.requests,
            over: b.over.map_or(Duration::ZERO, |d| d.0),
        })
        .collect();
    c.check(
        bursts.len() <= limits::MAX_EVENTS_PER_FLOW,
        format!("{at}.bursts"),
        format!("at most {}", limits::MAX_EVENTS_PER_FLOW),
    );
    for (j, b) in bursts.iter().enumerate() {
        c.check(
            b.at < duration,
            format!("{at}.bursts[{j}].at"),
            "must fall within the workload's duration",
        );
        c.check(
            b.requests >= 1,
            format!("{at}.bursts[{j}].requests"),
            "must be at least 1",
        );
    }
    let expect = match f.expect.as_deref() {
        None => None,
        Some("served") => Some(Expectation::Served),
        Some(other) => {
            c.error(
                format!("{at}.expect"),
                format!("unknown expectation {other:?}; expected `served`"),
            );
            None
        }
    };
    Flow {
        name: f.name,
        replicas,
        request,
        arrival,
        retry_after: f.retry_after.map_or(Duration::from_secs(1), |d| d.0),
        service,
        initial_seats,
        final_seats,
        additional_latency: f.additional_latency.map_or(Duration::ZERO, |d| d.0),
        timeout: f.timeout.map(|d| d.0),
        phases,
        bursts,
        expect,
    }
}

fn check_service(c: &mut Checker, at: &str, s: &ServiceTime) {
    match *s {
        ServiceTime::Uniform { min, max } => c.check(
            min <= max,
            format!("{at}.uniform"),
            "min must not exceed max",
        ),
        ServiceTime::Lognormal { sigma, .. } => c.check(
            sigma.is_finite() && (0.0..=10.0).contains(&sigma),
            format!("{at}.lognormal.sigma"),
            "must be between 0 and 10",
        ),
        ServiceTime::Constant(_) | ServiceTime::Exponential { .. } => {}
    }
}

fn check_phases(c: &mut Checker, at: &str, phases: &[Phase], arrival: &Arrival) {
    c.check(
        phases.len() <= limits::MAX_EVENTS_PER_FLOW,
        format!("{at}.phases"),
        format!("at most {}", limits::MAX_EVENTS_PER_FLOW),
    );
    for (j, p) in phases.iter().enumerate() {
        let bad_scale = !p.scale.is_finite() || p.scale < 0.0 || p.scale > 1e6;
        c.check(
            !bad_scale,
            format!("{at}.phases[{j}].scale"),
            "must be between 0 and 1e6",
        );
        if j > 0 {
            c.check(
                p.at > phases[j - 1].at,
                format!("{at}.phases[{j}].at"),
                "phases must be in increasing order of time",
            );
        }
        if let (Arrival::Poisson { rate }, false) = (arrival, bad_scale) {
            c.check(
                rate * p.scale <= limits::MAX_RATE,
                format!("{at}.phases[{j}].scale"),
                format!("rate times scale at most {:e}", limits::MAX_RATE),
            );
        }
        if let (Arrival::Closed { clients, .. }, false) = (arrival, bad_scale) {
            c.check(
                (*clients as f64 * p.scale).round() <= u32::MAX as f64,
                format!("{at}.phases[{j}].scale"),
                "clients times scale too large",
            );
        }
    }
}

/// The URL path Kubernetes would serve a resource request on.
fn resource_path(r: &RequestTemplate) -> String {
    let mut p = if r.api_group.is_empty() {
        "/api/v1".to_string()
    } else {
        format!("/apis/{}/v1", r.api_group)
    };
    if !r.namespace.is_empty() {
        p.push_str("/namespaces/");
        p.push_str(&r.namespace);
    }
    p.push('/');
    p.push_str(&r.resource);
    if !r.name.is_empty() {
        p.push('/');
        p.push_str(&r.name);
        if !r.subresource.is_empty() {
            p.push('/');
            p.push_str(&r.subresource);
        }
    }
    p
}

#[derive(Default)]
struct Checker {
    errors: Vec<WorkloadError>,
}

impl Checker {
    fn check(&mut self, ok: bool, path: impl Into<String>, message: impl Into<String>) {
        if !ok {
            self.error(path, message);
        }
    }
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(WorkloadError {
            path: path.into(),
            message: message.into(),
        });
    }
    fn finish(self, w: Workload) -> Result<Workload, WorkloadErrors> {
        if self.errors.is_empty() {
            Ok(w)
        } else {
            Err(WorkloadErrors(self.errors))
        }
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

/// The serde shapes of the file. Every struct denies unknown fields.
mod raw {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Workload {
        pub name: Option<String>,
        pub description: Option<String>,
        pub duration: Dur,
        pub seed: Option<u64>,
        pub server: Option<Server>,
        pub sample_interval: Option<Dur>,
        pub served_fraction: Option<f64>,
        pub flows: Vec<Flow>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Server {
        pub concurrency_limit: Option<u32>,
        pub service_time_guess: Option<Dur>,
        pub wait_limit: Option<Dur>,
        pub borrowing_period: Option<Dur>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct Flow {
        pub name: String,
        pub replicas: Option<u32>,
        pub user: String,
        pub groups: Option<Vec<String>>,
        pub verb: Option<String>,
        pub non_resource: Option<bool>,
        pub api_group: Option<String>,
        pub resource: Option<String>,
        pub subresource: Option<String>,
        pub namespace: Option<String>,
        /// The object's name (`name` is the flow's).
        pub object_name: Option<String>,
        pub path: Option<String>,
        pub rate: Option<f64>,
        pub clients: Option<u32>,
        pub think: Option<Dur>,
        pub retry_after: Option<Dur>,
        pub service: Option<Service>,
        pub seats: Option<Seats>,
        pub additional_latency: Option<Dur>,
        pub timeout: Option<Dur>,
        pub phases: Option<Vec<PhaseRaw>>,
        #[serde(default)]
        pub bursts: Vec<BurstRaw>,
        pub expect: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct PhaseRaw {
        pub at: Dur,
        pub scale: f64,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct BurstRaw {
        pub at: Dur,
        pub requests: u32,
        pub over: Option<Dur>,
    }

    /// `seats: 3` or `seats: {initial: 1, final: 4}`.
    pub enum Seats {
        Count(u32),
        Split {
            initial: Option<u32>,
            r#final: Option<u32>,
        },
    }

    impl Default for Seats {
        fn default() -> Self {
            Seats::Count(1)
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeatsMap {
        initial: Option<u32>,
        r#final: Option<u32>,
    }

    impl<'de> Deserialize<'de> for Seats {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Seats;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a seat count or {initial, final}")
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seats, E> {
                    u32::try_from(v)
                        .map(Seats::Count)
                        .map_err(|_| E::custom("seat count out of range"))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seats, E> {
                    u32::try_from(v)
                        .map(Seats::Count)
                        .map_err(|_| E::custom("seat count out of range"))
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Seats, A::Error> {
                    let m = SeatsMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                    Ok(Seats::Split {
                        initial: m.initial,
                        r#final: m.r#final,
                    })
                }
            }
            d.deserialize_any(V)
        }
    }

    /// `service: 20ms` (constant) or one distribution.
    pub struct Service(pub ServiceTime);

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    enum ServiceMap {
        Constant(Dur),
        Uniform { min: Dur, max: Dur },
        Exponential { mean: Dur },
        Lognormal { median: Dur, sigma: f64 },
    }

    impl<'de> Deserialize<'de> for Service {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Service;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str(
                        "a duration, or one of {constant}, {uniform}, {exponential}, {lognormal}",
                    )
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Service, E> {
                    parse_duration(v)
                        .map(|d| Service(ServiceTime::Constant(d)))
                        .map_err(E::custom)
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Service, E> {
                    self.visit_str(&v.to_string())
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Service, A::Error> {
                    let m = ServiceMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                    Ok(Service(match m {
                        ServiceMap::Constant(d) => ServiceTime::Constant(d.0),
                        ServiceMap::Uniform { min, max } => ServiceTime::Uniform {
                            min: min.0,
                            max: max.0,
                        },
                        ServiceMap::Exponential { mean } => {
                            ServiceTime::Exponential { mean: mean.0 }
                        }
                        ServiceMap::Lognormal { median, sigma } => ServiceTime::Lognormal {
                            median: median.0,
                            sigma,
                        },
                    }))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// A duration written with a unit.
    pub struct Dur(pub Duration);

    impl<'de> Deserialize<'de> for Dur {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Dur;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a duration such as 250ms, 1.5s or 2m")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                    parse_duration(v).map(Dur).map_err(E::custom)
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                    self.visit_str(&v.to_string())
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                    self.visit_str(&v.to_string())
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const MINIMAL: &str = "
duration: 10s
flows:
  - name: app
    user: alice
    groups: [system:authenticated]
    resource: pods
    rate: 100
";

    #[test]
    fn minimal_workload_takes_defaults() {
        let w = Workload::from_yaml_str(MINIMAL).unwrap();
        assert_eq!(w.duration, Duration::from_secs(10));
        assert_eq!(w.seed, 1);
        assert_eq!(w.server.concurrency_limit, 600);
        assert_eq!(w.sample_interval, Duration::from_millis(83));
        let f = &w.flows[0];
        assert_eq!(f.replicas, 1);
        assert_eq!(f.arrival, Arrival::Poisson { rate: 100.0 });
        assert_eq!(f.service, ServiceTime::Constant(Duration::from_millis(10)));
        assert_eq!((f.initial_seats, f.final_seats), (1, 0));
        assert_eq!(f.request.verb, "get");
        assert_eq!(f.request.path, "/api/v1/pods");
    }

    #[test]
    fn every_field_is_read() {
        let text = "
name: full
description: every field
duration: 2m
seed: 7
sampleInterval: 1s
servedFraction: 0.9
server: {concurrencyLimit: 50, serviceTimeGuess: 1ms, waitLimit: 5s, borrowingPeriod: 2s}
flows:
  - name: tenant
    replicas: 3
    user: 'system:serviceaccount:t-{i}:app'
    groups: [system:serviceaccounts, 'system:serviceaccounts:t-{i}']
    verb: update
    apiGroup: apps
    resource: deployments
    subresource: status
    namespace: 't-{i}'
    objectName: web
    clients: 4
    think: 250ms
    retryAfter: 2s
    service: {lognormal: {median: 20ms, sigma: 0.5}}
    seats: {initial: 2, final: 3}
    additionalLatency: 100ms
    timeout: 30s
    phases: [{at: 10s, scale: 2}, {at: 20s, scale: 0}]
    bursts: [{at: 5s, requests: 100, over: 1s}]
    expect: served
  - name: metrics
    user: prometheus
    nonResource: true
    path: /metrics
    verb: get
    rate: 0.5
    service: {uniform: {min: 1ms, max: 3ms}}
    seats: 2
";
        let w = Workload::from_yaml_str(text).unwrap();
        assert_eq!(w.seed, 7);
        assert_eq!(w.served_fraction, 0.9);
        assert_eq!(w.server.concurrency_limit, 50);
        assert_eq!(w.server.borrowing_period, Duration::from_secs(2));
        let t = &w.flows[0];
        assert_eq!(
            t.arrival,
            Arrival::Closed {
                clients: 4,
                think: Duration::from_millis(250)
            }
        );
        assert_eq!(t.retry_after, Duration::from_secs(2));
        assert_eq!(
            t.service,
            ServiceTime::Lognormal {
                median: Duration::from_millis(20),
                sigma: 0.5
            }
        );
        assert_eq!((t.initial_seats, t.final_seats), (2, 3));
        assert_eq!(t.additional_latency, Duration::from_millis(100));
        assert_eq!(t.timeout, Some(Duration::from_secs(30)));
        assert_eq!(t.phases.len(), 2);
        assert_eq!(t.bursts[0].over, Duration::from_secs(1));
        assert_eq!(t.expect, Some(Expectation::Served));
        assert_eq!(
            t.request.path,
            "/apis/apps/v1/namespaces/t-{i}/deployments/web/status"
        );
        let r = t.request.instantiate(2);
        assert_eq!(r.user, "system:serviceaccount:t-2:app");
        assert_eq!(r.groups[1], "system:serviceaccounts:t-2");
        assert_eq!(r.namespace, "t-2");
        let m = &w.flows[1];
        assert!(m.request.non_resource);
        assert_eq!((m.initial_seats, m.final_seats), (2, 0));
    }

    fn errors(text: &str) -> Vec<String> {
        Workload::from_yaml_str(text)
            .unwrap_err()
            .0
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn parse_errors_name_the_field() {
        let e = errors(&MINIMAL.replace("rate: 100", "rate: 100\n    sevice: 5ms"));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("flows[0].sevice: unknown field `sevice`"),
            "{e:?}"
        );
        let e = errors(&MINIMAL.replace("rate: 100", "rate: 100\n    service: 5 parsecs"));
        assert!(e[0].starts_with("flows[0].service: unknown unit"), "{e:?}");
        let e = errors(&MINIMAL.replace(
            "rate: 100",
            "rate: 100\n    service: {lognormal: {median: 5ms}}",
        ));
        assert!(e[0].contains("missing field `sigma`"), "{e:?}");
        let e = errors(&MINIMAL.replace("10s", "ten seconds"));
        assert!(e[0].starts_with("duration: "), "{e:?}");
    }

    #[test]
    fn value_errors_are_all_collected() {
        let text = "
duration: 0s
server: {concurrencyLimit: 0}
flows:
  - name: a
    user: u
    rate: -1
    clients: 3
    service: {uniform: {min: 5ms, max: 1ms}}
    seats: 0
    phases: [{at: 2s, scale: 1}, {at: 1s, scale: -1}]
    expect: perfect
  - name: a
    user: u
    nonResource: true
";
        let e = errors(text);
        let want = [
            "duration: must be positive",
            "server.concurrencyLimit: must be between 1",
            "flows[0]: give either rate",
            "flows[0].service.uniform: min must not exceed max",
            "flows[0].seats.initial: must be between 1",
            "flows[0].resource: a resource request needs",
            "flows[0].phases[1].scale: must be between",
            "flows[0].phases[1].at: phases must be in increasing order",
            "flows[0].expect: unknown expectation",
            "flows[1].name: duplicate flow name",
            "flows[1]: give rate",
            "flows[1].path: a non-resource request needs a path",
        ];
        for w in want {
            assert!(
                e.iter().any(|m| m.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
    }

    #[test]
    fn limits_refuse_huge_workloads_before_building_anything() {
        let e = errors(&MINIMAL.replace("rate: 100", "clients: 4000000000\n    replicas: 4000"));
        assert!(e.iter().any(|m| m.contains("clients in all")), "{e:?}");
        let e = errors(&MINIMAL.replace("10s", "1000h"));
        assert!(
            e.iter().any(|m| m.starts_with("duration: at most")),
            "{e:?}"
        );
        let e = errors(&MINIMAL.replace(
            "rate: 100",
            "rate: 100\n    replicas: 500000\n    bursts: [{at: 1s, requests: 1}, {at: 2s, requests: 1}, {at: 3s, requests: 0}]",
        ));
        assert!(
            e.iter().any(|m| m.contains("bursts over all replicas")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("flows[0].bursts[2].requests: must be at least 1")),
            "{e:?}"
        );
        let e = errors(&format!("sampleInterval: 1ns\n{MINIMAL}"));
        assert!(
            e.iter().any(|m| m.starts_with("sampleInterval: gives")),
            "{e:?}"
        );
    }

    #[test]
    fn a_new_duration_resamples() {
        let w = Workload::from_yaml_str(MINIMAL).unwrap();
        let w = w.with_duration(Duration::from_secs(120)).unwrap();
        assert_eq!(w.duration, Duration::from_secs(120));
        assert_eq!(w.sample_interval, Duration::from_secs(1));
        assert!(w.clone().with_duration(Duration::ZERO).is_err());
        assert!(w.with_duration(Duration::from_secs(8 * 24 * 3600)).is_err());
    }

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("10µs"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        for bad in [
            "",
            "5",
            "s",
            "1.2.3s",
            "-1s",
            "1e400s",
            "3 fortnights",
            "1e30h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_an_error() {
        let e = Workload::from_slice(&[0xff, 0xfe, b'a']).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"));
    }
}
