//! References to a level or a flow schema that a request holds, without a
//! write to a cache line that every core writes.
//!
//! # Why
//! A request keeps its level (and the dispatcher's `Decision` its flow
//! schema) alive while it runs, so that a reconfiguration that removes
//! the level cannot free it under the request. With one `Arc<Level>` per
//! level, every request's clone and drop is an atomic read-modify-write on
//! the level's one reference count: one cache line that every core using
//! the level writes, twice per reference per request (docs/scaling.md,
//! "the dispatcher path shares more lines").
//!
//! # Protocol
//! - A configuration snapshot holds, for each level and each flow schema,
//!   a [`Leases`]: one [`Lease`] per shard, each a reference count of its
//!   own on its own cache lines, each holding one clone of the shared
//!   `Arc` (taken once, when the snapshot is built). The C ABI's queueset
//!   holds its level's the same way, for as long as it lives.
//! - A request clones the lease of its thread's shard
//!   (`thread_index() & (shards − 1)`, as the queueset's shards): the count
//!   it writes is written only by the threads of that shard, so with no
//!   more busy threads than CPUs only one core writes it.
//! - A reconfiguration swaps in a new snapshot with new leases. The old
//!   snapshot's leases go when the last snapshot reader and the last
//!   request holding one drop them; each lease then drops its clone of
//!   the shared `Arc`.
//!
//! # Invariants
//! 1. **A request finishes at the level it started on, and that level
//!    lives until it finishes**: the request's guard (or ticket) owns a
//!    clone of a lease, the lease owns a clone of the `Arc<Level>`, and
//!    nothing else is ever read to find the level again.
//! 2. **A value is freed exactly once, after its last user**: these are
//!    plain `Arc`s nested in `Arc`s (no unsafe code, no new memory
//!    ordering): the shared `Arc`'s count is the number of live leases
//!    plus the other owners, and each lease's count the number of its
//!    holders.
//! 3. **`Arc::strong_count` of the shared value still means "referenced"**:
//!    it counts the live leases (a snapshot's, or a request's) and the
//!    other owners; a value with one count left (its last owner's) has no
//!    snapshot and no request referring to it (the dispatcher's schema-id
//!    reuse relies on it).
//!
//! The loom model below checks 1 and 2 with a reconfiguration racing a
//! request's start and finish, and fails when the request does not own
//! its lease (a finish that finds its level again through the
//! configuration in force).

use crate::sync::Arc;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::ops::Deref;

/// A reference to a level or a flow schema that keeps it alive (see the
/// module documentation). Dereferences to the value; [`Lease::arc`] gives
/// the shared `Arc` (for identity, or an owner of one's own).
///
/// One representation only (a shard's reference count on cache lines of
/// its own, holding a clone of the shared `Arc`), so that reading the
/// value through it is two loads and no test: a request reads its level
/// and schema through leases about ten times.
pub struct Lease<T>(Arc<CachePadded<Arc<T>>>);

impl<T> Lease<T> {
    /// A lease of its own for `value`: one allocation of two cache lines.
    /// A holder that hands out many (one per request) keeps [`Leases`]
    /// and clones its thread's shard's instead.
    pub fn new(value: Arc<T>) -> Lease<T> {
        Lease(Arc::new(CachePadded::new(value)))
    }

    /// The shared `Arc` (clone it to own the value beyond the lease).
    #[inline]
    pub fn arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T> Clone for Lease<T> {
    #[inline]
    fn clone(&self) -> Self {
        Lease(self.0.clone())
    }
}

impl<T> Deref for Lease<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.arc()
    }
}

impl<T: fmt::Debug> fmt::Debug for Lease<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// One [`Lease`] per shard of one value (see the module documentation):
/// what a holder that admits many requests keeps (the dispatcher's
/// configuration snapshot, the C ABI's queueset), so that each request
/// clones its thread's shard's lease.
pub struct Leases<T>(Box<[Lease<T>]>);

impl<T> Leases<T> {
    /// Leases of `value`, one per shard: as many as the queueset's shards
    /// (one per CPU rounded down to a power of two, at most 16; two under
    /// loom and shuttle). Each costs one allocation of two cache lines.
    pub fn new(value: &Arc<T>) -> Leases<T> {
        let n = if cfg!(any(loom, shuttle)) {
            2
        } else {
            let cpus = std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, 16);
            1 << cpus.ilog2()
        };
        Leases((0..n).map(|_| Lease::new(value.clone())).collect())
    }

    /// The lease of the calling thread's shard.
    #[inline]
    pub fn mine(&self) -> &Lease<T> {
        self.of_thread(crate::sync::thread_index())
    }

    /// The lease of the shard of the thread numbered `thread`
    /// (`crate::sync::thread_index`, read once for several values).
    #[inline]
    pub(crate) fn of_thread(&self, thread: usize) -> &Lease<T> {
        // A power of two (see `new`).
        &self.0[thread & (self.0.len() - 1)]
    }
}

