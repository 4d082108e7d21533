use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

const GOLDEN: &str = include_str!("../../tests/data/dealer_golden.txt");

/// Deterministic hashes for tests that need many (splitmix64).
fn hashes(seed: u64, count: usize) -> impl Iterator<Item = u64> {
    let mut state = seed;
    (0..count).map(move |_| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The largest deck that can deal `hand` cards (validity is monotone in the
/// deck once the deck holds the hand).
fn largest_valid_deck(hand: u32) -> u32 {
    let (mut valid, mut invalid) = (hand, MAX_DECK_SIZE as u64 + 1);
    assert!(validate(hand, hand).is_ok(), "hand {hand} is never valid");
    while invalid - valid as u64 > 1 {
        let middle = ((valid as u64 + invalid) / 2) as u32;
        if validate(middle, hand).is_ok() {
            valid = middle;
        } else {
            invalid = middle as u64;
        }
    }
    valid
}

fn plain_hand(dealer: &Dealer, hash: u64) -> Vec<u32> {
    let mut cards = Vec::new();
    dealer.deal_plain(hash, |card| cards.push(card));
    cards
}

fn dealt(dealer: &Dealer, hash: u64) -> Vec<u32> {
    let mut cards = Vec::new();
    dealer.deal(hash, |card| cards.push(card));
    cards
}

/// Every way of reaching the hand agrees with the plain reference.
fn assert_all_paths_agree(dealer: &Dealer, hash: u64) -> Vec<u32> {
    let reference = plain_hand(dealer, hash);
    let context = (dealer.deck_size(), dealer.hand_size(), hash);
    assert_eq!(
        dealer.deal_into_hand(hash).as_slice(),
        &reference[..],
        "{context:?}"
    );
    assert_eq!(dealt(dealer, hash), reference, "{context:?}");
    for (index, &card) in (0u32..).zip(&reference) {
        assert_eq!(
            dealer.card_at(hash, index),
            card,
            "{context:?} index {index}"
        );
    }
    reference
}

fn numbers(fields: &[&str]) -> Vec<u64> {
    fields.iter().map(|f| f.parse().expect(f)).collect()
}

fn golden_lines(kind: &str) -> impl Iterator<Item = Vec<&'static str>> + '_ {
    GOLDEN
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .filter(move |fields| fields[0] == kind)
}

#[test]
fn golden_deals_match_kubernetes() {
    let mut count = 0;
    for fields in golden_lines("deal") {
        let values = numbers(&fields[1..]);
        let (deck, hand, hash) = (values[0] as u32, values[1] as u32, values[2]);
        let expected: Vec<u32> = values[3..].iter().map(|&c| c as u32).collect();
        let dealer = Dealer::new(deck, hand).unwrap();
        assert_eq!(expected.len(), hand as usize);
        assert_eq!(
            assert_all_paths_agree(&dealer, hash),
            expected,
            "{fields:?}"
        );
        count += 1;
    }
    assert!(count >= 500, "only {count} golden deals");
}

#[test]
fn golden_validation_matches_kubernetes() {
    let mut count = 0;
    for fields in golden_lines("new") {
        let values = numbers(&fields[1..3]);
        let (deck, hand) = (values[0] as u32, values[1] as u32);
        match (fields[3], Dealer::new(deck, hand)) {
            ("ok", Ok(dealer)) => {
                assert_eq!((dealer.deck_size(), dealer.hand_size()), (deck, hand))
            }
            ("err", Err(error)) => {
                assert_eq!(error.to_string(), fields[4..].join(" "));
                assert_eq!(validate(deck, hand), Err(error));
            }
            (want, got) => panic!("{deck} {hand}: Kubernetes says {want}, got {got:?}"),
        }
        count += 1;
    }
    assert!(count >= 40, "only {count} golden validations");
}

/// The golden file lists, for each hand up to 16, every deck up to
/// MAX_DECK_SIZE where Kubernetes' RequiredEntropyBits changes. Ours is
/// exact, hence non-decreasing in the deck, so agreeing at both ends of each
/// constant stretch means agreeing on every deck in between.
#[test]
fn entropy_bits_match_kubernetes_for_every_deck() {
    let mut by_hand: Vec<Vec<(u32, u32)>> = vec![Vec::new(); 17];
    for fields in golden_lines("bits") {
        let v = numbers(&fields[1..]);
        by_hand[v[0] as usize].push((v[1] as u32, v[2] as u32));
    }
    for (hand, stretches) in (0u32..).zip(&by_hand).skip(1) {
        assert_eq!(stretches.first().map(|s| s.0), Some(1), "hand {hand}");
        let ends = stretches
            .iter()
            .skip(1)
            .map(|s| s.0 - 1)
            .chain([MAX_DECK_SIZE]);
        for (&(start, bits), end) in stretches.iter().zip(ends) {
            assert_eq!(
                required_entropy_bits(start, hand),
                bits,
                "deck {start} hand {hand}"
            );
            assert_eq!(
                required_entropy_bits(end, hand),
                bits,
                "deck {end} hand {hand}"
            );
        }
    }
}

#[test]
fn entropy_bits_kubernetes_table() {
    assert_eq!(required_entropy_bits(1024, 6), 60);
    assert_eq!(required_entropy_bits(512, 8), 72);
}

#[test]
fn entropy_bits_edges() {
    assert_eq!(required_entropy_bits(0, 5), 0);
    assert_eq!(required_entropy_bits(1, 1000), 0);
    assert_eq!(required_entropy_bits(1000, 0), 0);
    assert_eq!(required_entropy_bits(3, 1), 2);
    // 3^80 < 2^127 < 3^81 < 2^129: last exact result, first float one.
    assert_eq!(required_entropy_bits(3, 80), 127);
    assert_eq!(required_entropy_bits(3, 81), 129);
    assert_eq!(required_entropy_bits(3, 1000), 1585);
    assert_eq!(required_entropy_bits(1 << 31, u32::MAX), u32::MAX);
    assert_eq!(required_entropy_bits(u32::MAX, u32::MAX), u32::MAX);
    assert_eq!(required_entropy_bits(u32::MAX, 3), 96);
}

#[test]
fn entropy_bits_match_float_formula_off_near_ties() {
    for (i, hash) in (0..).zip(hashes(7, 20_000)) {
        let deck = (hash as u32 % MAX_DECK_SIZE) + 2;
        let hand = (hash >> 40) as u32 % 200 + 1 + i % 2;
        let float = f64::from(deck).log2() * f64::from(hand);
        if (float - float.round()).abs() > 1e-6 {
            assert_eq!(
                required_entropy_bits(deck, hand),
                float.ceil() as u32,
                "{deck} {hand}"
            );
        }
    }
}

/// Kubernetes' NewDealer table, less the negative sizes a u32 cannot hold.
#[test]
fn validation_table() {
    let cases = [
        (0, 8, Some("deckSize 0 or handSize 8 is not positive")),
        (100, 0, Some("deckSize 100 or handSize 0 is not positive")),
        (100, 101, Some("handSize 101 is greater than deckSize 100")),
        (
            1 << 27,
            2,
            Some("deckSize 134217728 is impractically large"),
        ),
        (
            512,
            8,
            Some("required entropy bits of deckSize 512 and handSize 8 is greater than 60"),
        ),
        (1024, 6, None),
    ];
    for (deck, hand, message) in cases {
        let result = Dealer::new(deck, hand)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(result.err().as_deref(), message, "{deck} {hand}");
    }
}

#[test]
fn max_hand_size_is_the_largest_valid_hand() {
    let largest = MAX_HAND_SIZE as u32;
    assert!(validate(largest, largest).is_ok());
    assert!(validate(largest + 1, largest).is_ok());
    // Bits grow with the deck and a hand needs a deck at least its size.
    assert!(validate(largest + 1, largest + 1).is_err());
    assert_eq!(required_entropy_bits(largest + 1, largest + 1), 64);
}

/// At the largest valid deck of every hand, the full product of the bases
/// stays within MAX_HASH_BITS (so the prefix products cannot saturate) and
/// one deck more is rejected.
#[test]
fn entropy_limit_bounds_every_valid_dealer() {
    for hand in 1..=MAX_HAND_SIZE as u32 {
        let deck = largest_valid_deck(hand);
        let product = (0..hand).fold(1u128, |p, i| p * u128::from(deck - i));
        assert!(product <= 1 << MAX_HASH_BITS, "deck {deck} hand {hand}");
        assert!(required_entropy_bits(deck, hand) <= MAX_HASH_BITS);
        if deck < MAX_DECK_SIZE {
            assert_eq!(
                Dealer::new(deck + 1, hand).unwrap_err(),
                DealerError::TooMuchEntropy {
                    deck_size: deck + 1,
                    hand_size: hand
                }
            );
        }
        let dealer = Dealer::new(deck, hand).unwrap();
        for hash in [0, 1, u64::MAX, (1 << MAX_HASH_BITS) - 1, product as u64 - 1] {
            assert_all_paths_agree(&dealer, hash);
        }
    }
    assert_eq!(largest_valid_deck(1), MAX_DECK_SIZE);
    assert_eq!(largest_valid_deck(6), 1024);
}

#[test]
fn cards_are_distinct_and_in_the_deck() {
    let shapes = [
        (4, 4),
        (8, 8),
        (10, 10),
        (12, 12),
        (15, 15),
        (128, 8),
        (256, 7),
        (512, 6),
    ];
    for (deck, hand) in shapes {
        let dealer = Dealer::new(deck, hand).unwrap();
        for hash in hashes(u64::from(deck), 2_000).chain([0, u64::MAX]) {
            let cards = dealer.deal_into_hand(hash);
            assert_eq!(cards.len(), hand as usize);
            assert!(cards.iter().all(|&c| c < deck), "{cards:?}");
            assert_eq!(
                cards.iter().collect::<HashSet<_>>().len(),
                cards.len(),
                "{cards:?}"
            );
        }
    }
}

#[test]
fn small_decks_agree_with_plain_everywhere() {
    for deck in 1..=40 {
        for hand in (1..=deck).filter(|&h| validate(deck, h).is_ok()) {
            let dealer = Dealer::new(deck, hand).unwrap();
            let edges = [0, 1, u64::MAX, u64::MAX - 1, 1 << 63, 1 << 60];
            for hash in hashes(u64::from(deck * 100 + hand), 50).chain(edges) {
                assert_all_paths_agree(&dealer, hash);
            }
        }
    }
}

#[test]
fn card_at_past_the_hand_is_the_last_card() {
    let dealer = Dealer::new(128, 6).unwrap();
    for hash in hashes(3, 100) {
        let last = dealer.deal_into_hand(hash)[5];
        assert_eq!(dealer.card_at(hash, 6), last);
        assert_eq!(dealer.card_at(hash, u32::MAX), last);
    }
}

#[test]
fn hand_compares_and_prints_its_cards_only() {
    let dealer = Dealer::new(4, 4).unwrap();
    let hand = dealer.deal_into_hand(0);
    assert_eq!(format!("{hand:?}"), "[0, 1, 2, 3]");
    assert_eq!(hand, dealer.deal_into_hand(0));
    assert_ne!(hand, dealer.deal_into_hand(1));
    assert_ne!(hand, Dealer::new(4, 3).unwrap().deal_into_hand(0));
}

/// The falling factorial n·(n−1)·…·(n−m+1).
fn falling_factorial(n: u64, m: u64) -> u64 {
    (n - m + 1..=n).product()
}

fn binomial(n: u64, k: u64) -> u64 {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// Position of a sorted hand among all hands of its size (combinatorial
/// number system), so a dense counter array can stand in for a map.
fn hand_rank(sorted: &[u32]) -> usize {
    (1..)
        .zip(sorted)
        .map(|(k, &card)| binomial(u64::from(card), k) as usize)
        .sum()
}

/// How often each unordered hand (by [`hand_rank`]) comes up over `hashes`.
fn count_hands(dealer: &Dealer, hashes: std::ops::Range<u64>) -> Vec<u64> {
    let (deck, hand) = (dealer.deck_size(), dealer.hand_size());
    let mut counts = vec![0; binomial(u64::from(deck), u64::from(hand)) as usize];
    for hash in hashes {
        let mut cards = dealer.deal_into_hand(hash).cards;
        let cards = &mut cards[..hand as usize];
        cards.sort_unstable();
        counts[hand_rank(cards)] += 1;
    }
    counts
}

/// Kubernetes' uniformity test: dealing every hash in `0..hash_max` gives
/// each unordered hand a count within one deal-per-ordering of the mean.
///
/// A deal reads only `hash mod ff(deck, hand)` (checked on samples here and
/// everywhere by the equivalence with the plain dealer), so the counts over
/// `0..hash_max` are whole cycles of `0..ff` plus `0..rest`: dealing those
/// two ranges gives the same counts as dealing every hash, at a fraction of
/// the cost of an unoptimized test build.
fn assert_uniform(deck: u32, hand: u32, hash_max: u64) {
    let dealer = Dealer::new(deck, hand).unwrap();
    let cycle = falling_factorial(u64::from(deck), u64::from(hand));
    for hash in hashes(u64::from(deck), 1_000) {
        let hash = hash % hash_max;
        assert_eq!(
            dealer.deal_into_hand(hash),
            dealer.deal_into_hand(hash % cycle)
        );
    }
    let (cycles, rest) = (hash_max / cycle, hash_max % cycle);
    let per_cycle = count_hands(&dealer, 0..cycle);
    let partial = count_hands(&dealer, 0..rest);
    let orderings = falling_factorial(u64::from(hand), u64::from(hand));
    let per_ordering = hash_max as f64 / cycle as f64;
    let low = orderings * per_ordering.floor() as u64;
    let high = orderings * per_ordering.ceil() as u64;
    // Unseen hands count too: a zero is outside the range.
    let outside = (per_cycle.iter().zip(&partial))
        .map(|(&full, &part)| cycles * full + part)
        .filter(|count| !(low..=high).contains(count))
        .count();
    assert_eq!(
        outside, 0,
        "deck {deck} hand {hand}: counts outside [{low}, {high}]"
    );
}

#[test]
fn uniform_with_spare_hash_bits() {
    let spare = 64 - MAX_HASH_BITS;
    let hands = falling_factorial(64, 3);
    assert_uniform(64, 3, 1 << ((hands as f64).log2().ceil() as u32 + spare));
}

#[test]
fn uniform_over_one_cycle_of_three() {
    assert_uniform(128, 3, falling_factorial(128, 3));
}

#[test]
fn uniform_over_one_cycle_of_four() {
    assert_uniform(50, 4, falling_factorial(50, 4));
}

const DIVISOR_EDGES: [u64; 12] = [
    1,
    2,
    3,
    5,
    7,
    MAX_DECK_SIZE as u64,
    MAX_DECK_SIZE as u64 - 1,
    (1 << 60) - 1,
    1 << 63,
    (1 << 63) + 1,
    u64::MAX - 1,
    u64::MAX,
];

fn check_division(dividend: u64, divisor: u64) {
    let reciprocal = Reciprocal::new(NonZeroU64::new(divisor).unwrap());
    let quotient = reciprocal.quotient(dividend);
    assert_eq!(quotient, dividend / divisor, "{dividend} / {divisor}");
    assert_eq!(
        dividend - quotient * divisor,
        dividend % divisor,
        "{dividend} % {divisor}"
    );
}

#[test]
fn reciprocal_division_edges() {
    let powers = (0..64).flat_map(|k| {
        let p = 1u64 << k;
        [p - 1, p, p + 1].into_iter().filter(|&d| d != 0)
    });
    let divisors: Vec<u64> = powers.chain(DIVISOR_EDGES).collect();
    let mut dividends = vec![0, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
    dividends.extend(divisors.iter().flat_map(|&d| [d - 1, d, d.wrapping_add(1)]));
    dividends.extend(divisors.iter().map(|&d| u64::MAX - u64::MAX % d - 1));
    for &divisor in &divisors {
        for &dividend in &dividends {
            check_division(dividend, divisor);
        }
    }
    // Powers of two and one need no multiply at all.
    assert_eq!(Reciprocal::new(NonZeroU64::MIN), Reciprocal::ONE);
    assert_eq!(Reciprocal::new(NonZeroU64::new(1 << 40).unwrap()).magic, 0);
}

/// Every divisor a deck of up to 4096 cards uses, against dividends that
/// stress the rounding: just below multiples and the top of the range.
#[test]
fn reciprocal_division_every_small_divisor() {
    for divisor in 1..=4096u64 {
        let top = u64::MAX - u64::MAX % divisor;
        for dividend in [
            u64::MAX,
            top,
            top.wrapping_sub(1),
            divisor * 977 - 1,
            divisor - 1,
        ] {
            check_division(dividend, divisor);
        }
    }
}

fn any_divisor() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=u64::MAX,
        1..=u64::from(MAX_DECK_SIZE),
        (0u32..64, -1i64..=1)
            .prop_map(|(k, delta)| (1u64 << k).wrapping_add_signed(delta))
            .prop_filter("nonzero", |&d| d != 0),
        proptest::sample::select(DIVISOR_EDGES.to_vec()),
    ]
}

fn any_dividend() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0..1024u64).prop_map(|d| u64::MAX - d),
        0..1024u64
    ]
}

