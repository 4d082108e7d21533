//! The exposition: owned figures in, OpenMetrics text out, through the
//! `prometheus-client` crate's encoder.

use super::{
    possible_reasons, DispatchMetrics, ExpositionOptions, FlowcontrolMetrics, LevelMetrics,
    SchemaMetrics, Utilization,
};
use super::{DURATION_BUCKETS_SECONDS, QUEUE_LENGTH_BUCKETS};
use crate::queueset::RejectReason;
use crate::stats::{BucketHistogram, RatioHistogram, ReadVsWrite};
use crate::workqueue::{
    WorkqueueHistogram, WorkqueueMetrics, DURATION_BUCKETS_SECONDS as QUEUE_BUCKETS,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::fmt;

/// The exposition of `flow` (if any) and `queues`.
pub(super) fn text(
    flow: Option<&FlowcontrolMetrics>,
    queues: &[WorkqueueMetrics],
    options: &ExpositionOptions,
) -> String {
    let labels = options
        .const_labels
        .iter()
        .map(|(k, v)| (Cow::Owned(k.clone()), Cow::Owned(v.clone())));
    let mut registry = match &options.prefix {
        Some(prefix) => Registry::with_prefix_and_labels(prefix.clone(), labels),
        None => Registry::with_labels(labels),
    };
    registry.register_collector(Box::new(Scrape {
        flow: flow.cloned(),
        queues: queues.to_vec(),
    }));
    let mut out = String::new();
    // Writing to a String cannot fail, and every value here is encodable.
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding into a String does not fail");
    out
}

/// One scrape's figures, owned, as the registry's collectors must be.
#[derive(Debug)]
struct Scrape {
    flow: Option<FlowcontrolMetrics>,
    queues: Vec<WorkqueueMetrics>,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        if let Some(flow) = &self.flow {
            encode_flowcontrol(flow, &mut encoder)?;
        }
        encode_workqueues(&self.queues, &mut encoder)
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// A histogram ready for the encoder: per-bucket counts, `+Inf` last.
struct HistogramValue {
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

fn duration_value(h: &BucketHistogram<13>) -> HistogramValue {
    apf_histogram(h, &DURATION_BUCKETS_SECONDS, 1e-9)
}

fn length_value(h: &BucketHistogram<8>) -> HistogramValue {
    apf_histogram(h, &QUEUE_LENGTH_BUCKETS, 1.0)
}

fn seats_value(h: &BucketHistogram<4>) -> HistogramValue {
    apf_histogram(h, &super::WORK_SEATS_BUCKETS, 1.0)
}

/// A time-weighted ratio histogram: counts in nanoseconds, as Kubernetes'
/// timing histograms weigh each observation by its duration.
fn ratio_value<const N: usize>(h: &RatioHistogram<N>) -> HistogramValue {
    let mut buckets: Vec<(f64, u64)> = h
        .bounds()
        .iter()
        .copied()
        .zip(h.per_bucket().iter().copied())
        .collect();
    buckets.push((f64::INFINITY, h.overflow()));
    HistogramValue {
        sum: h.sum(),
        count: h.count(),
        buckets,
    }
}

fn apf_histogram<const N: usize>(
    h: &BucketHistogram<N>,
    bounds: &[f64; N],
    unit: f64,
) -> HistogramValue {
    let mut buckets: Vec<(f64, u64)> = bounds
        .iter()
        .copied()
        .zip(h.per_bucket().iter().copied())
        .collect();
    buckets.push((f64::INFINITY, h.overflow()));
    HistogramValue {
        sum: h.sum() as f64 * unit,
        count: h.count(),
        buckets,
    }
}

fn queue_value(h: &WorkqueueHistogram) -> HistogramValue {
    let mut previous = 0;
    let mut buckets: Vec<(f64, u64)> = QUEUE_BUCKETS
        .iter()
        .zip(h.cumulative)
        .map(|(&bound, cumulative)| {
            let own = cumulative.saturating_sub(previous);
            previous = cumulative;
            (bound, own)
        })
        .collect();
    buckets.push((f64::INFINITY, h.count.saturating_sub(previous)));
    HistogramValue {
        sum: h.sum_seconds,
        count: h.count,
        buckets,
    }
}

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: Vec<(Labels<'_>, u64)>,
) -> fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in &series {
        if labels.is_empty() {
            family.encode_counter::<NoLabelSet, u64, u64>(value, None)?;
        } else {
            family
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, u64, u64>(value, None)?;
        }
    }
    Ok(())
}

fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: Vec<(Labels<'_>, f64)>,
) -> fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in &series {
        if labels.is_empty() {
            family.encode_gauge(value)?;
        } else {
            family.encode_family(labels)?.encode_gauge(value)?;
        }
    }
    Ok(())
}

/// Histogram series appear once they have an observation, as in
/// Kubernetes: at 16 series each, eager ones would make most of an idle
/// server's exposition.
fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    mut series: Vec<(Labels<'_>, HistogramValue)>,
) -> fmt::Result {
    series.retain(|(_, h)| h.count > 0);
    if series.is_empty() {
        return Ok(());
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in &series {
        family
            .encode_family(labels)?
            .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?;
    }
    Ok(())
}

const PREFIX: &str = "apiserver_flowcontrol_";

/// Every (level, schema) pair with its labels, filtered by level.
fn pairs<'a>(
    flow: &'a FlowcontrolMetrics,
    keep: impl Fn(&LevelMetrics) -> bool + 'a,
) -> impl Iterator<Item = (&'a LevelMetrics, &'a SchemaMetrics, Labels<'a>)> + 'a {
    flow.levels
        .iter()
        .filter(move |l| keep(l))
        .flat_map(|level| {
            level.schemas.iter().map(move |schema| {
                let labels = vec![
                    ("priority_level", level.name.as_str()),
                    ("flow_schema", schema.name.as_str()),
                ];
                (level, schema, labels)
            })
        })
}

fn per_level<'a>(
    flow: &'a FlowcontrolMetrics,
    value: impl Fn(&LevelMetrics) -> Option<f64>,
) -> Vec<(Labels<'a>, f64)> {
    flow.levels
        .iter()
        .filter_map(|l| Some((vec![("priority_level", l.name.as_str())], value(l)?)))
        .collect()
}

fn encode_flowcontrol(flow: &FlowcontrolMetrics, enc: &mut DescriptorEncoder) -> fmt::Result {
    let name = |n: &str| format!("{PREFIX}{n}");
    let limited = |l: &LevelMetrics| !l.exempt;
    let queuing = |l: &LevelMetrics| l.queuing;
    let any = |_: &LevelMetrics| true;

    let mut rejected = Vec::new();
    for (level, schema, labels) in pairs(flow, any) {
        for reason in RejectReason::ALL {
            let count = schema.stats.rejected[reason as usize];
            if count > 0 || possible_reasons(level).contains(&reason) {
                let mut l = labels.clone();
                l.push(("reason", reason.as_str()));
                rejected.push((l, count));
            }
        }
    }
    counters(
        enc,
        &name("rejected_requests"),
        "Requests rejected, by priority level, flow schema and reason.",
        rejected,
    )?;
    counters(
        enc,
        &name("dispatched_requests"),
        "Requests that started executing, by priority level and flow schema.",
        pairs(flow, any)
            .map(|(_, s, l)| (l, s.stats.dispatched))
            .collect(),
    )?;
    gauges(
        enc,
        &name("current_inqueue_requests"),
        "Requests waiting in queues now.",
        pairs(flow, queuing)
            .map(|(_, s, l)| (l, s.stats.waiting as f64))
            .collect(),
    )?;
    gauges(
        enc,
        &name("current_inqueue_seats"),
        "Seats (max of initial and final) of the requests waiting in queues now.",
        pairs(flow, queuing)
            .map(|(_, s, l)| (l, s.stats.waiting_seats as f64))
            .collect(),
    )?;
    gauges(
        enc,
        &name("current_executing_requests"),
        "Requests executing now.",
        pairs(flow, any)
            .map(|(_, s, l)| (l, s.stats.executing as f64))
            .collect(),
    )?;
    gauges(
        enc,
        &name("current_executing_seats"),
        "Seats held now by executing requests and by finished ones during their additional latency.",
        pairs(flow, any).map(|(_, s, l)| (l, s.stats.seats_in_use as f64)).collect(),
    )?;
    let mut waits = Vec::new();
    for (_, schema, labels) in pairs(flow, limited) {
        for (execute, h) in [
            ("true", &schema.stats.wait_dispatched),
            ("false", &schema.stats.wait_rejected),
        ] {
            let mut l = labels.clone();
            l.push(("execute", execute));
            waits.push((l, duration_value(h)));
        }
    }
    histograms(
        enc,
        &name("request_wait_duration_seconds"),
        "Seconds from arrival to the start of execution (execute=true) or to rejection (execute=false).",
        waits,
    )?;
    histograms(
        enc,
        &name("request_execution_seconds"),
        "Seconds from the start to the end of execution (additional latency not included).",
        pairs(flow, any)
            .map(|(_, s, mut l)| {
                l.push(("type", "regular"));
                (l, duration_value(&s.stats.execution))
            })
            .collect(),
    )?;
    histograms(
        enc,
        &name("request_queue_length_after_enqueue"),
        "Length of a request's queue right after the request joined it.",
        pairs(flow, queuing)
            .map(|(_, s, l)| (l, length_value(&s.stats.queue_length)))
            .collect(),
    )?;
    histograms(
        enc,
        &name("work_estimated_seats"),
        "Seats (max of initial and final) of the requests that reached a limited level.",
        pairs(flow, limited)
            .map(|(_, s, l)| (l, seats_value(&s.stats.work_estimated_seats)))
            .collect(),
    )?;
    // As in Kubernetes, a pair's series appears at its first count.
    counters(
        enc,
        &name("request_dispatch_no_accommodation"),
        "Dispatch attempts whose chosen request did not fit in the free seats.",
        pairs(flow, queuing)
            .filter(|(_, s, _)| s.stats.no_accommodation > 0)
            .map(|(_, s, l)| (l, s.stats.no_accommodation))
            .collect(),
    )?;
    let utilization = |phase: &'static str, pick: fn(&Utilization) -> HistogramValue| {
        flow.levels
            .iter()
            .filter_map(move |l| {
                let labels = vec![("phase", phase), ("priority_level", l.name.as_str())];
                Some((labels, pick(l.utilization.as_ref()?)))
            })
            .collect::<Vec<_>>()
    };
    histograms(
        enc,
        &name("priority_level_seat_utilization"),
        "Seats in use over the level's current limit, observed at the end of every nanosecond.",
        utilization("executing", |u| ratio_value(&u.seats)),
    )?;
    let mut requests = utilization("waiting", |u| ratio_value(&u.waiting));
    requests.extend(utilization("executing", |u| ratio_value(&u.executing)));
    histograms(
        enc,
        &name("priority_level_request_utilization"),
        "Requests waiting (over queue length limit x queues) or executing (over the current limit), observed at the end of every nanosecond.",
        requests,
    )?;
    gauges(
        enc,
        &name("nominal_limit_seats"),
        "NominalCL: the level's share of the server's seats.",
        per_level(flow, |l| Some(l.nominal_limit_seats as f64)),
    )?;
    gauges(
        enc,
        &name("lower_limit_seats"),
        "MinCL: the seats the level keeps however much others want to borrow.",
        per_level(flow, |l| Some(l.lower_limit_seats as f64)),
    )?;
    gauges(
        enc,
        &name("upper_limit_seats"),
        "MaxCL: the most seats the level may hold with what it borrows.",
        per_level(flow, |l| Some(l.upper_limit_seats as f64)),
    )?;
    gauges(
        enc,
        &name("current_limit_seats"),
        "CurrentCL: the seats the level may use now, after borrowing.",
        per_level(flow, |l| Some(l.current_limit_seats as f64)),
    )?;
    gauges(
        enc,
        &name("demand_seats_high_watermark"),
        "Highest seat demand of the last borrowing period.",
        per_level(flow, |l| Some(l.demand.high_watermark as f64)),
    )?;
    gauges(
        enc,
        &name("demand_seats_average"),
        "Time-weighted mean seat demand of the last borrowing period.",
        per_level(flow, |l| Some(l.demand.avg)),
    )?;
    gauges(
        enc,
        &name("demand_seats_stdev"),
        "Time-weighted standard deviation of seat demand over the last borrowing period.",
        per_level(flow, |l| Some(l.demand.std_dev)),
    )?;
    gauges(
        enc,
        &name("demand_seats_smoothed"),
        "Smoothed envelope of seat demand.",
        per_level(flow, |l| Some(l.demand.smoothed)),
    )?;
    gauges(
        enc,
        &name("target_seats"),
        "Borrowing's target seats for the level.",
        per_level(flow, |l| Some(l.target_seats)),
    )?;
    gauges(
        enc,
        &name("seat_fair_frac"),
        "Borrowing's fair fraction of the seats a level may claim.",
        vec![(Vec::new(), flow.seat_fair_frac)],
    )?;
    gauges(
        enc,
        &name("current_r"),
        "The level's virtual time R, in seat-seconds.",
        per_level(flow, |l| l.current_r),
    )?;
    encode_dispatch_and_demand(flow, enc)?;
    encode_adaptive(flow, enc)
}

