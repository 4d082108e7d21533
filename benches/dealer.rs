//! Shuffle-sharding deals: the reciprocal-division dealer against the plain
//! one (a hardware division per card, as Kubernetes deals), and `card_at`.
//! Each iteration deals a different hash from a fixed pseudo-random set.
use apf::dealer::Dealer;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

const SHAPES: [(u32, u32); 4] = [(128, 1), (128, 6), (128, 8), (16384, 4)];

fn hashes() -> Vec<u64> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..1024)
        .map(|_| {
            // xorshift64: cheap, and enough to defeat branch prediction.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
        .collect()
}

/// Hands out the hashes in turn, one per call.
fn cycle(hashes: &[u64]) -> impl FnMut() -> u64 + '_ {
    let mut next = 0;
    move || {
        next = (next + 1) % hashes.len();
        black_box(hashes[next])
    }
}

fn deal(c: &mut Criterion) {
    let hashes = hashes();
    let mut group = c.benchmark_group("deal");
    for (deck, hand) in SHAPES {
        let dealer = Dealer::new(deck, hand).expect("valid shape");
        let shape = format!("{deck}x{hand}");
        group.bench_function(BenchmarkId::new("fast", &shape), |b| {
            let mut hash = cycle(&hashes);
            b.iter(|| dealer.deal_into_hand(hash()))
        });
        group.bench_function(BenchmarkId::new("plain", &shape), |b| {
            let mut hash = cycle(&hashes);
            b.iter(|| {
                let mut cards = [0u32; 16];
                let mut len = 0;
                dealer.deal_plain(hash(), |card| {
                    cards[len] = card;
                    len += 1;
                });
                cards
            })
        });
        group.bench_function(BenchmarkId::new("card_at_first", &shape), |b| {
            let mut hash = cycle(&hashes);
            b.iter(|| dealer.card_at(hash(), 0))
        });
        group.bench_function(BenchmarkId::new("card_at_last", &shape), |b| {
            let mut hash = cycle(&hashes);
            b.iter(|| dealer.card_at(hash(), hand - 1))
        });
    }
    group.finish();
}

criterion_group!(benches, deal);
criterion_main!(benches);
