//! A noisy neighbour on one priority level, simulated on the manual clock:
//! one runaway client flow with 30 concurrent requests against five polite
//! flows with 2 each, all sharing a level of 10 seats (64 queues, hand size
//! 8, Kubernetes' defaults). Prints each flow's throughput, share of the
//! seats, and queue waits, with fair queuing on, and then with a plain
//! first-come-first-served semaphore of the same size for comparison.
//!
//! `cargo run --release --example demo`
use apf::clock::{Clock, Instant};
use apf::queueset::{Admission, Guard, QueueSet, QueueSetConfig, Request, Ticket};
use apf::work_estimate::WorkEstimate;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

struct Flow {
    name: &'static str,
    hash: u64,
    clients: usize,
    exec: Duration,
    think: Duration,
}

#[derive(Default, Clone)]
struct Tally {
    done: u64,
    rejected: u64,
    seat_nanos: u128,
    wait_nanos: Vec<u64>,
}

enum State<'q> {
    Thinking,
    Waiting(Ticket<'q>, Instant),
    Running(Guard<'q>),
}

fn simulate(flows: &[Flow], fair: bool, horizon: Duration) -> Vec<Tally> {
    let (clock, manual) = Clock::manual();
    let cfg = QueueSetConfig {
        name: "workload-low".into(),
        concurrency_limit: 10,
        // One queue with hand size 1 is first-come-first-served.
        queues: if fair { 64 } else { 1 },
        hand_size: if fair { 8 } else { 1 },
        queue_length_limit: if fair { 50 } else { 1000 },
        ..QueueSetConfig::default()
    };
    let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
    let mut clients: Vec<(usize, State)> = Vec::new();
    let mut events = BinaryHeap::new();
    for (f, flow) in flows.iter().enumerate() {
        for _ in 0..flow.clients {
            events.push(Reverse((Instant::ZERO, clients.len())));
            clients.push((f, State::Thinking));
        }
    }
    let mut tally = vec![Tally::default(); flows.len()];
    let end = Instant::ZERO.saturating_add(horizon);
    while let Some(Reverse((at, c))) = events.pop() {
        if at > end {
            break;
        }
        manual.advance_to(at);
        let now = clock.now();
        let f = clients[c].0;
        let flow = &flows[f];
        match std::mem::replace(&mut clients[c].1, State::Thinking) {
            State::Thinking => {
                let request = Request {
                    flow_hash: flow.hash,
                    estimate: WorkEstimate::new(1, 0, Duration::ZERO),
                    deadline: None,
                };
                match qs.start(&request) {
                    Admission::Execute(g) => {
                        tally[f].wait_nanos.push(0);
                        events.push(Reverse((now.saturating_add(flow.exec), c)));
                        clients[c].1 = State::Running(g);
                    }
                    Admission::Queued(t) => clients[c].1 = State::Waiting(t, now),
                    Admission::Rejected(_) => {
                        tally[f].rejected += 1;
                        events.push(Reverse((
                            now.saturating_add(flow.think.max(Duration::from_millis(1))),
                            c,
                        )));
                    }
                }
            }
            State::Running(g) => {
                tally[f].done += 1;
                tally[f].seat_nanos += now.saturating_since(g.start_time()).as_nanos();
                g.finish();
                events.push(Reverse((now.saturating_add(flow.think), c)));
            }
            State::Waiting(t, since) => clients[c].1 = State::Waiting(t, since),
        }
        // A finish or a time-out decides waiting requests: collect them.
        for (c, (f, state)) in clients.iter_mut().enumerate() {
            if let State::Waiting(t, since) = state {
                let since = *since;
                match t.poll() {
                    Some(Ok(g)) => {
                        tally[*f]
                            .wait_nanos
                            .push(duration_ns(now.saturating_since(since)));
                        events.push(Reverse((now.saturating_add(flows[*f].exec), c)));
                        *state = State::Running(g);
                    }
                    Some(Err(_)) => {
                        tally[*f].rejected += 1;
                        events.push(Reverse((now.saturating_add(flows[*f].think), c)));
                        *state = State::Thinking;
                    }
                    None => {}
                }
            }
        }
    }
    tally
}

fn duration_ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn report(title: &str, flows: &[Flow], tally: &[Tally], horizon: Duration) {
    println!("\n{title}");
    println!(
        "{:<10} {:>8} {:>10} {:>11} {:>10} {:>10} {:>9}",
        "flow", "clients", "req/s", "seat share", "wait p50", "wait p99", "rejected"
    );
    let total: u128 = tally.iter().map(|t| t.seat_nanos).sum::<u128>().max(1);
    for (flow, t) in flows.iter().zip(tally) {
        let mut w = t.wait_nanos.clone();
        w.sort_unstable();
        let pct = |p: f64| {
            w.get(((w.len() as f64 - 1.0) * p) as usize)
                .map_or(0.0, |&n| n as f64 / 1e6)
        };
        println!(
            "{:<10} {:>8} {:>10.1} {:>10.1}% {:>8.1}ms {:>8.1}ms {:>9}",
            flow.name,
            flow.clients,
            t.done as f64 / horizon.as_secs_f64(),
            100.0 * t.seat_nanos as f64 / total as f64,
            pct(0.5),
            pct(0.99),
            t.rejected
        );
    }
}

fn main() {
    let ms = Duration::from_millis;
    let mut flows = vec![Flow {
        name: "runaway",
        hash: 0x5eed,
        clients: 30,
        exec: ms(10),
        think: ms(0),
    }];
    for (i, name) in ["tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e"]
        .into_iter()
        .enumerate()
    {
        flows.push(Flow {
            name,
            hash: 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 2),
            clients: 2,
            exec: ms(10),
            think: ms(20),
        });
    }
    let horizon = Duration::from_secs(60);
    println!("one level of 10 seats; each request holds 1 seat for 10 ms; {}s simulated on the manual clock", horizon.as_secs());
    report(
        "fair queuing (64 queues, hand size 8):",
        &flows,
        &simulate(&flows, true, horizon),
        horizon,
    );
    report(
        "first come, first served (1 queue):",
        &flows,
        &simulate(&flows, false, horizon),
        horizon,
    );
}
