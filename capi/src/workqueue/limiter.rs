//! `apf_rate_limiter`: a rate limiter's description, turned into a limiter on
//! the queue's clock by `apf_workqueue_new`.

use super::super::cast::{bytes_from_raw, free_box, to_boxed_mut_ptr, Castable};
use super::super::status::{apf_status, fail};
use super::items::Key;
use crate::error::apf_error;
use apf::clock::Clock;
use apf::workqueue::{
    ItemExponentialFailure, ItemFastSlow, ItemTokenBucket, MaxOf, RateLimiter, TokenBucket,
};
use std::num::NonZeroUsize;
use std::time::Duration;

/// A rate limiter's description, not yet bound to a clock: each queue made
/// with it (`apf_workqueue_options.limiter`) gets its own limiter, with its own
/// state, built from a copy of the description. Free it with
/// `apf_rate_limiter_free` once no longer needed (queues keep their copy).
///
/// Thread safety: immutable once made; may be read from any number of
/// threads at once (by `apf_workqueue_new`, `apf_rate_limiter_new_max_of`), but not
/// while `apf_rate_limiter_free` runs.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct apf_rate_limiter {
    _private: [u8; 0],
}

/// Nesting of `max_of` descriptions allowed (deeper is surely a mistake).
const MAX_DEPTH: usize = 16;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LimiterSpec {
    TokenBucket {
        qps: f64,
        burst: u32,
    },
    ItemTokenBucket {
        qps: f64,
        burst: u32,
    },
    Exponential {
        base: Duration,
        max: Duration,
    },
    FastSlow {
        fast: Duration,
        slow: Duration,
        max_fast_attempts: u32,
    },
    MaxOf(Vec<LimiterSpec>),
}

impl Castable for apf_rate_limiter {
    type RustType = LimiterSpec;
}

/// How per-item limiter state is bounded (see `RateLimiter`'s docs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StateBounds {
    pub(crate) capacity: Option<NonZeroUsize>,
    pub(crate) idle_expiry: Option<Duration>,
}

/// A limiter as the queue uses it; the per-item ones are bounded by
/// [`StateBounds`].
pub(crate) type Limiter = Box<dyn RateLimiter<Key>>;

macro_rules! bounded {
    ($limiter:expr, $bounds:expr) => {{
        let mut l = $limiter;
        if let Some(c) = $bounds.capacity {
            l = l.with_capacity(c);
        }
        if let Some(e) = $bounds.idle_expiry {
            // Zero is mapped to "default" before we get here.
            l = l
                .with_idle_expiry(e)
                .expect("a non-zero idle expiry is valid");
        }
        Box::new(l) as Limiter
    }};
}

impl LimiterSpec {
    /// client-go's default controller limiter: the larger of a per-item
    /// exponential backoff from 5 ms to 1000 s and a 10 qps, burst 100
    /// bucket shared by all items.
    pub(crate) fn default_controller() -> LimiterSpec {
        LimiterSpec::MaxOf(vec![
            LimiterSpec::Exponential {
                base: Duration::from_millis(5),
                max: Duration::from_secs(1000),
            },
            LimiterSpec::TokenBucket {
                qps: 10.0,
                burst: 100,
            },
        ])
    }

    fn depth(&self) -> usize {
        match self {
            LimiterSpec::MaxOf(all) => 1 + all.iter().map(|l| l.depth()).max().unwrap_or(0),
            _ => 1,
        }
    }

    /// The limiter, on `clock`. The description was validated when made.
    pub(crate) fn build(&self, clock: &Clock, bounds: StateBounds) -> Limiter {
        match self {
            LimiterSpec::TokenBucket { qps, burst } => Box::new(
                TokenBucket::new(clock, *qps, *burst).expect("validated by its constructor"),
            ),
            LimiterSpec::ItemTokenBucket { qps, burst } => bounded!(
                ItemTokenBucket::new(clock, *qps, *burst).expect("validated by its constructor"),
                bounds
            ),
            LimiterSpec::Exponential { base, max } => {
                bounded!(ItemExponentialFailure::new(clock, *base, *max), bounds)
            }
            LimiterSpec::FastSlow {
                fast,
                slow,
                max_fast_attempts,
            } => bounded!(
                ItemFastSlow::new(clock, *fast, *slow, *max_fast_attempts),
                bounds
            ),
            LimiterSpec::MaxOf(all) => Box::new(MaxOf::new(
                all.iter().map(|l| l.build(clock, bounds)).collect(),
            )),
        }
    }
}

/// Check a token bucket's parameters, naming the bad one.
fn check_bucket(qps: f64, burst: u32) -> Result<(), apf_status> {
    if qps.is_nan() || qps <= 0.0 {
        return Err(fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            format_args!("qps must be a positive number of events per second (or +infinity for no limit), not {qps}"),
        ));
    }
    if burst == 0 && qps.is_finite() {
        return Err(fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            "burst must be at least 1 for a finite qps",
        ));
    }
    Ok(())
}

/// Hand a new description to C.
fn give(spec: LimiterSpec, out: *mut *mut apf_rate_limiter) -> apf_status {
    if out.is_null() {
        return fail(apf_status::APF_ERR_NULL_POINTER, "out is NULL");
    }
    // SAFETY: non-NULL checked above; writable per the exported functions'
    // contract.
    unsafe { super::super::cast::out_param(out) }.write(to_boxed_mut_ptr(spec));
    apf_status::APF_OK
}