/// The adaptive limit's series, when it is on.
fn encode_adaptive(flow: &FlowcontrolMetrics, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(a) = &flow.adaptive else {
        return Ok(());
    };
    let name = |n: &str| format!("{PREFIX}adaptive_{n}");
    let one = |v: f64| vec![(Vec::new(), v)];
    gauges(
        enc,
        &name("server_concurrency_limit"),
        "Seats the adaptive limit lets all levels share now.",
        one(f64::from(a.limit)),
    )?;
    gauges(
        enc,
        &name("limit_estimate"),
        "The adaptive limit's smoothed total, which a probe returns to.",
        one(a.estimate),
    )?;
    gauges(
        enc,
        &name("min_latency_seconds"),
        "Mean execution time the last minimum-latency probe measured.",
        a.min_latency_secs.map(one).unwrap_or_default(),
    )?;
    gauges(
        enc,
        &name("latency_seconds"),
        "Mean execution time over the adaptive limit's last window.",
        a.latency_secs.map(one).unwrap_or_default(),
    )?;
    gauges(
        enc,
        &name("gradient"),
        "The adaptive limit's last gradient: minimum latency times tolerance over latency, in [0.5, 2].",
        one(a.gradient),
    )?;
    gauges(
        enc,
        &name("probing"),
        "1 while a minimum-latency probe holds the limit low.",
        one(if a.probing { 1.0 } else { 0.0 }),
    )?;
    counters(
        enc,
        &name("probes"),
        "Minimum-latency probes started.",
        vec![(Vec::new(), a.probes)],
    )
}

