//! Shuffle sharding (placeholder: plain-division dealer; the fast dealer lands from the `dealer` branch).
use std::fmt;

pub const MAX_HASH_BITS: u32 = 60;
pub const MAX_HAND_SIZE: usize = 15;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DealerError {
    NotPositive { deck_size: u32, hand_size: u32 },
    HandLargerThanDeck { deck_size: u32, hand_size: u32 },
    TooMuchEntropy { deck_size: u32, hand_size: u32 },
}

impl fmt::Display for DealerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DealerError::NotPositive { deck_size, hand_size } => {
                write!(f, "deckSize {deck_size} or handSize {hand_size} is not positive")
            }
            DealerError::HandLargerThanDeck { deck_size, hand_size } => {
                write!(f, "handSize {hand_size} is greater than deckSize {deck_size}")
            }
            DealerError::TooMuchEntropy { deck_size, hand_size } => write!(
                f,
                "required entropy bits of deckSize {deck_size} and handSize {hand_size} should not be greater than {MAX_HASH_BITS}"
            ),
        }
    }
}
impl std::error::Error for DealerError {}

pub fn required_entropy_bits(deck_size: u32, hand_size: u32) -> u32 {
    ((deck_size as f64).log2() * hand_size as f64).ceil() as u32
}

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
    if required_entropy_bits(deck_size, hand_size) > MAX_HASH_BITS {
        return Err(DealerError::TooMuchEntropy {
            deck_size,
            hand_size,
        });
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Dealer {
    deck_size: u32,
    hand_size: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct Hand {
    cards: [u32; MAX_HAND_SIZE],
    len: usize,
}

impl std::ops::Deref for Hand {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.cards[..self.len]
    }
}

impl Dealer {
    pub fn new(deck_size: u32, hand_size: u32) -> Result<Dealer, DealerError> {
        validate(deck_size, hand_size)?;
        Ok(Dealer {
            deck_size,
            hand_size,
        })
    }
    pub fn deck_size(&self) -> u32 {
        self.deck_size
    }
    pub fn hand_size(&self) -> u32 {
        self.hand_size
    }
    pub fn deal(&self, mut hash: u64, mut pick: impl FnMut(u32)) {
        let mut rem = [0u32; MAX_HAND_SIZE];
        for (i, r) in rem.iter_mut().enumerate().take(self.hand_size as usize) {
            let d = (self.deck_size - i as u32) as u64;
            *r = (hash % d) as u32;
            hash /= d;
        }
        for i in 0..self.hand_size as usize {
            let mut card = rem[i];
            for j in (0..i).rev() {
                if card >= rem[j] {
                    card += 1;
                }
            }
            pick(card);
        }
    }
    pub fn deal_into_hand(&self, hash: u64) -> Hand {
        let mut hand = Hand {
            cards: [0; MAX_HAND_SIZE],
            len: 0,
        };
        self.deal(hash, |c| {
            hand.cards[hand.len] = c;
            hand.len += 1;
        });
        hand
    }
    pub fn card_at(&self, hash: u64, index: u32) -> u32 {
        self.deal_into_hand(hash)[index as usize]
    }
}
