//! Costs of borrowing: feeding a level's seat demand (on the queueset's
//! path, twice a request) and one whole adjustment (every ten seconds).

use apf::borrowing::{allocate_current_cls, level_limits, LevelConfig, LevelDemand};
use apf::clock::Instant;
use apf::stats::{SeatDemandHandle, SeatDemandIntegrator};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

fn seat_demand_updates(c: &mut Criterion) {
    let mut group = c.benchmark_group("seat_demand");
    group.bench_function("integrator_set", |b| {
        let mut igr = SeatDemandIntegrator::new(Instant::ZERO);
        let mut t = 0u64;
        b.iter(|| {
            t += 100;
            igr.set(black_box((t % 7) as u32), Instant::from_nanos(t));
        });
    });
    group.bench_function("handle_add", |b| {
        let h = SeatDemandHandle::new(Instant::ZERO);
        let mut t = 0u64;
        b.iter(|| {
            t += 100;
            let delta = if t.is_multiple_of(200) { -1 } else { 1 };
            h.add(black_box(delta), Instant::from_nanos(t));
        });
    });
    group.finish();
}

fn levels(n: usize) -> Vec<LevelDemand> {
    let configs: Vec<LevelConfig> = (0..n)
        .map(|i| {
            LevelConfig::limited(format!("l{i}"), 10 + (i as u32 * 37) % 90)
                .with_lendable_percent((i as u32 * 13) % 100)
                .with_borrowing_limit_percent(if i % 3 == 0 { None } else { Some(50) })
        })
        .collect();
    level_limits(6000, &configs)
        .into_iter()
        .enumerate()
        .map(|(i, limits)| LevelDemand {
            limits,
            high_watermark: (i as u32 * 97) % 400,
            smoothed: ((i * 61) % 300) as f64,
        })
        .collect()
}

fn adjustment(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocate_current_cls");
    for n in [8usize, 100, 1000] {
        let input = levels(n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| allocate_current_cls(black_box(input)));
        });
    }
    group.finish();
}

criterion_group!(benches, seat_demand_updates, adjustment);
criterion_main!(benches);
