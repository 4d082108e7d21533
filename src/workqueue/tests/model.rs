//! Property tests against the plain reference models of
//! [`differential`](super::super::differential).
use super::super::differential::{check, Kind, Op, KEYS};
use proptest::prelude::*;

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..KEYS, 0u8..4).prop_map(|(k, h)| Op::Add(k, h)),
        3 => (0..KEYS, 0u8..4, 0u8..5).prop_map(|(k, h, d)| Op::AddAfter(k, h, d)),
        4 => Just(Op::TryGet),
        3 => (0..KEYS).prop_map(Op::Done),
        2 => (0u8..4).prop_map(Op::Advance),
        1 => Just(Op::ShutDown),
    ];
    proptest::collection::vec(op, 1..80)
}

fn matches(kind: Kind, ops: Vec<Op>) -> Result<(), TestCaseError> {
    check(kind, &ops).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn delaying_fifo_matches_the_model(ops in ops()) {
        matches(Kind::DelayingFifo, ops)?;
    }

    #[test]
    fn two_lane_matches_the_model(ops in ops()) {
        matches(Kind::TwoLane, ops)?;
    }

    #[test]
    fn independent_priorities_match_the_model(ops in ops()) {
        matches(Kind::IndependentPriorities, ops)?;
    }

    #[test]
    fn priority_queue_matches_the_model(ops in ops()) {
        matches(Kind::PriorityQueue, ops)?;
    }
}
