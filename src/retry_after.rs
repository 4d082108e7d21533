//! The `Retry-After` value of a rejected request, adapted to how often its
//! priority level has been rejecting lately, as Kubernetes' API server
//! computes it for APF rejections (its dropped-requests tracker).
//!
//! Each level starts at 1 second. Rejections are counted per second of the
//! clock; when a second with a rejection begins, the rejections of the last
//! `retry_after` whole seconds before it are summed:
//! - at least `3 × retry_after` of them doubles the value (at most
//!   [`MAX_RETRY_AFTER_SECS`]), but no sooner than `retry_after` seconds
//!   after the previous increase, so one spike counts once;
//! - fewer than `retry_after` of them lowers it by one second.
//!
//! Like TCP's congestion window: multiplicative increase, additive
//! decrease. The value only changes when a rejection happens, so a level
//! that stops rejecting keeps its last value until the next one.
//!
//! Seconds are whole seconds of the dispatcher's [`Clock`] since its epoch
//! (Kubernetes uses Unix seconds; only differences matter).

use crate::clock::Clock;
use crate::sync::{lock, Mutex};
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// The largest `Retry-After` suggested, in seconds.
pub const MAX_RETRY_AFTER_SECS: u64 = 32;

/// Per-level history of rejections and the `Retry-After` it suggests.
pub struct DroppedRequests {
    clock: Clock,
    levels: Mutex<HashMap<String, LevelDrops>>,
}

/// Rejections at one level.
#[derive(Debug)]
struct LevelDrops {
    /// Finished seconds with their rejection counts, oldest first; only as
    /// far back as a future decision can look.
    history: VecDeque<(u64, u64)>,
    /// The second being counted and its count so far.
    current: Option<(u64, u64)>,
    retry_after: u64,
    last_increase: Option<u64>,
}

impl DroppedRequests {
    /// An empty tracker on `clock` (the dispatcher's).
    pub fn new(clock: Clock) -> DroppedRequests {
        DroppedRequests {
            clock,
            levels: Mutex::new(HashMap::new()),
        }
    }

    /// Count one rejected request at `level` and return the `Retry-After`
    /// to send with it, in seconds.
    ///
    /// One short lock per rejection: rejections are not the admission hot
    /// path, and the 429 response costs far more.
    pub fn record(&self, level: &str) -> u64 {
        let second = self.clock.now().as_nanos() / 1_000_000_000;
        let mut levels = lock(&self.levels);
        if !levels.contains_key(level) {
            levels.insert(level.to_owned(), LevelDrops::new());
        }
        levels.get_mut(level).map_or(1, |drops| {
            drops.record(second);
            drops.retry_after
        })
    }

    /// The `Retry-After` `level` currently suggests, in seconds (1 for a
    /// level that never rejected).
    pub fn retry_after(&self, level: &str) -> u64 {
        lock(&self.levels).get(level).map_or(1, |d| d.retry_after)
    }
}

impl fmt::Debug for DroppedRequests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DroppedRequests")
            .field("levels", &lock(&self.levels).len())
            .finish()
    }
}

impl LevelDrops {
    fn new() -> LevelDrops {
        LevelDrops {
            history: VecDeque::new(),
            current: None,
            retry_after: 1,
            last_increase: None,
        }
    }

    fn record(&mut self, second: u64) {
        match self.current {
            Some((s, ref mut count)) if s == second => {
                *count += 1;
                return;
            }
            Some((s, count)) => self.close_second(s, count),
            None => {}
        }
        self.current = Some((second, 1));
        self.adjust(second);
    }

    /// Move a finished second into the history and forget what no decision
    /// will look at again (at most twice the current value back, capped).
    fn close_second(&mut self, second: u64, count: u64) {
        self.history.push_back((second, count));
        let keep = (2 * self.retry_after).min(MAX_RETRY_AFTER_SECS);
        while let Some(&(s, _)) = self.history.front() {
            if second.saturating_sub(s) <= keep {
                break;
            }
            self.history.pop_front();
        }
    }

    /// Decide at the start of `now`, from the seconds `[now - retry_after,
    /// now)`.
    fn adjust(&mut self, now: u64) {
        let window = self.retry_after;
        let recent: u64 = self
            .history
            .iter()
            .rev()
            .take_while(|&&(s, _)| now.saturating_sub(s) <= window)
            .filter(|&&(s, _)| s < now)
            .map(|&(_, count)| count)
            .sum();
        let settled = self
            .last_increase
            .is_none_or(|at| now.saturating_sub(at) >= window);
        if settled && recent >= 3 * window {
            self.retry_after = (2 * window).min(MAX_RETRY_AFTER_SECS);
            self.last_increase = Some(now);
        } else if recent < window && window > 1 {
            self.retry_after = window - 1;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// (seconds since start, rejections in that second, expected value after
    /// them): a burst doubles the value once per spike, quiet seconds bring
    /// it down one at a time. Kubernetes' own test walks the same path.
    #[test]
    fn doubles_on_bursts_and_decreases_one_second_at_a_time() {
        let (clock, manual) = Clock::manual();
        let drops = DroppedRequests::new(clock.clone());
        let steps: [(u64, u64, u64); 11] = [
            (0, 5, 1),
            (1, 11, 2),
            (2, 1, 2),
            (3, 11, 4),
            (4, 1, 4),
            (7, 1, 8),
            (11, 1, 8),
            (15, 1, 7),
            (17, 1, 6),
            (21, 14, 5),
            (22, 1, 10),
        ];
        // Start mid-second, as a real clock would.
        manual.advance(Duration::from_millis(1_300));
        let start = clock.now();
        for (second, rejections, expected) in steps {
            manual.advance_to(start.saturating_add(Duration::from_secs(second)));
            let mut last = 0;
            for _ in 0..rejections {
                last = drops.record("pl");
            }
            assert_eq!(last, expected, "after second {second}");
            assert_eq!(drops.retry_after("pl"), expected);
        }
    }

    #[test]
    fn levels_are_independent_and_unknown_levels_suggest_one_second() {
        let (clock, manual) = Clock::manual();
        let drops = DroppedRequests::new(clock);
        for level in ["a", "b"] {
            drops.record(level);
        }
        for _ in 0..5 {
            drops.record("a");
        }
        manual.advance(Duration::from_secs(1));
        assert_eq!(drops.record("a"), 2, "6 rejections in 1 s ≥ 3 × 1");
        assert_eq!(drops.record("b"), 1, "1 rejection in 1 s is below 3");
        assert_eq!(drops.retry_after("never-rejected"), 1);
    }

    #[test]
    fn never_exceeds_the_maximum() {
        let (clock, manual) = Clock::manual();
        let drops = DroppedRequests::new(clock);
        let mut value = 0;
        for _ in 0..200 {
            for _ in 0..200 {
                value = drops.record("pl");
            }
            manual.advance(Duration::from_secs(1));
        }
        assert_eq!(value, MAX_RETRY_AFTER_SECS);
        // A long quiet spell, then one rejection: one step down only.
        manual.advance(Duration::from_secs(1_000));
        assert_eq!(drops.record("pl"), MAX_RETRY_AFTER_SECS - 1);
    }
}
