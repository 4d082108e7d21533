//! Kubernetes' `apiserver_flowcontrol_read_vs_write_current_requests`: the
//! server's requests waiting in queues and executing, split into mutating
//! and read-only ones, as time-weighted histograms (observed at the end of
//! every nanosecond, so a bucket counts nanoseconds and `_sum` is the
//! integral of the count over time).
//!
//! # Where the kind comes from
//! A request's kind rides in the top bit of its tag ([`READ_ONLY_TAG`]), set
//! by the dispatcher from the verb. The hot path copies the tag into its
//! ring records as before, so knowing the kind costs it nothing; the
//! tallies strip the bit (see `tally`) and, when they count a request
//! joining or leaving a queue or starting or ending its execution, also
//! tell the dispatcher-wide [`ReadWriteHandle`]. That happens under the
//! level lock, while the ring is replayed or on the slow path, never on the
//! hot path.
//!
//! # Time across levels
//! Each level replays its own events in time order, but one level may
//! replay after another has already reported later events. Such a late
//! change still counts exactly in `_sum` (the integral gets the change
//! times the time since it happened), so the mean count is exact; in the
//! buckets it counts from the latest instant reported (time never runs
//! backward in them, as in the seat-demand integrator). Every slow-path
//! operation, every borrowing adjustment and every scrape replays a level's
//! ring, which holds at most 256 records, so the shift is small under load;
//! it is listed in docs/operators.md.
//!
//! # Denominators
//! Under API Priority and Fairness Kubernetes observes raw counts (its
//! ratioed gauges have denominator 1), so most time sits in the `+Inf`
//! bucket once two requests are in a phase and the useful figure is the
//! mean, `_sum / _count`. libapf does the same.

use super::utilization::RatioHistogram;
use crate::clock::{duration_nanos, Instant};
use crate::sync::{lock, Arc, Mutex};
use std::fmt;

/// The tag bit that marks a read-only request (verb `get`, `list` or
/// `watch`, as Kubernetes decides); without it a request counts as
/// mutating, as Kubernetes counts every other verb. Tallies ignore it.
pub const READ_ONLY_TAG: u32 = 1 << 31;

/// Kubernetes' bounds of `read_vs_write_current_requests`.
pub const READ_VS_WRITE_BUCKETS: [f64; 15] = [
    0.0, 0.001, 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
];

/// Kubernetes' read-only verbs (its `nonMutatingRequestVerbs`; a
/// non-resource request's verb is its lower-cased HTTP method, so a `GET`
/// of a path counts as read-only too).
pub fn is_read_only_verb(verb: &str) -> bool {
    matches!(verb, "get" | "list" | "watch")
}

/// `tag` marked with the kind of a request of `verb`.
pub fn tag_for_verb(tag: u32, verb: &str) -> u32 {
    if is_read_only_verb(verb) {
        tag | READ_ONLY_TAG
    } else {
        tag & !READ_ONLY_TAG
    }
}

/// The phase a request is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Waiting = 0,
    Executing = 2,
}

/// Which series a request of `tag` in `phase` changes.
fn series(phase: Phase, tag: u32) -> usize {
    phase as usize + usize::from(tag & READ_ONLY_TAG != 0)
}

/// The four series, in [`ReadVsWrite::SERIES`] order.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadVsWrite {
    /// Time-weighted counts, indexed like [`ReadVsWrite::SERIES`].
    pub series: [RatioHistogram<15>; 4],
}

impl ReadVsWrite {
    /// The `(phase, request_kind)` labels of each series, as Kubernetes
    /// spells them.
    pub const SERIES: [(&'static str, &'static str); 4] = [
        ("waiting", "mutating"),
        ("waiting", "readOnly"),
        ("executing", "mutating"),
        ("executing", "readOnly"),
    ];
}

impl Default for ReadVsWrite {
    fn default() -> Self {
        ReadVsWrite {
            // Raw counts, as under APF in Kubernetes: a denominator of 1.
            series: std::array::from_fn(|_| {
                let mut h = RatioHistogram::new(&READ_VS_WRITE_BUCKETS);
                h.rebase(1.0);
                h
            }),
        }
    }
}

/// The integrator's state. Each series' histogram is brought up to date
/// lazily, only when its own count changes (or at a snapshot): between
/// its changes a series' count is constant, and a histogram's `observe`
/// adds its time (buckets, count and integral alike), so one observation
/// of the whole stretch is the sum of the per-event observations an eager
/// integrator makes, and a report costs one histogram observation instead
/// of four (the tests compare with the eager integrator).
#[derive(Debug, Clone)]
struct Integrator {
    counts: [u32; 4],
    /// The latest instant reported: the buckets never run backward.
    last: Instant,
    /// Per series, the instant up to which its histogram holds its time
    /// (at most `last`).
    settled: [Instant; 4],
    observed: ReadVsWrite,
}

