#![cfg(not(loom))]
//! The optimised queueset against the plain reference model, on random
//! operation sequences (see `apf::queueset::differential`).
use apf::queueset::differential::{check, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..5, 0u8..4, prop_oneof![4 => Just(0u8), 1 => 1u8..6], proptest::option::weighted(0.2, 0u8..50))
            .prop_map(|(flow, initial, final_seats, latency_ms, deadline_ms)| Op::Start { flow, initial, final_seats, latency_ms, deadline_ms }),
        3 => any::<u8>().prop_map(|pick| Op::Finish { pick }),
        1 => any::<u8>().prop_map(|pick| Op::Cancel { pick }),
        2 => any::<u16>().prop_map(|micros| Op::Advance { micros }),
        1 => (0u8..8, 0u8..10, 1u8..5, 1u8..5, any::<bool>()).prop_map(|(limit, queues, hand, queue_length_limit, flow)| Op::Reconfigure { limit, queues, hand, queue_length_limit, flow }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512), ..ProptestConfig::default() })]

    #[test]
    // The hand's high bit starts half the cases under the flow policy.
    fn queueset_matches_reference_model(initial in (1u8..8, 0u8..10, prop_oneof![0u8..4, 0x80u8..0x84], 0u8..4), ops in proptest::collection::vec(op(), 1..120)) {
        if let Err(e) = check(initial, &ops) {
            prop_assert!(false, "{}", e);
        }
    }
}
