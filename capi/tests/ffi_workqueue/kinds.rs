//! The two-lane and priority queues, and options that carry their size
//! and their kind.

use super::*;

#[test]
fn two_lanes_serve_fast_first_and_a_re_add_moves_lanes() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE);
    let slow = apf_workqueue_add_options {
        lane: SLOW,
        ..plain()
    };
    ok(q.add_opts("s1", slow));
    ok(q.add_opts("s2", slow));
    q.add("f1");
    ok(q.add_opts("f2", plain()));
    let lane_len = |lane: u32| {
        let mut n = 0;
        // SAFETY: live queue; out writable.
        ok(unsafe { apf_workqueue_lane_len(q.0, lane, &mut n) });
        n
    };
    assert_eq!((lane_len(FAST), lane_len(SLOW)), (2, 2));
    // s2 moves to the fast lane; f1 moves to the slow lane's back.
    ok(q.add_opts("s2", plain()));
    ok(q.add_opts("f1", slow));
    let order: Vec<(Vec<u8>, u32)> = (0..4)
        .map(|_| {
            let g = q.try_get().unwrap();
            q.done(g.handle);
            (g.key, g.lane)
        })
        .collect();
    let want: Vec<(Vec<u8>, u32)> = [("f2", FAST), ("s2", FAST), ("s1", SLOW), ("f1", SLOW)]
        .iter()
        .map(|(k, l)| (k.as_bytes().to_vec(), *l))
        .collect();
    assert_eq!(order, want);
    // Delayed and rate-limited adds keep their lane.
    ok(q.add_opts(
        "later",
        apf_workqueue_add_options {
            lane: SLOW,
            after_nanos: MS,
            ..plain()
        },
    ));
    q.advance(MS);
    let g = q.try_get().unwrap();
    assert_eq!(g.lane, SLOW);
    q.done(g.handle);
    // A lane that does not exist.
    let bad = apf_workqueue_add_options { lane: 2, ..plain() };
    assert_eq!(q.add_opts("x", bad), apf_status::APF_ERR_INVALID_PARAMETER);
}

#[test]
fn queue_and_add_options_carry_their_size() {
    let bad = apf_status::APF_ERR_INVALID_PARAMETER;
    let mut o = options(apf_workqueue_kind::APF_WORKQUEUE_FIFO, true);
    assert_eq!(o.struct_size, std::mem::size_of::<apf_workqueue_options>());
    o.struct_size = 0;
    let mut p = null_mut();
    // SAFETY: readable; writable.
    assert_eq!(unsafe { apf_workqueue_new(&o, &mut p, err()) }, bad);
    assert!(p.is_null());
    assert!(
        last_error().contains("apf_workqueue_options.struct_size is 0"),
        "{}",
        last_error()
    );
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    let unset = apf_workqueue_add_options {
        struct_size: 0,
        ..plain()
    };
    assert_eq!(q.add_opts("a", unset), bad);
    assert_eq!(q.len(), 0, "nothing added");
    // A newer caller's larger struct: fine while the new field is zero.
    #[repr(C)]
    struct Newer {
        known: apf_workqueue_add_options,
        future: u64,
    }
    let mut newer = Newer {
        known: plain(),
        future: 0,
    };
    newer.known.struct_size = std::mem::size_of::<Newer>();
    // SAFETY: live queue; key readable; opts readable for struct_size.
    let add =
        |n: &Newer| unsafe { apf_workqueue_add_with_options(q.0, b"b".as_ptr(), 1, &n.known) };
    ok(add(&newer));
    newer.future = 9;
    assert_eq!(add(&newer), bad);
    assert_eq!(q.len(), 1);
}

#[test]
fn options_of_another_kind_are_refused() {
    let slow = apf_workqueue_add_options {
        lane: SLOW,
        ..plain()
    };
    let prio = apf_workqueue_add_options {
        has_priority: true,
        priority: 3,
        ..plain()
    };
    let fifo = Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO);
    assert_eq!(
        fifo.add_opts("a", slow),
        apf_status::APF_ERR_WORKQUEUE_WRONG_KIND
    );
    assert_eq!(
        fifo.add_opts("a", prio),
        apf_status::APF_ERR_WORKQUEUE_WRONG_KIND
    );
    assert_eq!(fifo.len(), 0, "nothing added");
    let lanes = Q::new(apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE);
    assert_eq!(
        lanes.add_opts("a", prio),
        apf_status::APF_ERR_WORKQUEUE_WRONG_KIND
    );
    let pq = Q::new(apf_workqueue_kind::APF_WORKQUEUE_PRIORITY);
    assert_eq!(
        pq.add_opts("a", slow),
        apf_status::APF_ERR_WORKQUEUE_WRONG_KIND
    );
    let mut n = 0;
    // SAFETY: live queue; out writable.
    let s = unsafe { apf_workqueue_lane_len(pq.0, FAST, &mut n) };
    assert_eq!(s, apf_status::APF_ERR_WORKQUEUE_WRONG_KIND);
    let mut o = options(apf_workqueue_kind::APF_WORKQUEUE_FIFO, true);
    o.kind = 3;
    let mut q = null_mut();
    // SAFETY: readable; writable.
    let s = unsafe { apf_workqueue_new(&o, &mut q, err()) };
    assert_eq!(s, apf_status::APF_ERR_INVALID_PARAMETER);
    assert!(q.is_null());
}

