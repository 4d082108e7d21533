//! Virtual time: R(t) and work, in fixed-point seat-nanoseconds.
//!
//! Kubernetes keeps R in `SeatSeconds` (a u64 of 1e-8 seat-seconds) and
//! advances it with a float64 rate. Here R is an integer of 2^-20
//! seat-nanoseconds in an `i128`: the rate min(C, demand) / active-queues is
//! applied as one integer multiply and one floor division per time step, so
//! there is no float drift and no epoch roll-over (an i128 of this unit lasts
//! 10^14 years at a million seats). Both the reference model and the
//! optimised core use these functions, so they agree to the last bit.

use crate::clock::duration_nanos;
use std::time::Duration;

/// A virtual time or an amount of work: 2^-20 seat-nanoseconds.
pub type VTime = i128;

/// Fraction bits of [`VTime`].
pub const FRACTION_BITS: u32 = 20;

/// `seats × d` as virtual work.
#[inline]
pub fn seats_times(seats: u32, d: Duration) -> VTime {
    seats_times_nanos(seats, duration_nanos(d))
}

/// `seats × nanos` as virtual work.
#[inline]
pub fn seats_times_nanos(seats: u32, nanos: u64) -> VTime {
    ((seats as i128) * (nanos as i128)) << FRACTION_BITS
}

/// How far R advances in `dt_nanos` when `demand` seats are requested
/// (executing, lingering for additional latency, or waiting) from
/// `active_queues` non-empty queues under concurrency limit `limit`
/// (Kubernetes' equal division among queues).
#[inline]
pub fn r_increment(limit: u32, demand: u64, active_queues: u32, dt_nanos: u64) -> VTime {
    rate_increment((limit as u64).min(demand), active_queues as u64, dt_nanos)
}

/// How far R advances in `dt_nanos` at `num / den` seats per queue:
/// ⌊num × dt × 2^20 / den⌋ (0 when `den` is 0: no queue is active).
#[inline]
pub fn rate_increment(num: u64, den: u64, dt_nanos: u64) -> VTime {
    if den == 0 || dt_nanos == 0 || num == 0 {
        return 0;
    }
    // The common case (num × dt < 2^43) stays in 64-bit arithmetic.
    match num.checked_mul(dt_nanos) {
        Some(p) if p < (1u64 << (63 - FRACTION_BITS)) => ((p << FRACTION_BITS) / den) as VTime,
        _ => (((num as i128) * (dt_nanos as i128)) << FRACTION_BITS) / den as i128,
    }
}

/// How far R advances over an unsaturated epoch of `dt_nanos` in which
/// the level served `seat_nanos` of seat-time, with `active_queues` active
/// at its end (the epoch rule, docs/scaling.md "The next core"):
/// `min(limit × dt, W) / max(1, active)`. The core and the reference model
/// both use it, so they agree to the last bit.
#[inline]
pub fn epoch_increment(limit: u32, seat_nanos: u128, active_queues: u32, dt_nanos: u64) -> VTime {
    let cap = u128::from(limit) * u128::from(dt_nanos);
    let w = seat_nanos.min(cap).min(u128::MAX >> (FRACTION_BITS + 1));
    ((w as i128) << FRACTION_BITS) / i128::from(active_queues.max(1))
}

/// The virtual work a request is charged at dispatch:
/// initial seats × G plus final seats × additional latency.
#[inline]
pub fn total_work(
    initial_seats: u32,
    final_seats: u32,
    additional_latency: Duration,
    g: Duration,
) -> VTime {
    seats_times(initial_seats, g) + seats_times(final_seats, additional_latency)
}

/// Convert virtual time to seat-seconds, for reports and metrics.
pub fn to_seat_seconds(v: VTime) -> f64 {
    (v as f64) / ((1u64 << FRACTION_BITS) as f64) / 1e9
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn r_advances_at_min_of_limit_and_demand_over_active_queues() {
        // 4 seats demanded, limit 10, 2 queues: R advances 2 seat-ns per ns.
        assert_eq!(r_increment(10, 4, 2, 1000), 2000 << FRACTION_BITS);
        // Demand above the limit: capped at the limit.
        assert_eq!(r_increment(3, 40, 1, 1000), 3000 << FRACTION_BITS);
        assert_eq!(r_increment(3, 40, 0, 1000), 0);
        assert_eq!(r_increment(3, 0, 2, 1000), 0);
    }

    #[test]
    fn large_steps_take_the_wide_path_without_overflow() {
        let dt = 10 * 365 * 24 * 3600 * 1_000_000_000u64; // ten years
        let v = r_increment(1 << 20, u64::MAX, 3, dt);
        assert_eq!(v, (((1i128 << 20) * dt as i128) << FRACTION_BITS) / 3);
    }

    #[test]
    fn total_work_adds_initial_and_final_parts() {
        let w = total_work(2, 3, Duration::from_millis(10), Duration::from_millis(3));
        assert_eq!(
            w,
            seats_times_nanos(2, 3_000_000) + seats_times_nanos(3, 10_000_000)
        );
        assert!((to_seat_seconds(w) - 0.036).abs() < 1e-12);
    }
}
