//! What a configuration does to a workload, before it goes live: the real
//! [`crate::dispatcher::Dispatcher`] on a manual clock, fed by simulated
//! clients, as fast as one core runs it (`apf simulate` prints how fast).
//!
//! A [`Workload`] (a YAML file; format in `docs/workload-format.md`) lists
//! flows: who sends (user, groups), what (verb, resource, namespace, ... —
//! what classification looks at), how (an open-loop Poisson rate or
//! closed-loop clients with think time), how long each request executes
//! (constant, uniform, exponential or lognormal), with how many seats and
//! additional latency, and how the load changes over time (phases and
//! bursts). [`run`] gives a deterministic [`Report`]: per flow and per
//! level, throughput, share of seat-seconds, queue waits and rejections by
//! reason, time series for [`charts`], and a [`Verdict`] on the flows the
//! workload expects to be served.
//!
//! ```
//! use apf::config::Config;
//! use apf::simulator::{self, Workload};
//!
//! let workload = Workload::from_yaml_str("
//! duration: 2s
//! flows:
//!   - name: app
//!     user: system:serviceaccount:shop:app
//!     groups: [system:serviceaccounts, system:authenticated]
//!     verb: list
//!     resource: pods
//!     namespace: shop
//!     rate: 500
//!     service: {exponential: {mean: 20ms}}
//!     expect: served
//! ").unwrap();
//! let (report, _stats) = simulator::run(&Config::builtin(), &workload, 7, &mut |_| {}).unwrap();
//! let app = report.flow("app").unwrap();
//! assert_eq!(app.level, "workload-low");
//! assert!(report.verdict().pass);
//! ```
//!
//! The built-in scenario, [`noisy_neighbour`], is what `apf simulate` runs
//! with no arguments.

mod engine;
mod fairness;
mod histogram;
mod report;
mod svg;
mod workload;

pub use engine::{run, RunStats, SimulationError};
pub use fairness::{
    compare_fairness, compare_fairness_with, with_fairness, FairnessComparison, FairnessRow,
};
pub use histogram::LogHistogram;
pub use report::{Check, FlowReport, LevelReport, Report, Series, Verdict};
// Number and duration formatting the apf-cli crate shares with the report
// page, so both print the same figures; not part of the API.
#[doc(hidden)]
pub use report::{count as format_count, duration as format_duration, wait as format_wait};
pub use workload::{
    limits, parse_duration, Arrival, Backend, BackendPhase, Burst, Expectation, Flow, Phase,
    Server, ServiceTime, Workload, WorkloadError, WorkloadErrors,
};

use std::path::{Path, PathBuf};

/// The built-in scenario's file, `examples/workloads/noisy-neighbour.yaml`.
pub const NOISY_NEIGHBOUR_YAML: &str =
    include_str!("../../examples/workloads/noisy-neighbour.yaml");

/// One runaway controller flooding workload-low through its service
/// account, forty polite tenants on the same level, node heartbeats at
/// node-high and leader election at leader-election.
pub fn noisy_neighbour() -> Workload {
    Workload::from_yaml_str(NOISY_NEIGHBOUR_YAML).expect("the built-in workload is valid")
}

/// The charts of a report, as (file name, SVG document): seat share over
/// time per flow, throughput against demand per flow, rejections over time
/// by reason, queue length over time per level with each level's queue
/// capacity, seats in use and the limit over time per level, and the
/// distribution of queue waits per flow; with an adaptive limit or a
/// backend model, also the server's total limit against the backend's
/// requests in flight and capacity. Charts over time mark the flows'
/// phase changes and the samples where borrowing moved a limit.
pub fn charts(report: &Report) -> Vec<(&'static str, String)> {
    let marked = |mut chart: svg::Chart| {
        chart.markers = markers(report);
        svg::render(&chart)
    };
    let mut charts = vec![
        ("seat-share.svg", marked(seat_share_chart(report))),
        ("throughput.svg", marked(throughput_chart(report))),
        ("rejections.svg", marked(rejections_chart(report))),
        ("queue-length.svg", marked(queue_length_chart(report))),
        ("level-seats.svg", marked(level_seats_chart(report))),
        ("wait-time.svg", svg::render(&wait_time_chart(report))),
    ];
    if report.adaptive || report.backend {
        charts.push(("server-limit.svg", marked(server_limit_chart(report))));
    }
    charts
}