impl Integrator {
    fn new(now: Instant) -> Self {
        Integrator {
            counts: [0; 4],
            last: now,
            settled: [now; 4],
            observed: ReadVsWrite::default(),
        }
    }

    /// Series `i`'s histogram up to `last`, at its current count.
    #[inline]
    fn settle(&mut self, i: usize) {
        let dt = duration_nanos(self.last.saturating_since(self.settled[i]));
        if dt > 0 {
            self.settled[i] = self.last;
            self.observed.series[i].observe(u64::from(self.counts[i]), dt);
        }
    }

    /// Time runs to `now` (never backward), every series settled.
    fn advance(&mut self, now: Instant) {
        if now > self.last {
            self.last = now;
        }
        for i in 0..self.counts.len() {
            self.settle(i);
        }
    }

    fn add(&mut self, phase: Phase, tag: u32, delta: i32, at: Instant) {
        let late = duration_nanos(self.last.saturating_since(at));
        if at > self.last {
            self.last = at;
        }
        let i = series(phase, tag);
        self.settle(i);
        let before = self.counts[i];
        let after = before.saturating_add_signed(delta);
        self.counts[i] = after;
        if late > 0 {
            // The buckets took the old count for the last `late` ns; the
            // integral takes the change for them too, so it stays exact.
            let applied = f64::from(after) - f64::from(before);
            self.observed.series[i].add_to_sum(applied * late as f64);
        }
    }
}

/// The dispatcher-wide integrator every level reports to. Cloning shares
/// it. Each report takes one short lock, after the level lock (the order
/// is level, then this).
#[derive(Clone)]
pub struct ReadWriteHandle {
    inner: Arc<Mutex<Integrator>>,
}

impl ReadWriteHandle {
    /// An integrator with nothing waiting or executing from `now` on.
    pub fn new(now: Instant) -> Self {
        ReadWriteHandle {
            inner: Arc::new(Mutex::new(Integrator::new(now))),
        }
    }

    /// A request tagged `tag` enters (`delta` 1) or leaves (-1) `phase` at
    /// `at`. Counts saturate at zero (a level replaced while its requests
    /// lived reports their ends too, so this does not happen by design).
    pub(crate) fn add(&self, phase: Phase, tag: u32, delta: i32, at: Instant) {
        lock(&self.inner).add(phase, tag, delta, at);
    }

    /// Requests tagged `tag` spent `nanos` in `phase` in all, entering and
    /// leaving it between two reports (the hot path's requests that started
    /// and finished between two merges of their level): their count never
    /// changed at a report, so only the integral takes them, exactly.
    pub(crate) fn add_time(&self, phase: Phase, tag: u32, nanos: u128) {
        if nanos == 0 {
            return;
        }
        let mut st = lock(&self.inner);
        let i = series(phase, tag);
        st.observed.series[i].add_to_sum(nanos as f64);
    }

    /// The histograms up to `now`.
    pub fn snapshot(&self, now: Instant) -> ReadVsWrite {
        let mut st = lock(&self.inner).clone();
        st.advance(now);
        st.observed
    }

    /// The current counts, in [`ReadVsWrite::SERIES`] order.
    pub fn counts(&self) -> [u32; 4] {
        lock(&self.inner).counts
    }
}

