//! Kubernetes' uniform queueset scenario, as `tests/queueset/k8s_scenarios.rs` and
//! `tests/queueset/k8s_departures.rs` run it on the simulation harness: clients,
//! level, evaluation windows, the expected fairness and margin, and
//! Kubernetes' final review.
//!
//! Included with `#[path]` after `support/sim.rs` and `support/measure.rs`
//! (as `sim` and `measure`).
#![allow(dead_code)]

use crate::measure::*;
use crate::sim::*;
use apf::queueset::{QueueSetConfig, RejectReason};
use std::time::Duration;

pub const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Kubernetes' think time for "just under the execution time".
pub const THINK: i64 = SEC as i64 - 1;

/// Kubernetes' test queueset: `queues` (0: no queuing), queue length limit,
/// hand size and concurrency limit; G = 3 ms as in its test factory.
pub fn k8s_cfg(queues: u32, queue_length_limit: u32, hand: u32, limit: u32) -> QueueSetConfig {
    QueueSetConfig {
        name: "k8s".into(),
        concurrency_limit: limit,
        queues,
        hand_size: hand,
        queue_length_limit,
        service_time_guess: Duration::from_millis(3),
        wait_limit: CENTURY,
        fairness: apf::queueset::Fairness::Kubernetes,
    }
}

/// Where a scenario runs.
pub enum Level {
    Queueset(QueueSetConfig),
    /// The built-in `exempt` level of a dispatcher with this server limit.
    Exempt(u32),
}

/// One of Kubernetes' uniform scenarios.
pub struct Scenario {
    pub name: String,
    pub level: Level,
    pub clients: Vec<Client>,
    /// The capacity the fair allocation divides (Kubernetes'
    /// `concurrencyLimit` of the scenario).
    pub limit: u32,
    pub eval: u64,
    /// (expect fair, margin): one entry, or one per half when a client is
    /// split.
    pub expect: Vec<(bool, f64)>,
    /// Replaces the fair allocation as the expected averages.
    pub averages: Option<Vec<f64>>,
    /// Every request is served; otherwise at least one must be refused,
    /// each for `reject_reason`.
    pub all_served: bool,
    pub reject_reason: Option<RejectReason>,
}

impl Scenario {
    pub fn new(name: impl Into<String>, cfg: QueueSetConfig, clients: Vec<Client>) -> Scenario {
        Scenario {
            name: name.into(),
            limit: cfg.concurrency_limit,
            level: Level::Queueset(cfg),
            clients,
            eval: 0,
            expect: vec![(true, 0.0)],
            averages: None,
            all_served: true,
            reject_reason: None,
        }
    }

    pub fn eval(mut self, seconds: u64, fair: bool, margin: f64) -> Scenario {
        self.eval = seconds * SEC;
        self.expect = vec![(fair, margin)];
        self
    }

    pub fn run(&self) -> Trace {
        let split = self.clients.iter().any(|c| c.split_at.is_some());
        let windows: Vec<(u64, u64)> = if split {
            vec![(0, self.eval / 2), (self.eval / 2, self.eval)]
        } else {
            vec![(0, self.eval)]
        };
        let opts = RunOptions {
            horizon: u64::MAX,
            stagger: (90, 20),
            checkpoints: windows.iter().map(|w| w.1).collect(),
            reconfigure: Vec::new(),
        };
        let trace = match &self.level {
            Level::Queueset(cfg) => simulate_with(cfg, &self.clients, &opts),
            Level::Exempt(server_limit) => simulate_exempt(*server_limit, &self.clients, &opts),
        };
        let name = &self.name;
        for (w, &(from, to)) in windows.iter().enumerate() {
            let first_half = split && w == 0;
            let demands: Vec<f64> = self
                .clients
                .iter()
                .map(|c| {
                    let threads = if c.split_at.is_some() && first_half {
                        c.threads / 2
                    } else {
                        c.threads
                    };
                    Client { threads, ..*c }.demand()
                })
                .collect();
            let expected = match &self.averages {
                Some(a) => a.clone(),
                None => fair_alloc(&demands, self.limit as f64),
            };
            let got = exec_seats(&trace, self.clients.len(), from, to);
            let (fair, margin) = self.expect[w.min(self.expect.len() - 1)];
            for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
                let off = if e > 0.0 { (g - e).abs() / e } else { g.abs() };
                assert_eq!(
                    off <= margin,
                    fair,
                    "{name}, window {from}..{to} ns: client {i} got {g:.6} seats, expected {e:.6} \
                     (off by {:.3}%, margin {:.3}%, expected {}); all: got {got:.4?}, expected {expected:.4?}",
                    off * 100.0,
                    margin * 100.0,
                    if fair { "within" } else { "outside" },
                );
            }
            eprintln!("{name}, window {from}..{to}: got {got:.4?}, expected {expected:.4?}");
        }
        self.final_review(&trace);
        trace
    }

    /// Kubernetes' final review: requests served or refused as expected,
    /// nothing left in queues or executing, refusals counted by reason.
    fn final_review(&self, trace: &Trace) {
        let name = &self.name;
        let calls: u64 = self
            .clients
            .iter()
            .map(|c| {
                let late = if c.split_at.is_some() {
                    c.threads - c.threads / 2
                } else {
                    0
                };
                let calls = u64::from(c.calls);
                u64::from(c.threads - late) * calls + u64::from(late) * (calls / 2)
            })
            .sum();
        if self.all_served {
            assert!(
                trace.refused.is_empty(),
                "{name}: refused {:?}",
                trace.refused
            );
            assert_eq!(
                trace.served.len() as u64,
                calls,
                "{name}: every call served"
            );
        } else {
            assert!(
                !trace.refused.is_empty(),
                "{name}: expected refusals, got none"
            );
        }
        assert_eq!(
            trace.final_counts,
            (0, 0, 0),
            "{name}: (seats, executing, waiting) at the end"
        );
        if let Some(reason) = self.reject_reason {
            assert!(
                trace.refused.iter().all(|&(_, r)| r == reason),
                "{name}: refusals {:?}, all expected {reason}",
                trace.refused
            );
        }
        if let Some(stats) = &trace.stats {
            let by_reason = |r: RejectReason| trace.refused.iter().filter(|x| x.1 == r).count();
            for r in RejectReason::ALL {
                assert_eq!(
                    stats.rejected[r as usize],
                    by_reason(r) as u64,
                    "{name}: {r} count"
                );
            }
            let windows = if self.expect.len() > 1 { 2 } else { 1 };
            assert_eq!(trace.demand_checks, windows, "{name}: seat demand checked");
        }
    }
}

/// A Kubernetes uniform client: `threads` threads of `calls` calls each.
pub fn client(hash: u64, threads: u32, calls: u32, exec: u64, think: i64) -> Client {
    Client::new(hash, threads, exec, think).calls(calls)
}
