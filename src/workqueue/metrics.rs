//! client-go's workqueue metrics, kept per item-table shard under the
//! shard's lock and summed when a snapshot is taken.

use super::chunk::ChunkVec;
use super::table::NONE;

/// The Prometheus names of the metrics, in the order of [`WorkqueueMetrics`]'s table.
pub fn metric_names() -> [&'static str; 7] {
    [
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
    ]
}

/// Upper bounds of the duration histograms' buckets, in seconds: client-go's
/// 10 exponential buckets from 10 ns to 10 s.
pub const DURATION_BUCKETS_SECONDS: [f64; 10] =
    [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

const BUCKET_BOUNDS_NANOS: [u64; 10] = [
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// A histogram of durations, as Prometheus exposes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkqueueHistogram {
    /// `cumulative[i]`: observations at most [`DURATION_BUCKETS_SECONDS`]`[i]`.
    pub cumulative: [u64; 10],
    /// All observations (the `+Inf` bucket).
    pub count: u64,
    /// The sum of all observations, in seconds.
    pub sum_seconds: f64,
    /// The last observation, in seconds (for tests and debugging).
    pub last_seconds: f64,
}

#[derive(Default)]
struct Recorder {
    per_bucket: [u64; 10],
    count: u64,
    sum_nanos: u128,
    last_nanos: u64,
    /// When the last observation was made: a snapshot sums one recorder per
    /// shard, and the last observation is the latest of theirs.
    last_at: u64,
}

impl Recorder {
    fn observe(&mut self, nanos: u64, at: u64) {
        self.last_at = at;
        if let Some(i) = BUCKET_BOUNDS_NANOS.iter().position(|&b| nanos <= b) {
            self.per_bucket[i] += 1;
        }
        self.count += 1;
        self.sum_nanos += u128::from(nanos);
        self.last_nanos = nanos;
    }

    /// Add `other`'s observations to these.
    fn merge(&mut self, other: &Recorder) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 || other.last_at >= self.last_at {
            self.last_nanos = other.last_nanos;
            self.last_at = other.last_at;
        }
        for (mine, theirs) in self.per_bucket.iter_mut().zip(other.per_bucket) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_nanos += other.sum_nanos;
    }

    fn snapshot(&self) -> WorkqueueHistogram {
        let mut cumulative = [0; 10];
        let mut running = 0;
        for (c, n) in cumulative.iter_mut().zip(self.per_bucket) {
            running += n;
            *c = running;
        }
        WorkqueueHistogram {
            cumulative,
            count: self.count,
            sum_seconds: self.sum_nanos as f64 / 1e9,
            last_seconds: seconds(self.last_nanos),
        }
    }
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// A snapshot of a queue's metrics: client-go's workqueue metrics, kept
/// inside the queue under its lock.
///
/// | field | Prometheus name (label `name`) | kind |
/// | --- | --- | --- |
/// | `depth` | `workqueue_depth` | gauge: dirty items (queued, or processing and added again) |
/// | `adds` | `workqueue_adds_total` | counter: adds that made an item dirty |
/// | `queue_duration` | `workqueue_queue_duration_seconds` | histogram: from becoming dirty to `get` |
/// | `work_duration` | `workqueue_work_duration_seconds` | histogram: from `get` to `done` |
/// | `unfinished_work_seconds` | `workqueue_unfinished_work_seconds` | gauge: summed age of the processing items |
/// | `longest_running_processor_seconds` | `workqueue_longest_running_processor_seconds` | gauge: age of the oldest processing item |
/// | `retries` | `workqueue_retries_total` | counter: delayed adds |
///
/// client-go refreshes the two unfinished-work gauges every 500 ms; here a
/// snapshot computes them at the moment it is taken, from the list of
/// processing items (never from a scan of all items).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkqueueMetrics {
    /// The queue's name: the metrics' `name` label.
    pub name: String,
    /// `workqueue_depth`.
    pub depth: u64,
    /// `workqueue_adds_total`.
    pub adds: u64,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: WorkqueueHistogram,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: WorkqueueHistogram,
    /// `workqueue_unfinished_work_seconds`.
    pub unfinished_work_seconds: f64,
    /// `workqueue_longest_running_processor_seconds`.
    pub longest_running_processor_seconds: f64,
    /// `workqueue_retries_total`.
    pub retries: u64,
    /// Adds dropped because `u32::MAX - 1` items were tracked at once (not a
    /// client-go metric).
    pub rejected: u64,
}

#[derive(Copy, Clone)]
struct RunPos(u32);

impl Default for RunPos {
    fn default() -> Self {
        RunPos(NONE)
    }
}

/// One shard's live metrics (the retries are counted queue-wide, under
/// the queue's lock, and added to a snapshot's [`Totals`]). Time stamps are only taken when `timed` is set; the
/// counters are always kept. Slots here are the shard's own numbers.
pub(crate) struct QueueMetrics {
    timed: bool,
    depth: u64,
    adds: u64,
    rejected: u64,
    queue_duration: Recorder,
    work_duration: Recorder,
    /// When each dirty slot became dirty.
    added_at: ChunkVec<u64>,
    /// The processing slots and when each started, for the unfinished-work
    /// gauges; `run_pos` finds a slot in it.
    running: Vec<(u32, u64)>,
    run_pos: ChunkVec<RunPos>,
}

impl QueueMetrics {
    pub(crate) fn new(timed: bool) -> Self {
        QueueMetrics {
            timed,
            depth: 0,
            adds: 0,
            rejected: 0,
            queue_duration: Recorder::default(),
            work_duration: Recorder::default(),
            added_at: ChunkVec::new(),
            running: Vec::new(),
            run_pos: ChunkVec::new(),
        }
    }

