//! The plain workqueue: client-go's dirty and processing rules, parked
//! workers, shutdown and drain, metrics.

use super::*;

#[test]
fn hands_items_out_in_fifo_order() {
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    for i in 0..5u32 {
        q.add(i);
    }
    assert_eq!(q.len(), 5);
    assert_eq!(drain(&q), vec![0, 1, 2, 3, 4]);
    assert!(q.is_empty());
    assert_eq!(q.tracked(), 0, "done items are forgotten");
}

#[test]
fn done_items_entries_are_kept_for_a_re_add_then_swept() {
    use crate::workqueue::shard::KEEP;
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    let items: Vec<Arc<u32>> = (0..1000).map(Arc::new).collect();
    for item in &items {
        q.add(item.clone());
        let got = q.try_get().unwrap();
        q.done(&got).unwrap();
    }
    assert_eq!(q.tracked(), 0, "done items are forgotten");
    let shards = q.shared().shard_count();
    let held = q.shared().held();
    assert!(held < KEEP * shards, "{held} entries held after the sweeps");
    let alive = items.iter().filter(|i| Arc::strong_count(i) > 1).count();
    assert_eq!(alive, held, "swept entries drop their item");
    // A kept entry is re-added like a forgotten one: queued once, processed.
    let last = items[999].clone();
    q.add(last.clone());
    q.add(last.clone());
    assert_eq!(q.len(), 1);
    assert_eq!(q.done(&last), Err(WorkqueueError::NotProcessing));
    assert_eq!(q.try_get(), Ok(last.clone()));
    q.done(&last).unwrap();
    assert_eq!(q.done(&last), Err(WorkqueueError::NotProcessing));
    assert_eq!(q.metrics().adds, 1001);
}

#[test]
fn an_item_added_twice_before_it_is_taken_is_queued_once() {
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    q.add("foo");
    q.add("bar");
    q.add("foo");
    assert_eq!(q.len(), 2);
    assert_eq!(drain(&q), vec!["foo", "bar"]);
    assert_eq!(q.metrics().adds, 2);
}

/// A FIFO that records which slots it was asked to touch.
#[derive(Default)]
struct Traced {
    fifo: Fifo,
    touched: Arc<Mutex<Vec<Slot>>>,
}

impl<T> QueueStrategy<T> for Traced {
    type Hint = ();
    fn push(&mut self, slot: Slot, item: &T, hint: ()) {
        self.fifo.push(slot, item, hint);
    }
    fn touch(&mut self, slot: Slot, _item: &T, _hint: ()) {
        crate::sync::lock(&self.touched).push(slot);
    }
    fn pop(&mut self) -> Option<(Slot, ())> {
        QueueStrategy::<T>::pop(&mut self.fifo)
    }
    fn len(&self) -> usize {
        QueueStrategy::<T>::len(&self.fifo)
    }
    fn merge(_: (), _: ()) {}
}

#[test]
fn a_queued_item_added_again_is_touched_and_a_processing_one_is_not() {
    let (config, _m) = manual();
    let traced = Traced::default();
    let touched = traced.touched.clone();
    let q = Workqueue::with_strategy(config, traced);
    q.add("bar");
    q.add("bar");
    assert_eq!(crate::sync::lock(&touched).len(), 1);
    let bar = q.try_get().unwrap();
    q.add("bar");
    q.add("bar");
    assert_eq!(crate::sync::lock(&touched).len(), 1, "processing: no touch");
    q.done(&bar).unwrap();
    assert_eq!(drain(&q), vec!["bar"]);
}

#[test]
fn an_item_added_while_processing_is_queued_again_after_done() {
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    q.add("foo");
    let foo = q.try_get().unwrap();
    q.add("foo");
    q.add("foo");
    assert_eq!(q.len(), 0, "not queued while processing");
    assert_eq!(
        q.try_get(),
        Err(TryGetError::Empty),
        "never to a second worker"
    );
    q.done(&foo).unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(drain(&q), vec!["foo"], "collapsed into one");
    assert_eq!(q.tracked(), 0);
}

#[test]
fn done_for_an_item_not_processing_is_an_error() {
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    assert_eq!(q.done(&1u8), Err(WorkqueueError::NotProcessing));
    q.add(1u8);
    assert_eq!(
        q.done(&1),
        Err(WorkqueueError::NotProcessing),
        "queued, not taken"
    );
    let one = q.try_get().unwrap();
    q.done(&one).unwrap();
    assert_eq!(
        q.done(&one),
        Err(WorkqueueError::NotProcessing),
        "done twice"
    );
    assert_eq!(q.len(), 0);
}

