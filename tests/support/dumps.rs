//! Reading back the debug dumps' text tables, for the tests of the dumps
//! (`tests/metrics/`, `capi/tests/ffi/observe.rs`). Included with `#[path]`.

/// Split a dump into header and rows of trimmed cells, checking the layout:
/// every cell but the last ends with a comma and is padded to its column.
pub fn table(dump: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = dump.lines();
    let split =
        |line: &str| -> Vec<String> { line.split(',').map(|c| c.trim().to_string()).collect() };
    let header = split(lines.next().expect("header"));
    let rows: Vec<Vec<String>> = lines.map(split).collect();
    for row in &rows {
        assert_eq!(row.len(), header.len(), "row width: {row:?}");
    }
    // Every column starts at the same offset on every line.
    let starts = |line: &str| -> Vec<usize> {
        let mut offset = 0;
        line.split(',')
            .map(|segment| {
                let start = offset + segment.len() - segment.trim_start().len();
                offset += segment.len() + 1;
                start
            })
            .collect()
    };
    let first = starts(dump.lines().next().expect("header"));
    for line in dump.lines() {
        assert_eq!(starts(line), first, "aligned columns:\n{dump}");
    }
    (header, rows)
}

/// Kubernetes' columns of `dump_priority_levels`.
pub const PRIORITY_LEVEL_COLUMNS: [&str; 10] = [
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

/// Kubernetes' columns of `dump_queues`.
pub const QUEUE_COLUMNS: [&str; 9] = [
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

/// Kubernetes' columns of `dump_requests` (its misspelt
/// "FlowDistingsher" included).
pub const REQUEST_COLUMNS: [&str; 10] = [
    "PriorityLevelName",
    "FlowSchemaName",
    "QueueIndex",
    "RequestIndexInQueue",
    "FlowDistingsher",
    "ArriveTime",
    "InitialSeats",
    "FinalSeats",
    "AdditionalLatency",
    "StartTime",
];

/// The columns `dump_requests` adds after [`REQUEST_COLUMNS`] with
/// `includeRequestDetails`.
pub const REQUEST_DETAIL_COLUMNS: [&str; 8] = [
    "UserName",
    "Verb",
    "APIPath",
    "Namespace",
    "Name",
    "APIVersion",
    "Resource",
    "SubResource",
];
