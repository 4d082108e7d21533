//! Per-tag tallies: what a level's requests did, counted by an opaque tag
//! the caller gives each request (the dispatcher uses one tag per flow
//! schema), for metrics.
//!
//! Everything here is updated under the level's mutex, while the event ring
//! is replayed or on the slow path, never by the lock-free hot path: a
//! request admitted there carries its tag in its ring records, and its
//! counts, wait and execution time are tallied when the records are
//! replayed, at their own timestamps. So counting costs the hot path no
//! atomic operation and no shared cache line.

use super::read_write::{Phase, ReadWriteHandle, READ_ONLY_TAG};
use crate::clock::Instant;

/// Kubernetes' bucket bounds for request wait and execution durations, in
/// seconds (`apiserver_flowcontrol_request_wait_duration_seconds`,
/// `..._request_execution_seconds`).
pub const DURATION_BUCKETS_SECONDS: [f64; 13] = [
    0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
];

/// Kubernetes' bucket bounds for queue lengths
/// (`apiserver_flowcontrol_request_queue_length_after_enqueue`).
pub const QUEUE_LENGTH_BUCKETS: [f64; 8] = [0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

const DURATION_BOUNDS_NANOS: [u64; 13] = [
    0,
    5_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    15_000_000_000,
    30_000_000_000,
];

const QUEUE_LENGTH_BOUNDS: [u64; 8] = [0, 10, 25, 50, 100, 250, 500, 1000];

/// Kubernetes' bucket bounds for the seats a request is estimated to
/// occupy (`apiserver_flowcontrol_work_estimated_seats`).
pub const WORK_SEATS_BUCKETS: [f64; 4] = [1.0, 2.0, 4.0, 10.0];

const WORK_SEATS_BOUNDS: [u64; 4] = [1, 2, 4, 10];

/// A histogram with fixed integer bucket bounds (inclusive upper bounds, as
/// Prometheus' `le`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketHistogram<const N: usize> {
    bounds: &'static [u64; N],
    /// `per_bucket[i]`: observations in `(bounds[i-1], bounds[i]]`.
    per_bucket: [u64; N],
    /// Observations above the last bound.
    overflow: u64,
    /// Sum of all observations, in the observed unit.
    sum: u128,
}

/// Durations in nanoseconds, with Kubernetes' buckets
/// ([`DURATION_BUCKETS_SECONDS`]).
pub type DurationHistogram = BucketHistogram<13>;

/// Queue lengths, with Kubernetes' buckets ([`QUEUE_LENGTH_BUCKETS`]).
pub type LengthHistogram = BucketHistogram<8>;

impl BucketHistogram<13> {
    /// An empty histogram of durations in nanoseconds.
    pub fn durations() -> Self {
        BucketHistogram::with_bounds(&DURATION_BOUNDS_NANOS)
    }
}

/// Seats (max of initial and final) per request, with Kubernetes' buckets
/// ([`WORK_SEATS_BUCKETS`]).
pub type SeatsHistogram = BucketHistogram<4>;

impl BucketHistogram<4> {
    /// An empty histogram of seats per request.
    pub fn seats() -> Self {
        BucketHistogram::with_bounds(&WORK_SEATS_BOUNDS)
    }
}

impl BucketHistogram<8> {
    /// An empty histogram of queue lengths.
    pub fn lengths() -> Self {
        BucketHistogram::with_bounds(&QUEUE_LENGTH_BOUNDS)
    }
}

impl<const N: usize> BucketHistogram<N> {
    fn with_bounds(bounds: &'static [u64; N]) -> Self {
        BucketHistogram {
            bounds,
            per_bucket: [0; N],
            overflow: 0,
            sum: 0,
        }
    }

    /// Record one observation. Typical values fall in the first buckets, so
    /// a linear scan beats a binary search here.
    #[inline]
    pub fn observe(&mut self, value: u64) {
        self.observe_one(value);
    }

    /// Record one observation of `value`: [`BucketHistogram::observe_n`]
    /// without the multiply (the hot finish observes two per request).
    #[inline]
    fn observe_one(&mut self, value: u64) {
        match self.bounds.iter().position(|&b| value <= b) {
            Some(i) => self.per_bucket[i] += 1,
            None => self.overflow += 1,
        }
        self.sum += u128::from(value);
    }