#[test]
fn after_shutdown_adds_are_ignored_and_the_rest_is_handed_out() {
    let (config, _m) = manual();
    let q = Workqueue::with_config(config);
    q.add(1u8);
    q.add(2);
    let one = q.try_get().unwrap();
    q.add(1);
    q.shut_down();
    assert!(q.shutting_down());
    q.add(3);
    q.add(2);
    assert_eq!(q.get(), Some(2));
    q.done(&2).unwrap();
    assert_eq!(q.get(), None, "1 is processing, nothing is queued");
    assert_eq!(q.try_get(), Err(TryGetError::ShutDown));
    q.done(&one).unwrap();
    assert_eq!(q.get(), Some(1), "an add made before shutdown is not lost");
    q.done(&1).unwrap();
    assert_eq!(q.get(), None);
    assert_eq!(q.tracked(), 0);
    q.shut_down();
}

#[test]
fn a_parked_worker_receives_the_next_add() {
    let (config, _m) = manual();
    let q = Arc::new(Workqueue::with_config(config));
    let q2 = q.clone();
    let worker = thread::spawn(move || {
        let x = q2.get();
        if let Some(x) = &x {
            q2.done(x).unwrap();
        }
        x
    });
    wait_until("worker parks", || q.parked() == 1);
    q.add(7u32);
    assert_eq!(worker.join_within(), Some(7));
    assert_eq!(q.len(), 0);
}

/// A FIFO get of a ready item takes no lock (issue 14: the 1,000
/// consumers' first gets waited milliseconds for a descheduled holder), and
/// the gets made meanwhile count once the lock is free: the items are
/// processing (`done` accepts them, a re-add waits for it) and the metrics
/// saw them taken.
#[test]
fn a_ready_fifo_item_is_taken_while_another_thread_holds_the_lock() {
    let q = Arc::new(Workqueue::with_config(manual().0));
    q.add(1u8);
    q.add(2);
    let got = q.while_locked(|| {
        let q2 = q.clone();
        let getter = thread::spawn(move || (q2.get(), q2.try_get()));
        getter.join_within()
    });
    assert_eq!(got, (Some(1), Ok(2)));
    q.add(1);
    assert_eq!(q.len(), 0, "1 is processing: the add waits for done");
    let m = q.metrics();
    // client-go counts the re-add in adds and depth at once.
    assert_eq!((m.adds, m.depth, m.queue_duration.count), (3, 1, 2));
    q.done(&1).unwrap();
    q.done(&2).unwrap();
    assert_eq!(q.try_get(), Ok(1), "the add made while processing");
    assert_eq!(q.done(&2), Err(WorkqueueError::NotProcessing));
}

/// A FIFO queue's add and done take only their item's shard lock, never
/// the queue's (issue 14: a `done` that queued on the one lock was the
/// backlog drain's remaining tail).
#[test]
fn fifo_adds_and_dones_do_not_wait_for_the_queue_lock() {
    let q = Arc::new(Workqueue::with_config(manual().0));
    q.add(1u8);
    let one = q.try_get().unwrap();
    let got = q.while_locked(|| {
        let q2 = q.clone();
        thread::spawn(move || {
            q2.add(2);
            q2.add(1); // processing: dirty again
            q2.done(&1).unwrap(); // queued again, behind 2
            let two = q2.try_get();
            q2.done(&2).unwrap();
            (two, q2.try_get(), q2.done(&3))
        })
        .join_within()
    });
    assert_eq!(got, (Ok(2), Ok(one), Err(WorkqueueError::NotProcessing)));
    q.done(&1).unwrap();
    assert_eq!((q.len(), q.tracked()), (0, 0));
    let m = q.metrics();
    assert_eq!((m.adds, m.depth, m.queue_duration.count), (3, 0, 3));
}

/// Two items in different shards: calls for one never wait for a thread
/// that holds the other's shard lock, whatever the strategy.
#[test]
fn a_held_shard_does_not_stall_items_of_other_shards() {
    fn check<S: QueueStrategy<u32>>(q: Workqueue<u32, S>) {
        let q = Arc::new(q);
        let a = 0u32;
        let b = (1..)
            .find(|b| q.shard_index(b) != q.shard_index(&a))
            .unwrap();
        let got = q.while_shard_locked(&a, || {
            let q2 = q.clone();
            thread::spawn(move || {
                q2.add(b);
                let got = q2.try_get();
                q2.add(b);
                q2.done(&b).unwrap();
                (got, q2.len())
            })
            .join_within()
        });
        assert_eq!(got, (Ok(b), 1), "b queued again by its done");
        let m = q.metrics();
        assert_eq!((m.adds, m.depth), (2, 1));
    }
    check(Workqueue::with_config(manual().0));
    check(Workqueue::with_strategy(manual().0, TwoLane::default()));
    check(Workqueue::with_strategy(manual().0, Priority::default()));
}

/// The hand-off is first parked, first served: with more workers than
/// items, a worker parked early is not passed over by every worker that
/// parks after it (issue 14: rare gets waited 100+ ms).
#[test]
fn parked_workers_are_served_in_the_order_they_parked() {
    let (config, _m) = manual();
    let q: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(config));
    let mut workers = Vec::new();
    for n in 1..=3 {
        let q2 = q.clone();
        workers.push(thread::spawn(move || q2.get()));
        wait_until("worker parks", || q.parked() == n);
    }
    for (item, worker) in (10u32..).zip(workers) {
        q.add(item);
        assert_eq!(
            worker.join_within(),
            Some(item),
            "the earliest parked worker"
        );
    }
}

