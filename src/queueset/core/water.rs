//! The `flow-maxmin` policy's max-min allocation among queues: the core keeps the
//! active queues' demands in a [`DemandIndex`] so that `sync` advances R at
//! the water level (see `waterlevel`). Under Kubernetes' policy there is no
//! index and R advances at Kubernetes' equal division.

use super::Core;
use crate::queueset::waterlevel::DemandIndex;

impl Core {
    /// Queue `q`'s seats in use or waiting may have changed, or it became
    /// active or idle: update its demand in the index (`flow-maxmin` only).
    #[inline]
    pub(super) fn note_demand(&mut self, q: usize) {
        if let Some(water) = &mut self.water {
            let queue = &self.queues[q];
            let demand = queue
                .is_active()
                .then(|| u64::from(queue.seats_in_use) + queue.waiting_seats);
            water.set(q, demand);
        }
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
