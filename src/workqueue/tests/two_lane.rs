//! The two-lane strategy.

use super::*;

fn queue() -> TwoLaneQueue<&'static str> {
    Workqueue::with_strategy(manual().0, TwoLane::default())
}

#[test]
fn fast_items_go_first() {
    let q = queue();
    q.add_with("a", Lane::Slow);
    q.add_with("b", Lane::Slow);
    q.add("c");
    assert_eq!(q.try_get_with_hint(), Ok(("c", Lane::Fast)));
    assert_eq!(q.try_get_with_hint(), Ok(("a", Lane::Slow)));
    assert_eq!(q.try_get_with_hint(), Ok(("b", Lane::Slow)));
}

#[test]
fn slow_backlog_never_delays_a_fast_item() {
    let q: TwoLaneQueue<u32> = Workqueue::with_strategy(manual().0, TwoLane::default());
    for i in 0..1000 {
        q.add_with(i, Lane::Slow);
    }
    let slow = q.try_get().unwrap();
    q.add_with(5000, Lane::Fast);
    assert_eq!(q.try_get(), Ok(5000));
    q.done(&slow).unwrap();
    assert_eq!(q.inspect_strategy(|s| s.lane_len(Lane::Slow)), 999);
}

#[test]
fn a_re_add_moves_a_queued_item_between_lanes() {
    let q = queue();
    q.add_with("a", Lane::Slow);
    q.add_with("b", Lane::Slow);
    q.add_with("c", Lane::Fast);
    q.add_with("d", Lane::Fast);
    q.add_with("b", Lane::Fast);
    q.add_with("c", Lane::Slow);
    q.add_with("d", Lane::Fast);
    assert_eq!(q.len(), 4);
    assert_eq!(drain(&q), vec!["d", "b", "a", "c"]);
}

#[test]
fn an_item_added_while_processing_is_requeued_in_its_latest_lane() {
    let q = queue();
    q.add("a");
    let a = q.try_get().unwrap();
    q.add_with("a", Lane::Fast);
    q.add_with("a", Lane::Slow);
    q.add("b");
    q.done(&a).unwrap();
    assert_eq!(q.try_get_with_hint(), Ok(("b", Lane::Fast)));
    assert_eq!(q.try_get_with_hint(), Ok(("a", Lane::Slow)));
}
