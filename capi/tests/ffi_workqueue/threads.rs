//! Many threads: producers and consumers lose nothing and never share a
//! key.

use super::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn many_producers_and_consumers_lose_nothing_and_never_share_a_key() {
    for kind in [
        apf_workqueue_kind::APF_WORKQUEUE_FIFO,
        apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE,
        apf_workqueue_kind::APF_WORKQUEUE_PRIORITY,
    ] {
        const PRODUCERS: usize = 4;
        const CONSUMERS: usize = 6;
        const ADDS: usize = 3000;
        const KEYS: usize = 50;
        let q = Arc::new(Q::new(kind));
        let in_flight = Arc::new(Mutex::new(HashSet::<Vec<u8>>::new()));
        let processed = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|c| {
                let (q, in_flight, processed) = (q.clone(), in_flight.clone(), processed.clone());
                std::thread::spawn(move || {
                    let mut seen = HashSet::new();
                    loop {
                        // Alternate blocking forms: forever, timed, try.
                        let got = match c % 3 {
                            0 => q.get(u64::MAX),
                            1 => q.get(MS),
                            _ => q.try_get(),
                        };
                        let g = match got {
                            Ok(g) => g,
                            Err(SHUT_DOWN) => return seen,
                            Err(_) => {
                                std::thread::yield_now();
                                continue;
                            }
                        };
                        assert!(
                            in_flight.lock().unwrap().insert(g.key.clone()),
                            "{kind:?}: key processed by two workers at once"
                        );
                        seen.insert(g.key.clone());
                        processed.fetch_add(1, Ordering::Relaxed);
                        in_flight.lock().unwrap().remove(&g.key);
                        q.done(g.handle);
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..ADDS {
                        let key = format!("k{}", (i * PRODUCERS + p) % KEYS);
                        match (kind, i % 3) {
                            (apf_workqueue_kind::APF_WORKQUEUE_TWO_LANE, 1) => ok(q.add_opts(
                                &key,
                                apf_workqueue_add_options {
                                    lane: SLOW,
                                    ..plain()
                                },
                            )),
                            (apf_workqueue_kind::APF_WORKQUEUE_PRIORITY, 1) => {
                                ok(q.add_opts(&key, prio((i % 5) as i32, 0)))
                            }
                            _ => q.add(&key),
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        // Every key was added after the last time any worker took it, so
        // each must be processed at least once more: drain, then check.
        // SAFETY: live queue; workers still run and will call done.
        ok(unsafe { apf_workqueue_shut_down_with_drain(q.0) });
        let mut all = HashSet::new();
        for c in consumers {
            all.extend(c.join().unwrap());
        }
        assert_eq!(all.len(), KEYS, "{kind:?}: every key was processed");
        assert!(processed.load(Ordering::Relaxed) >= KEYS);
        assert_eq!(q.processing(), 0);
        assert_eq!(q.len(), 0, "{kind:?}: nothing left behind");
    }
}

#[test]
fn an_add_during_processing_is_processed_after_done_under_contention() {
    // The last add of each key happens while some worker may process it:
    // after the drain, the number of times each key was processed after
    // its last add must be at least one.
    let q = Arc::new(Q::new(apf_workqueue_kind::APF_WORKQUEUE_FIFO));
    let last_add = Arc::new(Mutex::new(std::collections::HashMap::<Vec<u8>, u64>::new()));
    let stamp = Arc::new(AtomicUsize::new(0));
    let seen_after = Arc::new(Mutex::new(HashSet::<Vec<u8>>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, last_add, stamp, seen_after) = (
                q.clone(),
                last_add.clone(),
                stamp.clone(),
                seen_after.clone(),
            );
            std::thread::spawn(move || loop {
                let g = match q.get(u64::MAX) {
                    Ok(g) => g,
                    Err(_) => return,
                };
                let now = stamp.fetch_add(1, Ordering::SeqCst) as u64;
                if last_add
                    .lock()
                    .unwrap()
                    .get(&g.key)
                    .is_some_and(|&t| t < now)
                {
                    seen_after.lock().unwrap().insert(g.key.clone());
                }
                q.done(g.handle);
            })
        })
        .collect();
    for i in 0..2000 {
        let key = format!("k{}", i % 10);
        // Record the stamp before the add: a get after the add sees a
        // larger stamp.
        let t = stamp.fetch_add(1, Ordering::SeqCst) as u64;
        last_add.lock().unwrap().insert(key.clone().into_bytes(), t);
        q.add(&key);
    }
    // SAFETY: live queue.
    ok(unsafe { apf_workqueue_shut_down_with_drain(q.0) });
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        seen_after.lock().unwrap().len(),
        10,
        "no key's last add was lost"
    );
}
