//! The adaptive limit with requests of unequal cost (issue 26's optional
//! cost reported at finish): `examples/workloads/adaptive-mixed-cost.yaml`,
//! the noisy neighbour with costly lists (40 ms) and cheap gets (15 ms),
//! each flow reporting its requests' cost in seats at finish. With the
//! reports the adaptive limit reads latency per seat of cost and keeps the
//! goodput and the tenants' share of the best fixed limit; without them
//! (the same workload, nothing reported) the costlier mix reads as
//! congestion and the total collapses. docs/adaptive-limit.md records
//! these runs.

use apf::config::Config;
use apf::simulator::{self, Report, Workload};

fn load(name: &str) -> Workload {
    let path = format!(
        "{}/examples/workloads/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Workload::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run(w: &Workload) -> Report {
    simulator::run(&Config::builtin(), w, w.seed, &mut |_| {})
        .expect("simulation runs")
        .0
}

/// The best fixed total of the docs' sweep for this mix (40 to 66 seats).
const BEST_FIXED: u32 = 45;

#[test]
fn reported_costs_keep_the_goodput_and_shares_of_the_best_fixed_limit() {
    let w = load("adaptive-mixed-cost");
    assert!(w.server.adaptive.is_some());
    assert!(w.flows.iter().all(|f| f.actual_seats.is_some()));
    let reported = run(&w);
    let mut fixed = w.clone();
    fixed.server.adaptive = None;
    fixed.server.concurrency_limit = BEST_FIXED;
    let fixed = run(&fixed);
    let mut silent = w.clone();
    for f in &mut silent.flows {
        f.actual_seats = None;
    }
    let silent = run(&silent);
    let tenant = |r: &Report| r.flow("tenant").unwrap().seat_share;
    eprintln!(
        "mixed cost: reported {:.0}/s (tenants {:.4}), fixed {BEST_FIXED} {:.0}/s ({:.4}), unreported {:.0}/s ({:.4})",
        reported.goodput(),
        tenant(&reported),
        fixed.goodput(),
        tenant(&fixed),
        silent.goodput(),
        tenant(&silent),
    );
    assert!(
        reported.goodput() >= 0.9 * fixed.goodput(),
        "{} vs {}",
        reported.goodput(),
        fixed.goodput()
    );
    assert!(
        (tenant(&reported) - tenant(&fixed)).abs() <= 0.05 * tenant(&fixed),
        "{} vs {}",
        tenant(&reported),
        tenant(&fixed)
    );
    // Without the reports the mix reads as congestion.
    assert!(
        silent.goodput() < 0.7 * fixed.goodput(),
        "{} vs {}",
        silent.goodput(),
        fixed.goodput()
    );
}
