//! The adaptive server concurrency limit in the C ABI
//! ([`apf::adaptive`], docs/adaptive-limit.md): its tuning
//! (`apf_adaptive_options`, pointed to by
//! `apf_dispatcher_options.adaptive`) and its state now
//! (`apf_dispatcher_read_adaptive`).

use super::dispatcher::apf_dispatcher;
use super::sized::{read_growable, Growable};
use super::status::{apf_status, fail};
use apf::adaptive::{AdaptiveOptions, AdaptiveReport};
use apf::clock::duration_nanos;
use std::time::Duration;

/// The adaptive limit's tuning. Point `apf_dispatcher_options.adaptive` at
/// one to turn the limit on (NULL, the default, keeps the fixed
/// `server_concurrency_limit`). Always start from
/// `apf_adaptive_options_default`: it sets `struct_size` and the defaults
/// below, which docs/adaptive-limit.md justifies.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct apf_adaptive_options {
    /// `sizeof(apf_adaptive_options)` as the caller's header knows it; set
    /// by `apf_adaptive_options_default`.
    pub struct_size: usize,
    /// The least total the gradient may set, and where the slow start
    /// begins (default 8). At least 1.
    pub min_limit: u32,
    /// The greatest total the gradient may set (default 10000). From
    /// `min_limit` to 2^30.
    pub max_limit: u32,
    /// How often a window of latencies is taken and the total updated, in
    /// nanoseconds (default 250 ms). At least 10 ms (10000000).
    pub update_interval_ns: u64,
    /// The latency over the minimum the total settles at, in percent
    /// (default 10: 1.1 × the minimum latency). 1 to 1000.
    pub tolerance_percent: u32,
    /// How much of each window's target the total takes, in percent
    /// (default 20). 1 to 100.
    pub smoothing_percent: u32,
    /// The exponent on the latency ratio (default 3). 1 to 8.
    pub gain: u32,
    /// Windows with fewer completions than this are merged with the next
    /// (default 16).
    pub min_window_samples: u32,
    /// Time between minimum-latency probes, in nanoseconds (default 60 s).
    /// At least `update_interval_ns`.
    pub probe_interval_ns: u64,
    /// The total a probe asks for (default 3). From 1 to `max_limit`.
    pub probe_limit: u32,
    /// Completions a probe averages (default 50). At least 1.
    pub probe_samples: u32,
    /// The longest a probe drains or measures, in nanoseconds (default
    /// 2 s). At least `update_interval_ns`.
    pub probe_timeout_ns: u64,
}

impl apf_adaptive_options {
    fn from_rust(o: &AdaptiveOptions) -> apf_adaptive_options {
        apf_adaptive_options {
            struct_size: std::mem::size_of::<apf_adaptive_options>(),
            min_limit: o.min_limit,
            max_limit: o.max_limit,
            update_interval_ns: duration_nanos(o.update_interval),
            tolerance_percent: o.tolerance_percent,
            smoothing_percent: o.smoothing_percent,
            gain: o.gain,
            min_window_samples: o.min_window_samples,
            probe_interval_ns: duration_nanos(o.probe_interval),
            probe_limit: o.probe_limit,
            probe_samples: o.probe_samples,
            probe_timeout_ns: duration_nanos(o.probe_timeout),
        }
    }

    /// The Rust options, validated; the error names the field.
    fn to_rust(self) -> Result<AdaptiveOptions, String> {
        let options = AdaptiveOptions {
            min_limit: self.min_limit,
            max_limit: self.max_limit,
            update_interval: Duration::from_nanos(self.update_interval_ns),
            tolerance_percent: self.tolerance_percent,
            smoothing_percent: self.smoothing_percent,
            gain: self.gain,
            min_window_samples: self.min_window_samples,
            probe_interval: Duration::from_nanos(self.probe_interval_ns),
            probe_limit: self.probe_limit,
            probe_samples: self.probe_samples,
            probe_timeout: Duration::from_nanos(self.probe_timeout_ns),
        };
        match options.validate() {
            Ok(()) => Ok(options),
            // The C names of the duration fields end in `_ns`.
            Err(e) => {
                let field = match e.field {
                    "update_interval" | "probe_interval" | "probe_timeout" => {
                        format!("{}_ns", e.field)
                    }
                    f => f.to_owned(),
                };
                Err(format!("apf_adaptive_options.{field}: {}", e.message))
            }
        }
    }
}

