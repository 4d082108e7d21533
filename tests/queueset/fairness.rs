#![cfg(not(loom))]
//! Fairness scenarios on the manual clock: closed-loop clients driven by a
//! small discrete-event simulator, each scenario run through both the
//! queueset and the reference model (which must agree event for event), and
//! each flow's average seats in use compared with the fair allocation of
//! the concurrency limit.
//!
//! The shapes follow Kubernetes' own queueset tests (uniform flows, unequal
//! demands, mixed widths, a request wider than the limit, padding with
//! additional latency, windup); the numbers are this file's own.
//!
//! # What "fair" means here
//! Kubernetes' queueset is fair among *queues*, not flows: a request goes to
//! the least-loaded queue of its flow's hand, so a flow with enough
//! concurrent requests occupies every queue of its hand and takes that many
//! queues' shares. With hand size 1 (or flows too thin to fill their
//! hands) that is plain max-min fairness among flows. [`queue_fair`]
//! computes the queue-level allocation; scenarios that depend on the
//! difference say so.

use crate::measure;
use crate::sim;

use measure::*;
use sim::*;

// Tolerances. Kubernetes' queueset tests allow 1% for uniform flows with
// hand size 1, 3% with hand size 3, 15.5% for mixed widths and 35% for a
// request wider than the limit. The deviations come from the scenario, not
// from arithmetic: a flow's count of requests inside the window differs by
// one from another's depending on its phase (1 s of one seat out of 120 s
// of six seats is 0.8%), and a wide request waiting for enough free seats
// leaves the others idle. Every comment below quotes the numbers that
// k8s.io/apiserver v0.37.2's queueset gave for the very same scenario (same
// hashes, same clients, its own test harness and fake clock), so each
// tolerance can be judged against both implementations.

const THINK: i64 = 999 * MS as i64; // just under the execution time

#[test]
fn uniform_flows_get_equal_shares_with_hand_size_1() {
    let cfg = config(6, 16, 1, 50);
    let clients: Vec<Client> = disjoint_flows(16, 1, 3)
        .into_iter()
        .map(|h| Client::new(h, 6, SEC, THINK))
        .collect();
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Ours: 2.000, 1.983, 2.017. Kubernetes: the same.
    assert_within(
        "uniform, hand 1",
        &exec_seats(&t, 3, 0, horizon),
        &fair_alloc(&demands(&clients), 6.0),
        0.01,
    );
}

#[test]
fn uniform_flows_get_equal_shares_with_hand_size_3() {
    let cfg = config(6, 16, 3, 50);
    let clients: Vec<Client> = disjoint_flows(16, 3, 3)
        .into_iter()
        .map(|h| Client::new(h, 8, SEC, THINK))
        .collect();
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    let d = demands(&clients);
    // Every flow fills its three queues, so queue-level and flow-level
    // fairness agree.
    assert_eq!(queue_fair(&cfg, &clients, &d), fair_alloc(&d, 6.0));
    // Ours: 2.017, 1.958, 2.025. Kubernetes: 1.967, 1.975, 2.058.
    assert_within(
        "uniform, hand 3",
        &exec_seats(&t, 3, 0, horizon),
        &fair_alloc(&d, 6.0),
        0.03,
    );
}

#[test]
fn one_greedy_flow_leaves_light_flows_their_full_demand() {
    // Twelve greedy threads against five one-thread flows that think three
    // times as long as they execute (demand 0.25 each): max-min gives the
    // light flows all they ask for. A light request arrives while the level
    // is full; it must be chosen ahead of the greedy flow's queued requests
    // at the next free seat, or its thread falls behind (first come, first
    // served would make it wait behind the greedy flow's backlog).
    for hand in [1, 4] {
        let cfg = config(8, 64, hand, 50);
        let flows = disjoint_flows(64, hand, 6);
        let mut clients = vec![Client::new(flows[0], 12, SEC, 0)];
        clients.extend(
            flows[1..]
                .iter()
                .map(|&h| Client::new(h, 1, SEC, 3 * SEC as i64)),
        );
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let d = demands(&clients);
        // The greedy flow spreads over its hand, but the light flows ask for
        // less than one queue's share, so the queue-level split is the same.
        assert_eq!(queue_fair(&cfg, &clients, &d), fair_alloc(&d, 8.0));
        // Ours and Kubernetes': 6.75 and 0.25 each, exactly.
        assert_within(
            &format!("greedy vs light, hand {hand}"),
            &exec_seats(&t, clients.len(), 0, horizon),
            &fair_alloc(&d, 8.0),
            0.01,
        );
    }
}

