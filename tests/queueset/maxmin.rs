#![cfg(not(loom))]
//! Acceptance scenarios of max-min allocation among queues (issue 11 part
//! 2, Kubernetes issue 95979): the `flow-maxmin` policy advances R at the
//! water level of the active queues' demands, so a queue that uses less
//! than an equal share of the seats earns no virtual-time credit for the
//! rest; under Kubernetes' equal division it does, and spends it when its
//! demand rises. Each scenario runs on the manual clock under the three
//! policies, through the queueset and the reference model (which must
//! agree event for event); hand size 1, so a flow is a queue and the
//! `flow` policy behaves as Kubernetes' does. docs/flow-fairness.md
//! tabulates the rows these tests print
//! (`cargo test --test queueset maxmin:: -- --nocapture`).

use crate::measure;
use crate::sim;

use apf::queueset::{Fairness, QueueSetConfig};
use measure::*;
use sim::*;

/// One flow's clients beside another's; flow 1 under-uses its share for a
/// minute, then asks for more than it.
struct Case {
    name: &'static str,
    limit: u32,
    clients: Vec<Client>,
    /// Which flow each client belongs to.
    flow_of: Vec<usize>,
    /// Max-min fair shares of the two flows in the second minute.
    fair: [f64; 2],
}

const MINUTE: u64 = 60 * SEC;

impl Case {
    /// Per-flow average seats over the second minute under `fairness`.
    fn second_minute(&self, fairness: Fairness) -> Vec<f64> {
        let cfg = QueueSetConfig {
            fairness,
            ..config(self.limit, 16, 1, 50)
        };
        let t = simulate(&cfg, &self.clients, 2 * MINUTE);
        no_refusals(&t);
        let per_client = exec_seats(&t, self.clients.len(), MINUTE, 2 * MINUTE);
        let mut per_flow = vec![0.0; 2];
        for (seats, &flow) in per_client.iter().zip(&self.flow_of) {
            per_flow[flow] += seats;
        }
        per_flow
    }

    /// Checks Kubernetes more than 10% off max-min and `flow-maxmin`
    /// within 5%; returns the table row.
    fn check(&self) {
        let [kube, flow, max_min] = Fairness::ALL.map(|f| self.second_minute(f));
        let off = |got: &[f64]| {
            got.iter()
                .zip(&self.fair)
                .map(|(g, f)| (g - f).abs() / f)
                .fold(0.0, f64::max)
        };
        let show = |v: &[f64]| format!("{:.2} / {:.2}", v[0], v[1]);
        eprintln!(
            "| {} | {} | {} ({:.0}% off) | {} | {} ({:.1}% off) |",
            self.name,
            show(&self.fair),
            show(&kube),
            off(&kube) * 100.0,
            show(&flow),
            show(&max_min),
            off(&max_min) * 100.0
        );
        assert!(off(&kube) > 0.10, "{}: kubernetes {kube:?}", self.name);
        assert_within(
            &format!("{} under flow-maxmin", self.name),
            &max_min,
            &self.fair,
            0.05,
        );
    }
}

#[test]
fn windup_of_an_underusing_flow() {
    // Kubernetes' windup test (tests/queueset/fairness.rs): 3 seats, flow 0 two
    // threads, flow 1 one thread and a second one from the second minute;
    // each thread calls again 1 ns before its call ends. In the first
    // minute flow 1 uses 1 seat of the 1.5 equal division credits it;
    // Kubernetes then gives it 1.75 of 3 (its own test requires 10-26%
    // off), max-min 1.5.
    let f = disjoint_flows(16, 1, 2);
    Case {
        name: "windup (2 threads vs 1, then 2), limit 3",
        limit: 3,
        clients: vec![
            Client::new(f[0], 2, SEC, -1),
            Client::new(f[1], 1, SEC, -1),
            Client::new(f[1], 1, SEC, -1).starting_at(MINUTE),
        ],
        flow_of: vec![0, 1, 1],
        fair: [1.5, 1.5],
    }
    .check();
}

#[test]
fn a_short_request_flow_beside_a_long_request_flood() {
    // 16 threads of 1 s requests against a flow of 0.1 s requests: one
    // thread (1 seat of the 1.5 equal division credits it), then three
    // from the second minute. Max-min gives 1.5 each in the second minute.
    let f = disjoint_flows(16, 1, 2);
    Case {
        name: "short (0.1 s, 1 then 3 threads) vs 16 × 1 s, limit 3",
        limit: 3,
        clients: vec![
            Client::new(f[0], 16, SEC, 0),
            Client::new(f[1], 1, SEC / 10, -1),
            Client::new(f[1], 2, SEC / 10, -1).starting_at(MINUTE),
        ],
        flow_of: vec![0, 1, 1],
        fair: [1.5, 1.5],
    }
    .check();
}

#[test]
fn a_short_request_flow_beside_long_requests() {
    // As above against 16 threads of 4 s requests, the short flow's
    // requests taking 0.5 s.
    let f = disjoint_flows(16, 1, 2);
    Case {
        name: "short (0.5 s, 1 then 3 threads) vs 16 × 4 s, limit 3",
        limit: 3,
        clients: vec![
            Client::new(f[0], 16, 4 * SEC, -1),
            Client::new(f[1], 1, SEC / 2, -1),
            Client::new(f[1], 2, SEC / 2, -1).starting_at(MINUTE),
        ],
        flow_of: vec![0, 1, 1],
        fair: [1.5, 1.5],
    }
    .check();
}