fn any_valid_shape() -> impl Strategy<Value = (u32, u32)> {
    (1..=MAX_HAND_SIZE as u32).prop_flat_map(|hand| {
        let top = largest_valid_deck(hand);
        let deck = prop_oneof![hand..=top, Just(hand), Just(top)];
        (deck, Just(hand))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn reciprocal_equals_hardware_division(dividend in any_dividend(), divisor in any_divisor()) {
        check_division(dividend, divisor);
    }

    #[test]
    fn fast_deal_equals_plain_deal((deck, hand) in any_valid_shape(), hash in any::<u64>()) {
        let dealer = Dealer::new(deck, hand).unwrap();
        let fast = dealer.deal_into_hand(hash);
        prop_assert_eq!(fast.as_slice(), &plain_hand(&dealer, hash)[..]);
        prop_assert_eq!(dealt(&dealer, hash), plain_hand(&dealer, hash));
    }

    #[test]
    fn card_at_equals_the_dealt_card((deck, hand) in any_valid_shape(), hash in any::<u64>()) {
        let dealer = Dealer::new(deck, hand).unwrap();
        let cards = dealer.deal_into_hand(hash);
        for (index, &card) in (0u32..).zip(cards.iter()) {
            prop_assert_eq!(dealer.card_at(hash, index), card);
        }
    }

    #[test]
    fn dealer_new_agrees_with_validate(deck in any::<u32>(), hand in any::<u32>()) {
        prop_assert_eq!(Dealer::new(deck, hand).map(|_| ()), validate(deck, hand));
    }
}

/// The narrow reciprocal against hardware division, for dividends below
/// `2^bits` at the top of that range and just around multiples, for every
/// width a dealer uses (64 − ⌊log2 deck⌋ for decks of 2 and more) and
/// divisors up to 2^60 / 2^(64 − bits), where its multiplier must fit.
#[test]
fn narrow_reciprocal_division_edges() {
    for bits in (64 - 26)..=63u32 {
        let below = (1u64 << bits) - 1;
        let largest_divisor = 1u64 << (60 - (64 - bits));
        let powers = (0..=(60 - (64 - bits))).flat_map(|k| {
            let p = 1u64 << k;
            [p - 1, p, p + 1].into_iter().filter(|&d| d != 0)
        });
        let divisors: Vec<u64> = powers
            .chain(1..=300)
            .chain(DIVISOR_EDGES.iter().copied())
            .filter(|&d| d <= largest_divisor)
            .collect();
        for &divisor in &divisors {
            let narrow = NarrowReciprocal::new(NonZeroU64::new(divisor).unwrap(), bits)
                .expect("the multiplier fits");
            let top = below - below % divisor;
            for dividend in [
                0,
                1,
                below,
                below - 1,
                top,
                top.saturating_sub(1),
                divisor - 1,
                divisor.min(below),
            ] {
                let quotient = narrow.quotient(dividend << (64 - bits));
                assert_eq!(
                    quotient,
                    dividend / divisor,
                    "{dividend} / {divisor} ({bits} bits)"
                );
            }
        }
    }
}