impl fmt::Debug for ReadWriteHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReadWriteHandle")
            .field(&lock(&self.inner).counts)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn verbs_are_read_only_as_in_kubernetes() {
        for verb in ["get", "list", "watch"] {
            assert!(is_read_only_verb(verb), "{verb}");
            assert_eq!(tag_for_verb(5, verb), 5 | READ_ONLY_TAG);
        }
        for verb in [
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
            "post",
            "head",
            "GET",
        ] {
            assert!(!is_read_only_verb(verb), "{verb}");
            assert_eq!(tag_for_verb(5 | READ_ONLY_TAG, verb), 5);
        }
    }

    #[test]
    fn counts_are_integrated_per_phase_and_kind() {
        let h = ReadWriteHandle::new(at(0));
        h.add(Phase::Executing, 3 | READ_ONLY_TAG, 1, at(10));
        h.add(Phase::Executing, 3 | READ_ONLY_TAG, 1, at(20));
        h.add(Phase::Waiting, 3, 1, at(30));
        h.add(Phase::Waiting, 3, -1, at(40));
        // Late: in the buckets from 40, the latest instant seen; in the
        // sum from 35, exactly.
        h.add(Phase::Executing, 4, 1, at(35));
        assert_eq!(h.counts(), [0, 0, 1, 2]);
        let s = h.snapshot(at(100));
        let [wm, wr, em, er] = &s.series;
        // Read-only executing: 0 for 10 ns, 1 for 10 ns, 2 for 80 ns.
        assert_eq!(er.count(), 100);
        assert_eq!(er.per_bucket()[0], 10);
        assert_eq!(er.per_bucket()[14], 10, "a count of 1 is le=1");
        assert_eq!(er.overflow(), 80);
        assert_eq!(er.sum(), 10.0 + 160.0);
        assert_eq!(wm.per_bucket()[14], 10);
        assert_eq!(wm.sum(), 10.0);
        assert_eq!(wr.sum(), 0.0);
        assert_eq!(wr.per_bucket()[0], 100);
        assert_eq!(em.per_bucket()[14], 60, "the late start, from 40");
        assert_eq!(em.sum(), 65.0, "the late start, from 35");
        // A snapshot does not advance the integrator.
        assert_eq!(h.snapshot(at(100)), s);
    }

    /// A level replaying a request's start and end after another level
    /// reported later changes: the request vanishes from the buckets but
    /// its whole duration is in the sum.
    #[test]
    fn a_late_request_counts_exactly_in_the_sum() {
        let h = ReadWriteHandle::new(at(0));
        h.add(Phase::Waiting, 0, 1, at(100));
        h.add(Phase::Executing, 0, 1, at(10));
        h.add(Phase::Executing, 0, -1, at(30));
        let s = h.snapshot(at(100));
        assert_eq!(s.series[2].sum(), 20.0);
        assert_eq!(s.series[2].per_bucket()[0], 100);
    }

    /// The integrator as it was before it settled lazily: every report
    /// observes all four series up to the latest instant. The reference
    /// for the lazy one.
    struct Eager {
        counts: [u32; 4],
        last: Instant,
        observed: ReadVsWrite,
    }

    impl Eager {
        fn advance(&mut self, now: Instant) {
            if now <= self.last {
                return;
            }
            let dt = duration_nanos(now.saturating_since(self.last));
            self.last = now;
            for (h, &n) in self.observed.series.iter_mut().zip(&self.counts) {
                h.observe(u64::from(n), dt);
            }
        }

        fn add(&mut self, phase: Phase, tag: u32, delta: i32, at: Instant) {
            let late = duration_nanos(self.last.saturating_since(at));
            self.advance(at);
            let i = series(phase, tag);
            let before = self.counts[i];
            let after = before.saturating_add_signed(delta);
            self.counts[i] = after;
            if late > 0 {
                let applied = f64::from(after) - f64::from(before);
                self.observed.series[i].add_to_sum(applied * late as f64);
            }
        }
    }

    proptest::proptest! {
        /// Random reports, late ones (earlier than the latest) included,
        /// with snapshots in between: the lazy integrator reads exactly as
        /// the eager one (buckets, counts, integrals), and so do its
        /// snapshots. Fails if a series is settled at another count or
        /// time than the eager one observes (e.g. after its change).
        #[test]
        #[cfg_attr(loom, ignore)]
        fn lazy_settling_reads_as_the_eager_integrator(
            reports in proptest::collection::vec(
                (proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>(), 0u64..1_000, 0u8..8),
                1..120,
            )
        ) {
            let h = ReadWriteHandle::new(at(0));
            let mut eager = Eager { counts: [0; 4], last: at(0), observed: ReadVsWrite::default() };
            let mut now = 0u64;
            for (waiting, read_only, up, step, snap) in reports {
                // Mostly forward; one report in four from the past.
                let t = if snap % 4 == 0 { now.saturating_sub(step) } else { now + step };
                now = now.max(t);
                let phase = if waiting { Phase::Waiting } else { Phase::Executing };
                let tag = if read_only { 7 | READ_ONLY_TAG } else { 7 };
                let delta = if up { 1 } else { -1 };
                h.add(phase, tag, delta, at(t));
                eager.add(phase, tag, delta, at(t));
                proptest::prop_assert_eq!(h.counts(), eager.counts);
                if snap == 0 {
                    let mut then = Eager {
                        counts: eager.counts,
                        last: eager.last,
                        observed: eager.observed.clone(),
                    };
                    then.advance(at(now + 3));
                    proptest::prop_assert_eq!(h.snapshot(at(now + 3)), then.observed);
                }
            }
            eager.advance(at(now + 5));
            proptest::prop_assert_eq!(h.snapshot(at(now + 5)), eager.observed);
        }
    }

    #[test]
    fn counts_saturate_at_zero() {
        let h = ReadWriteHandle::new(at(0));
        h.add(Phase::Waiting, 0, -1, at(1));
        assert_eq!(h.counts(), [0; 4]);
    }
}