fn server_limit_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let line =
        |values: Vec<f64>| -> Vec<(f64, f64)> { s.times.iter().copied().zip(values).collect() };
    let mut series = vec![
        svg::Line {
            name: if report.adaptive {
                "server limit (adaptive)".into()
            } else {
                "server limit (fixed)".into()
            },
            points: line(s.server_limit.iter().map(|&x| f64::from(x)).collect()),
            dashed: false,
            color: Some(0),
        },
        svg::Line {
            name: "backend in flight".into(),
            points: line(s.backend_in_flight.iter().map(|&x| x as f64).collect()),
            dashed: false,
            color: Some(1),
        },
    ];
    if !s.backend_capacity.is_empty() {
        series.push(svg::Line {
            name: "backend capacity".into(),
            points: line(s.backend_capacity.iter().map(|&x| f64::from(x)).collect()),
            dashed: true,
            color: Some(2),
        });
    }
    svg::Chart {
        title: title("Server concurrency limit and the backend", report),
        x_label: "simulated time (s)".into(),
        y_label: "seats / requests".into(),
        series,
        ..svg::Chart::default()
    }
}

/// Phase changes (labelled) and borrowing adjustments (grey).
fn markers(report: &Report) -> Vec<svg::Marker> {
    let s = &report.series;
    // An adaptive total moves the limits at nearly every sample: marking
    // each would hide the chart.
    let adjustments = if report.adaptive {
        Vec::new()
    } else {
        s.borrowing_adjustments()
    };
    let mut markers: Vec<svg::Marker> = adjustments
        .into_iter()
        .map(|x| svg::Marker {
            x,
            label: "borrowing moved a limit".into(),
            strong: false,
        })
        .collect();
    markers.extend(s.phase_changes.iter().map(|(x, label)| svg::Marker {
        x: *x,
        label: format!("phase: {label}"),
        strong: true,
    }));
    markers
}

/// Per-interval counts as a rate per second at the interval's end.
fn per_second(s: &Series, counts: &[u64]) -> Vec<(f64, f64)> {
    let secs = s.interval.as_secs_f64().max(1e-9);
    let mut start = 0.0;
    s.times
        .iter()
        .zip(counts)
        .map(|(&t, &n)| {
            // The last interval may be cut short by the end of the run.
            let width = (t - start).max(1e-9).min(secs);
            start = t;
            (t, n as f64 / width)
        })
        .collect()
}

fn throughput_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let mut series = Vec::new();
    for (i, f) in report.flows.iter().enumerate() {
        series.push(svg::Line {
            name: format!("{} completed", f.label()),
            points: per_second(s, &s.flow_completed[i]),
            dashed: false,
            color: Some(i),
        });
        series.push(svg::Line {
            name: format!("{} arrived", f.label()),
            points: per_second(s, &s.flow_arrived[i]),
            dashed: true,
            color: Some(i),
        });
    }
    svg::Chart {
        title: title("Throughput against demand per flow", report),
        x_label: "simulated time (s)".into(),
        y_label: "requests per second (dashed: arrived, solid: completed)".into(),
        series,
        ..svg::Chart::default()
    }
}

fn rejections_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let series = crate::queueset::RejectReason::ALL
        .iter()
        .map(|&reason| {
            let mut line =
                svg::Line::new(reason.as_str(), per_second(s, &s.rejected[reason as usize]));
            line.color = Some(reason as usize + 2);
            line
        })
        .collect();
    svg::Chart {
        title: title("Rejections over time by reason", report),
        x_label: "simulated time (s)".into(),
        y_label: "rejections per second (HTTP 429)".into(),
        stacked: true,
        series,
        ..svg::Chart::default()
    }
}

/// Writes [`charts`] into `dir` (created if missing); returns their paths.
pub fn write_charts(report: &Report, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    charts(report)
        .into_iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        })
        .collect()
}

/// Writes [`charts`] and an `index.html` that shows `text` (the report as
/// printed) above every chart, so one page holds the whole run; returns the
/// path of `index.html` after the charts'.
pub fn write_report_page(report: &Report, text: &str, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = write_charts(report, dir)?;
    let mut html =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    html.push_str(&format!(
        "<title>apf simulate: {}</title>\n",
        html_escape(&report.workload)
    ));
    html.push_str(
        "<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px;overflow-x:auto}\
         img{max-width:100%;display:block;margin:1em 0}</style>\n</head>\n<body>\n",
    );
    html.push_str(&format!(
        "<h1>apf simulate: {}</h1>\n<pre>{}</pre>\n",
        html_escape(&report.workload),
        html_escape(text)
    ));
    for path in &paths {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let title = name.trim_end_matches(".svg").replace('-', " ");
        html.push_str(&format!(
            "<h2>{}</h2>\n<img src=\"{}\" alt=\"{}\">\n",
            html_escape(&title),
            html_escape(&name),
            html_escape(&title)
        ));
    }
    html.push_str("</body>\n</html>\n");
    let index = dir.join("index.html");
    std::fs::write(&index, html)?;
    paths.push(index);
    Ok(paths)
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

fn seat_share_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let totals: Vec<f64> = (0..s.times.len())
        .map(|k| s.flow_seat_seconds.iter().map(|f| f[k]).sum())
        .collect();
    let series = report
        .flows
        .iter()
        .zip(&s.flow_seat_seconds)
        .map(|(f, seat_seconds)| {
            let points = s
                .times
                .iter()
                .zip(seat_seconds.iter().zip(&totals))
                .map(|(&t, (&x, &total))| (t, if total > 0.0 { 100.0 * x / total } else { 0.0 }))
                .collect();
            svg::Line::new(f.label(), points)
        })
        .collect();
    svg::Chart {
        title: title("Share of seat time per flow", report),
        x_label: "simulated time (s)".into(),
        y_label: "share of seats in use (%)".into(),
        stacked: true,
        y_max: Some(100.0),
        series,
        ..svg::Chart::default()
    }
}

