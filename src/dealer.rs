//! Shuffle sharding: a hash value picks a small hand of distinct cards (queue
//! indexes) from a deck, the same hand Kubernetes'
//! `k8s.io/apiserver/pkg/util/shufflesharding` deals for the same
//! (deck size, hand size, hash).
//!
//! The hash is read as a number in a mixed radix whose digits have bases
//! `deck, deck - 1, …, deck - hand + 1`; digit `i` picks the card at that
//! position among the cards not dealt yet. Kubernetes extracts the digits
//! with one 64-bit division per card, each waiting on the previous quotient.
//! Here digit `i` is `⌊hash / Pᵢ⌋ mod (deck − i)` with `Pᵢ` the product of the
//! first `i` bases. `⌊hash / deck⌋` comes from a precomputed 65-bit
//! reciprocal (a multiply, an add and a shift); being below `2^64 / deck`,
//! it is then divided by each `Pᵢ / deck` with a 64-bit reciprocal (a
//! multiply and a shift), the later quotients independent of each other.
//! [`Dealer::deal_plain`] keeps Kubernetes' division chain as the reference.

use std::fmt;
use std::num::NonZeroU64;
use std::ops::Deref;

/// At most this many low bits of the hash feed a deal: the last digit of a
/// deal that used all 64 bits would be skewed up to 2:3 between its halves;
/// with 60 bits the skew is at most 32:33. Same as Kubernetes' `MaxHashBits`.
pub const MAX_HASH_BITS: u32 = 60;

/// The largest hand any valid (deck, hand) allows: 15 cards need
/// ⌈15·log2 15⌉ = 59 bits, while 16 cards from a deck of at least 16 need
/// 64 bits, more than [`MAX_HASH_BITS`]. Tests check both sides.
pub const MAX_HAND_SIZE: usize = 15;

/// Kubernetes rejects larger decks as impractical.
pub const MAX_DECK_SIZE: u32 = 1 << 26;

/// Why a (deck size, hand size) pair cannot deal. The messages are
/// Kubernetes' own, so logs read the same in both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DealerError {
    /// The deck or the hand is empty.
    NotPositive {
        /// The deck size given.
        deck_size: u32,
        /// The hand size given.
        hand_size: u32,
    },
    /// A hand cannot hold more cards than the deck has.
    HandLargerThanDeck {
        /// The deck size given.
        deck_size: u32,
        /// The hand size given.
        hand_size: u32,
    },
    /// The deck exceeds [`MAX_DECK_SIZE`].
    DeckTooLarge {
        /// The deck size given.
        deck_size: u32,
    },
    /// Dealing needs more than [`MAX_HASH_BITS`] bits of hash.
    TooMuchEntropy {
        /// The deck size given.
        deck_size: u32,
        /// The hand size given.
        hand_size: u32,
    },
}

impl fmt::Display for DealerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DealerError::NotPositive {
                deck_size,
                hand_size,
            } => write!(
                f,
                "deckSize {deck_size} or handSize {hand_size} is not positive"
            ),
            DealerError::HandLargerThanDeck {
                deck_size,
                hand_size,
            } => write!(
                f,
                "handSize {hand_size} is greater than deckSize {deck_size}"
            ),
            DealerError::DeckTooLarge { deck_size } => {
                write!(f, "deckSize {deck_size} is impractically large")
            }
            DealerError::TooMuchEntropy {
                deck_size,
                hand_size,
            } => write!(
                f,
                "required entropy bits of deckSize {deck_size} and handSize {hand_size} \
                 is greater than {MAX_HASH_BITS}"
            ),
        }
    }
}

impl std::error::Error for DealerError {}

/// Bits of hash a deal of `hand_size` cards from `deck_size` consumes:
/// ⌈hand_size · log2(deck_size)⌉, the number Kubernetes'
/// `RequiredEntropyBits` computes in floating point.
///
/// Computed exactly in integers (the smallest `k` with
/// `2^k >= deck^hand`) while that is below 2^128, so the answer does not
/// depend on a platform's `log2`. Kubernetes' float formula gives the same
/// result for every deck up to [`MAX_DECK_SIZE`] and every hand up to 64:
/// `tools/dealer-golden` checks that exhaustively, and the golden-vector test
/// re-checks every deck for hands up to 16. Results above 128 (never
/// valid) come from `f64::log2`, kept within the exact bounds.
/// A deck of 0 or 1, or a hand of 0, needs no bits.
pub fn required_entropy_bits(deck_size: u32, hand_size: u32) -> u32 {
    if deck_size <= 1 || hand_size == 0 {
        return 0;
    }
    let whole_bits = deck_size.ilog2();
    if deck_size.is_power_of_two() {
        return whole_bits.saturating_mul(hand_size);
    }
    // deck^hand has an odd factor, so it is not a power of two and the
    // ceiling of its log2 is its bit length.
    match u128::from(deck_size).checked_pow(hand_size) {
        Some(power) => u128::BITS - power.leading_zeros(),
        None => huge_entropy_bits(deck_size, hand_size, whole_bits),
    }
}

