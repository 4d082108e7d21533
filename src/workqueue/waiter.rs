//! A parked worker's private rendezvous, and the hand-offs an operation
//! decides under a lock and carries out after releasing it.

use crate::sync::{lock, Arc, Condvar, Mutex, MutexGuard};

/// A parked worker's private rendezvous.
pub(crate) struct Waiter<T, H> {
    slot: Mutex<Handoff<T, H>>,
    signal: Condvar,
}

enum Handoff<T, H> {
    Pending,
    Item(T, H),
    Closed,
}

impl<T, H> Waiter<T, H> {
    pub(crate) fn new() -> Self {
        Waiter {
            slot: Mutex::new(Handoff::Pending),
            signal: Condvar::new(),
        }
    }

    pub(crate) fn deliver(&self, payload: Option<(T, H)>) {
        let mut slot = lock(&self.slot);
        *slot = match payload {
            Some((item, hint)) => Handoff::Item(item, hint),
            None => Handoff::Closed,
        };
        drop(slot);
        self.signal.notify_one();
    }

    pub(crate) fn wait(&self) -> Option<(T, H)> {
        match self.wait_until(None) {
            Some(got) => got,
            None => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// Wait for a hand-off until `deadline` (real time; `None`: forever).
    /// The outer `None` means the deadline passed with nothing handed off.
    pub(crate) fn wait_until(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Option<Option<(T, H)>> {
        let mut slot = lock(&self.slot);
        loop {
            match std::mem::replace(&mut *slot, Handoff::Pending) {
                Handoff::Item(item, hint) => return Some(Some((item, hint))),
                Handoff::Closed => return Some(None),
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

/// A parked worker and what to hand it (`None`: the queue shut down).
pub(crate) type Wake<T, H> = (Arc<Waiter<T, H>>, Option<(T, H)>);

/// Hand-offs decided under the lock and carried out after it is released.
/// An operation hands off at most one item except when a timer releases
/// many at once, so the first is kept apart and the rest in a `Vec` that
/// costs nothing while empty (this is built and dropped on every call).
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
