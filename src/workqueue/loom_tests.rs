//! loom models of the add/get/done races. Each model is small (two or three
//! threads, one or two items) so that `scripts/loom.sh` explores it fully in
//! well under a minute.

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::sync::{thread, Arc, AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

fn queue() -> (Arc<DelayingQueue<u8>>, ManualClock) {
    let (clock, manual) = Clock::manual();
    let mut config = QueueConfig::with_clock(clock);
    config.timed_metrics = false;
    (Arc::new(DelayingQueue::with_config(config)), manual)
}

/// A worker that processes until shutdown, checking that no item is
/// processed twice at once and recording the newest add it has covered.
fn worker(
    q: Arc<DelayingQueue<u8>>,
    busy: Arc<AtomicBool>,
    last_add: Arc<AtomicU64>,
    covered: Arc<AtomicU64>,
) -> impl FnOnce() {
    move || {
        while let Some(x) = q.get() {
            assert!(
                !busy.swap(true, Ordering::SeqCst),
                "processed twice at once"
            );
            covered.fetch_max(last_add.load(Ordering::SeqCst), Ordering::SeqCst);
            busy.store(false, Ordering::SeqCst);
            q.done(&x).unwrap();
        }
    }
}

#[test]
fn an_add_during_processing_is_neither_lost_nor_doubled() {
    loom::model(|| {
        let (q, _clock) = queue();
        q.add(1);
        let one = q.try_get().unwrap();
        let q2 = q.clone();
        let producer = thread::spawn(move || q2.add(1));
        q.done(&one).unwrap();
        producer.join().unwrap();
        assert_eq!(q.try_get(), Ok(1), "the add is not lost");
        assert_eq!(q.try_get(), Err(TryGetError::Empty), "nor doubled");
        q.done(&1).unwrap();
        assert_eq!(q.try_get(), Err(TryGetError::Empty));
    });
}

#[test]
fn a_parked_worker_covers_every_add() {
    loom::model(|| {
        let (q, _clock) = queue();
        let busy = Arc::new(AtomicBool::new(false));
        let last_add = Arc::new(AtomicU64::new(0));
        let covered = Arc::new(AtomicU64::new(0));
        let w = thread::spawn(worker(q.clone(), busy, last_add.clone(), covered.clone()));
        for n in 1..=2 {
            last_add.store(n, Ordering::SeqCst);
            q.add(1);
        }
        q.shut_down_with_drain();
        w.join().unwrap();
        assert_eq!(
            covered.load(Ordering::SeqCst),
            2,
            "the second add was processed"
        );
    });
}

#[test]
fn two_workers_never_process_an_item_at_once() {
    loom::model(|| {
        let (q, _clock) = queue();
        let busy = Arc::new(AtomicBool::new(false));
        let last_add = Arc::new(AtomicU64::new(1));
        let covered = Arc::new(AtomicU64::new(0));
        q.add(1);
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (q, busy, last_add, covered) =
                    (q.clone(), busy.clone(), last_add.clone(), covered.clone());
                thread::spawn(move || {
                    if let Ok(x) = q.try_get() {
                        assert!(
                            !busy.swap(true, Ordering::SeqCst),
                            "processed twice at once"
                        );
                        covered.fetch_max(last_add.load(Ordering::SeqCst), Ordering::SeqCst);
                        busy.store(false, Ordering::SeqCst);
                        q.done(&x).unwrap();
                    }
                })
            })
            .collect();
        last_add.store(2, Ordering::SeqCst);
        q.add(1);
        for w in workers {
            w.join().unwrap();
        }
        while let Ok(x) = q.try_get() {
            covered.fetch_max(last_add.load(Ordering::SeqCst), Ordering::SeqCst);
            q.done(&x).unwrap();
        }
        assert_eq!(covered.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn shutdown_releases_a_parked_worker() {
    loom::model(|| {
        let (q, _clock) = queue();
        let q2 = q.clone();
        let w = thread::spawn(move || q2.get());
        q.shut_down();
        assert_eq!(w.join().unwrap(), None);
    });
}

#[test]
fn a_draining_shutdown_waits_for_done() {
    loom::model(|| {
        let (q, _clock) = queue();
        q.add(1);
        let one = q.try_get().unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let (q2, finished2) = (q.clone(), finished.clone());
        let w = thread::spawn(move || {
            finished2.store(true, Ordering::SeqCst);
            q2.done(&one).unwrap();
        });
        q.shut_down_with_drain();
        assert!(finished.load(Ordering::SeqCst), "returned before done");
        w.join().unwrap();
    });
}

#[test]
fn a_delayed_add_racing_the_clock_is_not_lost() {
    loom::model(|| {
        let (q, clock) = queue();
        let clock2 = clock.clone();
        let ticker = thread::spawn(move || clock2.advance(Duration::from_millis(10)));
        q.add_after(1, Duration::from_millis(10));
        ticker.join().unwrap();
        // Added before the advance: ready now; after it: ready at 20 ms.
        clock.advance(Duration::from_millis(10));
        assert_eq!(q.try_get(), Ok(1));
        assert_eq!(q.waiting_len(), 0);
    });
}

#[test]
fn two_parked_workers_and_a_producer() {
    loom::model(|| {
        let (q, _clock) = queue();
        let busy = Arc::new(AtomicBool::new(false));
        let last_add = Arc::new(AtomicU64::new(0));
        let covered = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let w = worker(q.clone(), busy.clone(), last_add.clone(), covered.clone());
                thread::spawn(w)
            })
            .collect();
        for n in 1..=2 {
            last_add.store(n, Ordering::SeqCst);
            q.add(1);
        }
        q.shut_down_with_drain();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(covered.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_worker_timing_out_during_a_hand_off_keeps_the_item() {
    // The 1 ns deadline has passed by the time the worker looks (loom's
    // condvar never times out by itself), so every interleaving of the
    // time-out with the add's hand-off is explored: the item is either
    // taken by the worker or left queued, never lost or counted twice.
    loom::model(|| {
        let (q, _clock) = queue();
        let q2 = q.clone();
        let producer = thread::spawn(move || q2.add(1));
        let got = q.get_timeout(Duration::from_nanos(1));
        producer.join().unwrap();
        match got {
            Ok(x) => {
                assert_eq!(x, 1);
                assert_eq!(q.try_get(), Err(TryGetError::Empty), "not doubled");
                q.done(&1).unwrap();
            }
            Err(GetTimeoutError::TimedOut) => {
                assert_eq!(q.try_get(), Ok(1), "not lost");
                q.done(&1).unwrap();
            }
            Err(GetTimeoutError::ShutDown) => panic!("nobody shut the queue down"),
        }
        assert_eq!(q.try_get(), Err(TryGetError::Empty));
    });
}

#[test]
fn a_lock_free_get_racing_an_add_a_done_and_a_draining_shutdown() {
    // The item is ready before the worker starts, so its first get takes it
    // from the lock-free list; the add, the worker's `done` (which applies
    // the taken list under the lock) and the draining shutdown race that
    // get in every order: the second add is processed, never twice at once,
    // and the drain ends with nothing processing or queued.
    loom::model(|| {
        let (q, _clock) = queue();
        let busy = Arc::new(AtomicBool::new(false));
        let last_add = Arc::new(AtomicU64::new(1));
        let covered = Arc::new(AtomicU64::new(0));
        q.add(1);
        let w = thread::spawn(worker(q.clone(), busy, last_add.clone(), covered.clone()));
        let q2 = q.clone();
        let producer = thread::spawn(move || {
            last_add.store(2, Ordering::SeqCst);
            q2.add(1);
        });
        producer.join().unwrap();
        q.shut_down_with_drain();
        w.join().unwrap();
        assert_eq!(
            covered.load(Ordering::SeqCst),
            2,
            "the second add was processed"
        );
        let m = q.metrics();
        assert_eq!((m.depth, q.len()), (0, 0));
    });
}

/// Two items in different shards (loom runs two shards; the hasher's seeds
/// are fixed under loom, so the pair is the same in every execution).
fn two_shards(q: &DelayingQueue<u8>) -> (u8, u8) {
    let a = 0u8;
    let b = (1..=u8::MAX)
        .find(|b| q.shard_index(b) != q.shard_index(&a))
        .expect("some item hashes to the other shard");
    (a, b)
}

#[test]
fn an_add_during_processing_racing_done_on_another_shard_and_a_parking_get() {
    // `a` (one shard) and `b` (the other) are processing. A producer re-adds
    // `a` while the main thread finishes it; a worker finishes `b` and then
    // gets, parking if nothing is ready. The re-queue of `a` by whichever of
    // add and done comes second pushes a ticket under `a`'s shard lock
    // alone, racing the worker's park under the queue's lock: the parking
    // handshake must hand `a` to the worker in every order, exactly once.
    loom::model(|| {
        let (q, _clock) = queue();
        let (a, b) = two_shards(&q);
        q.add(a);
        q.add(b);
        assert_eq!((q.try_get(), q.try_get()), (Ok(a), Ok(b)));
        let q2 = q.clone();
        let producer = thread::spawn(move || q2.add(a));
        let q3 = q.clone();
        let worker = thread::spawn(move || {
            q3.done(&b).unwrap();
            let got = q3.get();
            if let Some(x) = got {
                q3.done(&x).unwrap();
            }
            got
        });
        q.done(&a).unwrap();
        producer.join().unwrap();
        assert_eq!(
            worker.join().unwrap(),
            Some(a),
            "the re-add reached the worker"
        );
        assert_eq!(q.try_get(), Err(TryGetError::Empty), "and only once");
        assert_eq!((q.len(), q.metrics().depth), (0, 0));
        q.shut_down_with_drain();
    });
}

#[test]
fn a_worker_released_by_shutdown_leaves_no_item_behind() {
    // An add that found the queue open (under its shard lock only) races a
    // shutdown that releases a parked worker: either the add is ignored or
    // its item reaches a worker; a worker released with nothing never
    // leaves an item added before the shutdown in the queue. (Shutdown's
    // pass over every shard lock before it releases parked workers.)
    loom::model(|| {
        let (q, _clock) = queue();
        let q2 = q.clone();
        let worker = thread::spawn(move || {
            let got = q2.get();
            if let Some(x) = got {
                q2.done(&x).unwrap();
            }
            got
        });
        let q3 = q.clone();
        let producer = thread::spawn(move || q3.add(1));
        q.shut_down();
        producer.join().unwrap();
        if worker.join().unwrap().is_none() {
            assert_eq!(
                q.try_get(),
                Err(TryGetError::ShutDown),
                "released with nothing while an item was queued"
            );
        }
    });
}

#[test]
fn a_timed_out_worker_withdrawing_beside_a_parked_one_and_two_adds() {
    // A's 1 ns get times out (loom's condvar never times out by itself, so
    // every interleaving of its withdrawal with the adds' hand-offs is
    // explored; under loom each withdrawal compacts the parked list, moving
    // B off it for a moment). Each item is processed once, B is never left
    // asleep with an item ready, and nothing is left behind.
    loom::model(|| {
        let (q, _clock) = queue();
        let qa = q.clone();
        let a = thread::spawn(move || {
            let got = qa.get_timeout(Duration::from_nanos(1)).ok();
            if let Some(x) = got {
                qa.done(&x).unwrap();
            }
            got
        });
        let qb = q.clone();
        let b = thread::spawn(move || {
            let got = qb.get();
            if let Some(x) = got {
                qb.done(&x).unwrap();
            }
            got
        });
        q.add(1);
        q.add(2);
        let (got_a, got_b) = (a.join().unwrap(), b.join().unwrap());
        assert!(got_b.is_some(), "B got an item");
        assert_ne!(got_a, got_b, "never one item twice");
        let left = q.try_get().ok();
        let mut all: Vec<u8> = [got_a, got_b, left].into_iter().flatten().collect();
        all.sort();
        assert_eq!(all, [1, 2], "each item once, none left behind");
        if let Some(x) = left {
            q.done(&x).unwrap();
        }
        assert_eq!(q.try_get(), Err(TryGetError::Empty));
    });
}

/// The parking handshake on its own ([`super::parking`]): the ready list
/// is a flag per item here, plain atomics with no ordering of their own,
/// so that only the handshake's fences order a push with a parker's last
/// look (the queue's ready list is a mutex-guarded deque under loom, which
/// would order them by itself). Pushers make an item ready, then serve;
/// workers take a ready item or park. Asserted at every step: an item is
/// taken once, a worker is handed at most one item; at the end every item
/// was taken and nobody is parked. A lost wake-up leaves a worker asleep
/// for ever, which loom reports as a deadlock.
mod handshake {
    use super::super::parking::{ParkedList, Parking};
    use super::super::waiter::Wakes;
    use crate::sync::{thread, Arc, AtomicBool, Ordering};

    struct Model {
        parked: ParkedList<u8, ()>,
        ready: [AtomicBool; 2],
        taken: [AtomicBool; 2],
    }

    impl Model {
        fn new() -> Arc<Self> {
            Arc::new(Model {
                parked: ParkedList::new(),
                ready: [AtomicBool::new(false), AtomicBool::new(false)],
                taken: [AtomicBool::new(false), AtomicBool::new(false)],
            })
        }

        fn any_ready(&self) -> bool {
            self.ready.iter().any(|r| r.load(Ordering::Relaxed))
        }

        /// Take a ready item (the lock-free get), checking it is taken once.
        fn take(&self) -> Option<(u8, ())> {
            for (i, r) in self.ready.iter().enumerate() {
                if r.swap(false, Ordering::Relaxed) {
                    assert!(
                        !self.taken[i].swap(true, Ordering::Relaxed),
                        "item {i} taken twice"
                    );
                    return Some((i as u8, ()));
                }
            }
            None
        }

        /// A pusher: make item `i` ready, then the pusher's half.
        fn push(&self, i: usize) {
            // A read-modify-write, not a store: loom 0.7 can order a plain
            // relaxed store before another thread's earlier swap of the
            // same atomic (tokio-rs/loom#282), which no hardware does.
            self.ready[i].swap(true, Ordering::Relaxed);
            let mut wakes = Wakes::new();
            self.parked
                .serve(&mut wakes, || self.any_ready(), || self.take());
            wakes.run();
        }

        /// A worker's get: one item, parking while there is none.
        fn get(&self) -> u8 {
            loop {
                if let Some((i, ())) = self.take() {
                    return i;
                }
                match self.parked.park(|| self.any_ready()) {
                    Parking::Parked(w) => {
                        if let Some((i, ())) = w.wait() {
                            return i;
                        }
                    }
                    Parking::LookAgain(compacted) => {
                        if compacted.0 {
                            let mut wakes = Wakes::new();
                            self.parked
                                .serve(&mut wakes, || self.any_ready(), || self.take());
                            wakes.run();
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn no_worker_sleeps_while_an_item_is_ready() {
        // Two workers, two pushers (one item each), every interleaving.
        loom::model(|| {
            let m = Model::new();
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let m = m.clone();
                    thread::spawn(move || m.get())
                })
                .collect();
            let m2 = m.clone();
            let pusher = thread::spawn(move || m2.push(1));
            m.push(0);
            pusher.join().unwrap();
            let mut got: Vec<u8> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            got.sort();
            assert_eq!(got, [0, 1], "each worker got one item, each item once");
            assert!(!m.any_ready(), "nothing left ready");
        });
    }

    #[test]
    fn a_withdrawn_waiter_and_a_compaction_lose_no_wake_up() {
        // A worker that times out withdraws (and, with the loom slack of
        // zero, compacts the list, moving the other parked worker off it
        // for a moment) while a pusher serves.
        loom::model(|| {
            let m = Model::new();
            let m1 = m.clone();
            let sleeper = thread::spawn(move || m1.get());
            let m2 = m.clone();
            let quitter = thread::spawn(move || {
                match m2.parked.park(|| m2.any_ready()) {
                    Parking::Parked(w) => match m2.parked.withdraw(&w) {
                        Some(compacted) => {
                            if compacted.0 {
                                let mut wakes = Wakes::new();
                                m2.parked.serve(&mut wakes, || m2.any_ready(), || m2.take());
                                wakes.run();
                            }
                            None
                        }
                        // Claimed first: the delivery is owed.
                        None => w.wait(),
                    },
                    Parking::LookAgain(compacted) => {
                        if compacted.0 {
                            let mut wakes = Wakes::new();
                            m2.parked.serve(&mut wakes, || m2.any_ready(), || m2.take());
                            wakes.run();
                        }
                        None
                    }
                }
            });
            m.push(0);
            let quit_with = quitter.join().unwrap();
            let slept_with = match quit_with {
                // The quitter was handed the item: the sleeper needs another.
                Some(_) => {
                    m.push(1);
                    sleeper.join().unwrap()
                }
                None => sleeper.join().unwrap(),
            };
            assert!(quit_with.map(|(i, ())| i) != Some(slept_with));
            assert!(!m.any_ready(), "nothing left ready");
        });
    }
}

/// Models of the lock-free `done` and `add` (docs/scaling.md, "Done and
/// add that never wait for a descheduled thread"; the protocol's
/// invariants are at `slots.rs`, `index.rs` and `shard.rs`). Each has a
/// deliberately broken twin, built with `--cfg apf_broken_wqfree="..."`
/// (docs/verification.md lists which model catches which).
mod lock_free {
    use super::*;
    use crate::workqueue::index::{Index, IndexWriter};

    /// Items `n` of the shard of item 0.
    fn same_shard(q: &DelayingQueue<u8>, n: usize) -> Vec<u8> {
        (0..=u8::MAX)
            .filter(|b| q.shard_index(b) == q.shard_index(&0))
            .take(n)
            .collect()
    }

    /// Twin `claim`: the item compared before the busy bit is set (loom's
    /// cell tracking sees the read race the sweep's drop of the item).
    #[test]
    fn a_lock_free_add_racing_a_sweep_of_its_kept_entry() {
        loom::model(|| {
            let (q, _clock) = queue();
            let items = same_shard(&q, 3);
            let (y, z, w) = (items[0], items[1], items[2]);
            for x in [y, z] {
                q.add(x);
                let got = q.try_get().unwrap();
                // Lock-free: the entry is kept, its events not applied.
                q.done(&got).unwrap();
            }
            let q2 = q.clone();
            // Finds `y`'s kept entry through the index, without the lock.
            let adder = thread::spawn(move || q2.add(y));
            // A new item: the shard's lock, whose holder applies the
            // events (two kept entries: KEEP under loom) and sweeps.
            q.add(w);
            adder.join().unwrap();
            let mut got = Vec::new();
            while let Ok(x) = q.try_get() {
                got.push(x);
                q.done(&x).unwrap();
            }
            got.sort_unstable();
            let mut want = vec![y, w];
            want.sort_unstable();
            assert_eq!(got, want, "the re-add is queued once, the new item once");
            let m = q.metrics();
            assert_eq!((m.adds, m.depth), (4, 0));
        });
    }

    /// Twin `reclaim`: a replaced index array freed (under loom: marked)
    /// without reading the probe count; the probe's check sees it.
    #[test]
    fn a_probe_racing_a_growth_and_a_reclaim() {
        loom::model(|| {
            let index = Arc::new(Index::with_capacity(0));
            let mut w = IndexWriter::new();
            let hash_of = |s: u32| s;
            index.insert(&mut w, 0, 0, hash_of);
            let reader = {
                let index = index.clone();
                thread::spawn(move || index.find(0, |s| s == 0))
            };
            // The seventh entry doubles the 8 buckets (load 3/4).
            for s in 1..7 {
                index.insert(&mut w, s, s, hash_of);
            }
            index.reclaim(&mut w);
            assert_eq!(reader.join().unwrap(), Some(0), "growth copies every entry");
            index.reclaim(&mut w);
            assert_eq!(index.find(0, |s| s == 0), Some(0));
        });
    }

    /// Twin `drain`: the done without its `SeqCst` fence between the
    /// count's decrement and the look at the draining flag (loom reports
    /// the draining shutdown's lost wake-up as a deadlock).
    #[test]
    fn a_lock_free_done_racing_a_draining_shutdown() {
        loom::model(|| {
            let (q, _clock) = queue();
            q.add(1);
            let one = q.try_get().unwrap();
            let q2 = q.clone();
            // Lock-free (the entry is found through the index), and with
            // nothing to re-queue: no parking handshake's fence after it.
            let finisher = thread::spawn(move || q2.done(&one).unwrap());
            q.shut_down_with_drain();
            finisher.join().unwrap();
            assert_eq!(q.try_get(), Err(TryGetError::ShutDown));
        });
    }

    /// Twin `close`: the add without its fence between the claim and the
    /// look at the closed flag: it can push its ticket after the queue was
    /// sealed, where a get already returned "shut down".
    #[test]
    fn a_lock_free_add_racing_a_shutdown_is_handed_out_or_ignored() {
        loom::model(|| {
            let (q, _clock) = queue();
            q.add(1);
            let one = q.try_get().unwrap();
            // Kept: the next add finds the entry without the lock.
            q.done(&one).unwrap();
            let q2 = q.clone();
            let adder = thread::spawn(move || q2.add(1));
            q.shut_down();
            let first = q.try_get();
            adder.join().unwrap();
            let later = q.try_get();
            assert!(
                !(first == Err(TryGetError::ShutDown) && later == Ok(1)),
                "an add that found the queue open was queued after the seal"
            );
        });
    }
}
