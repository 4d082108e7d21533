//! A queued request's rendezvous between the dispatcher and the waiter:
//! blocking (condition variable), polling, or async (waker).

use super::held::Held;
use super::RejectReason;
use crate::sync::{lock, Condvar, Mutex};
use std::task::Waker;

#[derive(Debug)]
pub(crate) enum SlotState {
    /// In a queue; the waker (if any) is woken at the decision.
    Waiting(Option<Waker>),
    /// Dispatched: the request holds its seats from `start`.
    Dispatched(Held),
    Rejected(RejectReason),
    /// The ticket took the decision.
    Taken,
}

#[derive(Debug)]
pub(crate) struct WaitSlot {
    /// Arrival order within the level.
    pub(crate) seq: u64,
    pub(crate) queue: u32,
    /// The flow's hash when the flow fairness policy queued it (it is then
    /// counted in the level's flow table until it leaves).
    pub(crate) flow: Option<u64>,
    /// The caller's tag for the request (see `tally`).
    pub(crate) tag: u32,
    state: Mutex<Rendezvous>,
    decided: Condvar,
}

#[derive(Debug)]
struct Rendezvous {
    state: SlotState,
    /// A thread sleeps on `decided`. Most requests are never waited for
    /// by a blocked thread (they are polled, awaited, or dispatched before
    /// anyone waits), and a notify costs a system call even with no sleeper.
    sleeper: bool,
}

impl WaitSlot {
    pub(crate) fn new(seq: u64, queue: u32, flow: Option<u64>, tag: u32) -> WaitSlot {
        WaitSlot {
            seq,
            queue,
            flow,
            tag,
            state: Mutex::new(Rendezvous {
                state: SlotState::Waiting(None),
                sleeper: false,
            }),
            decided: Condvar::new(),
        }
    }

    /// Record the dispatcher's decision and wake a blocked waiter. An async
    /// waiter's waker is returned, for the caller to wake once it holds no
    /// lock of the level (a waker may run arbitrary code, even call back
    /// into the level).
    #[must_use = "the waker must be woken"]
    pub(crate) fn decide(&self, decision: SlotState) -> Option<Waker> {
        let mut slot = lock(&self.state);
        debug_assert!(
            matches!(slot.state, SlotState::Waiting(_)),
            "a request is decided once"
        );
        let previous = std::mem::replace(&mut slot.state, decision);
        let sleeper = slot.sleeper;
        drop(slot);
        if sleeper {
            self.decided.notify_all();
        }
        match previous {
            SlotState::Waiting(waker) => waker,
            _ => None,
        }
    }

    /// Take the decision if there is one; otherwise remember `waker`.
    pub(crate) fn try_take(&self, waker: Option<&Waker>) -> Option<SlotState> {
        let mut slot = lock(&self.state);
        let state = &mut slot.state;
        match state {
            SlotState::Waiting(slot) => {
                if let Some(w) = waker {
                    if !slot.as_ref().is_some_and(|old| old.will_wake(w)) {
                        *slot = Some(w.clone());
                    }
                }
                None
            }
            SlotState::Taken => None,
            _ => Some(std::mem::replace(state, SlotState::Taken)),
        }
    }

    /// Block until decided, then take the decision.
    pub(crate) fn wait_and_take(&self) -> SlotState {
        let mut slot = lock(&self.state);
        while matches!(slot.state, SlotState::Waiting(_)) {
            // Set under the lock the decider takes, so it cannot miss us.
            slot.sleeper = true;
            slot = match self.decided.wait(slot) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
        slot.sleeper = false;
        std::mem::replace(&mut slot.state, SlotState::Taken)
    }
}
