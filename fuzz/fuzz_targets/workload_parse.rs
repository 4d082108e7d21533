//! Any bytes: a workload or errors, never a panic. Whatever parses must be
//! within the limits the simulator relies on, and every error must name
//! what is wrong.
#![no_main]

use apf::simulator::{limits, Arrival, Workload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let workload = match Workload::from_slice(data) {
        Ok(w) => w,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "an error lists at least one problem");
            assert!(errors.0.iter().all(|e| !e.message.is_empty()));
            return;
        }
    };
    assert!(!workload.duration.is_zero() && workload.duration <= limits::MAX_DURATION);
    assert!(!workload.sample_interval.is_zero());
    assert!(!workload.flows.is_empty() && workload.flows.len() <= limits::MAX_FLOWS);
    for flow in &workload.flows {
        assert!(flow.replicas >= 1);
        assert!((1..=limits::MAX_SEATS).contains(&flow.initial_seats));
        if let Arrival::Poisson { rate } = flow.arrival {
            assert!(rate.is_finite() && rate >= 0.0);
        }
        for phase in &flow.phases {
            assert!(phase.scale.is_finite() && phase.scale >= 0.0);
        }
        let _ = flow.service.mean_secs();
        let _ = flow.replica_request(flow.replicas - 1);
    }
});
