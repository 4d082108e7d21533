//! A small per-thread memo of flow hashes.
//!
//! Kubernetes' flow hash is a SHA-256 of the schema name and distinguisher:
//! exact, but about twice the cost of matching itself. A server sees the
//! same few flows (users, namespaces) again and again, so each thread keeps
//! the last flows it hashed in a direct-mapped table keyed by the schema's
//! hasher and the distinguisher's bytes (compared in full, so a hit is always
//! the exact hash). Distinguishers longer than a slot are hashed every time.
//! Nothing allocates.

use std::cell::Cell;

use super::words::{word_at, Ends};

const SLOTS: usize = 64;
const SLOT_BITS: u32 = SLOTS.trailing_zeros();
const _: () = assert!(SLOTS.is_power_of_two());
/// Keys of up to this many bytes are memoized: the first and last words
/// and the six between them.
const MAX_KEY: usize = 64;
const WORDS: usize = MAX_KEY / 8;

/// One memoized hash. `Cell`s, so the per-thread table is read and written
/// through a shared reference, without a `RefCell`'s borrow flag; a key is
/// kept as words (see `words`): its first and last eight bytes, then the
/// words at offsets 8, 16, ... before the last eight.
struct Slot {
    /// The schema hasher's id; 0 for an empty slot (ids are never 0).
    owner: Cell<u64>,
    len: Cell<u64>,
    words: [Cell<u64>; WORDS],
    hash: Cell<u64>,
}

#[allow(clippy::declare_interior_mutable_const)] // only the initialiser
const EMPTY: Slot = Slot {
    owner: Cell::new(0),
    len: Cell::new(0),
    words: [const { Cell::new(0) }; WORDS],
    hash: Cell::new(0),
};

thread_local! {
    static MEMO: [Slot; SLOTS] = const { [EMPTY; SLOTS] };
}

/// Calls `f` with the key's words after its ends, and their slot numbers.
#[inline(always)]
fn for_each_middle_word(key: &[u8], mut f: impl FnMut(usize, u64) -> bool) -> bool {
    let mut at = 8;
    let mut j = 2;
    while at + 8 < key.len() && j < WORDS {
        if !f(j, word_at(key, at)) {
            return false;
        }
        at += 8;
        j += 1;
    }
    true
}

/// The flow hash of `distinguisher` under the schema hasher `owner` (a
/// unique id, never 0), computed by `compute` on a miss.
#[inline]
pub(super) fn memoized(owner: u64, distinguisher: &str, compute: impl FnOnce() -> u64) -> u64 {
    let key = distinguisher.as_bytes();
    if key.len() > MAX_KEY {
        return compute();
    }
    let ends = Ends::of(key);
    // The index only spreads entries: equality is checked in full, so a
    // collision only costs a miss.
    let i = ends.spread(owner, SLOT_BITS);
    let hit = MEMO.with(|memo| {
        let slot = &memo[i % SLOTS];
        (slot.owner.get() == owner
            && slot.len.get() == key.len() as u64
            && slot.words[0].get() == ends.head
            && slot.words[1].get() == ends.tail
            && for_each_middle_word(key, |j, w| slot.words[j].get() == w))
        .then(|| slot.hash.get())
    });
    if let Some(hash) = hit {
        return hash;
    }
    // Computed outside the table (no borrow is held, and nothing here is
    // re-entered anyway).
    let hash = compute();
    MEMO.with(|memo| {
        let slot = &memo[i % SLOTS];
        slot.owner.set(owner);
        slot.len.set(key.len() as u64);
        slot.words[0].set(ends.head);
        slot.words[1].set(ends.tail);
        for_each_middle_word(key, |j, w| {
            slot.words[j].set(w);
            true
        });
        slot.hash.set(hash);
    });
    hash
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn hits_return_exactly_what_was_computed_and_misses_compute() {
        let mut calls = 0;
        let mut h = |owner, d: &str, v| {
            memoized(owner, d, || {
                calls += 1;
                v
            })
        };
        assert_eq!(h(7, "alice", 1), 1);
        assert_eq!(h(7, "alice", 99), 1, "second call is a hit");
        assert_eq!(h(8, "alice", 2), 2, "another schema is another key");
        assert_eq!(h(7, "alicf", 3), 3, "another distinguisher is another key");
        let long = "x".repeat(MAX_KEY + 1);
        assert_eq!(h(7, &long, 4), 4);
        assert_eq!(h(7, &long, 5), 5, "long keys are never memoized");
        assert_eq!(calls, 5);
    }

    /// What a hit must return: the value computed for exactly this owner
    /// and key (a plain hash of both, standing in for SHA-256).
    fn reference(owner: u64, key: &[u8]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (owner, key).hash(&mut h);
        h.finish()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Keys of `a`s with at most two bytes turned to `b`, of every
        /// length up to past the slot's, under three owners: keys of one
        /// length share their ends and their slot more often than not, so
        /// a comparison that skipped any word (or the length, or the owner)
        /// would return another key's hash.
        #[test]
        #[cfg_attr(loom, ignore)]
        fn a_hit_is_always_the_exact_keys_hash(
            calls in proptest::collection::vec(
                (1u64..4, 0..MAX_KEY + 4, proptest::collection::vec(proptest::prelude::any::<usize>(), 0..3)),
                1..200,
            )
        ) {
            let calls: Vec<(u64, Vec<u8>)> = calls
                .into_iter()
                .map(|(owner, len, flips)| {
                    let mut key = vec![b'a'; len];
                    for f in flips {
                        if len > 0 {
                            key[f % len] = b'b';
                        }
                    }
                    (owner, key)
                })
                .collect();
            for (owner, key) in &calls {
                let key = std::str::from_utf8(key).unwrap();
                let got = memoized(*owner, key, || reference(*owner, key.as_bytes()));
                proptest::prop_assert_eq!(got, reference(*owner, key.as_bytes()), "{} {:?}", owner, key);
            }
        }
    }
}
