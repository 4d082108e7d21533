//! What a simulation found, per flow and per level, the verdict on the
//! workload's expectations, and the text `apf simulate` prints.

use super::histogram::LogHistogram;
use super::workload::Expectation;
use crate::queueset::RejectReason;
use std::fmt::Write as _;
use std::time::Duration;

/// Everything a run found. Deterministic: the same configuration, workload
/// and seed give an equal report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The workload's name (empty when its file gives none).
    pub workload: String,
    /// The workload's description.
    pub description: String,
    /// The seed the run used (the workload's, or the one given to [`super::run`]).
    pub seed: u64,
    /// Simulated time the run covered.
    pub duration: Duration,
    /// The server's concurrency limit (seats shared by all levels).
    pub server_concurrency_limit: u32,
    /// Whether the adaptive limit was on (`server_concurrency_limit` is
    /// then the total it started from; `series.server_limit` has its
    /// course).
    pub adaptive: bool,
    /// Whether the workload has a backend model (`series.backend_capacity`).
    pub backend: bool,
    /// The verdict's threshold (the workload's `servedFraction`).
    pub served_fraction: f64,
    /// Requests the dispatcher decided on.
    pub requests: u64,
    /// In the workload's order.
    pub flows: Vec<FlowReport>,
    /// Every level of the configuration, in its order.
    pub levels: Vec<LevelReport>,
    /// Time series for the charts.
    pub series: Series,
}

/// One flow entry of the workload (all its replicas together).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReport {
    /// The flow entry's name in the workload.
    pub name: String,
    /// How many flows the entry stands for.
    pub replicas: u32,
    /// Where its first replica was classified.
    pub schema: String,
    /// The priority level its first replica was classified into.
    pub level: String,
    /// Its first replica's flow distinguisher (the user or namespace its
    /// schema's distinguisher method picked; empty for none).
    pub distinguisher: String,
    /// What the workload expects of the flow, checked by [`Report::verdict`].
    pub expect: Option<Expectation>,
    /// Requests that arrived (open loop, bursts and closed-loop sends).
    pub arrived: u64,
    /// Requests that were given seats (at once or from a queue).
    pub dispatched: u64,
    /// Requests that finished executing before the end of the run.
    pub completed: u64,
    /// Requests the flow wanted to start: its arrivals (open loop), or what
    /// its clients would have sent had they never waited (closed loop).
    pub demand: f64,
    /// `demand` per simulated second.
    pub demand_per_second: f64,
    /// Completed requests per simulated second.
    pub throughput: f64,
    /// Dispatched requests over demand.
    pub served: f64,
    /// The lowest `served` of one replica, when there are several and each
    /// wanted at least a hundred requests (below that it is mostly noise).
    pub worst_replica_served: Option<f64>,
    /// Seats × time held by its requests (initial seats while executing,
    /// final seats during additional latency).
    pub seat_seconds: f64,
    /// Its share of the seat-seconds of all flows.
    pub seat_share: f64,
    /// What its requests really cost (its `actualSeats`, or its initial
    /// seats) × their execution time, in seat-seconds.
    pub cost_seconds: f64,
    /// Its share of the real cost of all flows: what a server that shares
    /// its capacity among the executing requests gives the flow (the
    /// simulator does not slow requests down when they cost more than the
    /// seats they hold; this share says who would be slowed).
    pub cost_share: f64,
    /// Time from arrival to dispatch of each dispatched request, ns.
    pub wait: LogHistogram,
    /// Execution times (start to finish) of its completed requests: the
    /// backend's latency.
    pub execution: LogHistogram,
    /// Rejections by reason, indexed by `RejectReason as usize`.
    pub rejected: [u64; 4],
}