#[test]
fn shutdown_releases_every_parked_worker() {
    let (config, _m) = manual();
    let q: Arc<Workqueue<u32>> = Arc::new(Workqueue::with_config(config));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || q.get())
        })
        .collect();
    wait_until("workers park", || q.parked() == 3);
    q.shut_down();
    for w in workers {
        assert_eq!(w.join_within(), None);
    }
    assert_eq!(q.get(), None, "never blocks after shutdown");
}

#[test]
fn shutdown_with_drain_waits_for_processing_items() {
    let (config, _m) = manual();
    let q = Arc::new(Workqueue::with_config(config));
    q.add("foo");
    q.add("bar");
    let first = q.try_get().unwrap();
    let second = q.try_get().unwrap();
    let q2 = q.clone();
    let drainer = thread::spawn(move || q2.shut_down_with_drain());
    wait_until("shutdown starts", || q.shutting_down());
    assert_eq!(q.get(), None);
    assert!(!drainer.is_finished(), "two items still processing");
    q.done(&first).unwrap();
    assert!(!drainer.is_finished(), "one item still processing");
    q.done(&second).unwrap();
    drainer.join_within();
}

#[test]
fn shutdown_cancels_a_drain() {
    let (config, _m) = manual();
    let q = Arc::new(Workqueue::with_config(config));
    q.add(1u8);
    let _held = q.try_get().unwrap();
    let q2 = q.clone();
    let drainer = thread::spawn(move || q2.shut_down_with_drain());
    wait_until("shutdown starts", || q.shutting_down());
    q.shut_down();
    drainer.join_within();
}

#[test]
fn drain_with_a_dirty_item_hands_it_out_again() {
    let (config, _m) = manual();
    let q = Arc::new(Workqueue::with_config(config));
    q.add("foo");
    let gotten = q.try_get().unwrap();
    q.add("foo");
    let q2 = q.clone();
    let drainer = thread::spawn(move || q2.shut_down_with_drain());
    wait_until("shutdown starts", || q.shutting_down());
    assert_eq!(q.get(), None);
    q.done(&gotten).unwrap();
    let again = q.get().expect("queued again by done");
    q.done(&again).unwrap();
    assert_eq!(q.get(), None);
    drainer.join_within();
}

#[test]
fn metrics_follow_client_go() {
    let (config, manual) = manual();
    let q = Workqueue::with_config(config);
    q.add("foo");
    let m = q.metrics();
    assert_eq!((m.name.as_str(), m.adds, m.depth), ("test", 1, 1));
    manual.advance(Duration::from_micros(50));
    let foo = q.try_get().unwrap();
    let m = q.metrics();
    assert_eq!(m.queue_duration.last_seconds, 50e-6);
    assert_eq!(m.queue_duration.count, 1);
    assert_eq!(m.depth, 0);
    for _ in 0..5 {
        q.add(foo);
    }
    let m = q.metrics();
    assert_eq!(
        (m.adds, m.depth),
        (2, 1),
        "re-adds while processing count once"
    );
    manual.advance(Duration::from_micros(25));
    q.done(&foo).unwrap();
    let m = q.metrics();
    assert_eq!(m.work_duration.last_seconds, 25e-6);
    assert_eq!(m.work_duration.count, 1);
    assert_eq!(m.depth, 1);
    let foo = q.try_get().unwrap();
    let m = q.metrics();
    assert_eq!(m.queue_duration.last_seconds, 25e-6);
    assert_eq!(m.queue_duration.count, 2);
    manual.advance(ms(1));
    let m = q.metrics();
    assert_eq!(m.unfinished_work_seconds, 0.001);
    assert_eq!(m.longest_running_processor_seconds, 0.001);
    q.done(&foo).unwrap();
    let m = q.metrics();
    assert_eq!(m.work_duration.last_seconds, 0.001);
    assert_eq!(m.work_duration.count, 2);
    assert_eq!(m.unfinished_work_seconds, 0.0);
    assert_eq!(m.retries, 0);
    assert_eq!(
        metric_names()[0..2],
        ["workqueue_depth", "workqueue_adds_total"]
    );
}

#[test]
fn untimed_metrics_keep_the_counters_only() {
    let (mut config, manual) = manual();
    config.timed_metrics = false;
    let q = Workqueue::with_config(config);
    q.add(1u8);
    manual.advance(ms(5));
    let one = q.try_get().unwrap();
    manual.advance(ms(5));
    q.done(&one).unwrap();
    let m = q.metrics();
    assert_eq!((m.adds, m.depth), (1, 0));
    assert_eq!(m.queue_duration.count, 0);
    assert_eq!(m.work_duration.count, 0);
}
