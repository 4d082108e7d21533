//! controller-runtime's priority queue and the priority strategy.

use super::*;

fn queue() -> (PriorityQueue<&'static str>, ManualClock) {
    let (config, manual) = manual();
    (PriorityQueue::with_config(config), manual)
}

fn at(priority: i32) -> AddOpts {
    AddOpts {
        priority,
        ..AddOpts::default()
    }
}

fn after(d: Duration, priority: i32) -> AddOpts {
    AddOpts {
        after: d,
        priority,
        ..AddOpts::default()
    }
}

fn take(q: &PriorityQueue<&'static str>) -> (&'static str, i32) {
    let got = q.try_get_with_priority().expect("an item is ready");
    q.done(&got.0).unwrap();
    got
}

#[test]
fn hands_out_in_order_and_counts_adds() {
    let (q, _c) = queue();
    q.add("foo");
    q.add("bar");
    assert_eq!(take(&q), ("foo", 0));
    assert_eq!(take(&q), ("bar", 0));
    let m = q.metrics();
    assert_eq!((m.adds, m.depth), (2, 0));
}

#[test]
fn a_processing_item_is_not_handed_out_again_until_done() {
    let (q, _c) = queue();
    q.add("foo");
    let (foo, _) = q.try_get_with_priority().unwrap();
    q.add("foo");
    q.add("bar");
    assert_eq!(q.try_get_with_priority(), Ok(("bar", 0)));
    assert_eq!(q.try_get_with_priority(), Err(TryGetError::Empty));
    q.add("baz");
    q.done(&foo).unwrap();
    // Queued again when done: behind baz, which was ready before it.
    assert_eq!(take(&q), ("baz", 0));
    assert_eq!(take(&q), ("foo", 0));
    assert_eq!(q.metrics().adds, 4);
}

#[test]
fn duplicates_keep_the_highest_priority() {
    let (q, _c) = queue();
    q.add_with_opts("foo", at(1));
    q.add_with_opts("foo", at(2));
    q.add_with_opts("foo", at(1));
    assert_eq!(q.len(), 1);
    assert_eq!(take(&q), ("foo", 2));
    assert_eq!(q.metrics().adds, 1);
}

#[test]
fn a_raised_item_goes_to_the_back_of_its_new_priority() {
    let (q, _c) = queue();
    q.add("foo");
    q.add("bar");
    q.add("baz");
    q.add_with_opts("baz", at(1));
    assert_eq!(take(&q), ("baz", 1));
    assert_eq!(q.depth_by_priority(), vec![(0, 2)]);
}

/// controller-runtime 31d30b6: raising a priority kept the item's old
/// insertion order, putting it ahead of items already at that priority.
#[test]
fn regression_fifo_within_a_priority_after_a_raise() {
    let (q, _c) = queue();
    q.add_with_opts("foo", at(0));
    q.add_with_opts("bar", at(1));
    q.add_with_opts("foo", at(1));
    assert_eq!(q.len(), 2);
    assert_eq!(take(&q), ("bar", 1));
    assert_eq!(take(&q), ("foo", 1));
    // Re-adding at the same priority keeps the place.
    for k in ["a", "b", "c"] {
        q.add_with_opts(k, at(3));
    }
    q.add_with_opts("a", at(3));
    assert_eq!([take(&q).0, take(&q).0, take(&q).0], ["a", "b", "c"]);
}

#[test]
fn the_shortest_delay_wins() {
    let (q, clock) = queue();
    q.add_with_opts("foo", after(Duration::ZERO, 0));
    q.add_with_opts("foo", after(Duration::from_secs(3600), 0));
    assert_eq!(q.len(), 1);
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(take(&q), ("foo", 0));

    q.add_after("bar", ms(100));
    q.add_after("bar", ms(50));
    clock.advance(ms(50));
    assert_eq!(take(&q), ("bar", 0));
    clock.advance(ms(100));
    assert_eq!(q.len(), 0, "merged: no second add at 100 ms");
}

