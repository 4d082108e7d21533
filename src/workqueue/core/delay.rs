//! Delayed adds: the delay heap, its timer and what shutdown does to the
//! waits. Everything here runs under the queue's lock, then the item's
//! shard lock (the lock order of the parent module's protocol).

use super::{Inner, Mode, Shared};
use crate::clock::Instant;
use crate::workqueue::shard::Held;
use crate::workqueue::strategy::{QueueStrategy, Slot};
use crate::workqueue::table::Phase;
use crate::workqueue::waiter::Wakes;
use crate::workqueue::Item;

type Hint<T, S> = <S as QueueStrategy<T>>::Hint;

impl<T: Item, S: QueueStrategy<T>> Shared<T, S> {
    /// Add `item` once `delay` nanoseconds have passed (at once for zero).
    /// `count_retry` says whether this add counts in `workqueue_retries_total`.
    pub(crate) fn add_after(&self, item: T, delay: u64, hint: Hint<T, S>, count_retry: bool) {
        let hash = self.hash(&item);
        let mut wakes = Wakes::new();
        let mut now = 0;
        {
            let mut inner = self.lock();
            if inner.shutting_down {
                return;
            }
            if count_retry {
                inner.retries += 1;
            }
            let mut shard = self.shard(hash);
            let Some(mut held) = shard.track(hash, item, hint) else {
                return;
            };
            if delay == 0 {
                now = self.stamp();
                self.add_tracked(Some(&mut inner), &mut held, hint, now, Some(&mut wakes));
            } else {
                let at = self.clock.now().as_nanos().saturating_add(delay);
                self.add_waiting(&mut inner, &mut held, at, hint);
            }
        }
        wakes.run();
        if self.fast && delay == 0 {
            // FIFO items went onto the ready list: the pusher's half of the
            // parking handshake, with no lock held.
            self.wake_parked(now);
        }
    }

    /// The timer's callback: make every item whose time has come ready.
    pub(super) fn fire(&self, now: Instant) {
        let mut wakes = Wakes::new();
        let now = now.as_nanos();
        {
            let mut inner = self.lock();
            while let Some((slot, hint)) = inner.waiting.pop_due(now) {
                let mut shard = self.shard_of(slot);
                let mut held = shard.claim_slot(slot);
                held.set_delayed(false);
                self.add_tracked(Some(&mut inner), &mut held, hint, now, Some(&mut wakes));
            }
            inner.arm_timer();
        }
        wakes.run();
        if self.fast {
            self.wake_parked(now);
        }
    }

    /// A delayed add: wait until `at` (or keep an earlier wait).
    pub(super) fn add_waiting(
        &self,
        inner: &mut Inner<T, S>,
        held: &mut Held<'_, '_, T, Hint<T, S>>,
        at: u64,
        hint: Hint<T, S>,
    ) {
        held.revive();
        let slot = held.slot();
        if self.mode == Mode::Merged {
            // Already ready: no delay is shorter than none, but the hint
            // still merges.
            match held.phase() {
                Phase::Queued => return inner.strategy.touch(Slot(slot), held.item(), hint),
                Phase::RunningDirty => {
                    held.set_hint(S::merge(held.hint(), hint));
                    return;
                }
                Phase::Idle | Phase::Running => {}
                Phase::Kept => unreachable!("revived above"),
            }
        }
        match inner.waiting.get(slot) {
            Some((_, held)) => inner.waiting.update(slot, at, S::merge(held, hint)),
            None => {
                inner.waiting.push(slot, at, hint);
                held.set_delayed(true);
            }
        }
        inner.arm_timer();
    }

    /// Shutdown ends every wait: items that were only waiting are dropped.
    pub(super) fn forget_waiting(&self, inner: &mut Inner<T, S>) {
        for slot in inner.waiting.drain() {
            let mut shard = self.shard_of(slot);
            let mut held = shard.claim_slot(slot);
            held.set_delayed(false);
            if held.phase() == Phase::Idle {
                held.remove();
            }
        }
        if let Some(timer) = &inner.timer {
            timer.cancel();
        }
    }
}

impl<T: Item, S: QueueStrategy<T>> Inner<T, S> {
    pub(super) fn arm_timer(&self) {
        if let (Some(timer), Some(at)) = (&self.timer, self.waiting.peek_at()) {
            timer.set_if_earlier(Instant::from_nanos(at));
        }
    }
}
