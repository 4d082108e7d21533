//! The delaying queue on the manual (and once the real) clock.

use super::*;

fn queue() -> (DelayingQueue<&'static str>, ManualClock) {
    let (config, manual) = manual();
    (DelayingQueue::with_config(config), manual)
}

#[test]
fn an_item_is_added_once_its_delay_passes() {
    let (q, clock) = queue();
    q.add_after("foo", ms(50));
    assert_eq!(q.len(), 0);
    assert_eq!(q.waiting_len(), 1);
    clock.advance(Duration::from_micros(49_999));
    assert_eq!(q.len(), 0);
    clock.advance(Duration::from_micros(1));
    assert_eq!(q.len(), 1, "exactly at the ready time");
    assert_eq!(drain(&q), vec!["foo"]);
    clock.advance(Duration::from_secs(10));
    assert_eq!(q.len(), 0);
    assert_eq!(q.tracked(), 0);
}

#[test]
fn a_waiting_item_keeps_its_earlier_ready_time() {
    let (q, clock) = queue();
    q.add_after("foo", ms(50));
    q.add_after("foo", ms(70));
    assert_eq!(q.waiting_len(), 1);
    clock.advance(ms(60));
    assert_eq!(drain(&q), vec!["foo"]);
    clock.advance(ms(20));
    assert_eq!(q.len(), 0, "the later add was merged away");

    q.add_after("foo", ms(50));
    q.add_after("foo", ms(30));
    clock.advance(ms(40));
    assert_eq!(drain(&q), vec!["foo"]);
    clock.advance(ms(20));
    assert_eq!(q.len(), 0);
}

#[test]
fn items_become_ready_in_ready_time_order() {
    let (q, clock) = queue();
    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", ms(50));
    clock.advance(ms(60));
    assert_eq!(drain(&q), vec!["bar"]);
    q.add_after("baz", Duration::from_secs(2));
    clock.advance(Duration::from_secs(1));
    assert_eq!(drain(&q), vec!["foo"]);
    clock.advance(Duration::from_secs(2));
    assert_eq!(drain(&q), vec!["baz"]);

    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", ms(500));
    q.add_after("baz", ms(250));
    clock.advance(Duration::from_secs(2));
    assert_eq!(drain(&q), vec!["baz", "bar", "foo"]);
}

#[test]
fn a_zero_delay_adds_at_once_and_every_delayed_add_is_a_retry() {
    let (q, _clock) = queue();
    q.add_after("now", Duration::ZERO);
    assert_eq!(q.len(), 1);
    q.add_after("later", ms(1));
    q.add_after("later", ms(2));
    assert_eq!(q.metrics().retries, 3);
}

#[test]
fn shutdown_ends_every_wait() {
    let (q, clock) = queue();
    q.add_after("foo", ms(10));
    q.shut_down();
    assert_eq!(q.waiting_len(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(q.len(), 0);
    assert_eq!(q.try_get(), Err(TryGetError::ShutDown));
    q.add_after("bar", ms(1));
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(q.metrics().retries, 1, "adds after shutdown do not count");
    assert_eq!(q.tracked(), 0);
}

#[test]
fn a_wait_is_independent_of_the_dirty_set() {
    let (q, clock) = queue();
    q.add_after("foo", ms(10));
    q.add("foo");
    assert_eq!(drain(&q), vec!["foo"]);
    assert_eq!(q.waiting_len(), 1, "still waiting, as in client-go");
    clock.advance(ms(10));
    assert_eq!(drain(&q), vec!["foo"]);

    // A wait that ends while the item is processing makes it dirty.
    q.add("bar");
    let bar = q.try_get().unwrap();
    q.add_after("bar", ms(5));
    clock.advance(ms(5));
    assert_eq!(q.len(), 0);
    q.done(&bar).unwrap();
    assert_eq!(drain(&q), vec!["bar"]);
    assert_eq!(q.tracked(), 0);
}

#[test]
fn a_parked_worker_gets_the_item_when_the_clock_reaches_it() {
    let (config, clock) = manual();
    let q = Arc::new(DelayingQueue::with_config(config));
    let q2 = q.clone();
    let worker = thread::spawn(move || q2.get());
    wait_until("worker parks", || q.parked() == 1);
    q.add_after(3u8, ms(100));
    clock.advance(ms(99));
    assert!(!worker.is_finished());
    clock.advance(ms(1));
    assert_eq!(worker.join_within(), Some(3));
}

#[test]
fn dropping_the_queue_frees_waiting_items() {
    let item = Arc::new(5u32);
    let (config, clock) = manual();
    let q = DelayingQueue::with_config(config);
    q.add_after(item.clone(), Duration::from_secs(1));
    assert_eq!(Arc::strong_count(&item), 2);
    drop(q);
    assert_eq!(
        Arc::strong_count(&item),
        1,
        "the timer no longer holds the queue"
    );
    clock.advance(Duration::from_secs(2));
}

#[test]
fn a_two_lane_delaying_queue_readies_items_in_their_lane() {
    let (config, clock) = manual();
    let q = DelayingQueue::with_strategy(config, TwoLane::default());
    q.add_after_with("slow", ms(1), Lane::Slow);
    q.add_after_with("fast", ms(2), Lane::Fast);
    clock.advance(ms(2));
    assert_eq!(q.try_get_with_hint(), Ok(("fast", Lane::Fast)));
    assert_eq!(q.try_get_with_hint(), Ok(("slow", Lane::Slow)));
}

#[test]
fn the_real_clock_drives_delays_too() {
    let q = DelayingQueue::with_config(QueueConfig::default());
    q.add_after(1u8, ms(1));
    wait_until("the timer thread readies the item", || q.len() == 1);
    assert_eq!(q.try_get(), Ok(1));
}