#[test]
fn a_ready_add_ends_the_wait() {
    let (q, clock) = queue();
    q.add_with_opts("foo", after(Duration::from_secs(60), 0));
    assert_eq!(q.len(), 0);
    assert_eq!(q.metrics().depth, 0);
    q.add_with_opts("foo", at(1));
    assert_eq!(q.len(), 1);
    assert_eq!(q.metrics().depth, 1);
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(take(&q), ("foo", 1));
    clock.advance(Duration::from_secs(60));
    assert_eq!(q.len(), 0);
    assert_eq!(q.queue().tracked(), 0);
}

#[test]
fn waiting_items_count_nowhere_until_ready() {
    let (q, clock) = queue();
    q.add_with_opts("foo", after(ms(500), 0));
    q.add("baz");
    q.add_with_opts("bar", after(ms(500), 0));
    q.add("bal");
    assert_eq!(q.len(), 2);
    assert_eq!(q.metrics().depth, 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(q.len(), 4);
    assert_eq!(q.metrics().depth, 4);
    assert_eq!(
        [take(&q).0, take(&q).0, take(&q).0, take(&q).0],
        ["baz", "bal", "foo", "bar"]
    );
    assert_eq!(q.metrics().depth, 0);
    assert_eq!(q.metrics().retries, 2);
}

/// controller-runtime #3330: items were sorted by ready time before
/// priority, so an item ready earlier at a low priority beat a
/// high-priority one that became ready later.
#[test]
fn regression_priority_beats_earlier_readiness() {
    let (q, clock) = queue();
    q.add_with_opts("foo", after(Duration::ZERO, -100));
    q.add_with_opts("prio", after(Duration::from_secs(1), 0));
    assert_eq!(take(&q).0, "foo", "the only ready item");
    q.add_with_opts("foo", after(Duration::ZERO, -100));
    clock.advance(Duration::from_secs(1));
    assert_eq!(take(&q), ("prio", 0));
    assert_eq!(take(&q), ("foo", -100));
    assert_eq!(q.metrics().adds, 3);
    assert_eq!(q.metrics().retries, 1);
}

/// controller-runtime 9de69a7: waiting and ready items lived in one tree
/// sorted by priority, so a waiting high-priority item could shadow
/// ready ones, and readiness order within a priority was lost.
#[test]
fn regression_waiting_and_ready_items_are_kept_apart() {
    let (q, clock) = queue();
    q.add_with_opts("waits", after(ms(10), 9));
    q.add_with_opts("ready", at(0));
    assert_eq!(take(&q), ("ready", 0), "a waiting item never goes first");
    assert_eq!(q.try_get_with_priority(), Err(TryGetError::Empty));
    q.add_with_opts("early", at(9));
    clock.advance(ms(10));
    assert_eq!(
        take(&q),
        ("early", 9),
        "ready before the waiting one became ready"
    );
    assert_eq!(take(&q), ("waits", 9));

    q.add_after("second", Duration::from_secs(1));
    q.add_after("first", ms(200));
    clock.advance(Duration::from_secs(1));
    assert_eq!([take(&q).0, take(&q).0], ["first", "second"]);
}

/// controller-runtime #3363 (bef0907): the dispatcher read the number of
/// waiting workers without the lock and handed out lower priorities
/// first. Here a large mixed batch must come out strictly by priority,
/// FIFO within each, whether added ready or with a delay.
#[test]
fn regression_many_priorities_come_out_in_order() {
    for delay in [Duration::ZERO, Duration::from_secs(1)] {
        let (q, clock) = manual();
        let q: PriorityQueue<(i32, u32)> = PriorityQueue::with_config(q);
        const PER: u32 = 300;
        let levels = [10, 5, 0, -5, -10];
        for i in 0..PER {
            for p in levels {
                q.add_with_opts((p, i), after(delay, p));
            }
        }
        clock.advance(delay);
        for p in levels {
            for i in 0..PER {
                let (item, prio) = q.try_get_with_priority().unwrap();
                assert_eq!((item, prio), ((p, i), p));
                q.done(&item).unwrap();
            }
        }
        let m = q.metrics();
        assert_eq!(m.adds, u64::from(PER) * 5);
        assert_eq!(
            m.retries,
            if delay.is_zero() {
                0
            } else {
                u64::from(PER) * 5
            }
        );
    }
}

/// The race version: concurrent workers drain a mixed queue. If one get
/// finished before another started, the first cannot have a lower
/// priority.
#[test]
fn regression_priority_holds_under_concurrent_gets() {
    let (config, _clock) = manual();
    let q = Arc::new(PriorityQueue::with_config(config));
    const N: u32 = 2000;
    for i in 0..N {
        q.add_with_opts(i, at((i % 7) as i32));
    }
    let ticks = Arc::new(AtomicU64::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, ticks, log) = (q.clone(), ticks.clone(), log.clone());
            thread::spawn(move || loop {
                let start = ticks.fetch_add(1, Ordering::SeqCst);
                let Ok((item, prio)) = q.try_get_with_priority() else {
                    return;
                };
                let end = ticks.fetch_add(1, Ordering::SeqCst);
                crate::sync::lock(&log).push((start, end, prio));
                q.done(&item).unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join_within();
    }
    let mut log = std::mem::take(&mut *crate::sync::lock(&log));
    assert_eq!(log.len(), N as usize);
    log.sort_by_key(|&(_, end, _)| end);
    // min_prio[i]: the lowest priority among the first i+1 gets to end.
    let mut min_prio = Vec::with_capacity(log.len());
    let mut lowest = i32::MAX;
    for &(_, _, p) in &log {
        lowest = lowest.min(p);
        min_prio.push(lowest);
    }
    for &(start, _, prio) in &log {
        let ended_before = log.partition_point(|&(_, end, _)| end < start);
        if ended_before > 0 {
            assert!(
                min_prio[ended_before - 1] >= prio,
                "priority {prio} started after a lower priority was handed out"
            );
        }
    }
}

#[test]
fn rate_limited_adds_take_the_shorter_of_after_and_the_limiter() {
    let (q, clock) = queue();
    for _ in 0..7 {
        q.add_rate_limited("bar");
        clock.advance(Duration::from_secs(1000));
        take(&q);
    }
    // The 8th failure of bar waits 5 ms * 2^7 = 640 ms; foo's first, 5 ms.
    q.add_rate_limited("foo");
    q.add_rate_limited("bar");
    clock.advance(ms(5));
    assert_eq!(take(&q).0, "foo");
    assert_eq!(q.try_get_with_priority(), Err(TryGetError::Empty));
    clock.advance(ms(635));
    assert_eq!(take(&q).0, "bar");

    let opts = |after| AddOpts {
        after,
        rate_limited: true,
        priority: 0,
    };
    // foo's second failure: the limiter says 10 ms.
    q.add_with_opts("foo", opts(ms(3)));
    clock.advance(ms(3));
    assert_eq!(take(&q).0, "foo", "after (3 ms) shorter than the limiter");
    q.add_with_opts("foo", opts(Duration::from_secs(9)));
    clock.advance(ms(20));
    assert_eq!(take(&q).0, "foo", "the limiter (20 ms) shorter than after");
    assert_eq!(q.num_requeues(&"foo"), 3);
    q.forget(&"foo");
    assert_eq!(q.num_requeues(&"foo"), 0);
}

/// controller-runtime #3239 and #3538: get blocked forever after
/// shutdown.
#[test]
fn regression_get_never_blocks_after_shutdown() {
    let (q, clock) = queue();
    q.add("baz");
    q.shut_down();
    q.add_with_opts("foo", after(Duration::from_secs(1), 0));
    clock.advance(Duration::from_secs(2));
    assert_eq!(q.get_with_priority(), Some(("baz", 0)));
    assert_eq!(q.get_with_priority(), None);
    assert_eq!(q.get_with_priority(), None);
}

#[test]
fn shutdown_releases_parked_workers() {
    let (config, _c) = manual();
    let q: Arc<PriorityQueue<u8>> = Arc::new(PriorityQueue::with_config(config));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || q.get())
        })
        .collect();
    wait_until("workers park", || q.queue().parked() == 3);
    q.add_with_opts(1, at(4));
    q.shut_down();
    let got: Vec<Option<u8>> = workers.into_iter().map(|w| w.join_within()).collect();
    assert_eq!(got.iter().filter(|g| g.is_some()).count(), 1);
    assert!(got.contains(&Some(1)));
}