/// The float estimate for deck^hand >= 2^128, clamped to what the exact
/// answer must be: above 128 and `whole_bits · hand`, at most
/// `(whole_bits + 1) · hand`.
fn huge_entropy_bits(deck_size: u32, hand_size: u32, whole_bits: u32) -> u32 {
    let estimate = (f64::from(deck_size).log2() * f64::from(hand_size)).ceil();
    // `as` saturates, which is what a u32 answer wants.
    let estimate = estimate as u32;
    let low = whole_bits
        .saturating_mul(hand_size)
        .saturating_add(1)
        .max(129);
    let high = (whole_bits + 1).saturating_mul(hand_size);
    estimate.clamp(low, high.max(low))
}

/// Whether a [`Dealer`] can be built for (deck, hand); the checks and their
/// order are Kubernetes' `NewDealer`'s.
pub fn validate(deck_size: u32, hand_size: u32) -> Result<(), DealerError> {
    if deck_size == 0 || hand_size == 0 {
        return Err(DealerError::NotPositive {
            deck_size,
            hand_size,
        });
    }
    if hand_size > deck_size {
        return Err(DealerError::HandLargerThanDeck {
            deck_size,
            hand_size,
        });
    }
    if deck_size > MAX_DECK_SIZE {
        return Err(DealerError::DeckTooLarge { deck_size });
    }
    if required_entropy_bits(deck_size, hand_size) > MAX_HASH_BITS {
        return Err(DealerError::TooMuchEntropy {
            deck_size,
            hand_size,
        });
    }
    Ok(())
}

/// Exact division of any `u64` by a fixed divisor without a divide
/// instruction (Granlund & Montgomery, "Division by invariant integers using
/// multiplication", 1994, theorem 4.2, with a 65-bit multiplier).
///
/// With `s = ⌈log2 d⌉` and `m = ⌈2^(64+s) / d⌉`, `m·d` exceeds `2^(64+s)` by
/// less than `d <= 2^s`, which the theorem shows makes
/// `⌊m·n / 2^(64+s)⌋ = ⌊n / d⌋` for every `n < 2^64`. Since
/// `2^64 <= m < 2^65`, only `magic = m − 2^64` is stored and
/// `m·n / 2^64 = n + ⌊magic·n / 2^64⌋` exactly. Divisors 1 and powers of two
/// get `magic = 0`, a plain shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reciprocal {
    magic: u64,
    shift: u32,
}

impl Reciprocal {
    #[cfg(test)]
    const ONE: Reciprocal = Reciprocal { magic: 0, shift: 0 };

    fn new(divisor: NonZeroU64) -> Reciprocal {
        let divisor = divisor.get();
        let shift = u64::BITS - (divisor - 1).leading_zeros();
        // ⌈x / d⌉ = ⌊(x − 1) / d⌋ + 1, and x − 1 = 2^(64+s) − 1 fits a u128
        // even for s = 64.
        let below = u128::MAX >> (64 - shift);
        let multiplier = below / u128::from(divisor) + 1;
        // 2^64 <= multiplier < 2^65: dropping bit 64 keeps the rest.
        let magic = multiplier as u64;
        Reciprocal { magic, shift }
    }

    #[inline(always)]
    fn quotient(self, dividend: u64) -> u64 {
        let high = (u128::from(self.magic) * u128::from(dividend)) >> 64;
        // The sum is below 2^65 and the shift brings it under 2^64 again.
        ((u128::from(dividend) + high) >> self.shift) as u64
    }
}