    /// An item became dirty.
    pub(crate) fn on_add(&mut self, slot: u32, now: u64) {
        self.adds += 1;
        self.depth += 1;
        if self.timed {
            *self.added_at.at(slot as usize) = now;
        }
    }

    /// A worker took a dirty item.
    pub(crate) fn on_get(&mut self, slot: u32, now: u64) {
        self.depth = self.depth.saturating_sub(1);
        if self.timed {
            let added = self.added_at.get(slot as usize).copied().unwrap_or(now);
            self.queue_duration.observe(now.saturating_sub(added), now);
            self.run_pos.at(slot as usize).0 = self.running.len() as u32;
            self.running.push((slot, now));
        }
    }

    /// A worker called `done`.
    pub(crate) fn on_done(&mut self, slot: u32, now: u64) {
        if !self.timed {
            return;
        }
        let i = self.run_pos.at(slot as usize).0;
        if i == NONE {
            return;
        }
        self.run_pos.at(slot as usize).0 = NONE;
        let (_, started) = self.running.swap_remove(i as usize);
        if let Some(&(moved, _)) = self.running.get(i as usize) {
            self.run_pos.at(moved as usize).0 = i;
        }
        self.work_duration.observe(now.saturating_sub(started), now);
    }

    pub(crate) fn on_reject(&mut self) {
        self.rejected += 1;
    }

    /// Add these metrics to a snapshot being summed over the shards.
    pub(crate) fn add_to(&self, totals: &mut Totals) {
        for &(_, started) in &self.running {
            let age = totals.now.saturating_sub(started);
            totals.unfinished += u128::from(age);
            totals.longest = totals.longest.max(age);
        }
        totals.depth += self.depth;
        totals.adds += self.adds;
        totals.rejected += self.rejected;
        totals.queue_duration.merge(&self.queue_duration);
        totals.work_duration.merge(&self.work_duration);
    }
}

/// A metrics snapshot being summed over the shards of a queue.
pub(crate) struct Totals {
    now: u64,
    depth: u64,
    adds: u64,
    retries: u64,
    rejected: u64,
    queue_duration: Recorder,
    work_duration: Recorder,
    unfinished: u128,
    longest: u64,
}

impl Totals {
    /// An empty sum; the unfinished-work gauges are ages at `now`.
    pub(crate) fn new(now: u64) -> Self {
        Totals {
            now,
            depth: 0,
            adds: 0,
            retries: 0,
            rejected: 0,
            queue_duration: Recorder::default(),
            work_duration: Recorder::default(),
            unfinished: 0,
            longest: 0,
        }
    }

    /// The queue-wide count of delayed adds (kept under the queue's lock).
    pub(crate) fn add_retries(&mut self, retries: u64) {
        self.retries += retries;
    }

    pub(crate) fn finish(self, name: &str) -> WorkqueueMetrics {
        WorkqueueMetrics {
            name: name.to_owned(),
            depth: self.depth,
            adds: self.adds,
            queue_duration: self.queue_duration.snapshot(),
            work_duration: self.work_duration.snapshot(),
            unfinished_work_seconds: self.unfinished as f64 / 1e9,
            longest_running_processor_seconds: seconds(self.longest),
            retries: self.retries,
            rejected: self.rejected,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_inclusive() {
        let mut r = Recorder::default();
        r.observe(10, 1);
        r.observe(11, 2);
        r.observe(20_000_000_000, 3);
        let h = r.snapshot();
        assert_eq!(h.cumulative[0], 1);
        assert_eq!(h.cumulative[1], 2);
        assert_eq!(h.cumulative[9], 2);
        assert_eq!(h.count, 3);
        assert!((h.sum_seconds - 20.000_000_021).abs() < 1e-9);
        assert_eq!(h.last_seconds, 20.0);
    }

    fn snapshot(parts: &[&QueueMetrics], now: u64) -> WorkqueueMetrics {
        let mut totals = Totals::new(now);
        for part in parts {
            part.add_to(&mut totals);
        }
        totals.finish("q")
    }

    #[test]
    fn shards_sum_and_the_last_observation_is_the_latest() {
        let (mut a, mut b) = (QueueMetrics::new(true), QueueMetrics::new(true));
        a.on_add(1, 0);
        b.on_add(1, 5);
        b.on_get(1, 30);
        a.on_get(1, 20);
        let s = snapshot(&[&b, &a], 40);
        assert_eq!((s.adds, s.depth, s.queue_duration.count), (2, 0, 2));
        assert_eq!(s.queue_duration.last_seconds, 25e-9, "b's get came last");
        assert_eq!(s.unfinished_work_seconds, 30e-9);
        assert_eq!(s.longest_running_processor_seconds, 20e-9);
    }

    #[test]
    fn running_list_tracks_starts_and_finishes() {
        let mut m = QueueMetrics::new(true);
        m.on_add(1, 0);
        m.on_add(2, 0);
        m.on_get(1, 10);
        m.on_get(2, 20);
        let s = snapshot(&[&m], 100);
        assert_eq!(s.depth, 0);
        assert_eq!(s.unfinished_work_seconds, 170e-9);
        assert_eq!(s.longest_running_processor_seconds, 90e-9);
        m.on_done(1, 100);
        let s = snapshot(&[&m], 100);
        assert_eq!(s.longest_running_processor_seconds, 80e-9);
        assert_eq!(s.work_duration.count, 1);
        assert_eq!(s.work_duration.last_seconds, 90e-9);
        m.on_done(1, 100);
        assert_eq!(
            snapshot(&[&m], 100).work_duration.count,
            1,
            "done twice counts once"
        );
    }
}
