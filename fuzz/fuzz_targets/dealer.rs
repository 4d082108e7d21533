//! The fast dealer (reciprocal division) against the plain one (a hardware
//! division per card, as Kubernetes deals), for arbitrary sizes and hashes.
#![no_main]

use apf::dealer::{validate, Dealer, MAX_DECK_SIZE, MAX_HAND_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u32, u32, u64)| {
    let (deck, hand, hash) = input;
    // Raw sizes are mostly invalid: construction must agree with validate.
    check(deck, hand, hash);
    // Folded into the valid region, so most runs deal.
    let hand = hand % MAX_HAND_SIZE as u32 + 1;
    let deck = hand + deck % (largest_valid_deck(hand) - hand + 1);
    check(deck, hand, hash);
});

fn check(deck: u32, hand: u32, hash: u64) {
    let dealer = match Dealer::new(deck, hand) {
        Ok(dealer) => dealer,
        Err(error) => {
            assert_eq!(validate(deck, hand), Err(error));
            return;
        }
    };
    let mut plain = Vec::with_capacity(hand as usize);
    dealer.deal_plain(hash, |card| plain.push(card));
    assert_eq!(dealer.deal_into_hand(hash).as_slice(), &plain[..]);

    let mut dealt = Vec::with_capacity(hand as usize);
    dealer.deal(hash, |card| dealt.push(card));
    assert_eq!(dealt, plain);

    for (index, &card) in (0u32..).zip(&plain) {
        assert_eq!(dealer.card_at(hash, index), card);
        assert!(card < deck);
        assert!(!plain[..index as usize].contains(&card));
    }
}

/// Validity is monotone in the deck once it holds the hand.
fn largest_valid_deck(hand: u32) -> u32 {
    let (mut valid, mut invalid) = (hand, u64::from(MAX_DECK_SIZE) + 1);
    while invalid - u64::from(valid) > 1 {
        let middle = ((u64::from(valid) + invalid) / 2) as u32;
        if validate(middle, hand).is_ok() {
            valid = middle;
        } else {
            invalid = u64::from(middle);
        }
    }
    valid
}
