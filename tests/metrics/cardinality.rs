//! How many series the built-in configuration makes.

use super::*;
use apf::metrics::BUILTIN_CONFIG_SERIES;
use openmetrics::parse;

/// Kubernetes' built-in configuration: the series of an idle server, and
/// the most it can have (every pair with every histogram).
#[test]
fn the_builtin_config_makes_a_bounded_number_of_series() {
    let (clock, _manual) = Clock::manual();
    let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
    let exp = parse(&d.metrics_text());
    let idle = exp.series();
    let flow = d.metrics();
    let pairs: usize = flow.levels.iter().map(|l| l.schemas.len()).sum();
    let limited: usize = flow
        .levels
        .iter()
        .filter(|l| !l.exempt)
        .map(|l| l.schemas.len())
        .sum();
    let queuing: usize = flow
        .levels
        .iter()
        .filter(|l| l.queuing)
        .map(|l| l.schemas.len())
        .sum();
    // A duration histogram is 13 buckets + Inf + count + sum; a queue-length
    // one 8 + 3; a work-seats one 4 + 3; a dispatch-without-room counter
    // one per queuing pair; per limited level, a seat-utilization
    // histogram (13 + 3) and two request-utilization ones (10 + 3 each);
    // per level a demand-seats histogram (12 + 3); per queuing level, once
    // it dispatched, six virtual-time gauges; for the server, four
    // read-vs-write histograms (15 + 3).
    let limited_levels = flow.levels.iter().filter(|l| !l.exempt).count();
    let queuing_levels = flow.levels.iter().filter(|l| l.queuing).count();
    let most = idle
        + limited * 2 * 16
        + pairs * 16
        + queuing * 11
        + limited * 7
        + queuing
        + limited_levels * (16 + 2 * 13)
        + flow.levels.len() * 15
        + queuing_levels * 6
        + 4 * 18;
    println!(
        "built-in config: {} levels, {pairs} (level, schema) pairs, {idle} series idle, at most {most}",
        flow.levels.len()
    );
    assert_eq!(flow.levels.len(), 8);
    assert_eq!(pairs, d.flow_schemas().len(), "one pair per schema");
    assert_eq!(idle, BUILTIN_CONFIG_SERIES);
    // Every label is one of the bounded ones.
    let allowed = [
        "priority_level",
        "flow_schema",
        "reason",
        "execute",
        "type",
        "le",
        "phase",
        "request_kind",
        "bound",
    ];
    for family in exp.families.values() {
        for s in &family.samples {
            for k in s.labels.keys() {
                assert!(allowed.contains(&k.as_str()), "label {k}");
            }
        }
    }
    assert!(
        most < 1608,
        "fewer than the 1,608 of Kubernetes issue 108272"
    );
}
