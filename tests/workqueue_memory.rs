//! Measures the queue's memory per queued item with a counting allocator:
//! the bytes the queue holds with N distinct items queued, minus what it held
//! empty, over N, minus the item's own size. Run with `--nocapture` to see
//! the table; the test fails above the 64-byte goal.
#![cfg(not(loom))]

use apf::clock::Clock;
use apf::workqueue::{Lane, Priority, PriorityQueue, QueueConfig, TwoLane, Workqueue};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's
// arguments unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller upholds `realloc`'s contract for `ptr` and `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const GOAL: f64 = 64.0;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Bytes per item beyond the item itself, for `n` items added by `add`.
fn per_item<Q>(make: impl FnOnce() -> Q, n: u64, add: impl Fn(&Q, u64)) -> f64 {
    let q = make();
    let before = live();
    for i in 0..n {
        add(&q, i);
    }
    let after = live();
    drop(q);
    (after - before) as f64 / n as f64 - std::mem::size_of::<u64>() as f64
}

fn config(timed: bool) -> QueueConfig {
    let (clock, _manual) = Clock::manual();
    let mut c = QueueConfig::with_clock(clock);
    c.timed_metrics = timed;
    c
}

#[test]
fn queue_overhead_per_item_is_at_most_64_bytes() {
    let mut rows = Vec::new();
    // Every kind at small sizes; the two extremes also at 600k (just after
    // the hash index and FIFO doubled) and at a million items.
    for n in [1_000u64, 100_000, 600_000, 1_000_000] {
        let all = n <= 100_000;
        rows.push((
            "fifo, timed metrics",
            n,
            per_item(
                || Workqueue::<u64>::with_config(config(true)),
                n,
                |q, i| q.add(i),
            ),
        ));
        rows.push((
            "priority queue, timed metrics",
            n,
            per_item(
                || PriorityQueue::<u64>::with_config(config(true)),
                n,
                |q, i| q.add(i),
            ),
        ));
        if !all {
            continue;
        }
        rows.push((
            "fifo, counters only",
            n,
            per_item(
                || Workqueue::<u64>::with_config(config(false)),
                n,
                |q, i| q.add(i),
            ),
        ));
        rows.push((
            "two lanes, timed metrics",
            n,
            per_item(
                || Workqueue::<u64, TwoLane>::with_strategy(config(true), TwoLane::default()),
                n,
                |q, i| q.add_with(i, if i % 2 == 0 { Lane::Fast } else { Lane::Slow }),
            ),
        ));
        rows.push((
            "priorities, timed metrics",
            n,
            per_item(
                || Workqueue::<u64, Priority>::with_strategy(config(true), Priority::default()),
                n,
                |q, i| q.add_with(i, (i % 10) as i32),
            ),
        ));
    }
    println!("| queue | items | bytes per queued item beyond the u64 item |");
    println!("| --- | ---: | ---: |");
    for (name, n, bytes) in &rows {
        println!("| {name} | {n} | {bytes:.1} |");
    }
    for (name, n, bytes) in rows {
        assert!(
            bytes <= GOAL,
            "{name} with {n} items: {bytes:.1} bytes per item"
        );
    }
}