/// Exact division of a dividend known to be below `2^bits` (`bits <= 63`)
/// by a fixed divisor, with a 64-bit multiplier: one multiply and one
/// shift, no carry into a 65th bit.
///
/// With `l = ⌈log2 d⌉`, `k = bits + l` and `m = ⌈2^k / d⌉`, `m·d` exceeds
/// `2^k` by `e < d <= 2^l`, so for `n < 2^bits` the error `e·n / (d·2^k)`
/// stays below `1/d` and `⌊m·n / 2^k⌋ = ⌊n / d⌋` (the same theorem as
/// [`Reciprocal`]). `m <= 2^bits` for `d = 1`; otherwise `d > 2^(l−1)`
/// makes `m < 2^(bits+1) <= 2^64` as long as `l <= bits + 1`, which the
/// dealer's divisors meet (checked where they are made). The dividend
/// comes pre-shifted left by `64 − bits`, so the multiply's high word is
/// `⌊m·n / 2^bits⌋` and a shift by `l` finishes the division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NarrowReciprocal {
    magic: u64,
    shift: u32,
}

impl NarrowReciprocal {
    const UNUSED: NarrowReciprocal = NarrowReciprocal { magic: 0, shift: 0 };

    /// Divides dividends below `2^bits`; None if the multiplier would not
    /// fit 64 bits.
    fn new(divisor: NonZeroU64, bits: u32) -> Option<NarrowReciprocal> {
        let divisor = divisor.get();
        let shift = u64::BITS - (divisor - 1).leading_zeros();
        let k = bits + shift;
        // ⌈2^k / d⌉ = ⌊(2^k − 1) / d⌋ + 1; k <= 63 + 64 fits a u128.
        let multiplier = ((1u128 << k) - 1) / u128::from(divisor) + 1;
        let magic = u64::try_from(multiplier).ok()?;
        Some(NarrowReciprocal { magic, shift })
    }

    /// `⌊n / d⌋` for `shifted = n << (64 − bits)`.
    #[inline(always)]
    fn quotient(self, shifted: u64) -> u64 {
        let high = ((u128::from(self.magic) * u128::from(shifted)) >> 64) as u64;
        high >> self.shift
    }
}

/// Deals hands of `hand_size` distinct cards from `0..deck_size`.
/// Immutable after construction, so it can be shared across threads.
#[derive(Debug, Clone)]
pub struct Dealer {
    deck_size: u32,
    hand_size: u32,
    /// Divides the hash by the deck: the first quotient, from all 64 bits.
    by_deck: Reciprocal,
    /// The first quotient is below `2^64 / deck <= 2^(64 − pre)`: shifted
    /// left by `pre` it feeds the narrow reciprocals.
    pre: u32,
    /// Entry `i` (from 1) divides the first quotient by
    /// `(deck − 1) · … · (deck − i)`, giving `⌊hash / Pᵢ₊₁⌋` with `Pᵢ₊₁` the
    /// product of the first `i + 1` bases; entry 0 and entries at and past
    /// `hand_size` are unused.
    later_products: [NarrowReciprocal; MAX_HAND_SIZE],
}

impl Dealer {
    /// A dealer of hands of `hand_size` cards from a deck of `deck_size`
    /// (queues), or why that pair cannot deal (the same checks and messages as
    /// Kubernetes' `NewDealer`).
    pub fn new(deck_size: u32, hand_size: u32) -> Result<Dealer, DealerError> {
        validate(deck_size, hand_size)?;
        let deck = NonZeroU64::MIN.saturating_add(u64::from(deck_size - 1));
        let pre = deck_size.ilog2();
        let mut later_products = [NarrowReciprocal::UNUSED; MAX_HAND_SIZE];
        let mut product = NonZeroU64::MIN;
        for (i, slot) in (1u32..).zip(&mut later_products[1..hand_size as usize]) {
            // i < hand_size <= deck_size, so the base deck − i is at least 1.
            let base = NonZeroU64::MIN.saturating_add(u64::from(deck_size - 1 - i));
            // A valid deal needs at most 60 bits, so deck^hand and with it
            // every product is below 2^60: saturation never happens.
            product = product.saturating_mul(base);
            // A second card means deck >= 2, so pre >= 1 and the first
            // quotient has at most 63 bits; the product being below
            // 2^60 / deck keeps its multiplier within 64 bits.
            *slot = NarrowReciprocal::new(product, u64::BITS - pre)
                .expect("a valid deal's divisors have 64-bit multipliers");
        }
        Ok(Dealer {
            deck_size,
            hand_size,
            by_deck: Reciprocal::new(deck),
            pre,
            later_products,
        })
    }

    /// Cards in the deck (the level's number of queues).
    pub fn deck_size(&self) -> u32 {
        self.deck_size
    }

