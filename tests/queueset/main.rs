//! The queueset (one priority level's fair queuing) through its public
//! API, on the manual clock: one module a concept. `rules` holds one test
//! (or more) per rule of its semantics; the differential test runs it
//! against the plain reference model on random operations; the fairness,
//! max-min and flow-fairness scenarios and Kubernetes' own queueset
//! scenarios (`k8s_scenarios`, `k8s_departures`) run closed-loop clients on
//! the simulation harness (tests/support/sim.rs); the rest cover early seat
//! release, wakers, a zero wait limit and the epoch rule's bound.
//! The loom and shuttle models of its lock-free protocols live beside the
//! code they check (src/queueset/loom_tests/, src/queueset/shuttle_tests/).
#![cfg(not(loom))]

#[path = "../support/k8s.rs"]
mod k8s;
#[path = "../support/measure.rs"]
mod measure;
#[path = "../support/sim.rs"]
mod sim;

mod differential;
mod epoch_rule_bound;
mod fairness;
mod fairness_goals;
mod flow_fairness;
mod k8s_departures;
mod k8s_scenarios;
mod maxmin;
mod release;
mod release_flow;
mod rules;
mod wakers;
mod zero_wait;