    /// Record `n` observations of `value`.
    #[inline]
    pub fn observe_n(&mut self, value: u64, n: u64) {
        match self.bounds.iter().position(|&b| value <= b) {
            Some(i) => self.per_bucket[i] += n,
            None => self.overflow += n,
        }
        self.sum += u128::from(value) * u128::from(n);
    }

    /// Add `other`'s observations (same bounds) to these.
    pub(crate) fn absorb(&mut self, other: &Self) {
        for (a, b) in self.per_bucket.iter_mut().zip(other.per_bucket.iter()) {
            *a += b;
        }
        self.overflow += other.overflow;
        self.sum += other.sum;
    }

    /// The inclusive upper bounds, in the observed unit.
    pub fn bounds(&self) -> &[u64; N] {
        self.bounds
    }

    /// Observations per bucket (not cumulative); the `+Inf` bucket's own
    /// observations are [`BucketHistogram::overflow`].
    pub fn per_bucket(&self) -> &[u64; N] {
        &self.per_bucket
    }

    /// Observations above the last bound.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// All observations.
    pub fn count(&self) -> u64 {
        self.per_bucket.iter().sum::<u64>() + self.overflow
    }

    /// Sum of the observations, in the observed unit.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// Observations at most `bounds[i]` (Prometheus' cumulative bucket).
    pub fn cumulative(&self, i: usize) -> u64 {
        self.per_bucket[..=i.min(N - 1)].iter().sum()
    }
}

/// What the requests of one tag did at one level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagStats {
    /// Requests waiting in queues now.
    pub waiting: u32,
    /// Seats (max of initial and final) of the waiting requests.
    pub waiting_seats: u64,
    /// Requests executing now.
    pub executing: u32,
    /// Seats held now, by executing requests and by finished ones during
    /// their additional latency (Kubernetes' `current_executing_seats`).
    pub seats_in_use: u64,
    /// Requests that started executing.
    pub dispatched: u64,
    /// Rejections, indexed by `RejectReason as usize`.
    pub rejected: [u64; 4],
    /// Time from arrival to the start of execution (zero for requests that
    /// did not wait), for requests that executed.
    pub wait_dispatched: DurationHistogram,
    /// Time from arrival to rejection (zero for queue-full and
    /// concurrency-limit rejections).
    pub wait_rejected: DurationHistogram,
    /// Time from the start to the end of execution (additional latency not
    /// included).
    pub execution: DurationHistogram,
    /// The length of the request's queue right after it was put there
    /// (levels that queue only; a request admitted on the hot path found its
    /// queue empty, so it observes 1).
    pub queue_length: LengthHistogram,
    /// The seats (max of initial and final) of every request that reached
    /// the limited level: executed, queued or rejected on arrival.
    pub work_estimated_seats: SeatsHistogram,
    /// Dispatch attempts that found this tag's request at the head of the
    /// chosen queue and too few free seats for it.
    pub no_accommodation: u64,
}

impl Default for TagStats {
    fn default() -> Self {
        TagStats {
            waiting: 0,
            waiting_seats: 0,
            executing: 0,
            seats_in_use: 0,
            dispatched: 0,
            rejected: [0; 4],
            wait_dispatched: BucketHistogram::durations(),
            wait_rejected: BucketHistogram::durations(),
            execution: BucketHistogram::durations(),
            queue_length: BucketHistogram::lengths(),
            work_estimated_seats: BucketHistogram::seats(),
            no_accommodation: 0,
        }
    }
}

impl TagStats {
    /// Whether nothing was ever counted.
    pub fn is_untouched(&self) -> bool {
        *self == TagStats::default()
    }
}

/// One tag's tally as kept: [`TagStats`], except that requests that did not
/// wait (most of them, all those of the hot path) are only counted, and
/// enter the wait and queue-length histograms when a snapshot is taken.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    pub(crate) stats: TagStats,
    /// Requests that started at once: zero waits not yet observed.
    at_once: u64,
    /// Of those, the ones that joined an empty queue: lengths of 1 not yet
    /// observed.
    at_once_queued: u64,
}