/// The virtual-time gauges of the last dispatch, the time-weighted seat
/// demand, and the server's requests by kind.
fn encode_dispatch_and_demand(
    flow: &FlowcontrolMetrics,
    enc: &mut DescriptorEncoder,
) -> fmt::Result {
    let name = |n: &str| format!("{PREFIX}{n}");
    gauges(
        enc,
        &name("dispatch_r"),
        "R at the level's last dispatch from a queue, in seat-seconds.",
        per_level(flow, |l| Some(l.dispatch?.dispatch_r)),
    )?;
    gauges(
        enc,
        &name("latest_s"),
        "S (virtual start) of the level's last dispatched request, in seat-seconds.",
        per_level(flow, |l| Some(l.dispatch?.latest_s)),
    )?;
    let bounds = |pick: fn(&DispatchMetrics) -> (f64, f64)| {
        let mut series = Vec::new();
        for l in &flow.levels {
            if let Some(d) = &l.dispatch {
                let (min, max) = pick(d);
                for (bound, value) in [("min", min), ("max", max)] {
                    series.push((
                        vec![("priority_level", l.name.as_str()), ("bound", bound)],
                        value,
                    ));
                }
            }
        }
        series
    };
    gauges(
        enc,
        &name("next_s_bounds"),
        "Min and max, over queues with waiting requests, of the S of each one's oldest request, in seat-seconds.",
        bounds(|d| d.next_s_bounds),
    )?;
    gauges(
        enc,
        &name("next_discounted_s_bounds"),
        "next_s_bounds less each queue's estimated work in progress, in seat-seconds.",
        bounds(|d| d.next_discounted_s_bounds),
    )?;
    histograms(
        enc,
        &name("demand_seats"),
        "Seat demand (seats in use plus seats waiting) over NominalCL, observed at the end of every nanosecond.",
        flow.levels
            .iter()
            .filter_map(|l| {
                let labels = vec![("priority_level", l.name.as_str())];
                Some((labels, ratio_value(l.demand_seats.as_ref()?)))
            })
            .collect(),
    )?;
    let read_vs_write = flow.read_vs_write.as_ref().map_or_else(Vec::new, |rw| {
        ReadVsWrite::SERIES
            .iter()
            .zip(&rw.series)
            .map(|(&(phase, kind), h)| {
                (
                    vec![("phase", phase), ("request_kind", kind)],
                    ratio_value(h),
                )
            })
            .collect()
    });
    histograms(
        enc,
        &name("read_vs_write_current_requests"),
        "The server's requests waiting in queues or executing, by kind, observed at the end of every nanosecond (raw counts, as under API Priority and Fairness).",
        read_vs_write,
    )
}

