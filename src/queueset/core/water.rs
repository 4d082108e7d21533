//! The `flow-maxmin` policy's max-min allocation among queues: the core keeps the
//! active queues' demands in a [`DemandIndex`] so that `sync` advances R at
//! the water level (see `waterlevel`). Under Kubernetes' policy there is no
//! index and R advances at Kubernetes' equal division.

use super::Core;
use crate::queueset::vtime::VTime;
use crate::queueset::waterlevel::DemandIndex;

impl Core {
    /// Queue `q`'s seats in use or waiting may have changed, or it became
    /// active or idle: update its demand in the index (`flow-maxmin` only).
    /// Only the test is inline: the default policy's callers (the replay
    /// of hot-path records) stay as small as without the index, and are
    /// inlined as before.
    #[inline(always)]
    pub(super) fn note_demand(&mut self, q: usize) {
        if self.water.is_some() {
            self.index_demand(q);
        }
    }

    #[inline(never)]
    #[cold]
    fn index_demand(&mut self, q: usize) {
        if let Some(water) = &mut self.water {
            let queue = &self.queues[q];
            let demand = queue
                .is_active()
                .then(|| u64::from(queue.seats_in_use) + queue.waiting_seats);
            water.set(q, demand);
        }
    }

    /// How far R advances in `dt_nanos` at the water level (flow-maxmin;
    /// out of line for the same reason as `index_demand`).
    #[inline(never)]
    #[cold]
    pub(super) fn water_increment(&self, dt_nanos: u64) -> VTime {
        self.water.as_ref().map_or(0, |water| {
            water.level(self.cfg.concurrency_limit).increment(dt_nanos)
        })
    }

    /// Keep the index exactly when the configured policy needs it: built
    /// from every queue when the level switches to `flow-maxmin` or its
    /// limit needs another number of bits (a reconfiguration: O(queues ×
    /// bits)), dropped when it switches away.
    pub(super) fn follow_fairness(&mut self) {
        let bits = DemandIndex::bits_for(self.cfg.concurrency_limit);
        let wanted = self.cfg.fairness.is_max_min().then_some(bits);
        if wanted == self.water.as_ref().map(DemandIndex::bits) {
            return;
        }
        self.water = wanted.map(DemandIndex::new);
        for q in 0..self.queues.len() {
            self.note_demand(q);
        }
    }
}
