//! The `flow-maxmin` policy's max-min allocation among flows: the core
//! keeps the active flows' demands in a [`DemandIndex`] (kept in step by
//! `order`) so that `sync` advances R at the water level (see
//! `waterlevel`). Under `flow` and Kubernetes' policy there is no index.

use super::Core;
use crate::queueset::waterlevel::DemandIndex;

impl Core {
    /// Keep per-flow order and the demand index exactly when the configured
    /// policy needs them: the index is built from every flow when the level
    /// switches to `flow-maxmin` or its limit needs another number of bits
    /// (a reconfiguration: O(flows × bits)), dropped when it switches away.
    pub(super) fn follow_fairness(&mut self) {
        self.order_follow();
        let bits = DemandIndex::bits_for(self.cfg.concurrency_limit);
        let wanted = self.cfg.fairness.is_max_min().then_some(bits);
        if wanted == self.water.as_ref().map(DemandIndex::bits) {
            return;
        }
        self.water = wanted.map(DemandIndex::new);
        self.index_flow_demands();
    }
}