/// One priority level (all the flows classified there).
#[derive(Debug, Clone, PartialEq)]
pub struct LevelReport {
    /// The level's name.
    pub name: String,
    /// Whether the level is exempt (executes everything at once).
    pub exempt: bool,
    /// NominalCL; `None` for exempt levels.
    pub nominal_limit: Option<u32>,
    /// The concurrency limit averaged over the samples (borrowing moves
    /// it); `None` for exempt levels.
    pub mean_limit: Option<f64>,
    /// Requests classified to the level.
    pub arrived: u64,
    /// Requests given seats (at once or from a queue).
    pub dispatched: u64,
    /// Requests that finished executing before the end of the run.
    pub completed: u64,
    /// Completed requests per simulated second.
    pub throughput: f64,
    /// Seats × seconds held by the level's requests.
    pub seat_seconds: f64,
    /// Its share of the seat-seconds of all levels (0..=1).
    pub seat_share: f64,
    /// Seats in use, averaged over the run.
    pub mean_seats: f64,
    /// Time from arrival to dispatch of each dispatched request, ns.
    pub wait: LogHistogram,
    /// Rejections by reason, indexed by `RejectReason as usize`.
    pub rejected: [u64; 4],
    /// Longest total queue length seen at a sample.
    pub max_queue_length: u32,
    /// Requests its queues hold at most (queues × queue length limit);
    /// `None` for levels that do not queue.
    pub queue_capacity: Option<u32>,
    /// The level's own dispatch counter (to cross-check the simulator's).
    pub dispatcher_dispatched: u64,
}

/// Time series for the charts: one point per sample interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Length of each sample interval (the workload's `sampleInterval`).
    pub interval: Duration,
    /// End of each interval, seconds.
    pub times: Vec<f64>,
    /// Per flow entry, per interval.
    pub flow_seat_seconds: Vec<Vec<f64>>,
    /// Per level, sampled at the end of each interval.
    pub level_queue_length: Vec<Vec<u32>>,
    /// Per level, seats in use at the end of each interval.
    pub level_seats_in_use: Vec<Vec<u32>>,
    /// Per level, its concurrency limit at the end of each interval (0 for
    /// exempt levels).
    pub level_limit: Vec<Vec<u32>>,
    /// Per flow entry, requests that arrived in each interval (its demand
    /// as sent; closed-loop clients send less while they wait).
    pub flow_arrived: Vec<Vec<u64>>,
    /// Per flow entry, requests that completed in each interval.
    pub flow_completed: Vec<Vec<u64>>,
    /// Rejections in each interval, indexed by `RejectReason as usize`.
    pub rejected: [Vec<u64>; 4],
    /// The seats shared by all levels at the end of each interval (fixed,
    /// or the adaptive limit's total).
    pub server_limit: Vec<u32>,
    /// Requests executing in the backend at the end of each interval.
    pub backend_in_flight: Vec<u64>,
    /// The backend model's capacity at the end of each interval (empty
    /// without one).
    pub backend_capacity: Vec<u32>,
    /// When a flow entered one of its phases (seconds), and a label
    /// ("tenants ×4").
    pub phase_changes: Vec<(f64, String)>,
}

impl Series {
    /// Adds one to `counts` in the interval that `at_ns` falls in (the last
    /// one for the very end of the run).
    pub(crate) fn count(interval: Duration, counts: &mut [u64], at_ns: u64) {
        let interval = crate::clock::duration_nanos(interval).max(1);
        let k = ((at_ns / interval) as usize).min(counts.len().saturating_sub(1));
        if let Some(c) = counts.get_mut(k) {
            *c += 1;
        }
    }

    /// Times (seconds) at which some level's limit differs from the
    /// previous sample's: borrowing moved seats.
    pub fn borrowing_adjustments(&self) -> Vec<f64> {
        (1..self.times.len())
            .filter(|&k| {
                self.level_limit
                    .iter()
                    .any(|l| l.len() > k && l[k] != l[k - 1])
            })
            .map(|k| self.times[k])
            .collect()
    }
}

/// Whether the workload's expectations held.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// True when every check passed (and vacuously when there is none).
    pub pass: bool,
    /// One check per flow that has an expectation, in the workload's order.
    pub checks: Vec<Check>,
}

/// One flow's expectation and how it fared.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The flow entry's name.
    pub flow: String,
    /// Dispatched requests over demand (0..=1).
    pub served: f64,
    /// The least fraction of its demand it had to get, if checked.
    pub served_bound: Option<f64>,
    /// Its wait p99, in nanoseconds.
    pub wait_p99: u64,
    /// The longest wait p99 allowed, if checked.
    pub wait_p99_bound: Option<Duration>,
    /// Whether every checked bound held.
    pub pass: bool,
}