impl Tally {
    /// A request holding `seats` starts executing on arrival; `queued` if
    /// the level queues (it joined its empty queue for an instant).
    #[inline]
    pub(crate) fn begin_at_once(&mut self, seats: u32, queued: bool) {
        self.begin_unobserved(seats);
        self.at_once += 1;
        self.at_once_queued += queued as u64;
    }

    /// A request holding `seats` starts executing after waiting `waited`
    /// nanoseconds in a queue.
    #[inline]
    pub(crate) fn begin_after_wait(&mut self, seats: u32, waited: u64) {
        self.begin_unobserved(seats);
        self.stats.wait_dispatched.observe(waited);
    }

    /// A request holding `seats` starts executing; its wait is not observed
    /// (exempt levels, as in Kubernetes).
    #[inline]
    pub(crate) fn begin_unobserved(&mut self, seats: u32) {
        let st = &mut self.stats;
        st.executing += 1;
        st.seats_in_use += seats as u64;
        st.dispatched += 1;
    }

    /// A request holding `seats` that started on arrival (`queued`: as in
    /// [`Tally::begin_at_once`]) and ended `ran` nanoseconds later, its
    /// seats given back: exactly `begin_at_once`, the observation of its
    /// seats, `end` and `release`, less the gauges' changes, which net
    /// zero (a shard's sums of the hot path's finished requests).
    #[inline]
    pub(crate) fn began_and_ended_at_once(&mut self, seats: u32, queued: bool, ran: u64) {
        self.stats.dispatched += 1;
        self.at_once += 1;
        self.at_once_queued += queued as u64;
        self.stats.work_estimated_seats.observe_one(seats.into());
        self.stats.execution.observe_one(ran);
    }

    /// A request that started at `start` ends its execution at `end`.
    #[inline]
    pub(crate) fn end(&mut self, start: Instant, end: Instant) {
        self.stats.executing -= 1;
        self.stats
            .execution
            .observe(end.as_nanos().saturating_sub(start.as_nanos()));
    }

    /// A request gives its seats back.
    #[inline]
    pub(crate) fn release(&mut self, seats: u32) {
        self.stats.seats_in_use -= seats as u64;
    }

    /// Add what `other` counted (a shard's tallies of requests that
    /// started and finished on the hot path, src/queueset/core/epoch.rs):
    /// every count and histogram adds up; gauges (executing, seats) are
    /// net zero there.
    pub(crate) fn absorb(&mut self, other: &Tally) {
        let (a, b) = (&mut self.stats, &other.stats);
        a.waiting += b.waiting;
        a.waiting_seats += b.waiting_seats;
        a.executing += b.executing;
        a.seats_in_use += b.seats_in_use;
        a.dispatched += b.dispatched;
        for (x, y) in a.rejected.iter_mut().zip(b.rejected.iter()) {
            *x += y;
        }
        a.wait_dispatched.absorb(&b.wait_dispatched);
        a.wait_rejected.absorb(&b.wait_rejected);
        a.execution.absorb(&b.execution);
        a.queue_length.absorb(&b.queue_length);
        a.work_estimated_seats.absorb(&b.work_estimated_seats);
        a.no_accommodation += b.no_accommodation;
        self.at_once += other.at_once;
        self.at_once_queued += other.at_once_queued;
    }

    /// The published form, with the deferred observations folded in.
    fn snapshot(&self) -> TagStats {
        let mut st = self.stats.clone();
        st.wait_dispatched.observe_n(0, self.at_once);
        st.queue_length.observe_n(1, self.at_once_queued);
        st
    }
}

/// Tags above this share one tally (tags are meant to be small and dense).
pub const MAX_TAG: u32 = (1 << 16) - 1;

const NO_SLOT: u32 = u32::MAX;

/// The tallies of one level, by tag: a dense index from tag to slot, so a
/// replayed record finds its tally with two array reads. A tag's
/// [`READ_ONLY_TAG`] bit is not part of it: it only says which
/// `read_vs_write` series the request changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tallies {
    slot_of: Vec<u32>,
    stats: Vec<(u32, Tally)>,
    /// The dispatcher's read-vs-write integrator, if any (see `read_write`).
    read_write: Option<ReadWriteHandle>,
}