fn label(q: &WorkqueueMetrics) -> Labels<'_> {
    vec![("name", q.name.as_str())]
}

fn encode_workqueues(queues: &[WorkqueueMetrics], enc: &mut DescriptorEncoder) -> fmt::Result {
    gauges(
        enc,
        "workqueue_depth",
        "Items waiting to be processed.",
        queues.iter().map(|q| (label(q), q.depth as f64)).collect(),
    )?;
    counters(
        enc,
        "workqueue_adds",
        "Adds that made an item dirty.",
        queues.iter().map(|q| (label(q), q.adds)).collect(),
    )?;
    histograms(
        enc,
        "workqueue_queue_duration_seconds",
        "Seconds an item waited before a worker took it.",
        queues
            .iter()
            .map(|q| (label(q), queue_value(&q.queue_duration)))
            .collect(),
    )?;
    histograms(
        enc,
        "workqueue_work_duration_seconds",
        "Seconds a worker spent on an item.",
        queues
            .iter()
            .map(|q| (label(q), queue_value(&q.work_duration)))
            .collect(),
    )?;
    gauges(
        enc,
        "workqueue_unfinished_work_seconds",
        "Seconds of work in progress not yet observed by work_duration.",
        queues
            .iter()
            .map(|q| (label(q), q.unfinished_work_seconds))
            .collect(),
    )?;
    gauges(
        enc,
        "workqueue_longest_running_processor_seconds",
        "Seconds the longest-running worker has been at its item.",
        queues
            .iter()
            .map(|q| (label(q), q.longest_running_processor_seconds))
            .collect(),
    )?;
    counters(
        enc,
        "workqueue_retries",
        "Rate-limited (delayed) adds.",
        queues.iter().map(|q| (label(q), q.retries)).collect(),
    )?;
    Ok(())
}
