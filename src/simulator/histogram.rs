//! A log-linear histogram of nanosecond values: exact below 32 ns, then 32
//! buckets per power of two (at most about 3% error), 1,920 buckets in all.
//! Recording is an index computation and an increment, cheap enough for a
//! million records a second.

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// Counts of values by bucket, with the exact maximum.
#[derive(Clone, PartialEq, Eq)]
pub struct LogHistogram {
    counts: Box<[u64]>,
    count: u64,
    max: u64,
}

impl std::fmt::Debug for LogHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHistogram")
            .field("count", &self.count)
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.max)
            .finish()
    }
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            max: 0,
        }
    }
}

#[inline]
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros();
    let shift = exp - SUB_BITS;
    let mantissa = v >> shift;
    ((shift as u64 + 1) * SUB + (mantissa - SUB)) as usize
}

/// The largest value that falls in bucket `i`.
fn upper_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = i / SUB - 1;
    let mantissa = SUB + i % SUB;
    // The last bucket's bound is u64::MAX; computing it in u128 avoids the
    // overflow of (mantissa + 1) << 58.
    let bound = ((mantissa as u128 + 1) << shift) - 1;
    bound.min(u64::MAX as u128) as u64
}

impl LogHistogram {
    /// Counts one value (nanoseconds, in the simulator's use).
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &LogHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded, exactly; 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1): the upper bound of the bucket
    /// holding it, never above the maximum; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper_bound(i).min(self.max);
            }
        }
        self.max
    }

    /// The cumulative distribution: (value, fraction of values at or below
    /// it) at each non-empty bucket's upper bound.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let mut seen = 0;
        let total = self.count.max(1) as f64;
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| {
                seen += c;
                (upper_bound(i).min(self.max), seen as f64 / total)
            })
            .collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut last = None;
        for i in 0..BUCKETS {
            let hi = upper_bound(i);
            assert_eq!(index(hi), i, "bucket {i}");
            if let Some(prev) = last {
                assert_eq!(index(prev + 1), i, "bucket {i} starts after {prev}");
            }
            last = Some(hi);
        }
        assert_eq!(last, Some(u64::MAX));
    }

    #[test]
    fn quantiles_of_a_known_set() {
        let mut h = LogHistogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.max(), 1_000_000);
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.04, "{p50}");
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.04, "{p99}");
        assert_eq!(h.quantile(1.0), 1_000_000);
        let cdf = h.cdf();
        assert_eq!(cdf.last(), Some(&(1_000_000, 1.0)));
    }

    proptest! {
        #[test]
        fn bucket_error_is_bounded(v in any::<u64>()) {
            let hi = upper_bound(index(v));
            prop_assert!(hi >= v);
            prop_assert!((hi - v) as f64 <= v as f64 / SUB as f64 + 1.0);
        }

        #[test]
        fn merge_equals_recording_both(a in prop::collection::vec(any::<u32>(), 0..50),
                                       b in prop::collection::vec(any::<u32>(), 0..50)) {
            let (mut ha, mut hb, mut both) = (LogHistogram::default(), LogHistogram::default(), LogHistogram::default());
            for &v in &a { ha.record(v as u64); both.record(v as u64); }
            for &v in &b { hb.record(v as u64); both.record(v as u64); }
            ha.merge(&hb);
            prop_assert_eq!(ha, both);
        }
    }
}
