#![cfg(not(loom))]
//! The measurement harness of issue 22's fairness goals: one scenario per
//! class of the "Measured" table (many flows over few queues,
//! hundreds of heavy and light flows, shared queues with a small hand, one-
//! vs three-seat, mixed widths and service times, wide vs narrow vs short,
//! bursts, a flow returning from idle), each run on the manual clock under
//! the three policies through the queueset and the reference model (which
//! must agree event for event, `support/sim.rs`). Each flow's average
//! seats held over the scenario's window is compared with its max-min
//! fair share, computed independently of the code under test by water
//! filling on the flows' demands (`support/measure.rs`: `fair_alloc`); a
//! scenario's score is the worst relative error over its flows. Also:
//! watch-like requests that give their seats back early, and a
//! reconfiguration mid-run (limit, queues and hand size).
//!
//! `cargo test --release --test queueset fairness_goals::measured_today --
//! --ignored --nocapture` prints the table (docs/flow-fairness.md, "Measured against
//! issue 22's goals"), with the order before issue 22 (the reference model's
//! `WaitingOrder::Queues`) beside today's. Each scenario carries its goal
//! (5%, 10% where widths differ); with its `enforce` set,
//! `enforced_scenarios_meet_their_goals`, which runs in the test command,
//! asserts it under `flow` and `flow-maxmin`, and `flow-maxmin` no more
//! than a tenth of a point worse than `flow`. Every scenario of the table
//! is enforced, two of them with 61 flows active at once. Apart from it,
//! `measured_many_flows` measures thousands of flows active at once (500,
//! 2,000 and 10,000), on demand (docs/flow-fairness.md, "Thousands of
//! flows active at once").

use crate::measure;
use crate::sim;

use apf::queueset::reference::WaitingOrder;
use apf::queueset::{Fairness, QueueSetConfig};
use measure::*;
use sim::*;

/// One scenario of the harness.
struct Scenario {
    name: String,
    /// Limit, queues, hand size (queue length limit 50, G 3 ms, wait
    /// limit 60 s: `sim::config`).
    cfg: QueueSetConfig,
    clients: Vec<Client>,
    /// The flow each client belongs to (clients of a flow share its hash).
    flow_of: Vec<usize>,
    /// The measured window `[from, to)`, nanoseconds; the run ends at `to`.
    window: (u64, u64),
    /// The largest relative error of any flow from its max-min share that
    /// issue 22 allows (5%, 10% where widths differ).
    goal: f64,
    /// Assert the goal under `flow` and `flow-maxmin` in the test command.
    enforce: bool,
    /// A reconfiguration during the run: when, and the new limit, queues
    /// and hand size (the window then measures after it).
    then: Option<(u64, u32, u32, u32)>,
    /// Run the reference model beside the queueset (event for event);
    /// off only for thousands of flows, where the model's work per event
    /// grows with the flows waiting.
    differential: bool,
}

/// What a scenario measured under one policy.
struct Measured {
    /// Each flow's average executing seats over the window.
    seats: Vec<f64>,
    /// The worst relative error from the max-min shares.
    error: f64,
    /// The flow with that error.
    worst: usize,
}

impl Scenario {
    fn flows(&self) -> usize {
        self.flow_of.iter().max().map_or(0, |&f| f + 1)
    }

    /// Each flow's demand over the window, in seats: the sum of Kubernetes'
    /// demand formula over its clients that run the whole window (started
    /// by its beginning, with no limit on their calls).
    fn demands(&self) -> Vec<f64> {
        let mut demand = vec![0.0; self.flows()];
        for (c, &f) in self.clients.iter().zip(&self.flow_of) {
            if c.start <= self.window.0 && c.calls == u32::MAX {
                demand[f] += c.demand();
            }
        }
        demand
    }

    /// The max-min fair shares of the flows over the window (at the limit
    /// in force then).
    fn fair(&self) -> Vec<f64> {
        let limit = self.then.map_or(self.cfg.concurrency_limit, |t| t.1);
        fair_alloc(&self.demands(), limit as f64)
    }

    fn run(&self, fairness: Fairness) -> Measured {
        self.measure(fairness, None)
    }