#[test]
fn widths_one_and_two_share_seats_fairly() {
    for (hand, flows) in [(1, disjoint_flows(32, 1, 2)), (4, disjoint_flows(32, 4, 2))] {
        let cfg = config(6, 32, hand, 50);
        let clients = vec![
            Client::new(flows[0], 10, SEC, THINK),
            Client::new(flows[1], 6, SEC, THINK).width(2),
        ];
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        // Both ask for more than half. Seats go idle while a two-seat head
        // waits for a second free seat, mostly at the one-seat flow's cost.
        // Hand 1 — ours: 2.892, 3.000; Kubernetes: the same.
        // Hand 4 — ours: 2.775, 2.950; Kubernetes: 2.725, 2.967.
        assert_within(
            &format!("widths 1 and 2, hand {hand}"),
            &exec_seats(&t, 2, 0, horizon),
            &fair_alloc(&demands(&clients), 6.0),
            0.15,
        );
    }
}

#[test]
fn a_request_wider_than_the_limit_is_served_among_narrow_ones() {
    let cfg = config(5, 32, 3, 50);
    let flows = disjoint_flows(32, 3, 4);
    let mut clients: Vec<Client> = flows[..3]
        .iter()
        .map(|&h| Client::new(h, 8, SEC, THINK))
        .collect();
    clients.push(Client::new(flows[3], 4, SEC, THINK).width(8));
    let horizon = 240 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Eight seats over a limit of five: as in Kubernetes, not clamped: each
    // such request waits until nothing executes, then runs alone holding
    // all eight seats.
    assert_eq!(t.clamped, 0, "no wide request is clamped");
    let wide: Vec<&Served> = t.served.iter().filter(|s| s.client == 3).collect();
    assert!(wide.iter().all(|s| s.initial_seats == 8));
    assert!(wide.len() >= 40, "wide requests served: {}", wide.len());
    // Draining the level for each wide request idles seats that the narrow
    // flows would have used, and the wide flow, served in whole-level
    // chunks and counted at eight seats, comes out ahead, as in Kubernetes
    // (measured there on this scenario: 1.088, 1.042, 1.038 and 2.133).
    let got = exec_seats(&t, 4, 0, horizon);
    eprintln!("too wide: {got:?}");
    assert_within("too wide", &got, &[1.088, 1.042, 1.038, 2.133], 0.10);
}

#[test]
fn additional_latency_counts_as_seats_in_use() {
    // Alone, exactly (as Kubernetes' separation tests): one thread, 1 s
    // execution, no think time, one final seat for 1 s more, limit 1: each
    // call waits for the previous call's final seat, so it executes half the
    // time. Two such flows: a quarter each.
    for n in [1usize, 2] {
        let cfg = config(1, 16, 1, 50);
        let clients: Vec<Client> = disjoint_flows(16, 1, n)
            .into_iter()
            .map(|h| Client::new(h, 1, SEC, 0).pad(1, SEC))
            .collect();
        let horizon = 24 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let expected = vec![0.5 / n as f64; n];
        assert_within(
            &format!("padded alone, {n} flows"),
            &exec_seats(&t, n, 0, horizon),
            &expected,
            1e-6,
        );
    }

    // Competing: flow 0 holds a final seat for 1 s after each 1 s call,
    // flow 1 does not. Fair queuing charges the final seats too, so the
    // flows get equal *occupied* seats (2 each of 4), and flow 0 executes
    // half as much. Ours: executing 1.000, 2.008, occupied 1.992, 2.008;
    // Kubernetes (executing): 1.017, 1.992.
    let cfg = config(4, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 4, SEC, 0).pad(1, SEC),
        Client::new(flows[1], 4, SEC, 0),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    // Occupancy demand per thread: (1 s + 1 s) of seats per 1 s cycle.
    let occupancy_demand = [8.0, 4.0];
    let occupied = fair_alloc(&occupancy_demand, 4.0);
    assert_within(
        "with latency, occupied",
        &occupied_seats(&t, 2, 0, horizon),
        &occupied,
        0.02,
    );
    assert_within(
        "with latency, executing",
        &exec_seats(&t, 2, 0, horizon),
        &[occupied[0] / 2.0, occupied[1]],
        0.02,
    );
}