/// client-go's default controller limiter: the larger of a per-item
/// exponential backoff (5 ms doubling up to 1000 s) and one token bucket of
/// 10 qps with a burst of 100 shared by all items. What a queue uses when
/// `apf_workqueue_options.limiter` is NULL. Free `*out` with `apf_rate_limiter_free`.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_default(
    out: *mut *mut apf_rate_limiter,
) -> apf_status {
    ffi_panic_boundary! {
        give(LimiterSpec::default_controller(), out)
    }
}

/// One token bucket for all items (client-go's `BucketRateLimiter`): `qps`
/// tokens a second, at most `burst` stored, one taken per rate-limited add.
/// `qps` must be positive (`+INFINITY`: no limit) and `burst` at least 1 for
/// a finite `qps`, else `APF_ERR_INVALID_PARAMETER`. Keeps no per-item
/// state: `apf_workqueue_num_requeues` counts nothing for it.
///
/// # Safety
/// `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_token_bucket(
    qps: f64,
    burst: u32,
    out: *mut *mut apf_rate_limiter,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        if let Err(status) = check_bucket(qps, burst) {
            return status;
        }
        give(LimiterSpec::TokenBucket { qps, burst }, out)
    }
}

/// A token bucket per item (client-go's `ItemBucketRateLimiter`), with the
/// parameters checked as for `apf_rate_limiter_new_token_bucket`. Per-item
/// state is bounded (`apf_workqueue_options.limiter_state_capacity`).
///
/// # Safety
/// `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_item_token_bucket(
    qps: f64,
    burst: u32,
    out: *mut *mut apf_rate_limiter,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        if let Err(status) = check_bucket(qps, burst) {
            return status;
        }
        give(LimiterSpec::ItemTokenBucket { qps, burst }, out)
    }
}

/// Per-item exponential backoff (client-go's
/// `ItemExponentialFailureRateLimiter`): an item's n-th rate-limited add
/// since it was last forgotten waits `base_nanos * 2^(n-1)`, at most
/// `max_nanos` (never overflowing). `base_nanos` greater than `max_nanos`
/// is `APF_ERR_INVALID_PARAMETER`.
///
/// # Safety
/// `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_exponential(
    base_nanos: u64,
    max_nanos: u64,
    out: *mut *mut apf_rate_limiter,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        if base_nanos > max_nanos {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!("base_nanos ({base_nanos}) must not exceed max_nanos ({max_nanos})"),
            );
        }
        give(
            LimiterSpec::Exponential {
                base: Duration::from_nanos(base_nanos),
                max: Duration::from_nanos(max_nanos),
            },
            out,
        )
    }
}

/// Fast, then slow retries per item (client-go's `ItemFastSlowRateLimiter`):
/// an item's first `max_fast_attempts` rate-limited adds wait `fast_nanos`,
/// later ones `slow_nanos`. `fast_nanos` greater than `slow_nanos` is
/// `APF_ERR_INVALID_PARAMETER`.
///
/// # Safety
/// `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_fast_slow(
    fast_nanos: u64,
    slow_nanos: u64,
    max_fast_attempts: u32,
    out: *mut *mut apf_rate_limiter,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        if fast_nanos > slow_nanos {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!("fast_nanos ({fast_nanos}) must not exceed slow_nanos ({slow_nanos})"),
            );
        }
        give(
            LimiterSpec::FastSlow {
                fast: Duration::from_nanos(fast_nanos),
                slow: Duration::from_nanos(slow_nanos),
                max_fast_attempts,
            },
            out,
        )
    }
}

/// The longest delay of several limiters (client-go's `MaxOfRateLimiter`);
/// `apf_workqueue_num_requeues` is the largest of theirs, `apf_workqueue_forget` forgets
/// in all. `limiters` points to `n` (at least 1) non-NULL descriptions,
/// which are copied: free them whenever you like. Nesting deeper than 16
/// levels is `APF_ERR_INVALID_PARAMETER`.
///
/// # Safety
/// `limiters` must be NULL or readable for `n` pointers, each NULL or a
/// live `apf_rate_limiter`; `out` must be NULL or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_new_max_of(
    limiters: *const *const apf_rate_limiter,
    n: usize,
    out: *mut *mut apf_rate_limiter,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        // SAFETY: readable for `n` pointers (contract above).
        let list = match unsafe { bytes_from_raw(limiters, n) } {
            Ok(list) => list,
            Err(e) => return fail(e.status(), format_args!("limiters {}", e.describe())),
        };
        if list.is_empty() {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                "n must be at least 1 (limiters to take the maximum of)",
            );
        }
        let mut all = Vec::with_capacity(list.len());
        for (i, &ptr) in list.iter().enumerate() {
            // SAFETY: NULL or live (contract above).
            match unsafe { super::super::cast::try_from(ptr) } {
                Some(spec) => all.push(LimiterSpec::clone(spec)),
                None => {
                    return fail(
                        apf_status::APF_ERR_NULL_POINTER,
                        format_args!("limiters[{i}] is NULL"),
                    )
                }
            }
        }
        let spec = LimiterSpec::MaxOf(all);
        if spec.depth() > MAX_DEPTH {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!("limiters nest more than {MAX_DEPTH} max_of levels deep"),
            );
        }
        give(spec, out)
    }
}

/// Free a limiter description. Queues made with it keep their own copy.
/// NULL is a no-op.
///
/// # Safety
/// `limiter` must be NULL or a live description, not used afterwards nor
/// concurrently.
#[no_mangle]
pub unsafe extern "C" fn apf_rate_limiter_free(limiter: *mut apf_rate_limiter) {
    ffi_panic_boundary! {
        // SAFETY: the caller hands over ownership (contract above).
        unsafe { free_box(limiter) }
    }
}