    /// Under the order before issue 22 (queues first come first served,
    /// least virtual finish among queues), which only the reference model
    /// keeps.
    fn run_before(&self, fairness: Fairness) -> Measured {
        self.measure(fairness, Some(WaitingOrder::Queues))
    }

    /// `order`: None runs the queueset and the reference (which must
    /// agree); Some runs the reference alone under that order.
    fn measure(&self, fairness: Fairness, order: Option<WaitingOrder>) -> Measured {
        let cfg = QueueSetConfig {
            fairness,
            ..self.cfg.clone()
        };
        let (from, to) = self.window;
        let mut opts = RunOptions::until(to);
        if let Some((at, limit, queues, hand_size)) = self.then {
            let next = QueueSetConfig {
                concurrency_limit: limit,
                queues,
                hand_size,
                ..cfg.clone()
            };
            opts.reconfigure.push((at, next));
        }
        let trace = match order {
            None if !self.differential => simulate_queueset(&cfg, &self.clients, &opts),
            None => simulate_with(&cfg, &self.clients, &opts),
            Some(order) => simulate_reference(&cfg, &self.clients, &opts, order),
        };
        no_refusals(&trace);
        let per_client = held_seats(&trace, self.clients.len(), from, to);
        let mut seats = vec![0.0; self.flows()];
        for (s, &f) in per_client.iter().zip(&self.flow_of) {
            seats[f] += s;
        }
        let fair = self.fair();
        let (worst, error) = seats
            .iter()
            .zip(&fair)
            .map(|(g, f)| (g - f).abs() / f)
            .enumerate()
            .fold(
                (0, 0.0),
                |best, (i, e)| if e > best.1 { (i, e) } else { best },
            );
        Measured {
            seats,
            error,
            worst,
        }
    }
}