#[test]
fn a_flow_returning_after_a_long_idle_gets_no_credit_for_it() {
    // Flow 1 is idle for the first minute while flow 0 uses the whole level
    // and R advances. Its queue restarts at the current R, so it comes back
    // to half the level, not to a minute's worth of catching up (which
    // would give it all four seats for a long while). Two rules each
    // prevent that credit here: the restart of an idle queue and the
    // anti-windup bound; this scenario fails only when both are removed
    // (checked by hand), the unit tests pin each one alone.
    let cfg = config(4, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 8, SEC, 0),
        Client::new(flows[1], 8, SEC, 0).starting_at(60 * SEC),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    assert_within(
        "alone",
        &exec_seats(&t, 2, 0, 60 * SEC),
        &fair_alloc(&[8.0, 0.0], 4.0),
        0.01,
    );
    // The first seconds back: flow 0's last requests are charged when they
    // finish, so flow 1 takes the seats they free, then the two alternate.
    // Ours: 1.8 and 2.2 over the first 5 s.
    let back = exec_seats(&t, 2, 60 * SEC, 65 * SEC);
    assert!(
        back[1] <= 2.0 * 1.15,
        "flow 1 right after its return: {back:?}"
    );
    assert_within(
        "after the return",
        &exec_seats(&t, 2, 60 * SEC, horizon),
        &fair_alloc(&demands(&clients), 4.0),
        0.01,
    );
}

#[test]
fn windup_of_an_underusing_flow_is_only_partly_bounded_as_in_kubernetes() {
    // Kubernetes' windup case: flow 1 is active but can use only one seat
    // of the 1.5 it is entitled to during the first minute, so its queue
    // falls behind in virtual time; in the second minute it can use more
    // and gets more than half. The anti-windup bound (a queue never starts
    // before its oldest request's arrival) removes part of that credit, not
    // all: Kubernetes' own test requires the second-half error to lie
    // between 10% and 26%. Flow 1 is two clients of one hash: one thread
    // throughout and one from the second minute. Each thread calls again
    // 1 ns before its call ends.
    let cfg = config(3, 16, 1, 50);
    let flows = disjoint_flows(16, 1, 2);
    let clients = vec![
        Client::new(flows[0], 2, SEC, -1),
        Client::new(flows[1], 1, SEC, -1),
        Client::new(flows[1], 1, SEC, -1).starting_at(60 * SEC),
    ];
    let horizon = 120 * SEC;
    let t = simulate(&cfg, &clients, horizon);
    no_refusals(&t);
    let first = exec_seats(&t, 3, 0, 60 * SEC);
    assert_within(
        "windup, first minute",
        &[first[0], sum_of(&first, &[1, 2])],
        &fair_alloc(&[2.0, 1.0], 3.0),
        0.01,
    );
    // Ours: 1.25 and 1.75. Kubernetes: the same.
    let second = exec_seats(&t, 3, 60 * SEC, horizon);
    let (f0, f1) = (second[0], sum_of(&second, &[1, 2]));
    let off = (f1 - 1.5) / 1.5;
    assert!(
        (0.10..=0.26).contains(&off) && (f0 + f1 - 3.0).abs() < 0.03,
        "windup, second minute: {f0:.4} and {f1:.4} (flow 1 off by {:.1}%)",
        off * 100.0
    );
}

#[test]
fn a_many_threaded_flow_spreads_over_its_hand_as_in_kubernetes() {
    // Queues, not flows, compete fairly. Sixteen threads of flow 0 fill all
    // six queues of its hand; flow 1's single thread holds one queue. Max-
    // min fairness among flows would give 3 and 1; fairness among the seven
    // queues would give 3.43 and 0.57. Kubernetes lands in between, and so
    // must we: flow 1's queue competes while its request waits, but between
    // its calls it is empty and its request then waits for the next seat.
    // Kubernetes on these very scenarios: 3.275/0.725 (16 queues) and
    // 3.292/0.708 (64 queues). Ours: 3.283/0.717 for both.
    for (queues, kubernetes) in [(16, [3.275, 0.725]), (64, [3.292, 0.708])] {
        let cfg = config(4, queues, 6, 50);
        let flows = disjoint_flows(queues, 6, 2);
        let clients = vec![
            Client::new(flows[0], 16, SEC, 0),
            Client::new(flows[1], 1, SEC, 0),
        ];
        let horizon = 120 * SEC;
        let t = simulate(&cfg, &clients, horizon);
        no_refusals(&t);
        let got = exec_seats(&t, 2, 0, horizon);
        let d = demands(&clients);
        let (flow_fair, queue_level) = (fair_alloc(&d, 4.0), queue_fair(&cfg, &clients, &d));
        assert!(
            queue_level[1] < got[1] && got[1] < 0.8 * flow_fair[1],
            "flow 1 got {:.4}: expected between the queue-level {:.4} and 80% of the flow-level {:.4}",
            got[1],
            queue_level[1],
            flow_fair[1]
        );
        // Within 3% of Kubernetes' numbers (the two differ in how they order
        // events of the same instant and in R's arithmetic, fixed point here
        // against floating point there).
        assert_within(
            &format!("spread over the hand, {queues} queues"),
            &got,
            &kubernetes,
            0.03,
        );
    }
}
