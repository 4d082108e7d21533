//! Debug dumps with the columns of Kubernetes'
//! `/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues`
//! and `dump_requests`, as the same comma-separated, space-aligned text
//! tables.
//!
//! Where libapf differs: instants are the dispatcher clock's (seconds since
//! its epoch, not wall-clock RFC 3339); `dump_requests` lists the waiting
//! requests (the queueset does not keep a record per executing request);
//! the `APIVersion` column shows the API group (a request digest has no
//! version).

use crate::clock::Instant;
use crate::dispatcher::Dispatcher;
use crate::level::{Level, WaitingNote};
use crate::queueset::vtime::{VTime, FRACTION_BITS};
use crate::queueset::RejectReason;
use crate::stats::READ_ONLY_TAG;
use crate::sync::Arc;
use std::time::Duration;

const PRIORITY_LEVEL_COLUMNS: [&str; 10] = [
    "PriorityLevelName",
    "ActiveQueues",
    "IsIdle",
    "IsQuiescing",
    "WaitingRequests",
    "ExecutingRequests",
    "DispatchedRequests",
    "RejectedRequests",
    "TimedoutRequests",
    "CancelledRequests",
];

const ADAPTIVE_COLUMNS: [&str; 10] = [
    "Limit",
    "Estimate",
    "MinLatency",
    "Latency",
    "Gradient",
    "Probing",
    "Probes",
    "Updates",
    "MinLimit",
    "MaxLimit",
];

const QUEUE_COLUMNS: [&str; 9] = [
    "PriorityLevelName",
    "Index",
    "PendingRequests",
    "ExecutingRequests",
    "SeatsInUse",
    "NextDispatchR",
    "InitialSeatsSum",
    "MaxSeatsSum",
    "TotalWorkSum",
];

const REQUEST_COLUMNS: [&str; 10] = [
    "PriorityLevelName",
    "FlowSchemaName",
    "QueueIndex",
    "RequestIndexInQueue",
    // Kubernetes' spelling.
    "FlowDistingsher",
    "ArriveTime",
    "InitialSeats",
    "FinalSeats",
    "AdditionalLatency",
    "StartTime",
];

const REQUEST_DETAIL_COLUMNS: [&str; 8] = [
    "UserName",
    "Verb",
    "APIPath",
    "Namespace",
    "Name",
    "APIVersion",
    "Resource",
    "SubResource",
];

impl Dispatcher {
    /// One row per priority level (levels a reconfiguration removed are
    /// shown while requests remain in them, with `IsQuiescing` true).
    pub fn dump_priority_levels(&self) -> String {
        let mut rows = vec![header(&PRIORITY_LEVEL_COLUMNS)];
        for (level, quiescing) in self.dumped_levels() {
            let st = level.stats().queueset;
            let tallies = level.tag_stats();
            let total = |f: &dyn Fn(&crate::stats::TagStats) -> u64| -> u64 {
                tallies.iter().map(|(_, t)| f(t)).sum()
            };
            let rejected = |r: RejectReason| total(&|t| t.rejected[r as usize]);
            let active_queues = level.queueset().map_or(0, |qs| {
                qs.dump().queues.iter().filter(|q| q.waiting > 0).count()
            });
            rows.push(vec![
                level.name.clone(),
                active_queues.to_string(),
                (st.requests_waiting == 0 && st.requests_executing == 0).to_string(),
                quiescing.to_string(),
                st.requests_waiting.to_string(),
                st.requests_executing.to_string(),
                total(&|t| t.dispatched).to_string(),
                (rejected(RejectReason::QueueFull) + rejected(RejectReason::ConcurrencyLimit))
                    .to_string(),
                rejected(RejectReason::TimeOut).to_string(),
                rejected(RejectReason::Cancelled).to_string(),
            ]);
        }
        format_table(&rows)
    }

