//! A parked worker's private rendezvous, and the hand-offs an operation
//! decides and carries out once it holds no lock.

use crate::sync::{lock, Arc, AtomicU32, Condvar, Mutex, MutexGuard, Ordering};

/// The waiter is on the parked list, unclaimed.
const PARKED: u32 = 0;
/// A serving thread took it off the list and will deliver to it.
const CLAIMED: u32 = 1;
/// Its worker gave up waiting (timed out, or saw an item on its last look).
const WITHDRAWN: u32 = 2;

/// A parked worker's private rendezvous.
///
/// # Invariant: one way out
///
/// `state` leaves [`PARKED`] exactly once, by one compare-and-swap: to
/// [`CLAIMED`] by a thread that then delivers exactly once (an item, or
/// "look again"), or to [`WITHDRAWN`] by the worker itself, which then
/// takes nothing from anyone. So a worker is never handed two items, an
/// item handed to a worker is never also taken by it elsewhere, and a
/// worker that lost the race to withdraw waits for the delivery that the
/// winner owes it. Exclusivity needs only the compare-and-swap's
/// atomicity (one location); the payload travels under `slot`'s mutex,
/// which orders everything the deliverer did before it.
pub(crate) struct Waiter<T, H> {
    state: AtomicU32,
    slot: Mutex<Handoff<T, H>>,
    signal: Condvar,
}

enum Handoff<T, H> {
    Pending,
    /// `None`: look again (nothing was taken for this worker).
    Delivered(Option<(T, H)>),
}

impl<T, H> Waiter<T, H> {
    pub(crate) fn new() -> Self {
        Waiter {
            state: AtomicU32::new(PARKED),
            slot: Mutex::new(Handoff::Pending),
            signal: Condvar::new(),
        }
    }

    /// Take the waiter for a delivery; false if it withdrew first.
    #[inline]
    pub(crate) fn claim(&self) -> bool {
        self.state
            .compare_exchange(PARKED, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The worker gives up waiting; false if it was claimed first (a
    /// delivery is then under way: wait for it).
    #[inline]
    pub(crate) fn withdraw(&self) -> bool {
        self.state
            .compare_exchange(PARKED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Still on the list and unclaimed (a snapshot).
    #[inline]
    pub(crate) fn is_parked(&self) -> bool {
        self.state.load(Ordering::Acquire) == PARKED
    }

    /// Hand a claimed waiter an item, or `None`: look again.
    pub(crate) fn deliver(&self, payload: Option<(T, H)>) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), CLAIMED);
        let mut slot = lock(&self.slot);
        *slot = Handoff::Delivered(payload);
        drop(slot);
        self.signal.notify_one();
    }

    /// Wait for the delivery: an item, or `None` (look again).
    pub(crate) fn wait(&self) -> Option<(T, H)> {
        match self.wait_until(None) {
            Some(got) => got,
            None => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// Wait for a delivery until `deadline` (real time; `None`: forever).
    /// The outer `None` means the deadline passed with nothing delivered.
    pub(crate) fn wait_until(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Option<Option<(T, H)>> {
        let mut slot = lock(&self.slot);
        loop {
            match std::mem::replace(&mut *slot, Handoff::Pending) {
                Handoff::Delivered(got) => return Some(got),
                Handoff::Pending => match deadline {
                    None => slot = wait(&self.signal, slot),
                    Some(deadline) => {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            return None;
                        }
                        slot = match self.signal.wait_timeout(slot, left) {
                            Ok((g, _)) => g,
                            Err(poisoned) => poisoned.into_inner().0,
                        };
                    }
                },
            }
        }
    }
}

pub(crate) fn wait<'a, G>(cv: &Condvar, guard: MutexGuard<'a, G>) -> MutexGuard<'a, G> {
    match cv.wait(guard) {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A claimed worker and what to hand it (`None`: look again).
pub(crate) type Wake<T, H> = (Arc<Waiter<T, H>>, Option<(T, H)>);

/// Hand-offs decided (waiters claimed) and carried out once the deciding
/// thread holds no lock: the wake-up's system call never runs under one.
/// An operation hands off at most one item except when a timer or a
/// shutdown releases many at once, so the first is kept apart and the rest
/// in a `Vec` that costs nothing while empty (this is built and dropped on
/// every call).
pub(crate) struct Wakes<T, H> {
    first: Option<Wake<T, H>>,
    more: Vec<Wake<T, H>>,
}

impl<T, H> Wakes<T, H> {
    #[inline]
    pub(crate) fn new() -> Self {
        Wakes {
            first: None,
            more: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, wake: Wake<T, H>) {
        if self.first.is_none() {
            self.first = Some(wake);
        } else {
            self.more.push(wake);
        }
    }

    #[inline]
    pub(crate) fn run(self) {
        if let Some((waiter, payload)) = self.first {
            waiter.deliver(payload);
            for (waiter, payload) in self.more {
                waiter.deliver(payload);
            }
        }
    }
}
