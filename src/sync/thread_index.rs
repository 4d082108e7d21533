//! The calling thread's small number, which picks its shard of every
//! sharded structure (`thread_index() & (shards − 1)`: the queueset's
//! shards, `ReadMostly`'s reader counts, the level leases).
//!
//! # Why the lowest free number
//! Two busy threads on one shard share every line of it: the budget, the
//! ledger's mutex and slots, the lease counts, the reader count
//! (docs/scaling.md, "What the dispatcher path still shares": 15 lines
//! per dispatcher request taken from the other core instead of 1).
//! Numbers handed out once each, in first-call order, put a server's
//! threads on shards by the order they first asked: after threads come
//! and go (a thread per connection, a blocking pool that shrinks and
//! grows), the live ones hold scattered numbers, and two of them can
//! share a shard while another shard idles. Here an exiting thread gives
//! its number back and a new thread takes the lowest free one, so the
//! live threads that asked hold 0, 1, …, n − 1: with no more of them than
//! shards, no two share a shard, whatever came and went before.
//!
//! Nothing's correctness depends on the choice (every shard's state is
//! atomic or locked, and threads share shards whenever there are more of
//! them than shards); a call made while the thread's number is being
//! dropped (from another thread-local's destructor) gets 0.
//!
//! Outside any concurrent protocol (taken once per thread, given back at
//! its exit), so it uses std's primitives directly; loom and shuttle
//! runs use their own `thread_index` (src/sync.rs).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Mutex;

/// Thread numbers: the lowest free one first.
pub(super) struct ThreadIndices {
    /// Numbers given back by exited threads (a min-heap), and the next
    /// never-used one.
    state: Mutex<(BinaryHeap<Reverse<usize>>, usize)>,
}

impl ThreadIndices {
    pub(super) const fn new() -> ThreadIndices {
        ThreadIndices {
            state: Mutex::new((BinaryHeap::new(), 0)),
        }
    }

    /// The lowest free number, now the caller's.
    pub(super) fn take(&self) -> usize {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.0.pop() {
            Some(Reverse(i)) => i,
            None => {
                st.1 += 1;
                st.1 - 1
            }
        }
    }

    /// `i` (a number [`ThreadIndices::take`] returned) is free again.
    pub(super) fn give_back(&self, i: usize) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0.push(Reverse(i));
    }
}

static INDICES: ThreadIndices = ThreadIndices::new();

/// [`CACHED`] before the thread's first call.
const UNSET: usize = usize::MAX;
/// [`CACHED`] once the thread's number was given back (at its exit).
const GONE: usize = usize::MAX - 1;

/// A thread's number, given back when the thread exits.
struct Held(usize);

impl Drop for Held {
    fn drop(&mut self) {
        CACHED.with(|c| c.set(GONE));
        INDICES.give_back(self.0);
    }
}

std::thread_local! {
    /// The number every call reads. Const-initialised and without a
    /// destructor, so a read is one thread-local load with no lazy state
    /// to test (a key with a destructor, [`HELD`], tests its state on
    /// every access: about 20 instructions per start+finish, measured).
    static CACHED: Cell<usize> = const { Cell::new(UNSET) };
    /// Gives the number back at the thread's exit; touched once, at the
    /// thread's first call.
    static HELD: Held = Held(take_and_cache());
}

fn take_and_cache() -> usize {
    let i = INDICES.take();
    CACHED.with(|c| c.set(i));
    i
}

/// A small number for the calling thread, fixed for its lifetime: the
/// lowest not held by a live thread when it first asks (see the module
/// documentation).
#[inline]
pub fn thread_index() -> usize {
    let i = CACHED.with(Cell::get);
    if i < GONE {
        i
    } else {
        first_or_late(i)
    }
}

/// The thread's first call (takes its number) or one made after its
/// number was given back (0).
#[cold]
#[inline(never)]
fn first_or_late(cached: usize) -> usize {
    if cached == GONE {
        return 0;
    }
    HELD.try_with(|held| held.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_thread_takes_the_lowest_number_an_exited_one_gave_back() {
        let pool = ThreadIndices::new();
        assert_eq!([pool.take(), pool.take(), pool.take()], [0, 1, 2]);
        pool.give_back(2);
        pool.give_back(0);
        assert_eq!(pool.take(), 0, "the lowest free number first");
        assert_eq!(pool.take(), 2);
        assert_eq!(pool.take(), 3, "then a never-used one");
    }

    /// Threads that come and go, one at a time, each while one
    /// long-lived thread stays: with the number given back, every
    /// newcomer is on the other shard of two (the churn that, with
    /// numbers never reused, put half of them on the long-lived
    /// thread's shard).
    #[test]
    fn threads_that_come_and_go_reuse_the_numbers_of_those_gone() {
        let pool = std::sync::Arc::new(ThreadIndices::new());
        let stays = pool.take();
        let mut seen = Vec::new();
        for _ in 0..8 {
            let pool = pool.clone();
            let i = std::thread::spawn(move || {
                let i = pool.take();
                pool.give_back(i);
                i
            })
            .join()
            .unwrap();
            seen.push(i);
        }
        assert!(
            seen.iter().all(|&i| i & 1 != stays & 1),
            "{stays} and {seen:?}"
        );
    }

    #[test]
    fn a_thread_keeps_its_number_and_no_live_thread_shares_it() {
        let main = thread_index();
        let (mine, again) = std::thread::spawn(|| (thread_index(), thread_index()))
            .join()
            .unwrap();
        assert_eq!(mine, again);
        assert_ne!(mine, main);
        assert_eq!(thread_index(), main);
    }
}