    /// The adaptive server concurrency limit (libapf's own dump, beside
    /// Kubernetes' three): one row, or the header alone when it is off.
    /// Latencies in seconds; `-` where nothing was measured yet.
    pub fn dump_adaptive_limit(&self) -> String {
        let mut rows = vec![header(&ADAPTIVE_COLUMNS)];
        if let Some(a) = self.adaptive() {
            let secs = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| format!("{s:.6}"));
            rows.push(vec![
                a.limit.to_string(),
                format!("{:.2}", a.estimate),
                secs(a.min_latency_secs),
                secs(a.latency_secs),
                format!("{:.4}", a.gradient),
                a.probing.to_string(),
                a.probes.to_string(),
                a.updates.to_string(),
                a.options.min_limit.to_string(),
                a.options.max_limit.to_string(),
            ]);
        }
        format_table(&rows)
    }

    /// One row per queue of every level that queues.
    pub fn dump_queues(&self) -> String {
        let mut rows = vec![header(&QUEUE_COLUMNS)];
        for (level, _) in self.dumped_levels() {
            let Some(qs) = level.queueset() else {
                continue;
            };
            for q in qs.dump().queues {
                rows.push(vec![
                    level.name.clone(),
                    q.index.to_string(),
                    q.waiting.to_string(),
                    q.executing.to_string(),
                    q.seats_in_use.to_string(),
                    format_seat_seconds(q.next_dispatch_r),
                    q.initial_seats_sum.to_string(),
                    q.max_seats_sum.to_string(),
                    format_seat_seconds(q.total_work_sum),
                ]);
            }
        }
        format_table(&rows)
    }

    /// One row per waiting request, queue by queue, head first; with
    /// `include_details`, the request's attributes too.
    pub fn dump_requests(&self, include_details: bool) -> String {
        let mut head = header(&REQUEST_COLUMNS);
        if include_details {
            head.extend(header(&REQUEST_DETAIL_COLUMNS));
        }
        let mut rows = vec![head];
        for (level, _) in self.dumped_levels() {
            let Some(qs) = level.queueset() else {
                continue;
            };
            for w in qs.dump().waiting {
                let note = level.waiting_note(w.id);
                let field = |i: usize| note.as_ref().map_or("", |n| n.field(i)).to_string();
                let mut row = vec![
                    level.name.clone(),
                    self.schema_name(w.tag & !READ_ONLY_TAG).unwrap_or_default(),
                    w.queue.to_string(),
                    w.position.to_string(),
                    field(0),
                    format_instant(w.arrival),
                    w.estimate.initial_seats.to_string(),
                    w.estimate.final_seats.to_string(),
                    format_duration(w.estimate.additional_latency),
                    "-".to_string(),
                ];
                if include_details {
                    row.extend((1..WaitingNote::FIELDS.len()).map(field));
                }
                rows.push(row);
            }
        }
        format_table(&rows)
    }

    /// The levels in force and the quiescing ones, by name.
    fn dumped_levels(&self) -> Vec<(Arc<Level>, bool)> {
        let mut all: Vec<(Arc<Level>, bool)> =
            self.levels().into_iter().map(|l| (l, false)).collect();
        all.extend(self.quiescing_levels().into_iter().map(|l| (l, true)));
        all.sort_by(|a, b| a.0.name.cmp(&b.0.name).then(a.1.cmp(&b.1)));
        all
    }
}

fn header(columns: &[&str]) -> Vec<String> {
    columns.iter().map(|c| c.to_string()).collect()
}

/// Kubernetes' dump layout: cells joined by `,` and aligned as Go's
/// `tabwriter` aligns them with a minimum width of 8 and one space of
/// padding; the last cell of a row is not padded.
pub fn format_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                widths[i] = widths[i].max(cell.chars().count() + 2);
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < row.len() {
                out.push(',');
                let width = widths[i].max(8);
                let used = cell.chars().count() + 1;
                out.extend(std::iter::repeat_n(' ', width.saturating_sub(used)));
            }
        }
        out.push('\n');
    }
    out
}

/// Virtual time or work as Kubernetes prints its `SeatSeconds`: eight
/// decimals and `ss`.
pub fn format_seat_seconds(v: VTime) -> String {
    // VTime is 2^-20 seat-ns; 1e-8 seat-seconds are 10 seat-ns.
    let units = v / ((1i128 << FRACTION_BITS) * 10);
    let sign = if units < 0 { "-" } else { "" };
    let units = units.unsigned_abs();
    format!("{sign}{}.{:08}ss", units / 100_000_000, units % 100_000_000)
}

fn format_instant(t: Instant) -> String {
    let n = t.as_nanos();
    format!("{}.{:09}s", n / 1_000_000_000, n % 1_000_000_000)
}

fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".to_string()
    } else {
        format!("{d:?}")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn tables_align_like_go_tabwriter() {
        let rows = vec![
            vec!["Name".to_string(), "A".to_string(), "Last".to_string()],
            vec![
                "workload-low".to_string(),
                "12345678".to_string(),
                "x".to_string(),
            ],
        ];
        let t = format_table(&rows);
        // What Go's tabwriter.NewWriter(w, 8, 0, 1, ' ', 0) prints for
        // these rows joined with ",\t".
        assert_eq!(
            t,
            "Name,         A,        Last\nworkload-low, 12345678, x\n"
        );
    }

    #[test]
    fn seat_seconds_have_eight_decimals() {
        let one_and_a_half = (3i128 << FRACTION_BITS) * 500_000_000;
        assert_eq!(format_seat_seconds(one_and_a_half), "1.50000000ss");
        assert_eq!(format_seat_seconds(0), "0.00000000ss");
        assert_eq!(format_seat_seconds(-one_and_a_half), "-1.50000000ss");
    }
}
