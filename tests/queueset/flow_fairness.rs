#![cfg(not(loom))]
//! Acceptance scenarios of the flow fairness policy (issue 11): each
//! workload runs on the manual clock under Kubernetes' policy (the default)
//! and under `flow`, through the queueset and the reference model (which
//! must agree event for event). Under `flow` every flow's average seats
//! must be within 5% of its max-min fair share (10% where widths differ);
//! under the default the same workload must show Kubernetes' unfairness
//! (queues, not flows, compete fairly). docs/flow-fairness.md tabulates the
//! numbers these tests print (`cargo test --test queueset flow_fairness:: -- --nocapture`).

use crate::measure;
use crate::sim;

use apf::queueset::{Fairness, QueueSetConfig};
use measure::*;
use sim::*;

/// Average executing seats per client over the run's second half, under
/// `fairness`.
fn run(cfg: &QueueSetConfig, fairness: Fairness, clients: &[Client], horizon: u64) -> Vec<f64> {
    let cfg = QueueSetConfig {
        fairness,
        ..cfg.clone()
    };
    let t = simulate(&cfg, clients, horizon);
    no_refusals(&t);
    exec_seats(&t, clients.len(), horizon / 2, horizon)
}

/// Runs a workload under both policies and checks both outcomes.
struct Case {
    name: &'static str,
    cfg: QueueSetConfig,
    clients: Vec<Client>,
    horizon: u64,
    /// How close `flow` must come to max-min (relative).
    tolerance: f64,
}

impl Case {
    /// Returns (max-min, Kubernetes' policy, flow policy).
    fn run(&self) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let fair = fair_alloc(&demands(&self.clients), self.cfg.concurrency_limit as f64);
        let kube = run(&self.cfg, Fairness::Kubernetes, &self.clients, self.horizon);
        let flow = run(&self.cfg, Fairness::Flow, &self.clients, self.horizon);
        eprintln!(
            "| {} | {} | {} | {} |",
            self.name,
            show(&fair),
            show(&kube),
            show(&flow)
        );
        assert_within(
            &format!("{} under flow", self.name),
            &flow,
            &fair,
            self.tolerance,
        );
        (fair, kube, flow)
    }
}

fn show(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The largest relative distance of `got` from `fair`.
fn off(got: &[f64], fair: &[f64]) -> f64 {
    got.iter()
        .zip(fair)
        .map(|(g, f)| (g - f).abs() / f)
        .fold(0.0, f64::max)
}

#[test]
fn elephant_and_mouse() {
    // Issue 11's headline: 16 closed-loop threads against 1, limit 4, 64
    // queues, hand 6, 1 s requests and no think time. Max-min: 3 and 1.
    let flows = disjoint_flows(64, 6, 2);
    let case = Case {
        name: "elephant (16 threads) vs mouse (1)",
        cfg: config(4, 64, 6, 50),
        clients: vec![
            Client::new(flows[0], 16, SEC, 0),
            Client::new(flows[1], 1, SEC, 0),
        ],
        horizon: 120 * SEC,
        tolerance: 0.05,
    };
    let (fair, kube, _) = case.run();
    // Kubernetes: the elephant spreads over its six queues.
    assert!(kube[1] < 0.8 * fair[1], "default policy: mouse {kube:?}");
}

#[test]
fn many_mice_and_one_elephant() {
    // Six one-thread mice and a 32-thread elephant share 8 seats: max-min
    // gives each mouse 1 and the elephant 2.
    let flows = disjoint_flows(64, 6, 7);
    let mut clients = vec![Client::new(flows[0], 32, SEC, 0)];
    clients.extend(flows[1..].iter().map(|&f| Client::new(f, 1, SEC, 0)));
    let case = Case {
        name: "elephant (32 threads) vs 6 mice",
        cfg: config(8, 64, 6, 50),
        clients,
        horizon: 120 * SEC,
        tolerance: 0.05,
    };
    let (fair, kube, _) = case.run();
    assert!(off(&kube, &fair) > 0.10, "default policy: {kube:?}");
}

#[test]
fn long_requests_against_short_ones() {
    // 16 threads of 4 s requests against 2 threads of 0.5 s requests, 4
    // seats: each flow wants at least 2, so max-min gives 2 and 2.
    let flows = disjoint_flows(64, 6, 2);
    let case = Case {
        name: "long (16 × 4 s) vs short (2 × 0.5 s)",
        cfg: config(4, 64, 6, 50),
        clients: vec![
            Client::new(flows[0], 16, 4 * SEC, 0),
            Client::new(flows[1], 2, SEC / 2, 0),
        ],
        horizon: 240 * SEC,
        tolerance: 0.05,
    };
    let (fair, kube, _) = case.run();
    assert!(off(&kube, &fair) > 0.10, "default policy: {kube:?}");
}

#[test]
fn wide_requests_against_narrow_ones() {
    // 16 threads of 2-seat requests against 2 threads of 1-seat requests,
    // 6 seats: max-min gives 4 and 2.
    let flows = disjoint_flows(64, 6, 2);
    let case = Case {
        name: "wide (16 × 2 seats) vs narrow (2 × 1 seat)",
        cfg: config(6, 64, 6, 50),
        clients: vec![
            Client::new(flows[0], 16, SEC, 0).width(2),
            Client::new(flows[1], 2, SEC, 0),
        ],
        horizon: 120 * SEC,
        tolerance: 0.10,
    };
    let (fair, kube, _) = case.run();
    assert!(off(&kube, &fair) > 0.10, "default policy: {kube:?}");
}

#[test]
fn a_polite_flow_under_a_flood() {
    // A flood of 32 threads against a polite flow that wants half a seat
    // (1 s requests, 1 s apart), 4 seats: max-min gives 3.5 and 0.5.
    let flows = disjoint_flows(64, 6, 2);
    let case = Case {
        name: "flood (32 threads) vs polite (0.5 seat)",
        cfg: config(4, 64, 6, 50),
        clients: vec![
            Client::new(flows[0], 32, SEC, 0),
            Client::new(flows[1], 1, SEC, SEC as i64),
        ],
        horizon: 120 * SEC,
        tolerance: 0.05,
    };
    let (fair, kube, _) = case.run();
    assert!(off(&kube, &fair) > 0.10, "default policy: {kube:?}");
}