// ----- priorities ----------------------------------------------------------

#[test]
fn priority_queue_orders_by_priority_then_fifo() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_PRIORITY);
    ok(q.add_opts("low1", prio(-1, 0)));
    ok(q.add_opts("mid1", prio(0, 0)));
    ok(q.add_opts("high1", prio(5, 0)));
    ok(q.add_opts("mid2", prio(0, 0)));
    ok(q.add_opts("high2", prio(5, 0)));
    q.add("mid3");
    let order: Vec<(String, i32)> = (0..6)
        .map(|_| {
            let g = q.try_get().unwrap();
            q.done(g.handle);
            (String::from_utf8(g.key).unwrap(), g.priority)
        })
        .collect();
    let want = [
        ("high1", 5),
        ("high2", 5),
        ("mid1", 0),
        ("mid2", 0),
        ("mid3", 0),
        ("low1", -1),
    ]
    .map(|(k, p)| (k.to_string(), p));
    assert_eq!(order, want);
}

#[test]
fn priority_duplicates_keep_highest_priority_and_shortest_delay() {
    let q = Q::new(apf_workqueue_kind::APF_WORKQUEUE_PRIORITY);
    ok(q.add_opts("a", prio(1, 10 * MS)));
    ok(q.add_opts("a", prio(7, 30 * MS)));
    ok(q.add_opts("a", prio(3, 5 * MS)));
    ok(q.add_opts("b", prio(2, 0)));
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.len(), 1, "a waiting item is not counted as ready");
    let b = q.try_get().unwrap();
    assert_eq!(
        q.try_get(),
        Err(EMPTY),
        "a is not ready whatever its priority"
    );
    q.done(b.handle);
    q.advance(5 * MS);
    let a = q.try_get().unwrap();
    assert_eq!((a.key.as_slice(), a.priority), (&b"a"[..], 7));
    q.done(a.handle);
    // A ready add ends a wait; raising a queued item's priority moves it.
    ok(q.add_opts("c", prio(0, SECOND)));
    ok(q.add_opts("d", prio(1, 0)));
    ok(q.add_opts("c", prio(0, 0)));
    assert_eq!(q.waiting_len(), 0);
    ok(q.add_opts("c", prio(2, 0)));
    assert_eq!(q.take(), "c");
    assert_eq!(q.take(), "d");
}

#[test]
fn priority_rate_limited_adds_use_the_limiter_capped_by_after() {
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_fast_slow(SECOND, SECOND, 1, out, err()) });
    let q = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_PRIORITY, l);
    let opts = apf_workqueue_add_options {
        rate_limited: true,
        has_priority: true,
        priority: 4,
        ..plain()
    };
    ok(q.add_opts("a", opts));
    assert_eq!(q.requeues("a"), 1);
    q.advance(SECOND - 1);
    assert_eq!(q.len(), 0);
    q.advance(1);
    let a = q.try_get().unwrap();
    assert_eq!(a.priority, 4);
    q.done(a.handle);
    // A shorter `after` caps the limiter's delay.
    ok(q.add_opts(
        "a",
        apf_workqueue_add_options {
            after_nanos: MS,
            ..opts
        },
    ));
    q.advance(MS);
    assert_eq!(q.take(), "a");
    // The same capping for a FIFO queue.
    // SAFETY: out writable.
    let l = limiter(|out| unsafe { apf_rate_limiter_new_fast_slow(SECOND, SECOND, 1, out, err()) });
    let f = Q::with_limiter(apf_workqueue_kind::APF_WORKQUEUE_FIFO, l);
    let capped = apf_workqueue_add_options {
        rate_limited: true,
        after_nanos: MS,
        ..plain()
    };
    ok(f.add_opts("a", capped));
    f.advance(MS);
    assert_eq!(f.take(), "a");
    assert_eq!(f.requeues("a"), 1);
}