/// Flow hashes for `n` flows: a fixed sequence, so every run deals the same
/// hands (scenarios whose flows must share queues rely on hashes landing
/// where they land, not on a search).
fn hashes(n: usize) -> Vec<u64> {
    (1..=n as u64)
        .map(|i| {
            // splitmix64's finaliser: well spread, fixed.
            let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

/// One client per flow: (clients, flow of each).
fn one_each(clients: Vec<Client>) -> (Vec<Client>, Vec<usize>) {
    let n = clients.len();
    (clients, (0..n).collect())
}

/// Every scenario, in the table's order.
fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    let half = |horizon: u64| (horizon / 2, horizon);

    // Baselines that today's `flow` already meets (tests/queueset/flow_fairness.rs).
    let f = disjoint_flows(64, 6, 2);
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 16, SEC, 0),
        Client::new(f[1], 1, SEC, 0),
    ]);
    out.push(Scenario {
        name: "elephant (16 threads) vs mouse (1); limit 4, 64 queues, hand 6".into(),
        cfg: config(4, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 16, SEC, 0),
        Client::new(f[1], 2, SEC / 10, 0),
    ]);
    out.push(Scenario {
        name: "long (16 × 1 s) vs short (2 × 0.1 s); limit 4, 64 queues, hand 6".into(),
        cfg: config(4, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Many flows over few queues: 60 light flows (0.1 seat each) and 60
    // four times as busy (0.4) over 8 queues; max-min: 0.1 and 0.3.
    let h = hashes(120);
    let (clients, flow_of) = one_each(
        (0..120)
            .map(|i| {
                let think = if i % 2 == 0 { 9 * SEC } else { 3 * SEC / 2 };
                Client::new(h[i], 1, SEC, think as i64)
            })
            .collect(),
    );
    out.push(Scenario {
        name: "120 flows over 8 queues (hand 2), half 4× as busy; limit 24".into(),
        cfg: config(24, 8, 2, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Hundreds of flows: 20 heavy (4 threads, no think) and 180 light
    // (0.1 seat) over 64 queues, hand 8; max-min: 1.1 and 0.1.
    let h = hashes(200);
    let (clients, flow_of) = one_each(
        (0..200)
            .map(|i| {
                if i % 10 == 0 {
                    Client::new(h[i], 4, SEC, 0)
                } else {
                    Client::new(h[i], 1, SEC / 2, (9 * SEC / 2) as i64)
                }
            })
            .collect(),
    );
    out.push(Scenario {
        name: "20 heavy + 180 light flows over 64 queues (hand 8); limit 40".into(),
        cfg: config(40, 64, 8, 50),
        clients,
        flow_of,
        window: half(40 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Shared queues, small hand: 5 flows of 3 threads over 4 queues,
    // hand 2; max-min: 1 each.
    let h = hashes(5);
    let (clients, flow_of) = one_each(h.iter().map(|&h| Client::new(h, 3, SEC, 0)).collect());
    out.push(Scenario {
        name: "5 flows over 4 queues (hand 2), 3 threads each; limit 5".into(),
        cfg: config(5, 4, 2, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // One-seat vs three-seat requests; max-min: 3 and 3.
    let f = disjoint_flows(64, 6, 4);
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 8, SEC, 0),
        Client::new(f[1], 4, SEC, 0).width(3),
    ]);
    out.push(Scenario {
        name: "one-seat (8 threads) vs three-seat (4 threads); limit 6".into(),
        cfg: config(6, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.10,
        enforce: true,
        then: None,
        differential: true,
    });

    // Mixed widths and service times, and a polite flow (0.5 seat);
    // max-min: 19/6 for each of the three busy flows, 0.5 for the polite.
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 8, SEC / 20, 0),
        Client::new(f[1], 4, 2 * SEC, 0).width(4),
        Client::new(f[2], 4, SEC / 2, 0).width(2),
        Client::new(f[3], 1, SEC, SEC as i64),
    ]);
    out.push(Scenario {
        name: "mixed: 1 seat × 0.05 s, 4 × 2 s, 2 × 0.5 s, polite 0.5; limit 10".into(),
        cfg: config(10, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.10,
        enforce: true,
        then: None,
        differential: true,
    });

    // Wide vs narrow vs short; max-min: 2 each.
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 4, SEC, 0).width(4),
        Client::new(f[1], 8, SEC, 0),
        Client::new(f[2], 8, SEC / 10, 0),
    ]);
    out.push(Scenario {
        name: "4-seat vs 1-seat vs short (0.1 s) 1-seat; limit 6".into(),
        cfg: config(6, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.10,
        enforce: true,
        then: None,
        differential: true,
    });

    // Bursts: 4 threads of 1 s requests calling together every 4 s (1 seat
    // on average) beside a one-thread mouse and a flood of 16; max-min: 2,
    // 1 and 1.
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 16, SEC, 0),
        Client::new(f[1], 1, SEC, 0),
        Client::new(f[2], 4, SEC, 3 * SEC as i64),
    ]);
    out.push(Scenario {
        name: "bursts of 4 × 1 s every 4 s vs a mouse and a flood of 16; limit 4".into(),
        cfg: config(4, 64, 6, 50),
        clients,
        flow_of,
        window: (30 * SEC, 90 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Bursts over shared queues: 12 bursty flows (4 threads of 1 s
    // requests calling together every 4 s: 1 seat on average, 4 at once),
    // each starting 1/3 s after the one before so that three bursts
    // overlap, beside 4 floods (16 threads of 0.3 s requests), 16 flows
    // over 4 queues with hand 2; max-min at limit 24: 1 each bursty, 3
    // each flood. The window spans 30 bursts of each bursty flow.
    let h = hashes(16);
    let mut clients: Vec<Client> = (0..12)
        .map(|i| Client::new(h[i], 4, SEC, 3 * SEC as i64).starting_at(i as u64 * SEC / 3))
        .collect();
    clients.extend((12..16).map(|i| Client::new(h[i], 16, 3 * SEC / 10, 0)));
    let (clients, flow_of) = one_each(clients);
    out.push(Scenario {
        name: "12 bursty flows (4 × 1 s every 4 s, overlapping) + 4 floods of 16 over 4 queues (hand 2); limit 24".into(),
        cfg: config(24, 4, 2, 50),
        clients,
        flow_of,
        window: (20 * SEC, 140 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Idle and return: flow 1 (4 threads) makes 20 calls a thread, is idle
    // until 60 s, then returns; the 5 s after its return are measured
    // against a flood of 16; max-min: 2 and 2.
    out.push(Scenario {
        name: "a flow idle from ~40 s returns at 60 s (5 s after) vs a flood; limit 4".into(),
        cfg: config(4, 64, 6, 50),
        clients: vec![
            Client::new(f[0], 16, SEC, 0),
            Client::new(f[1], 4, SEC, 0).calls(20),
            Client::new(f[1], 4, SEC, 0).starting_at(60 * SEC),
        ],
        flow_of: vec![0, 1, 1],
        window: (60 * SEC, 65 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Idle and return after using less than its share: flow 1 is polite
    // (1 thread, 1 s requests 1 s apart) for 15 calls, idle until 40 s,
    // then returns with 4 threads; the 5 s after its return are measured
    // against a flood of 16; max-min: 2 and 2.
    out.push(Scenario {
        name: "a polite flow idle from ~30 s returns at 40 s with 4 threads (5 s after) vs a flood; limit 4".into(),
        cfg: config(4, 64, 6, 50),
        clients: vec![
            Client::new(f[0], 16, SEC, 0),
            Client::new(f[1], 1, SEC, SEC as i64).calls(15),
            Client::new(f[1], 4, SEC, 0).starting_at(40 * SEC),
        ],
        flow_of: vec![0, 1, 1],
        window: (40 * SEC, 45 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Watch-like early release: 8 threads of 2 s requests that give their
    // seat back after 0.5 s (demand 2) beside a flood of 16 and a mouse;
    // max-min at limit 4: 1.5, 1.5 and 1 (seats held, not time executing).
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 8, 2 * SEC, 0).release_early(SEC / 2),
        Client::new(f[1], 16, SEC, 0),
        Client::new(f[2], 1, SEC, 0),
    ]);
    out.push(Scenario {
        name: "watch-like (8 × 2 s, seat given back after 0.5 s) vs a flood and a mouse; limit 4"
            .into(),
        cfg: config(4, 64, 6, 50),
        clients,
        flow_of,
        window: half(60 * SEC),
        goal: 0.05,
        enforce: true,
        then: None,
        differential: true,
    });

    // Reconfiguration mid-run: limit 4 -> 6, 64 queues -> 2, hand 6 -> 1
    // at 30 s (two of the flows now share a queue); measured from 35 s against
    // the new limit: a flood, 3 threads and a mouse get 2.5, 2.5 and 1.
    let (clients, flow_of) = one_each(vec![
        Client::new(f[0], 16, SEC, 0),
        Client::new(f[1], 3, SEC, 0),
        Client::new(f[2], 1, SEC, 0),
    ]);
    out.push(Scenario {
        name: "reconfigured at 30 s (limit 4 -> 6, 64 queues -> 2, hand 6 -> 1): flood, 3 threads, mouse".into(),
        cfg: config(4, 64, 6, 50),
        clients,
        flow_of,
        window: (35 * SEC, 65 * SEC),
        goal: 0.05,
        enforce: true,
        then: Some((30 * SEC, 6, 2, 1)),
        differential: true,
    });

    // Many flows active at once, small enough for the test command: a
    // flow of 16 threads among 60 flows of one, arriving at an idle
    // level just before them (it takes 16 seats at once, charged G each
    // until its first finish), or just after them (every request waits;
    // charged G each, it won 16 dispatches in a row). Before the
    // provisional guess and its forgiveness, the heavy flow repaid the
    // difference by waiting 16 rounds: 37.9% and 7.5% off under both
    // policies (docs/flow-fairness.md, "Thousands of flows active at
    // once"). Each fix has its scenario: without the forgiveness the first
    // is 37.9% off, without the provisional guess the second is 42.5%
    // (the run of 16 dispatches, forgiven). Max-min: 16/61 each.
    for heavy_first in [true, false] {
        out.push(Scenario {
            enforce: true,
            ..many_flows_arriving(60, 1, 16, 16, 8, heavy_first)
        });
    }
    out
}

/// `many_flows` with the heavy flows arriving 1 ms before the light ones
/// (`heavy_first`: the level is idle, they take their seats at once) or 1
/// ms after (every light flow is served or waiting by then). The window
/// spans 30 rounds, so that a flow served once more or less in it is off
/// by a thirtieth (ten rounds: a tenth), from round 4 (heavy flows first)
/// or 1 (last).
fn many_flows_arriving(
    light: usize,
    heavy: usize,
    threads: u32,
    limit: u32,
    queues: u32,
    heavy_first: bool,
) -> Scenario {
    let mut s = many_flows(light, heavy, threads, limit, queues, true);
    let round = s.window.0 / 4;
    // Arriving last, the heavy flows are first dispatched in round 1: the
    // window starts there, so that a run of their dispatches shows.
    let from = if heavy_first { 4 } else { 1 };
    s.window = (from * round, (from + 30) * round);
    for (i, c) in s.clients.iter_mut().enumerate() {
        if (i < heavy) != heavy_first {
            c.start = MS;
        }
    }
    let when = if heavy_first {
        "first, at an idle level"
    } else {
        "last, behind the light ones"
    };
    s.name = format!("{}; the heavy flows {when}", s.name);
    s
}

/// Scenarios with thousands of flows active at once in one level (issue
/// 22: "up to at least 10,000 concurrently active flows per level"),
/// measured on demand by `measured_many_flows`: the reference model's work
/// per event grows with the flows waiting, so the largest run the queueset
/// alone and leave the "before" and Kubernetes columns out.
fn many_flow_scenarios() -> Vec<Scenario> {
    vec![
        many_flows(500, 4, 16, 20, 32, true),
        many_flows(2_000, 4, 16, 80, 32, true),
        many_flows(10_000, 20, 16, 400, 128, false),
        // How the shortfall at 10,000 grows with the heavy flows' threads.
        many_flows(10_000, 20, 4, 400, 128, false),
        many_flows(10_000, 20, 8, 400, 128, false),
    ]
}

/// `light` flows of one thread and `heavy` of `threads`, every request
/// 0.1 s with no think time, so that every flow always has a request
/// waiting or executing: all `light + heavy` flows are active at once.
/// `queues` queues, hand 8, limit `limit`; max-min: an equal share each
/// (every demand is above it). The window spans ten rounds in which each
/// flow is served once.
fn many_flows(
    light: usize,
    heavy: usize,
    threads: u32,
    limit: u32,
    queues: u32,
    differential: bool,
) -> Scenario {
    let n = light + heavy;
    let h = hashes(n);
    let (clients, flow_of) = one_each(
        (0..n)
            .map(|i| Client::new(h[i], if i < heavy { threads } else { 1 }, SEC / 10, 0))
            .collect(),
    );
    let round = n as u64 * SEC / 10 / limit as u64;
    Scenario {
        name: format!(
            "{light} light (1 thread) + {heavy} heavy ({threads} threads) flows active at once, 0.1 s requests; limit {limit}, {queues} queues, hand 8"
        ),
        cfg: config(limit, queues, 8, 500),
        clients,
        flow_of,
        window: (4 * round, 14 * round),
        goal: 0.05,
        enforce: false,
        then: None,
        differential,
    }
}

/// The bursts-over-shared-queues family the enforced bursty scenario was
/// chosen from (same 12 bursty flows; floods of 8 or 16 threads of 0.1 to
/// 0.7 s requests; 4 or 8 queues, hand 2), measured on demand by
/// `measured_burst_variants` to compare `flow-maxmin` with `flow`
/// (docs/flow-fairness.md, "`flow-maxmin` against `flow`").
fn burst_variants() -> Vec<Scenario> {
    let mut out = Vec::new();
    for queues in [4, 8] {
        for flood_threads in [8, 16] {
            for tenths in [1, 2, 3, 5, 7] {
                let h = hashes(16);
                let mut clients: Vec<Client> = (0..12)
                    .map(|i| {
                        Client::new(h[i], 4, SEC, 3 * SEC as i64).starting_at(i as u64 * SEC / 3)
                    })
                    .collect();
                clients.extend(
                    (12..16).map(|i| Client::new(h[i], flood_threads, tenths * SEC / 10, 0)),
                );
                let (clients, flow_of) = one_each(clients);
                out.push(Scenario {
                    name: format!(
                        "12 bursty flows + 4 floods of {flood_threads} × 0.{tenths} s over {queues} queues (hand 2); limit 24"
                    ),
                    cfg: config(24, queues, 2, 50),
                    clients,
                    flow_of,
                    window: (20 * SEC, 140 * SEC),
                    goal: 0.05,
                    enforce: false,
                    then: None,
                    differential: false,
                });
            }
        }
    }
    out
}

/// The rows of the bursts-over-shared-queues family: `cargo test --release
/// --test queueset fairness_goals::measured_burst_variants -- --ignored
/// --nocapture` (the queueset alone; about a minute on the 2-core machine).
#[test]
#[ignore = "measurement: flow-maxmin against flow on bursts"]
fn measured_burst_variants() {
    print_table(burst_variants());
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The table of `cargo test --release --test queueset
/// fairness_goals::measured_today -- --ignored --nocapture`: per scenario,
/// the worst relative error under each policy
/// (and, under `flow` and `flow-maxmin`, the flow with it, by its index in
/// the scenario: its seats and its max-min share), before issue 22's order
/// (reference model) and now (queueset and reference model agreeing).
#[test]
#[ignore = "measurement: prints the table of docs/flow-fairness.md"]
fn measured_today() {
    print_table(scenarios());
}

/// The rows of the scenarios with thousands of flows active at once:
/// `cargo test --release --test queueset fairness_goals::measured_many_flows
/// -- --ignored --nocapture` (about six minutes on the 2-core machine, most of
/// it the reference model at 2,000 flows).
#[test]
#[ignore = "measurement: thousands of flows, minutes in a release build"]
fn measured_many_flows() {
    print_table(many_flow_scenarios());
}

/// Per scenario, the worst relative error under each policy (and, under
/// `flow` and `flow-maxmin`, the flow with it, by its index in the
/// scenario: its seats and its max-min share), before issue 22's order
/// (reference model) and now (queueset and reference model agreeing, or
/// the queueset alone where `differential` is off: then without the
/// Kubernetes and "before" columns). `FAIRNESS_ONLY=text` keeps the
/// scenarios whose name contains it.
fn print_table(scenarios: Vec<Scenario>) {
    let only = std::env::var("FAIRNESS_ONLY").unwrap_or_default();
    eprintln!("| scenario | goal | Kubernetes | `flow` before | `flow-maxmin` before | `flow` | `flow-maxmin` |");
    eprintln!("| --- | --- | --- | --- | --- | --- | --- |");
    for s in scenarios.into_iter().filter(|s| s.name.contains(&only)) {
        let started = std::time::Instant::now();
        let fair = s.fair();
        let detail = |m: &Measured| {
            let cell = format!(
                "{} (flow {}: {:.2} of {:.2})",
                pct(m.error),
                m.worst,
                m.seats[m.worst],
                fair[m.worst]
            );
            if m.error > s.goal {
                format!("**{cell}**")
            } else {
                cell
            }
        };
        let [flow, max_min] = [Fairness::Flow, Fairness::FlowMaxMin].map(|p| s.run(p));
        let [kube, flow_before, max_min_before] = if s.differential {
            [
                pct(s.run(Fairness::Kubernetes).error),
                detail(&s.run_before(Fairness::Flow)),
                detail(&s.run_before(Fairness::FlowMaxMin)),
            ]
        } else {
            ["not run".into(), "not run".into(), "not run".into()]
        };
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            pct(s.goal),
            kube,
            flow_before,
            max_min_before,
            detail(&flow),
            detail(&max_min)
        );
        eprintln!("({:.1} s)", started.elapsed().as_secs_f64());
    }
}

/// How much worse than `flow` `flow-maxmin` may be on a scenario: a tenth
/// of a point (mixed widths: 1.1% against 1.0%, both 3.13 of 3.17 seats).
const MAX_MIN_SLACK: f64 = 0.001;

/// Scenarios where `flow-maxmin` is known to be worse than `flow` beyond
/// the slack, each still held to its goal (docs/flow-fairness.md,
/// "`flow-maxmin` against `flow`"). Mixed widths: 1.3% against 1.1% in the
/// enforced window (30-60 s: the worst flow 3.126 seats of 3.167 against
/// 3.133), the same 9.94 seats of 10 shared a little differently among
/// the three busy flows, not a flow held back:
/// over other windows `flow-maxmin` is 0.9% against 1.0% (60-120 s),
/// 0.6% against 0.8% (120-240 s) and 0.7% against 0.6% (30-240 s),
/// measured 2026-11-27 by `measured_windows`.
const MAX_MIN_WORSE: &[&str] = &["mixed"];

/// The switch: every scenario whose `enforce` is set must meet its goal
/// under `flow` and `flow-maxmin`, and `flow-maxmin` be no worse than
/// `flow` beyond `MAX_MIN_SLACK`.
#[test]
fn enforced_scenarios_meet_their_goals() {
    for s in scenarios().into_iter().filter(|s| s.enforce) {
        let [flow, max_min] = [Fairness::Flow, Fairness::FlowMaxMin].map(|policy| {
            let m = s.run(policy);
            assert!(
                m.error <= s.goal,
                "{} under {}: flow {} got {:.3} seats, max-min {:.3} ({} off, goal {})",
                s.name,
                policy.as_str(),
                m.worst,
                m.seats[m.worst],
                s.fair()[m.worst],
                pct(m.error),
                pct(s.goal)
            );
            m
        });
        if MAX_MIN_WORSE.iter().any(|part| s.name.contains(part)) {
            continue;
        }
        assert!(
            max_min.error <= flow.error + MAX_MIN_SLACK,
            "{}: flow-maxmin {} off, flow {}",
            s.name,
            pct(max_min.error),
            pct(flow.error)
        );
    }
}

/// The shares the scenarios are judged against, worked by hand: the
/// harness's max-min is what the scenarios' comments claim.
#[test]
fn the_max_min_shares_are_the_ones_worked_by_hand() {
    let close = |got: &[f64], want: &[f64]| {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-9)
    };
    let by_name = |part: &str| {
        scenarios()
            .into_iter()
            .find(|s| s.name.contains(part))
            .unwrap_or_else(|| panic!("no scenario {part}"))
    };
    let fair = by_name("half 4×").fair();
    assert!(close(&fair[..2], &[0.1, 0.3]), "{:?}", &fair[..2]);
    let fair = by_name("180 light").fair();
    assert!(close(&fair[..2], &[1.1, 0.1]), "{:?}", &fair[..2]);
    assert!(close(&by_name("5 flows").fair(), &[1.0; 5]));
    assert!(close(&by_name("three-seat").fair(), &[3.0, 3.0]));
    let busy = 9.5 / 3.0;
    assert!(close(&by_name("mixed").fair(), &[busy, busy, busy, 0.5]));
    assert!(close(&by_name("4-seat").fair(), &[2.0, 2.0, 2.0]));
    assert!(close(&by_name("bursts of 4").fair(), &[2.0, 1.0, 1.0]));
    let fair = by_name("bursty").fair();
    assert!(
        close(&fair, &[&[1.0; 12][..], &[3.0; 4]].concat()),
        "{fair:?}"
    );
    assert!(close(&by_name("a flow idle").fair(), &[2.0, 2.0]));
    assert!(close(&by_name("a polite flow idle").fair(), &[2.0, 2.0]));
    assert!(close(&by_name("watch-like").fair(), &[1.5, 1.5, 1.0]));
    assert!(close(&by_name("reconfigured").fair(), &[2.5, 2.5, 1.0]));
    assert!(close(
        &by_name("heavy flows first").fair(),
        &[16.0 / 61.0; 61]
    ));
    assert!(close(
        &by_name("heavy flows last").fair(),
        &[16.0 / 61.0; 61]
    ));
    // Water filling itself: a demand under the level keeps its demand, the
    // rest share what is left equally.
    assert!(close(&fair_alloc(&[1.0, 5.0, 5.0], 7.0), &[1.0, 3.0, 3.0]));
    assert!(close(&fair_alloc(&[0.5, 0.5], 4.0), &[0.5, 0.5]));
}

/// The light flows' waits in 20 heavy + 180 light flows, per 10 s of the
/// run, under `flow` and `flow-maxmin` (the queueset alone): `cargo test
/// --release --test queueset fairness_goals::measured_light_waits --
/// --ignored --nocapture`. A light flow calls every 5 s and is forgotten
/// in between, so each call arrives as a new flow; its wait is its
/// dispatch less its arrival (the end of its last call plus its think
/// time). Also each flow's error from its max-min share over three
/// windows (docs/flow-fairness.md, "`flow-maxmin` against `flow`").
#[test]
#[ignore = "measurement: the light flows' waits among heavy flows"]
fn measured_light_waits() {
    let s = scenarios()
        .into_iter()
        .find(|s| s.name.contains("180 light"))
        .expect("the scenario");
    let think = 9 * SEC / 2;
    for policy in [Fairness::Flow, Fairness::FlowMaxMin] {
        let cfg = QueueSetConfig {
            fairness: policy,
            ..s.cfg.clone()
        };
        let trace = simulate_queueset(&cfg, &s.clients, &RunOptions::until(100 * SEC));
        eprintln!("{}:", policy.as_str());
        let mut calls: Vec<Vec<(u64, u64)>> = vec![Vec::new(); s.clients.len()];
        for sv in &trace.served {
            calls[sv.client].push((sv.start, sv.exec_end));
        }
        calls.iter_mut().for_each(|c| c.sort_unstable());
        for w in 0..10u64 {
            let (a, b) = (w * 10 * SEC, (w + 1) * 10 * SEC);
            let mut waits: Vec<u64> = calls
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 10 != 0)
                .flat_map(|(_, c)| {
                    c.windows(2).filter_map(|p| {
                        let arrival = p[0].1 + think;
                        (a..b).contains(&arrival).then(|| p[1].0 - arrival)
                    })
                })
                .collect();
            waits.sort_unstable();
            let n = waits.len().max(1);
            let ms = |x: u64| x as f64 / 1e6;
            eprintln!(
                "  {:>3}-{:<3} s: {} light calls, wait mean {:.1} ms, p50 {:.1}, p90 {:.1}, max {:.1}",
                a / SEC,
                b / SEC,
                waits.len(),
                ms(waits.iter().sum::<u64>()) / n as f64,
                ms(waits.get(n / 2).copied().unwrap_or(0)),
                ms(waits.get(n * 9 / 10).copied().unwrap_or(0)),
                ms(waits.last().copied().unwrap_or(0))
            );
        }
        let fair = s.fair();
        for (a, b) in [(20, 40), (40, 80), (60, 100)] {
            let seats = held_seats(&trace, s.clients.len(), a * SEC, b * SEC);
            let worst = |light: bool| {
                seats
                    .iter()
                    .zip(&fair)
                    .enumerate()
                    .filter(|(i, _)| (i % 10 != 0) == light)
                    .map(|(_, (g, f))| (g - f).abs() / f)
                    .fold(0.0, f64::max)
            };
            eprintln!(
                "  {a}-{b} s: worst light flow {}, worst heavy flow {}",
                pct(worst(true)),
                pct(worst(false))
            );
        }
    }
}

/// Each flow's seats under `flow` and `flow-maxmin` over another window:
/// `FAIRNESS_ONLY=text FAIRNESS_WINDOW=from,to cargo test --release --test
/// queueset fairness_goals::measured_windows -- --ignored --nocapture`
/// (seconds; the run ends at `to`).
#[test]
#[ignore = "measurement: scenarios over other windows"]
fn measured_windows() {
    let only = std::env::var("FAIRNESS_ONLY").unwrap_or_default();
    for mut s in scenarios().into_iter().filter(|s| s.name.contains(&only)) {
        if let Some((a, b)) = std::env::var("FAIRNESS_WINDOW")
            .ok()
            .and_then(|w| {
                w.split_once(',')
                    .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
            })
            .and_then(|p| Some((p.0.ok()?, p.1.ok()?)))
        {
            s.window = (a * SEC, b * SEC);
        }
        eprintln!("{} ({}-{} s)", s.name, s.window.0 / SEC, s.window.1 / SEC);
        for p in [Fairness::Flow, Fairness::FlowMaxMin] {
            let m = s.run(p);
            eprintln!(
                "  {}: {} (flow {}: {:.3} of {:.3})",
                p.as_str(),
                pct(m.error),
                m.worst,
                m.seats[m.worst],
                s.fair()[m.worst]
            );
        }
    }
}