impl Growable for apf_adaptive_options {
    const NAME: &'static str = "apf_adaptive_options";
    const MIN_SIZE: usize = std::mem::size_of::<apf_adaptive_options>();
    fn defaults() -> apf_adaptive_options {
        apf_adaptive_options::from_rust(&AdaptiveOptions::default())
    }
}

/// Read `apf_dispatcher_options.adaptive`: NULL is off; otherwise the
/// validated Rust options, or `APF_ERR_INVALID_PARAMETER` with a message
/// naming the field (it reaches the caller through the dispatcher
/// constructor's `out_error`).
///
/// # Safety
/// `ptr` is NULL or readable for the `struct_size` bytes it states.
pub(crate) unsafe fn adaptive_from_c(
    ptr: *const apf_adaptive_options,
) -> Result<Option<AdaptiveOptions>, apf_status> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    let raw = unsafe { read_growable(ptr) }?;
    raw.to_rust()
        .map(Some)
        .map_err(|e| fail(apf_status::APF_ERR_INVALID_PARAMETER, e))
}

/// Fill `*out` with the adaptive limit's default tuning: totals from 8 to
/// 10000 seats, a window every 250 ms, 10% tolerance, 20% smoothing, gain
/// 3, windows of at least 16 completions, a probe of 3 seats over 50
/// completions every 60 s that lasts at most 2 s.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_adaptive_options_default(
    out: *mut apf_adaptive_options,
) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_adaptive_options::defaults());
        apf_status::APF_OK
    }
}

/// The adaptive limit's state at one moment (`apf_dispatcher_read_adaptive`).
/// With the limit off, `enabled` is false and every other field 0.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct apf_adaptive_state {
    /// Whether the dispatcher runs the adaptive limit.
    pub enabled: bool,
    /// Whether a minimum-latency probe is under way.
    pub probing: bool,
    /// The total seats the priority levels share now.
    pub limit: u32,
    /// The smoothed total the gradient follows (a probe returns to it).
    pub estimate: f64,
    /// The minimum latency the last probe measured, in nanoseconds; 0
    /// until a probe has measured one.
    pub min_latency_ns: u64,
    /// The last window's mean execution time, in nanoseconds; 0 before the
    /// first window.
    pub latency_ns: u64,
    /// The last gradient applied, in [0.5, 2].
    pub gradient: f64,
    /// Probes started so far.
    pub probes: u64,
    /// Windows taken so far.
    pub updates: u64,
}

impl apf_adaptive_state {
    fn from_report(r: Option<&AdaptiveReport>) -> apf_adaptive_state {
        // Seconds to whole nanoseconds, at least 1 so a measured latency is
        // never read as "none"; `as` saturates.
        let nanos = |s: Option<f64>| s.map_or(0, |s| ((s * 1e9).round() as u64).max(1));
        match r {
            None => apf_adaptive_state {
                enabled: false,
                probing: false,
                limit: 0,
                estimate: 0.0,
                min_latency_ns: 0,
                latency_ns: 0,
                gradient: 0.0,
                probes: 0,
                updates: 0,
            },
            Some(r) => apf_adaptive_state {
                enabled: true,
                probing: r.probing,
                limit: r.limit,
                estimate: r.estimate,
                min_latency_ns: nanos(r.min_latency_secs),
                latency_ns: nanos(r.latency_secs),
                gradient: r.gradient,
                probes: r.probes,
                updates: r.updates,
            },
        }
    }
}

/// The adaptive limit's state now: the total, the minimum-latency
/// estimate, the last window's latency and gradient (the same figures as
/// the `apiserver_flowcontrol_adaptive_*` metrics). With the limit off,
/// `APF_OK` and `out->enabled` false.
///
/// # Safety
/// `dispatcher` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_read_adaptive(
    dispatcher: *const apf_dispatcher,
    out: *mut apf_adaptive_state,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let out = try_out!(out);
        out.write(apf_adaptive_state::from_report(d.inner.adaptive().as_ref()));
        apf_status::APF_OK
    }
}
