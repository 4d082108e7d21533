//! What the fairness scenarios measure: each client's average seats over a
//! window of a [`Trace`], the max-min fair allocations to compare them
//! with, and flows whose hands do not overlap.
//!
//! Included with `#[path]` next to `support/sim.rs`; not every crate uses
//! every helper.
#![allow(dead_code)]

use crate::sim::{Client, Served, Trace};
use apf::dealer::Dealer;
use apf::queueset::QueueSetConfig;
use std::collections::BTreeMap;

/// Average over `[from, to)` of each client's seats, where `seats` says
/// which seats of a request count over which interval.
pub fn averages(
    trace: &Trace,
    clients: usize,
    from: u64,
    to: u64,
    seats: impl Fn(&Served) -> (u64, u64, u32),
) -> Vec<f64> {
    let mut integral = vec![0u128; clients];
    for s in &trace.served {
        let (a, b, n) = seats(s);
        let (a, b) = (a.max(from), b.min(to));
        if b > a {
            integral[s.client] += (b - a) as u128 * n as u128;
        }
    }
    integral
        .into_iter()
        .map(|i| i as f64 / (to - from) as f64)
        .collect()
}

/// Seats held while executing (initial seats), as Kubernetes' tests measure.
pub fn exec_seats(trace: &Trace, clients: usize, from: u64, to: u64) -> Vec<f64> {
    averages(trace, clients, from, to, |s| {
        (s.start, s.exec_end, s.initial_seats)
    })
}

/// Initial seats held from dispatch until given back (an early release, or
/// the end of execution).
pub fn held_seats(trace: &Trace, clients: usize, from: u64, to: u64) -> Vec<f64> {
    averages(trace, clients, from, to, |s| {
        (s.start, s.held_until, s.initial_seats)
    })
}

/// Seats occupied from dispatch to the end of the additional latency.
pub fn occupied_seats(trace: &Trace, clients: usize, from: u64, to: u64) -> Vec<f64> {
    averages(trace, clients, from, to, |s| (s.start, s.release, s.seats))
}

/// Max-min fair allocation of `capacity` to `demands` (water filling).
pub fn fair_alloc(demands: &[f64], capacity: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    let mut alloc = vec![0.0; demands.len()];
    let mut left = capacity;
    for (n, &i) in order.iter().enumerate() {
        let share = left / (order.len() - n) as f64;
        alloc[i] = demands[i].min(share);
        left -= alloc[i];
    }
    alloc
}

/// Kubernetes' allocation: max-min among queues. A client with `threads`
/// concurrent calls spreads them over min(threads, hand size) queues of its
/// hand (each with an equal part of its demand). Hands must not overlap.
pub fn queue_fair(cfg: &QueueSetConfig, clients: &[Client], demands: &[f64]) -> Vec<f64> {
    let dealer = Dealer::new(cfg.queues, cfg.hand_size).expect("valid dealer");
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    let mut queue_demands = Vec::new();
    let mut queue_client = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let hand = dealer.deal_into_hand(c.hash);
        for &q in hand.iter() {
            if let Some(other) = owner.insert(q, i) {
                assert_eq!(
                    other, i,
                    "clients {other} and {i} share queue {q}: pick other hashes"
                );
            }
        }
        let k = c.threads.min(cfg.hand_size);
        for _ in 0..k {
            queue_demands.push(demands[i] / k as f64);
            queue_client.push(i);
        }
    }
    let per_queue = fair_alloc(&queue_demands, cfg.concurrency_limit as f64);
    let mut alloc = vec![0.0; clients.len()];
    for (a, &i) in per_queue.iter().zip(&queue_client) {
        alloc[i] += a;
    }
    alloc
}

#[track_caller]
pub fn assert_within(what: &str, got: &[f64], expected: &[f64], tolerance: f64) {
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let off = if e > 0.0 { (g - e).abs() / e } else { g.abs() };
        assert!(
            off <= tolerance,
            "{what}: client {i} got {g:.4} seats, expected {e:.4} (off by {:.2}%, tolerance {:.1}%)\n  all: got {got:.4?}, expected {expected:.4?}",
            off * 100.0,
            tolerance * 100.0
        );
    }
    eprintln!("{what}: got {got:.4?}, expected {expected:.4?}");
}

pub fn no_refusals(trace: &Trace) {
    assert!(trace.refused.is_empty(), "refused: {:?}", trace.refused);
}

pub fn demands(clients: &[Client]) -> Vec<f64> {
    clients.iter().map(Client::demand).collect()
}

// ----- flows ------------------------------------------------------------------------

/// `n` flow hashes whose hands (for `queues` and `hand`) are pairwise
/// disjoint, found by a fixed search so every run uses the same ones.
pub fn disjoint_flows(queues: u32, hand: u32, n: usize) -> Vec<u64> {
    let dealer = Dealer::new(queues, hand).expect("valid dealer");
    let mut used = vec![false; queues as usize];
    let mut out = Vec::new();
    for i in 1u64.. {
        let h = i.wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(17);
        let cards = dealer.deal_into_hand(h);
        if cards.iter().all(|&q| !used[q as usize]) {
            cards.iter().for_each(|&q| used[q as usize] = true);
            out.push(h);
            if out.len() == n {
                break;
            }
        }
    }
    out
}

/// The average of clients `ids` together (a flow made of several clients).
pub fn sum_of(averages: &[f64], ids: &[usize]) -> f64 {
    ids.iter().map(|&i| averages[i]).sum()
}