    /// Cards in each hand.
    pub fn hand_size(&self) -> u32 {
        self.hand_size
    }

    /// Calls `pick` once per card of the hand `hash` selects, in the order
    /// Kubernetes' `Deal` picks them.
    #[inline]
    pub fn deal(&self, hash: u64, mut pick: impl FnMut(u32)) {
        for &card in self.deal_into_hand(hash).iter() {
            pick(card);
        }
    }

    /// The hand `hash` selects, in [`Dealer::deal`]'s order, without
    /// allocating.
    #[inline]
    pub fn deal_into_hand(&self, hash: u64) -> Hand {
        let len = self.hand_size as usize;
        let mut cards = [0; MAX_HAND_SIZE];
        self.digits(hash, &mut cards[..len]);
        // Card i is shifted past the digits before it; going backwards
        // leaves those digits untouched until their own turn.
        for i in (0..len).rev() {
            cards[i] = place(&cards[..i], cards[i]);
        }
        Hand {
            cards,
            len: len as u8,
        }
    }

    /// The card [`Dealer::deal`] would pick at position `index`, computing
    /// only the digits up to that position. An `index` at or past the hand
    /// size is read as the last position, so the result is always a card of
    /// the hand.
    #[inline]
    pub fn card_at(&self, hash: u64, index: u32) -> u32 {
        let index = index.min(self.hand_size - 1) as usize;
        let mut digits = [0; MAX_HAND_SIZE];
        self.digits(hash, &mut digits[..=index]);
        place(&digits[..index], digits[index])
    }

    /// The reference deal: Kubernetes' chain of one hardware division per
    /// card. Same result as [`Dealer::deal`]; kept for tests, fuzzing and
    /// benchmarks.
    pub fn deal_plain(&self, hash: u64, mut pick: impl FnMut(u32)) {
        let len = self.hand_size as usize;
        let mut digits = [0; MAX_HAND_SIZE];
        let mut rest = hash;
        for (i, digit) in (0u32..).zip(&mut digits[..len]) {
            let base = u64::from(self.deck_size - i);
            // The remainder is below the base, itself at most MAX_DECK_SIZE.
            *digit = (rest % base) as u32;
            rest /= base;
        }
        for i in 0..len {
            pick(place(&digits[..i], digits[i]));
        }
    }

    /// Fills `out` with the first `out.len()` mixed-radix digits of `hash`.
    #[inline(always)]
    fn digits(&self, hash: u64, out: &mut [u32]) {
        let Some((first, rest)) = out.split_first_mut() else {
            return;
        };
        let mut base = u64::from(self.deck_size);
        let mut quotient = self.by_deck.quotient(hash);
        // hash − deck·⌊hash / deck⌋ = hash mod deck < deck <= MAX_DECK_SIZE.
        *first = (hash - base * quotient) as u32;
        base -= 1;
        // Below 2^64 once shifted (see `pre`); every later quotient comes
        // from it alone, so their multiplies do not wait on each other.
        let shifted = quotient << self.pre;
        let reciprocals = &self.later_products[1..=rest.len()];
        for (digit, reciprocal) in rest.iter_mut().zip(reciprocals) {
            let next = reciprocal.quotient(shifted);
            // quotient − base·next = quotient mod base < base <= MAX_DECK_SIZE.
            *digit = (quotient - base * next) as u32;
            quotient = next;
            // At most hand_size <= deck_size decrements.
            base -= 1;
        }
    }
}

/// Turns digit `digit` into a card by stepping over earlier picks: compared
/// with the earlier digits from the latest back to the first, as Kubernetes
/// does, which is what makes the same hash give the same hand.
#[inline(always)]
fn place(earlier_digits: &[u32], digit: u32) -> u32 {
    earlier_digits
        .iter()
        .rev()
        .fold(digit, |card, &earlier| card + u32::from(card >= earlier))
}

/// A dealt hand: up to [`MAX_HAND_SIZE`] cards, inline. Dereferences to the
/// cards in dealing order.
#[derive(Clone, Copy)]
pub struct Hand {
    cards: [u32; MAX_HAND_SIZE],
    len: u8,
}

impl Hand {
    /// The cards, in dealing order.
    pub fn as_slice(&self) -> &[u32] {
        &self.cards[..usize::from(self.len)]
    }
}

impl Deref for Hand {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        self.as_slice()
    }
}

impl PartialEq for Hand {
    fn eq(&self, other: &Hand) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Hand {}

impl fmt::Debug for Hand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
