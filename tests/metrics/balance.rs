//! The tallies balance under any interleaving of starts, finishes,
//! cancellations and clock advances (a property test).

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    /// A request of user `u` of schema tenants (0), batch (1) or exempt (2).
    Start(u8, u8),
    Finish(usize),
    Cancel(usize),
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..4).prop_map(|(s, u)| Op::Start(s, u)),
        2 => (0usize..16).prop_map(Op::Finish),
        1 => (0usize..16).prop_map(Op::Cancel),
        2 => (1u16..20_000).prop_map(Op::Advance),
    ]
}

const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];

#[derive(Default)]
struct Expected {
    dispatched: u64,
    rejected: [u64; 4],
    executing: u32,
    waiting: u32,
}

fn check(d: &Dispatcher, model: &BTreeMap<&str, Expected>) -> Result<(), TestCaseError> {
    let flow = d.metrics();
    for level in &flow.levels {
        for s in &level.schemas {
            let st = &s.stats;
            let e = model.get(s.name.as_str());
            let (dispatched, rejected, executing, waiting) = e.map_or((0, [0; 4], 0, 0), |e| {
                (e.dispatched, e.rejected, e.executing, e.waiting)
            });
            prop_assert_eq!(st.dispatched, dispatched, "{} dispatched", s.name);
            prop_assert_eq!(st.rejected, rejected, "{} rejected", s.name);
            prop_assert_eq!(st.executing, executing, "{} executing", s.name);
            prop_assert_eq!(st.waiting, waiting, "{} waiting", s.name);
            prop_assert_eq!(st.seats_in_use, executing as u64, "{} seats", s.name);
            prop_assert_eq!(st.execution.count(), dispatched - executing as u64);
            if !level.exempt {
                prop_assert_eq!(st.wait_dispatched.count(), dispatched);
                prop_assert_eq!(st.wait_rejected.count(), rejected.iter().sum::<u64>());
            }
            if level.queuing {
                // Every request that started or waited joined a queue once.
                let joined = st.queue_length.count();
                let queued = dispatched + rejected[1] + rejected[2] + waiting as u64;
                prop_assert!(joined <= queued && joined + dispatched >= queued);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn tallies_match_what_requests_saw(ops in proptest::collection::vec(op(), 1..60)) {
        let (d, manual) = dispatcher();
        let mut model: BTreeMap<&str, Expected> = BTreeMap::new();
        let mut guards: Vec<(&str, apf::level::RequestGuard)> = Vec::new();
        let mut tickets: Vec<(&str, RequestTicket)> = Vec::new();
        for op in ops {
            match op {
                Op::Start(s, u) => {
                    let (schema, digest) = match s {
                        0 => ("tenants", tenant(USERS[u as usize])),
                        1 => ("batch", batch()),
                        _ => ("exempt", admin()),
                    };
                    let e = model.entry(schema).or_default();
                    match d.start_request(&digest, one_seat(), None).outcome {
                        Outcome::Execute(g) => {
                            e.dispatched += 1;
                            e.executing += 1;
                            guards.push((schema, g));
                        }
                        Outcome::Queued(t) => {
                            e.waiting += 1;
                            tickets.push((schema, t));
                        }
                        Outcome::Rejected(r) => e.rejected[r as usize] += 1,
                    }
                }
                Op::Finish(i) if !guards.is_empty() => {
                    let (schema, g) = guards.remove(i % guards.len());
                    drop(g);
                    model.get_mut(schema).expect("started").executing -= 1;
                }
                Op::Cancel(i) if !tickets.is_empty() => {
                    let (schema, t) = tickets.remove(i % tickets.len());
                    let e = model.get_mut(schema).expect("started");
                    e.waiting -= 1;
                    // Pending at the last poll, and nothing happened since.
                    prop_assert!(t.cancel());
                    e.rejected[RejectReason::Cancelled as usize] += 1;
                }
                Op::Advance(ms) => manual.advance(Duration::from_millis(ms as u64)),
                _ => {}
            }
            // Collect decisions.
            let mut still = Vec::new();
            for (schema, mut t) in tickets.drain(..) {
                match t.poll() {
                    None => still.push((schema, t)),
                    Some(result) => {
                        let e = model.get_mut(schema).expect("started");
                        e.waiting -= 1;
                        match result {
                            Ok(g) => {
                                e.dispatched += 1;
                                e.executing += 1;
                                guards.push((schema, g));
                            }
                            Err(r) => e.rejected[r as usize] += 1,
                        }
                    }
                }
            }
            tickets = still;
            check(&d, &model)?;
        }
        // Everything ends: every gauge is back to zero.
        drop(guards);
        for (_, t) in tickets.drain(..) {
            drop(t);
        }
        for level in d.metrics().levels {
            for s in level.schemas {
                prop_assert_eq!(s.stats.executing, 0);
                prop_assert_eq!(s.stats.waiting, 0);
                prop_assert_eq!(s.stats.seats_in_use, 0);
            }
        }
    }
}