impl<T: fmt::Debug> fmt::Debug for Leases<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("shards", &self.0.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::level::{Level, Outcome};
    use crate::queueset::{QueueSet, QueueSetConfig};
    use crate::work_estimate::WorkEstimate;
    use std::time::Duration;

    fn level() -> Arc<Level> {
        let (clock, _manual) = Clock::manual();
        let cfg = QueueSetConfig {
            name: "leased".into(),
            concurrency_limit: 2,
            ..QueueSetConfig::default()
        };
        let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
        Arc::new(Level::limited("leased".into(), None, qs, clock))
    }

    /// The shared count counts the live leases (invariant 3), and a
    /// request admitted through them adds none to it; `Level::admit`'s
    /// lease of its own adds one while its request runs.
    #[test]
    fn a_request_through_leases_writes_no_shared_count() {
        let level = level();
        let leases = Leases::new(&level);
        let with_leases = Arc::strong_count(&level);
        assert_eq!(with_leases, 1 + leases.0.len(), "one count per lease");
        let one = WorkEstimate::new(1, 0, Duration::ZERO);
        let outcome = Level::admit_with_leases(&leases, 0, 7, one, None, || unreachable!());
        let Outcome::Execute(guard) = outcome else {
            panic!("a free seat")
        };
        assert_eq!(Arc::strong_count(&level), with_leases, "no shared write");
        assert_eq!(level.seats_in_use(), 1);
        let own = Level::admit(&level, 0, 7, one, None, || unreachable!());
        let Outcome::Execute(own) = own else {
            panic!("a free seat")
        };
        assert_eq!(
            Arc::strong_count(&level),
            with_leases + 1,
            "a lease of its own"
        );
        drop((guard, own));
        assert_eq!(level.seats_in_use(), 0, "both finished");
        assert_eq!(Arc::strong_count(&level), with_leases);
        let lease = leases.mine().clone();
        assert!(Arc::ptr_eq(lease.arc(), &level));
        assert_eq!(lease.name, "leased", "reads the value");
        drop((lease, leases));
        assert_eq!(Arc::strong_count(&level), 1, "no lease left");
    }
}

/// The loom model of the protocol: a request's start and finish on one
/// thread, racing a reconfiguration that replaces the level on another.
/// Run with `scripts/loom.sh`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::clock::Clock;
    use crate::level::{Level, Outcome};
    use crate::queueset::{QueueSet, QueueSetConfig};
    use crate::sync::{thread_index, ArcCell};
    use crate::work_estimate::WorkEstimate;
    use loom::thread;
    use std::time::Duration;

    /// The configuration in force: one level's leases.
    struct Snapshot {
        level: Leases<Level>,
    }

    fn level(name: &str, clock: &Clock) -> Arc<Level> {
        let cfg = QueueSetConfig {
            name: name.into(),
            concurrency_limit: 1,
            queues: 1,
            hand_size: 1,
            queue_length_limit: 4,
            ..QueueSetConfig::default()
        };
        let qs = QueueSet::new(cfg, clock.clone()).expect("valid config");
        Arc::new(Level::limited(name.into(), None, qs, clock.clone()))
    }

    /// `owned`: the request owns a clone of its shard's lease (the
    /// protocol). Otherwise (broken) it keeps none: its finish finds its
    /// level again through the configuration in force.
    fn reconfigure_against_request(owned: bool) {
        loom::model(move || {
            let (clock, _manual) = Clock::manual();
            let old = level("old", &clock);
            let new = level("new", &clock);
            let cell = Arc::new(ArcCell::new(Arc::new(Snapshot {
                level: Leases::new(&old),
            })));
            let reconfigure = {
                let (cell, new) = (cell.clone(), new.clone());
                thread::spawn(move || {
                    cell.store(Arc::new(Snapshot {
                        level: Leases::new(&new),
                    }));
                })
            };
            let lease = cell.with(|s| s.level.of_thread(thread_index()).clone());
            let started_on = lease.name.clone();
            let estimate = WorkEstimate::new(1, 0, Duration::ZERO);
            let Outcome::Execute(mut guard) = Level::admit_leased(
                lease,
                0,
                7,
                estimate,
                None,
                || unreachable!("it fits"),
                None,
            ) else {
                panic!("a free seat");
            };
            // Every step the request can observe: its level is the one it
            // started on, and holds its seat.
            assert_eq!(guard.level_name(), started_on, "the request's level");
            assert_eq!(guard.level_seats(), 1, "its seat is held");
            if !owned {
                guard.find_level_again(cell.with(|s| s.level.of_thread(thread_index()).clone()));
            }
            if guard.level_name() != started_on || guard.level_seats() != 1 {
                // Not dropped: its finish at another level would panic
                // again while this panic unwinds.
                std::mem::forget(guard);
                panic!("the request lost its level (started on {started_on})");
            }
            guard.finish();
            reconfigure.join().unwrap();
            for l in [&old, &new] {
                assert_eq!(l.seats_in_use(), 0, "level {}: every seat back", l.name);
                assert!(l.is_idle(), "level {}", l.name);
            }
            // Only the test's own references are left: no lease leaked,
            // none dropped a reference it did not own.
            drop(cell);
            assert_eq!(Arc::strong_count(&old), 1, "old level");
            assert_eq!(Arc::strong_count(&new), 1, "new level");
        });
    }

    #[test]
    fn a_request_finishes_at_the_level_it_started_on() {
        reconfigure_against_request(true);
    }

    /// The deliberately broken protocol: the model must catch it.
    #[test]
    #[should_panic(expected = "the request lost its level")]
    fn a_request_without_its_own_lease_is_caught() {
        reconfigure_against_request(false);
    }
}