impl Check {
    fn of(flow: &FlowReport, expectation: &Expectation, default_served: f64) -> Check {
        let served_bound = expectation.served_fraction(default_served);
        let wait_p99 = flow.wait.quantile(0.99);
        let wait_p99_bound = expectation.wait_p99();
        let served_ok = served_bound.is_none_or(|b| flow.served >= b);
        let wait_ok = wait_p99_bound.is_none_or(|b| u128::from(wait_p99) <= b.as_nanos());
        Check {
            flow: flow.name.clone(),
            served: flow.served,
            served_bound,
            wait_p99,
            wait_p99_bound,
            pass: served_ok && wait_ok,
        }
    }

    /// Why it failed, in words (empty when it passed).
    fn shortfall(&self) -> String {
        let mut why = Vec::new();
        if let Some(b) = self.served_bound.filter(|b| self.served < *b) {
            why.push(format!("served below {}", percent(b)));
        }
        if let Some(b) = self
            .wait_p99_bound
            .filter(|b| u128::from(self.wait_p99) > b.as_nanos())
        {
            why.push(format!(
                "wait p99 over {}",
                wait(b.as_nanos() as u64).trim()
            ));
        }
        why.join(", ")
    }
}

impl FlowReport {
    /// `name` or `name ×replicas`.
    pub fn label(&self) -> String {
        if self.replicas > 1 {
            format!("{} ×{}", self.name, self.replicas)
        } else {
            self.name.clone()
        }
    }

    /// Rejections of every reason together.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

impl LevelReport {
    /// Rejections of every reason together.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

impl Report {
    /// Requests completed per second, over all flows.
    pub fn goodput(&self) -> f64 {
        let completed: u64 = self.flows.iter().map(|f| f.completed).sum();
        completed as f64 / self.duration.as_secs_f64().max(1e-9)
    }

    /// Execution times of every flow's completed requests together.
    pub fn execution(&self) -> LogHistogram {
        let mut all = LogHistogram::default();
        for f in &self.flows {
            all.merge(&f.execution);
        }
        all
    }

    /// The flow entry named `name`, if the workload has one.
    pub fn flow(&self, name: &str) -> Option<&FlowReport> {
        self.flows.iter().find(|f| f.name == name)
    }

    /// The level named `name`, if the configuration has one.
    pub fn level(&self, name: &str) -> Option<&LevelReport> {
        self.levels.iter().find(|l| l.name == name)
    }

    /// Levels that saw traffic.
    pub fn busy_levels(&self) -> impl Iterator<Item = &LevelReport> {
        self.levels.iter().filter(|l| l.arrived > 0)
    }

    /// Checks every flow's expectation against what it got.
    pub fn verdict(&self) -> Verdict {
        let checks: Vec<Check> = self
            .flows
            .iter()
            .filter_map(|f| {
                f.expect
                    .as_ref()
                    .map(|e| Check::of(f, e, self.served_fraction))
            })
            .collect();
        Verdict {
            pass: checks.iter().all(|c| c.pass),
            checks,
        }
    }

    /// The report as `apf simulate` prints it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_flows(&mut out);
        out.push('\n');
        self.render_levels(&mut out);
        self.render_server_limit(&mut out);
        let notes = self.notes();
        if !notes.is_empty() {
            for note in &notes {
                let _ = writeln!(out, "note: {note}");
            }
        }
        out.push('\n');
        self.render_verdict(&mut out);
        out
    }

    /// With an adaptive limit or a backend model: the total's course, the
    /// goodput and the backend's latency.
    fn render_server_limit(&self, out: &mut String) {
        if !(self.adaptive || self.backend) {
            return;
        }
        let limits = &self.series.server_limit;
        let (lo, hi) = (
            limits.iter().copied().min().unwrap_or(0),
            limits.iter().copied().max().unwrap_or(0),
        );
        let mean = limits.iter().map(|&x| f64::from(x)).sum::<f64>() / limits.len().max(1) as f64;
        let execution = self.execution();
        let _ = writeln!(
            out,
            "\nserver limit: {} (mean {mean:.1}, {lo}..{hi}); goodput {}/s; execution p50 {} p99 {}",
            if self.adaptive { "adaptive" } else { "fixed" },
            rate(self.goodput()),
            duration(Duration::from_nanos(execution.quantile(0.5))),
            duration(Duration::from_nanos(execution.quantile(0.99))),
        );
    }

