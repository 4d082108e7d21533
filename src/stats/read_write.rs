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

#[derive(Debug, Clone)]
struct Integrator {
    counts: [u32; 4],
    last: Instant,
    observed: ReadVsWrite,
}

impl Integrator {
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
            inner: Arc::new(Mutex::new(Integrator {
                counts: [0; 4],
                last: now,
                observed: ReadVsWrite::default(),
            })),
        }
    }

    /// A request tagged `tag` enters (`delta` 1) or leaves (-1) `phase` at
    /// `at`. Counts saturate at zero (a level replaced while its requests
    /// lived reports their ends too, so this does not happen by design).
    pub(crate) fn add(&self, phase: Phase, tag: u32, delta: i32, at: Instant) {
        let mut st = lock(&self.inner);
        let late = duration_nanos(st.last.saturating_since(at));
        st.advance(at);
        let i = series(phase, tag);
        let before = st.counts[i];
        let after = before.saturating_add_signed(delta);
        st.counts[i] = after;
        if late > 0 {
            // The buckets took the old count for the last `late` ns; the
            // integral takes the change for them too, so it stays exact.
            let applied = f64::from(after) - f64::from(before);
            st.observed.series[i].add_to_sum(applied * late as f64);
        }
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

    #[test]
    fn counts_saturate_at_zero() {
        let h = ReadWriteHandle::new(at(0));
        h.add(Phase::Waiting, 0, -1, at(1));
        assert_eq!(h.counts(), [0; 4]);
    }
}
