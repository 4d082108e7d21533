//! A small per-thread memo of flow hashes.
//!
//! Kubernetes' flow hash is a SHA-256 of the schema name and distinguisher:
//! exact, but about twice the cost of matching itself. A server sees the
//! same few flows (users, namespaces) again and again, so each thread keeps
//! the last flows it hashed in a direct-mapped table keyed by the schema's
//! hasher and the distinguisher's bytes (compared in full, so a hit is always
//! the exact hash). Distinguishers longer than a slot are hashed every time.
//! Nothing allocates.

use std::cell::RefCell;

const SLOTS: usize = 64;
const _: () = assert!(SLOTS.is_power_of_two());
const MAX_KEY: usize = 62;

#[derive(Clone, Copy)]
struct Slot {
    owner: u64,
    len: u8,
    bytes: [u8; MAX_KEY],
    hash: u64,
}

const EMPTY: Slot = Slot {
    owner: 0,
    len: 0,
    bytes: [0; MAX_KEY],
    hash: 0,
};

thread_local! {
    static MEMO: RefCell<[Slot; SLOTS]> = const { RefCell::new([EMPTY; SLOTS]) };
}

/// The key's slot: a multiplicative hash of the owner, the length and the
/// key's first and last eight bytes. The index only spreads entries
/// (equality is checked in full, so a collision only costs a miss); it is
/// a few instructions where hashing every byte of the key cost as much as
/// the rest of the look-up.
fn slot_index(owner: u64, key: &[u8]) -> usize {
    let word = |bytes: &[u8]| {
        let mut w = [0u8; 8];
        w[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(w)
    };
    let n = key.len();
    let (head, tail) = if n >= 8 {
        (word(&key[..8]), word(&key[n - 8..]))
    } else {
        (word(key), 0)
    };
    let mixed = owner ^ head.rotate_left(23) ^ tail ^ ((n as u64) << 56);
    // The top bits of a Fibonacci hash: SLOTS is a power of two.
    (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// The flow hash of `distinguisher` under the schema hasher `owner` (a
/// unique id, never 0), computed by `compute` on a miss.
pub(super) fn memoized(owner: u64, distinguisher: &str, compute: impl FnOnce() -> u64) -> u64 {
    let key = distinguisher.as_bytes();
    if key.len() > MAX_KEY {
        return compute();
    }
    let i = slot_index(owner, key);
    let hit = MEMO.with(|memo| {
        let memo = memo.borrow();
        let slot = &memo[i];
        (slot.owner == owner && slot.len as usize == key.len() && &slot.bytes[..key.len()] == key)
            .then_some(slot.hash)
    });
    if let Some(hash) = hit {
        return hash;
    }
    let hash = compute();
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        let slot = &mut memo[i];
        slot.owner = owner;
        slot.len = key.len() as u8;
        slot.bytes[..key.len()].copy_from_slice(key);
        slot.hash = hash;
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
}