    /// What an operator may misread in the level table, explained where it
    /// occurs: a limit below or above nominal (lending, borrowing) and a
    /// queue total above the per-queue length limit.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for l in self.busy_levels() {
            let (Some(nominal), Some(mean)) = (l.nominal_limit, l.mean_limit) else {
                continue;
            };
            let nominal_f = f64::from(nominal);
            if mean < nominal_f - 0.5 {
                notes.push(format!(
                    "{}: limit avg {mean:.1} is below its nominal {nominal}: it lent seats to levels \
                     whose demand was higher (at most its lendablePercent), and gets them back within \
                     a borrowing period when its own demand rises",
                    l.name
                ));
            } else if mean > nominal_f + 0.5 {
                notes.push(format!(
                    "{}: limit avg {mean:.1} is above its nominal {nominal}: it borrowed seats that idle \
                     levels lent (up to its borrowingLimitPercent)",
                    l.name
                ));
            }
        }
        for l in self.busy_levels().filter(|l| l.max_queue_length > 0) {
            notes.push(format!(
                "{}: queue max {} counts the waiting requests of all its queues together; \
                 queueLengthLimit caps each queue, and a flow spreads over the handSize queues \
                 dealt to it, so it can have up to handSize × queueLengthLimit waiting before \
                 it is rejected (queue-full)",
                l.name, l.max_queue_length
            ));
        }
        notes
    }

    fn render_flows(&self, out: &mut String) {
        let name_w = width(self.flows.iter().map(|f| f.label()), "flow");
        let level_w = width(self.flows.iter().map(|f| f.level.clone()), "level");
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<level_w$}  {:>9}  {:>9}  {:>6}  {:>10}  {:>8}  {:>8}  {:>8}  rejected",
            "flow", "level", "demand/s", "done/s", "served", "seat share", "wait p50", "p99", "max",
        );
        for f in &self.flows {
            let _ = writeln!(
                out,
                "{:<name_w$}  {:<level_w$}  {:>9}  {:>9}  {:>6}  {:>10}  {:>8}  {:>8}  {:>8}  {}",
                f.label(),
                f.level,
                rate(f.demand_per_second),
                rate(f.throughput),
                percent(f.served),
                percent(f.seat_share),
                wait(f.wait.quantile(0.5)),
                wait(f.wait.quantile(0.99)),
                wait(f.wait.max()),
                rejections(&f.rejected),
            );
        }
    }

    fn render_levels(&self, out: &mut String) {
        let name_w = width(self.busy_levels().map(|l| l.name.clone()), "level");
        let _ = writeln!(
            out,
            "{:<name_w$}  {:>7}  {:>9}  {:>10}  {:>9}  {:>10}  {:>8}  {:>8}  {:>8}  {:>9}  rejected",
            "level",
            "nominal",
            "limit avg",
            "seats used",
            "done/s",
            "seat share",
            "wait p50",
            "p99",
            "max",
            "queue max"
        );
        for l in self.busy_levels() {
            let (nominal, mean) = match (l.nominal_limit, l.mean_limit) {
                (Some(n), Some(m)) => (n.to_string(), format!("{m:.1}")),
                _ => ("exempt".to_string(), "-".to_string()),
            };
            let _ = writeln!(
                out,
                "{:<name_w$}  {:>7}  {:>9}  {:>10.1}  {:>9}  {:>10}  {:>8}  {:>8}  {:>8}  {:>9}  {}",
                l.name,
                nominal,
                mean,
                l.mean_seats,
                rate(l.throughput),
                percent(l.seat_share),
                wait(l.wait.quantile(0.5)),
                wait(l.wait.quantile(0.99)),
                wait(l.wait.max()),
                l.max_queue_length,
                rejections(&l.rejected),
            );
        }
    }

    fn render_verdict(&self, out: &mut String) {
        let verdict = self.verdict();
        let only_served = self
            .flows
            .iter()
            .all(|f| matches!(f.expect, None | Some(Expectation::Served)));
        if verdict.checks.is_empty() {
            out.push_str("verdict: nothing to check (no flow has `expect:`)\n");
        } else if only_served {
            let _ = writeln!(
                out,
                "verdict: {} — {} of {} flows expected to be served got at least {} of their demand",
                if verdict.pass { "PASS" } else { "FAIL" },
                verdict.checks.iter().filter(|c| c.pass).count(),
                verdict.checks.len(),
                percent(self.served_fraction),
            );
        } else {
            let _ = writeln!(
                out,
                "verdict: {} — {} of {} flows met their expectations (served fraction, wait p99)",
                if verdict.pass { "PASS" } else { "FAIL" },
                verdict.checks.iter().filter(|c| c.pass).count(),
                verdict.checks.len(),
            );
        }
        let name_w = width(self.flows.iter().map(|f| f.label()), "");
        let level_w = width(self.flows.iter().map(|f| f.level.clone()), "");
        for f in &self.flows {
            let check = f
                .expect
                .as_ref()
                .map(|e| Check::of(f, e, self.served_fraction));
            let mark = match &check {
                Some(c) if c.pass => "ok  ",
                Some(_) => "FAIL",
                None => "    ",
            };
            let mut line = format!(
                "  {mark}  {:<name_w$}  {:<level_w$}  {:>6} of demand",
                f.label(),
                f.level,
                percent(f.served)
            );
            if let Some(worst) = f.worst_replica_served {
                let _ = write!(line, " (worst replica {})", percent(worst));
            }
            let _ = write!(line, ", wait p99 {}", wait(f.wait.quantile(0.99)).trim());
            if f.rejected_total() > 0 {
                let _ = write!(line, ", {} rejected", count(f.rejected_total()));
            }
            match &check {
                Some(c) if !c.pass => {
                    let _ = write!(line, " — {}", c.shortfall());
                }
                Some(_) => {}
                None => {
                    if let Some(level) = self.level(&f.level) {
                        let _ = write!(
                            line,
                            "; {} of its level's seat time",
                            percent(ratio(f.seat_seconds, level.seat_seconds)),
                        );
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn width(items: impl Iterator<Item = String>, header: &str) -> usize {
    items
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(header.chars().count())
}

/// `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A simulated duration: `60 s`, `1.5 s`, `250 ms`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1000.0 {
        format!("{} ms", trim(ms))
    } else {
        format!("{} s", trim(ms / 1e3))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Requests per second: whole numbers from 100 on, one decimal below.
fn rate(r: f64) -> String {
    if r >= 100.0 {
        count(r.round() as u64)
    } else if r >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A wait: `0`, `850 µs`, `12.5 ms`, `3.20 s`.
pub fn wait(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns == 0 {
        "0".into()
    } else if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.0} µs", ns_f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else {
        format!("{:.2} s", ns_f / 1e9)
    }
}

fn rejections(r: &[u64; 4]) -> String {
    let parts: Vec<String> = RejectReason::ALL
        .iter()
        .filter(|&&reason| r[reason as usize] > 0)
        .map(|&reason| format!("{} {}", count(r[reason as usize]), reason.as_str()))
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(rate(20012.4), "20,012");
        assert_eq!(rate(36.44), "36.4");
        assert_eq!(rate(0.5), "0.50");
        assert_eq!(wait(0), "0");
        assert_eq!(wait(850), "850 ns");
        assert_eq!(wait(85_000), "85 µs");
        assert_eq!(wait(12_500_000), "12.5 ms");
        assert_eq!(wait(3_200_000_000), "3.20 s");
        assert_eq!(duration(Duration::from_secs(60)), "60 s");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(rejections(&[0; 4]), "0");
        assert_eq!(rejections(&[5, 1000, 0, 0]), "5 queue-full, 1,000 time-out");
    }
}