impl Tallies {
    /// Report phase changes to `handle` from now on.
    pub(crate) fn set_read_write(&mut self, handle: Option<ReadWriteHandle>) {
        self.read_write = handle;
    }

    /// Requests tagged `tag` spent `nanos` executing in all, between two
    /// reports (see `ReadWriteHandle::add_time`).
    pub(crate) fn note_executed(&self, tag: u32, nanos: u128) {
        if let Some(h) = &self.read_write {
            h.add_time(Phase::Executing, tag, nanos);
        }
    }

    /// A request tagged `tag` enters (`delta` 1) or leaves (-1) `phase` at
    /// `at`: told to the read-vs-write integrator, if any.
    #[inline]
    pub(crate) fn note(&self, phase: Phase, tag: u32, delta: i32, at: Instant) {
        if let Some(h) = &self.read_write {
            h.add(phase, tag, delta, at);
        }
    }

    /// The tally of `tag`, created on first use.
    #[inline]
    pub(crate) fn get(&mut self, tag: u32) -> &mut Tally {
        let tag = tag & !READ_ONLY_TAG;
        let slot = self.slot_of.get(tag as usize).copied().unwrap_or(NO_SLOT) as usize;
        if slot < self.stats.len() {
            return &mut self.stats[slot].1;
        }
        self.insert(tag)
    }

    #[cold]
    fn insert(&mut self, tag: u32) -> &mut Tally {
        let tag = tag.min(MAX_TAG);
        let i = tag as usize;
        if i >= self.slot_of.len() {
            self.slot_of.resize(i + 1, NO_SLOT);
        }
        if self.slot_of[i] == NO_SLOT {
            self.slot_of[i] = self.stats.len() as u32;
            self.stats.push((tag, Tally::default()));
        }
        &mut self.stats[self.slot_of[i] as usize].1
    }

    /// Whether a request tagged `tag` still waits, executes or holds seats.
    pub(crate) fn is_busy(&self, tag: u32) -> bool {
        let tag = tag & !READ_ONLY_TAG;
        let slot = self.slot_of.get(tag as usize).copied().unwrap_or(NO_SLOT) as usize;
        self.stats.get(slot).is_some_and(|(_, t)| {
            let s = &t.stats;
            s.waiting > 0 || s.executing > 0 || s.seats_in_use > 0 || s.waiting_seats > 0
        })
    }

    /// Drop the tally of `tag` (its schema is gone and its id will be
    /// reused: the new schema must not inherit its counts).
    pub(crate) fn remove(&mut self, tag: u32) {
        let tag = tag & !READ_ONLY_TAG;
        let Some(&slot) = self.slot_of.get(tag as usize) else {
            return;
        };
        if slot == NO_SLOT {
            return;
        }
        self.slot_of[tag as usize] = NO_SLOT;
        self.stats.swap_remove(slot as usize);
        if let Some((moved, _)) = self.stats.get(slot as usize) {
            self.slot_of[*moved as usize] = slot;
        }
    }

