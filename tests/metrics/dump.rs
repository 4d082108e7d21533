//! The debug dumps: Kubernetes' columns, one row per level, queue and
//! waiting request.

use super::*;
use dumps::{
    table, PRIORITY_LEVEL_COLUMNS, QUEUE_COLUMNS, REQUEST_COLUMNS, REQUEST_DETAIL_COLUMNS,
};

#[test]
fn dump_priority_levels_has_kubernetes_columns_and_one_row_per_level() {
    let (d, manual) = dispatcher();
    let a1 = executes(&d, &tenant("alice"));
    let _a2 = executes(&d, &tenant("alice"));
    let waiting = queues(&d, &tenant("alice"));
    let _queued2 = queues(&d, &tenant("eve"));
    assert_eq!(rejected(&d, &tenant("alice")), RejectReason::QueueFull);
    manual.advance(ms(5));
    assert!(waiting.cancel());
    drop(a1);
    let (header, rows) = table(&d.dump_priority_levels());
    assert_eq!(header, PRIORITY_LEVEL_COLUMNS);
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        names,
        ["catch-all", "exempt", "strict", "tight"],
        "sorted by name"
    );
    let tight = &rows[3];
    // eve's request was dispatched when a1 ended: 3 dispatched, 2 running.
    assert_eq!(
        tight[1..],
        ["0", "false", "false", "0", "2", "3", "1", "0", "1"]
    );
    assert_eq!(
        rows[1][1..],
        ["0", "true", "false", "0", "0", "0", "0", "0", "0"]
    );
}

#[test]
fn a_removed_level_with_requests_is_quiescing() {
    let (d, _manual) = dispatcher();
    let held = executes(&d, &tenant("alice"));
    d.reconfigure(&Config::mandatory()).expect("valid");
    let (_, rows) = table(&d.dump_priority_levels());
    let tight = rows.iter().find(|r| r[0] == "tight").expect("still shown");
    assert_eq!(tight[3], "true");
    assert_eq!(tight[5], "1");
    drop(held);
    let (_, rows) = table(&d.dump_priority_levels());
    assert!(rows.iter().all(|r| r[0] != "tight"), "gone once idle");
}

#[test]
fn dump_queues_has_one_row_per_queue() {
    let (d, _manual) = dispatcher();
    let _a = executes(&d, &tenant("alice"));
    let _b = executes(&d, &tenant("alice"));
    let _w = queues(&d, &tenant("alice"));
    let (header, rows) = table(&d.dump_queues());
    assert_eq!(header, QUEUE_COLUMNS);
    // Only tight queues: catch-all and strict reject, exempt never waits.
    let tight: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "tight").collect();
    assert_eq!(tight.len(), 1);
    assert_eq!(tight[0][1..5], ["0", "1", "2", "2"]);
    assert!(tight[0][5].ends_with("ss"));
    assert_eq!(tight[0][6..8], ["1", "1"]);
    // One waiting request's work: 1 seat × G (3 ms).
    assert_eq!(tight[0][8], "0.00300000ss");
    assert_eq!(rows.len(), 1);
}

#[test]
fn dump_requests_lists_waiting_requests_with_their_details() {
    // Flows are told apart only when a level has more than one queue.
    let (d, manual) = dispatcher_with(config(4));
    let _a = executes(&d, &tenant("alice"));
    let _b = executes(&d, &tenant("alice"));
    manual.advance(ms(1500));
    let _w1 = queues(&d, &tenant("alice"));
    let _w2 = queues(&d, &tenant("mallory"));
    let (header, rows) = table(&d.dump_requests(false));
    assert_eq!(header, REQUEST_COLUMNS);
    assert_eq!(rows.len(), 2);
    let mut rows = rows;
    rows.sort_by(|a, b| a[4].cmp(&b[4]));
    let alice_queue: u32 = rows[0][2].parse().expect("queue index");
    assert!(alice_queue < 4);
    assert_eq!(rows[0][..2], ["tight", "tenants"]);
    assert_eq!(
        rows[0][3..],
        ["0", "alice", "1.500000000s", "1", "0", "0s", "-"]
    );
    assert_eq!(rows[1][4], "mallory");
    let (header, mut rows) = table(&d.dump_requests(true));
    rows.sort_by(|a, b| a[4].cmp(&b[4]));
    assert_eq!(header[10..], REQUEST_DETAIL_COLUMNS);
    assert_eq!(
        rows[1][10..],
        [
            "mallory",
            "list",
            "/apis/apps/v1/namespaces/team-a/deployments",
            "team-a",
            "",
            "apps",
            "deployments",
            ""
        ]
    );
    // Decided requests leave the dump.
    drop(_w1);
    let (_, rows) = table(&d.dump_requests(true));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][4], "mallory");
}