fn queue_length_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let mut series = Vec::new();
    for (i, (l, level)) in queued_levels(report).enumerate() {
        let points = s
            .times
            .iter()
            .zip(&s.level_queue_length[l])
            .map(|(&t, &n)| (t, n as f64))
            .collect();
        series.push(svg::Line {
            name: level.name.clone(),
            points,
            dashed: false,
            color: Some(i),
        });
        if let (Some(capacity), Some(&last)) = (level.queue_capacity, s.times.last()) {
            series.push(svg::Line {
                name: format!("{} capacity", level.name),
                points: vec![(0.0, capacity as f64), (last, capacity as f64)],
                dashed: true,
                color: Some(i),
            });
        }
    }
    svg::Chart {
        title: title("Requests waiting per priority level", report),
        x_label: "simulated time (s)".into(),
        y_label: "requests in queues (dashed: queues × length limit)".into(),
        series,
        ..svg::Chart::default()
    }
}

fn level_seats_chart(report: &Report) -> svg::Chart {
    let s = &report.series;
    let mut series = Vec::new();
    for (i, (l, level)) in queued_levels(report).enumerate() {
        let line = |values: &[u32]| -> Vec<(f64, f64)> {
            s.times
                .iter()
                .zip(values)
                .map(|(&t, &n)| (t, n as f64))
                .collect()
        };
        series.push(svg::Line {
            name: format!("{} in use", level.name),
            points: line(&s.level_seats_in_use[l]),
            dashed: false,
            color: Some(i),
        });
        series.push(svg::Line {
            name: format!("{} limit", level.name),
            points: line(&s.level_limit[l]),
            dashed: true,
            color: Some(i),
        });
    }
    svg::Chart {
        title: title("Seats per priority level", report),
        x_label: "simulated time (s)".into(),
        y_label: "seats (limit moves with borrowing)".into(),
        series,
        ..svg::Chart::default()
    }
}

/// Limited levels that saw traffic, with their index.
fn queued_levels(report: &Report) -> impl Iterator<Item = (usize, &LevelReport)> {
    report
        .levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.arrived > 0 && !l.exempt)
}

fn title(what: &str, report: &Report) -> String {
    if report.workload.is_empty() {
        what.to_string()
    } else {
        format!("{what} — {}", report.workload)
    }
}

/// The smallest wait the log axis shows, ms; shorter waits (including
/// none) are drawn there.
const WAIT_FLOOR_MS: f64 = 1e-3;

fn wait_time_chart(report: &Report) -> svg::Chart {
    let longest_ms = report
        .flows
        .iter()
        .map(|f| f.wait.max() as f64 / 1e6)
        .fold(WAIT_FLOOR_MS * 1e3, f64::max);
    let series = report
        .flows
        .iter()
        .filter(|f| f.wait.count() > 0)
        .map(|f| {
            let mut points = vec![(WAIT_FLOOR_MS, 0.0)];
            for (ns, frac) in f.wait.cdf() {
                let ms = ns as f64 / 1e6;
                if ms <= WAIT_FLOOR_MS {
                    points[0].1 = 100.0 * frac;
                } else {
                    points.push((ms, 100.0 * frac));
                }
            }
            // Carried to the right edge, so a flow that never waited shows
            // as a line along the top.
            points.push((longest_ms, 100.0));
            svg::Line::new(f.label(), points)
        })
        .collect();
    svg::Chart {
        title: title("Queue wait distribution per flow", report),
        x_label: "wait (ms, log scale; 1 µs or less drawn at the left edge)".into(),
        y_label: "requests that waited at most this long (%)".into(),
        log_x: true,
        y_max: Some(100.0),
        series,
        ..svg::Chart::default()
    }
}
