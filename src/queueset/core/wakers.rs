//! The async waiters a locked operation decided, to be woken once the
//! level lock is released (a waker may run arbitrary code, even call back
//! into the level).

use std::task::Waker;

/// Wakers decided under the lock, in the order they were decided. The
/// first is kept inline: an operation on a saturated level decides one
/// waiter (the finish that dispatches the next request), and a plain
/// `Vec` taken out of the core leaves it no capacity, so that every such
/// operation allocated one anew (docs/scaling.md, "The saturated level
/// (issue 21)").
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    first: Option<Waker>,
    /// The second and later, in order (empty, unallocated, when at most
    /// one was decided).
    rest: Vec<Waker>,
}

impl Wakers {
    /// Remember `waker` (a decided waiter's, if it is async).
    #[inline]
    pub(crate) fn add(&mut self, waker: Option<Waker>) {
        let Some(waker) = waker else { return };
        if self.first.is_none() {
            debug_assert!(self.rest.is_empty(), "the first is taken first");
            self.first = Some(waker);
        } else {
            self.rest.push(waker);
        }
    }

    /// Wake them all, in the order they were decided.
    pub(crate) fn wake_all(self) {
        for waker in self.first.into_iter().chain(self.rest) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Wakers;
    use std::sync::{Arc, Mutex};
    use std::task::{Wake, Waker};

    struct Record(usize, Arc<Mutex<Vec<usize>>>);

    impl Wake for Record {
        fn wake(self: Arc<Self>) {
            self.1.lock().unwrap().push(self.0);
        }
    }

    #[test]
    fn wakes_every_waker_once_in_the_order_decided() {
        for n in 0..5 {
            let woken = Arc::new(Mutex::new(Vec::new()));
            let mut wakers = Wakers::default();
            for i in 0..n {
                wakers.add(None); // a blocking waiter: nothing to wake
                wakers.add(Some(Waker::from(Arc::new(Record(i, woken.clone())))));
            }
            assert_eq!(
                wakers.rest.capacity() == 0,
                n <= 1,
                "one waker allocates nothing"
            );
            std::mem::take(&mut wakers).wake_all();
            assert_eq!(*woken.lock().unwrap(), (0..n).collect::<Vec<_>>());
            assert!(wakers.first.is_none() && wakers.rest.capacity() == 0);
        }
    }
}