    /// Add every tag's tally of `other` to this one's, and empty `other`
    /// (keeping its index, so a shard's tallies do not allocate again).
    pub(crate) fn absorb(&mut self, other: &mut Tallies) {
        for (tag, tally) in other.stats.iter_mut() {
            self.get(*tag).absorb(tally);
            *tally = Tally::default();
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &TagStats> {
        self.stats.iter().map(|(_, t)| &t.stats)
    }

    /// Every tag's tally, by tag.
    pub(crate) fn snapshot(&self) -> Vec<(u32, TagStats)> {
        let mut all: Vec<(u32, TagStats)> = self
            .stats
            .iter()
            .map(|(tag, t)| (*tag, t.snapshot()))
            .collect();
        all.sort_by_key(|(tag, _)| *tag);
        all
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let mut h = BucketHistogram::durations();
        h.observe(0);
        h.observe(5_000_000);
        h.observe(5_000_001);
        h.observe(31_000_000_000);
        assert_eq!(h.per_bucket()[0], 1);
        assert_eq!(h.per_bucket()[1], 1);
        assert_eq!(h.per_bucket()[2], 1);
        assert_eq!(h.overflow(), 1);
        assert_eq!(h.count(), 4);
        assert_eq!(h.cumulative(1), 2);
        assert_eq!(h.cumulative(12), 3);
        assert_eq!(h.sum(), 31_010_000_001);
    }

    #[test]
    fn bounds_match_the_exported_seconds() {
        let h = BucketHistogram::durations();
        for (nanos, seconds) in h.bounds().iter().zip(DURATION_BUCKETS_SECONDS) {
            assert_eq!(*nanos as f64 / 1e9, seconds);
        }
        let l = BucketHistogram::lengths();
        for (n, b) in l.bounds().iter().zip(QUEUE_LENGTH_BUCKETS) {
            assert_eq!(*n as f64, b);
        }
    }

    /// The hot finish's one-call tally is the four calls it stands for:
    /// a dropped count or observation, or a gauge left changed, fails.
    #[test]
    fn began_and_ended_at_once_is_begin_observe_end_release() {
        for (seats, queued, ran) in [
            (1, true, 0),
            (1, false, 700),
            (3, true, 5_000_000),
            (4, false, 5_000_001),
            (11, true, 31_000_000_000),
        ] {
            let mut a = Tally::default();
            let mut b = Tally::default();
            for _ in 0..2 {
                let start = Instant::ZERO.saturating_add(std::time::Duration::from_nanos(9));
                let end = start.saturating_add(std::time::Duration::from_nanos(ran));
                a.begin_at_once(seats, queued);
                a.stats.work_estimated_seats.observe(seats.into());
                a.end(start, end);
                a.release(seats);
                b.began_and_ended_at_once(seats, queued, ran);
            }
            assert_eq!(a.snapshot(), b.snapshot(), "{seats} seats, {ran} ns");
            assert_eq!((a.at_once, a.at_once_queued), (b.at_once, b.at_once_queued));
        }
    }

    #[test]
    fn a_removed_tag_starts_afresh_and_the_others_keep_their_counts() {
        let mut t = Tallies::default();
        for tag in [3, 5, 9] {
            t.get(tag).begin_at_once(1, false);
        }
        assert!(t.is_busy(5));
        t.get(5).end(Instant::ZERO, Instant::ZERO);
        t.get(5).release(1);
        assert!(!t.is_busy(5));
        t.remove(3);
        t.remove(3);
        t.remove(100);
        let tags: Vec<u32> = t.snapshot().iter().map(|(tag, _)| *tag).collect();
        assert_eq!(tags, vec![5, 9]);
        assert_eq!(t.get(9).stats.dispatched, 1, "moved slot still found");
        assert_eq!(t.get(3).stats.dispatched, 0, "a reused tag starts at zero");
    }

    #[test]
    fn tallies_are_per_tag_and_sorted() {
        let mut t = Tallies::default();
        t.get(7).begin_at_once(1, true);
        t.get(2).begin_at_once(1, false);
        t.get(2).begin_after_wait(3, 10);
        t.get(7).begin_unobserved(1);
        t.get(u32::MAX).begin_unobserved(1);
        let s = t.snapshot();
        let tags: Vec<u32> = s.iter().map(|(tag, _)| *tag).collect();
        assert_eq!(tags, vec![2, 7, MAX_TAG]);
        let (two, seven) = (&s[0].1, &s[1].1);
        assert_eq!((two.dispatched, two.executing, two.seats_in_use), (2, 2, 4));
        assert_eq!(
            two.wait_dispatched.count(),
            2,
            "one deferred zero, one 10 ns"
        );
        assert_eq!(two.wait_dispatched.per_bucket()[0], 1);
        assert_eq!(two.wait_dispatched.sum(), 10);
        assert_eq!(two.queue_length.count(), 0, "a level that does not queue");
        assert_eq!(seven.dispatched, 2);
        assert_eq!(
            seven.wait_dispatched.count(),
            1,
            "exempt starts are not observed"
        );
        assert_eq!(seven.queue_length.per_bucket()[1], 1, "a length of 1");
        assert_eq!(seven.queue_length.sum(), 1);
        assert!(!s[0].1.is_untouched());
        assert!(TagStats::default().is_untouched());
    }
}
