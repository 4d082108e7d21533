//! `apf simulate --compare-fairness[=POLICY]`: one workload under
//! Kubernetes' fairness policy and under another (`flow` unless named),
//! flow by flow, so an operator can see what switching a level would
//! change before doing it.

use super::engine::{run, SimulationError};
use super::report::{wait, Report};
use super::workload::Workload;
use crate::config::{Config, FAIRNESS_ANNOTATION};
use crate::queueset::Fairness;

/// `config` with every priority level annotated with `fairness` (the
/// annotation only matters where a level queues).
pub fn with_fairness(config: &Config, fairness: Fairness) -> Config {
    let mut config = config.clone();
    for pl in &mut config.priority_levels {
        pl.metadata.annotations.insert(
            FAIRNESS_ANNOTATION.to_string(),
            fairness.as_str().to_string(),
        );
    }
    config
}

/// One flow under both policies.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessRow {
    /// The workload's flow (all its replicas).
    pub flow: String,
    /// Where it was classified (under Kubernetes' policy).
    pub level: String,
    /// Average seats held (seat-seconds over the simulated time), under
    /// Kubernetes' policy and under the other.
    pub seats: [f64; 2],
    /// Dispatched over demand, under each policy.
    pub served: [f64; 2],
    /// 99th-percentile wait before dispatch, ns, under each policy.
    pub wait_p99: [u64; 2],
}

/// The workload's flows under both policies.
#[derive(Debug, Clone, PartialEq)]
pub struct FairnessComparison {
    /// The policy compared with Kubernetes'.
    pub against: Fairness,
    /// One row per flow of the workload, in its order.
    pub rows: Vec<FairnessRow>,
    /// The full reports, Kubernetes' policy first.
    pub reports: [Report; 2],
}

/// Run `workload` against `config` with every level under Kubernetes'
/// policy, then under `flow`, with the same seed.
pub fn compare_fairness(
    config: &Config,
    workload: &Workload,
    seed: u64,
    progress: &mut dyn FnMut(f64),
) -> Result<FairnessComparison, SimulationError> {
    compare_fairness_with(config, workload, Fairness::Flow, seed, progress)
}

/// Run `workload` against `config` with every level under Kubernetes'
/// policy, then under `against`, with the same seed.
pub fn compare_fairness_with(
    config: &Config,
    workload: &Workload,
    against: Fairness,
    seed: u64,
    progress: &mut dyn FnMut(f64),
) -> Result<FairnessComparison, SimulationError> {
    let mut reports = Vec::with_capacity(2);
    for (i, fairness) in [Fairness::Kubernetes, against].into_iter().enumerate() {
        let (report, _) = run(&with_fairness(config, fairness), workload, seed, &mut |f| {
            progress((i as f64 + f) / 2.0)
        })?;
        reports.push(report);
    }
    let flow_report = reports.pop().expect("two runs");
    let kube = reports.pop().expect("two runs");
    let secs = workload.duration.as_secs_f64().max(f64::MIN_POSITIVE);
    let rows = kube
        .flows
        .iter()
        .map(|k| {
            let f = flow_report.flow(&k.name).unwrap_or(k);
            FairnessRow {
                flow: k.name.clone(),
                level: k.level.clone(),
                seats: [k.seat_seconds / secs, f.seat_seconds / secs],
                served: [k.served, f.served],
                wait_p99: [k.wait.quantile(0.99), f.wait.quantile(0.99)],
            }
        })
        .collect();
    Ok(FairnessComparison {
        against,
        rows,
        reports: [kube, flow_report],
    })
}

impl FairnessComparison {
    /// A table: per flow, its average seats, served fraction and p99 wait
    /// under each policy.
    pub fn render(&self) -> String {
        let to = self.against.as_str();
        let (seats_head, served_head, wait_head) = (
            format!("avg seats k8s -> {to}"),
            format!("served k8s -> {to}"),
            format!("p99 wait k8s -> {to}"),
        );
        let mut out = format!(
            "fairness comparison (every level under each policy; same seed):\n\
             {:<24} {:<22} {seats_head:<26} {served_head:<20} {wait_head}\n",
            "flow", "level",
        );
        for r in &self.rows {
            let change = if r.seats[0] > 0.0 {
                format!("{:+.0}%", (r.seats[1] / r.seats[0] - 1.0) * 100.0)
            } else {
                "-".to_string()
            };
            out.push_str(&format!(
                "{:<24} {:<22} {:>6.2} -> {:>6.2} {:>6}   {:>5.1}% -> {:>5.1}%   {:>8} -> {:<8}\n",
                clip(&r.flow, 24),
                clip(&r.level, 22),
                r.seats[0],
                r.seats[1],
                change,
                r.served[0] * 100.0,
                r.served[1] * 100.0,
                wait(r.wait_p99[0]),
                wait(r.wait_p99[1]),
            ));
        }
        out
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn both_policies_run_and_every_flow_gets_a_row() {
        let workload =
            Workload::from_slice(include_bytes!("../../examples/workloads/minimal.yaml"))
                .expect("valid workload")
                .with_duration(Duration::from_secs(2))
                .expect("a shorter run");
        let config = Config::builtin();
        let flow = with_fairness(&config, Fairness::Flow);
        let valid = flow.validate().expect("valid");
        assert!(valid
            .priority_levels()
            .iter()
            .all(|pl| pl.fairness == Fairness::Flow));
        let c = compare_fairness(&config, &workload, 1, &mut |_| {}).expect("runs");
        assert_eq!(c.rows.len(), workload.flows.len());
        assert_eq!(c.rows[0].flow, "shop-frontend");
        // An unsaturated level serves everyone under either policy.
        assert!(c.rows[0].served.iter().all(|&s| s > 0.99), "{:?}", c.rows);
        assert!(c.render().contains("shop-frontend"));
    }
}
