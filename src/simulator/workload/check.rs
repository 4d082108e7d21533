//! From the decoded file to a checked [`Workload`]: every value and range
//! checked, every problem collected with its field path, so one run of
//! `apf simulate` reports all of a file's mistakes at once.

use super::*;

impl Workload {
    pub(super) fn from_raw(raw: raw::Workload) -> Result<Workload, WorkloadErrors> {
        let mut c = Checker::default();
        let duration = raw.duration.0;
        c.check(duration > Duration::ZERO, "duration", "must be positive");
        c.check(
            duration <= limits::MAX_DURATION,
            "duration",
            format!("at most {:?}", limits::MAX_DURATION),
        );
        let server = check_server(&mut c, raw.server.unwrap_or_default());
        let backend = raw.backend.map(|b| check_backend(&mut c, b, duration));
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
            backend,
            sample_interval,
            served_fraction,
            flows,
        })
    }
}

/// About 120 points per chart, on a round number of milliseconds.
pub(super) fn default_sample_interval(duration: Duration) -> Duration {
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
        adaptive: s.adaptive.map(|a| {
            let d = crate::adaptive::AdaptiveOptions::default();
            crate::adaptive::AdaptiveOptions {
                min_limit: a.min_limit.unwrap_or(d.min_limit),
                max_limit: a.max_limit.unwrap_or(d.max_limit),
                update_interval: a.update_interval.map_or(d.update_interval, |x| x.0),
                tolerance_percent: a.tolerance_percent.unwrap_or(d.tolerance_percent),
                smoothing_percent: a.smoothing_percent.unwrap_or(d.smoothing_percent),
                gain: a.gain.unwrap_or(d.gain),
                min_window_samples: a.min_window_samples.unwrap_or(d.min_window_samples),
                probe_interval: a.probe_interval.map_or(d.probe_interval, |x| x.0),
                probe_limit: a.probe_limit.unwrap_or(d.probe_limit),
                probe_samples: a.probe_samples.unwrap_or(d.probe_samples),
                probe_timeout: a.probe_timeout.map_or(d.probe_timeout, |x| x.0),
            }
        }),
    };
    if let Some(Err(e)) = server.adaptive.as_ref().map(|a| a.validate()) {
        c.error(format!("server.adaptive.{}", camel(e.field)), e.message);
    }
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

/// `min_limit` as the file spells it, `minLimit`.
fn camel(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for ch in field.chars() {
        if ch == '_' {
            upper = true;
        } else if upper {
            out.extend(ch.to_uppercase());
            upper = false;
        } else {
            out.push(ch);
        }
    }
    out
}

fn check_backend(c: &mut Checker, b: raw::Backend, duration: Duration) -> Backend {
    let overload = b.overload.unwrap_or(0.0);
    c.check(
        (1..=limits::MAX_CONCURRENCY).contains(&b.capacity),
        "backend.capacity",
        format!("must be between 1 and {}", limits::MAX_CONCURRENCY),
    );
    c.check(
        overload.is_finite() && (0.0..=100.0).contains(&overload),
        "backend.overload",
        "must be between 0 and 100",
    );
    c.check(
        b.phases.len() <= limits::MAX_EVENTS_PER_FLOW,
        "backend.phases",
        format!("at most {}", limits::MAX_EVENTS_PER_FLOW),
    );
    let mut last = Duration::ZERO;
    for (i, p) in b.phases.iter().enumerate() {
        c.check(
            (1..=limits::MAX_CONCURRENCY).contains(&p.capacity),
            format!("backend.phases[{i}].capacity"),
            format!("must be between 1 and {}", limits::MAX_CONCURRENCY),
        );
        c.check(
            p.at.0 >= last && p.at.0 <= duration,
            format!("backend.phases[{i}].at"),
            "must be in increasing order, within the duration",
        );
        last = p.at.0;
    }
    Backend {
        capacity: b.capacity,
        overload,
        phases: b
            .phases
            .iter()
            .map(|p| BackendPhase {
                at: p.at.0,
                capacity: p.capacity,
            })
            .collect(),
    }
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
    let release_seats_after = f.release_seats_after.map(|d| d.0);
    c.check(
        release_seats_after.is_none_or(|d| !d.is_zero()),
        format!("{at}.releaseSeatsAfter"),
        "must be positive (leave it out to never release early)",
    );
    c.check(
        f.actual_seats
            .is_none_or(|c| c.is_finite() && (0.0..=f64::from(limits::MAX_SEATS)).contains(&c)),
        format!("{at}.actualSeats"),
        format!("must be a number of seats from 0 to {}", limits::MAX_SEATS),
    );
    let mut request = OwnedDigest {
        user: f.user,
        groups: f.groups.unwrap_or_default(),
        verb: f.verb.unwrap_or_else(|| "get".into()),
        is_resource_request: !f.non_resource.unwrap_or(false),
        api_group: f.api_group.unwrap_or_default(),
        resource: f.resource.unwrap_or_default(),
        subresource: f.subresource.unwrap_or_default(),
        namespace: f.namespace.unwrap_or_default(),
        name: f.object_name.unwrap_or_default(),
        path: f.path.unwrap_or_default(),
    };
    if !request.is_resource_request {
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
    let expect = match f.expect {
        None => None,
        Some(raw::Expect::Word(word)) if word == "served" => Some(Expectation::Served),
        Some(raw::Expect::Word(other)) => {
            c.error(
                format!("{at}.expect"),
                format!(
                    "unknown expectation {:?}; expected `served` or {{served: FRACTION, waitP99: DURATION}}",
                    clip(&other, 64)
                ),
            );
            None
        }
        Some(raw::Expect::Bounds { served, wait_p99 }) => {
            if let Some(s) = served {
                c.check(
                    (0.0..=1.0).contains(&s),
                    format!("{at}.expect.served"),
                    "must be a fraction between 0 and 1",
                );
            }
            c.check(
                served.is_some() || wait_p99.is_some(),
                format!("{at}.expect"),
                "give `served`, `waitP99` or both",
            );
            Some(Expectation::Bounds {
                served,
                wait_p99: wait_p99.map(|d| d.0),
            })
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
        release_seats_after,
        actual_seats: f.actual_seats,
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
fn resource_path(r: &OwnedDigest) -> String {
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
