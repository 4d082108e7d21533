//! Short byte strings as machine words, for the classifier's look-ups.
//!
//! The names a request brings (its user, its groups, the flow
//! distinguisher) are mostly 8 to 40 bytes long. Comparing them with
//! `==` calls `memcmp` (~20 instructions of call and dispatch before the
//! first byte), and hashing every byte costs as much again. Here a string
//! is read as its length and two words, its first and last eight bytes
//! ([`Ends`]): for strings of at most 16 bytes these determine the string
//! (the two words overlap or touch), so equal lengths and ends are
//! equality; longer strings compare their middle words
//! ([`middle_eq`]) after the ends agree. The ends also make a cheap hash
//! ([`Ends::spread`]) for the direct-mapped and open-addressed tables
//! that use them; a hash only spreads entries, equality is always checked
//! in full.

/// The `u64` (little-endian) at byte offset `at`; `at + 8 <= b.len()`.
#[inline(always)]
pub(super) fn word_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A word that, with the length (under 8), determines the bytes: two
/// overlapping 4-byte reads from 4 bytes on, the first, middle and last
/// byte below.
#[inline(always)]
fn short_word(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 4 {
        let mut lo = [0u8; 4];
        let mut hi = [0u8; 4];
        lo.copy_from_slice(&b[..4]);
        hi.copy_from_slice(&b[n - 4..]);
        u64::from(u32::from_le_bytes(lo)) | u64::from(u32::from_le_bytes(hi)) << 32
    } else if n > 0 {
        u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16
    } else {
        0
    }
}

/// A string's length and its first and last eight bytes (below 8 bytes,
/// one word that determines them, and 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ends {
    pub(super) len: usize,
    pub(super) head: u64,
    pub(super) tail: u64,
}

impl Ends {
    #[inline(always)]
    pub(super) fn of(b: &[u8]) -> Ends {
        let len = b.len();
        let (head, tail) = if len >= 8 {
            (word_at(b, 0), word_at(b, len - 8))
        } else {
            (short_word(b), 0)
        };
        Ends { len, head, tail }
    }

    /// `bits` (1 to 63) bits spread from the ends: the top bits of a
    /// Fibonacci (multiplicative) hash of the two words and the length.
    #[inline(always)]
    pub(super) fn spread(&self, seed: u64, bits: u32) -> usize {
        let mixed = seed ^ self.head.rotate_left(23) ^ self.tail ^ ((self.len as u64) << 56);
        (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }
}

/// Whether two strings with equal [`Ends`] are equal: their words between
/// the first and last eight bytes (none at 16 bytes or less).
#[inline(always)]
pub(super) fn middle_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let mut at = 8;
    // The chunks [8, 16), [16, 24), ... up to the one that reaches the
    // last eight bytes' start cover everything between the ends.
    while at + 8 < n {
        if word_at(a, at) != word_at(b, at) {
            return false;
        }
        at += 8;
    }
    true
}

/// `a == b`, by [`Ends`] and then the middle words.
#[inline(always)]
pub(super) fn eq(a: &[u8], b: &[u8]) -> bool {
    Ends::of(a) == Ends::of(b) && middle_eq(a, b)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Strings from a tiny alphabet, so that near misses (one byte apart,
    /// equal ends, different middles) are common.
    fn near(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b':')], 0..max)
    }

    proptest! {
        #[test]
        #[cfg_attr(loom, ignore)]
        fn equality_is_byte_equality(a in near(70), b in near(70)) {
            prop_assert_eq!(eq(&a, &b), a == b);
        }

        #[test]
        #[cfg_attr(loom, ignore)]
        fn one_byte_changed_anywhere_is_unequal(a in near(70), at in any::<usize>(), to in any::<u8>()) {
            prop_assume!(!a.is_empty());
            let mut b = a.clone();
            let i = at % a.len();
            prop_assume!(b[i] != to);
            b[i] = to;
            prop_assert!(!eq(&a, &b));
        }
    }

    #[test]
    fn every_length_and_position_is_compared() {
        for n in 0..=80usize {
            let a: Vec<u8> = (0..n).map(|i| i as u8).collect();
            assert!(eq(&a, &a), "{n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 0x80;
                assert!(!eq(&a, &b), "length {n}, byte {i}");
            }
        }
    }
}
