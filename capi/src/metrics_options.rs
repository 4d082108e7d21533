//! `apf_metrics_options`: the metric name prefix and constant labels of
//! an exposition, for a service that is not an API server or runs several
//! dispatchers in one process (see [`apf::metrics::ExpositionOptions`]).

use super::cast::{bytes_from_raw, str_from_raw};
use super::dispatcher::apf_dispatcher;
use super::names::apf_str;
use super::sized::{read_growable, Growable};
use super::status::{apf_status, fail};
use super::text::apf_text;
use crate::error::apf_error;
use apf::metrics::ExpositionOptions;

/// The most constant labels an exposition takes: each is on every series,
/// so a handful is plenty, and a bound keeps a bad count from allocating.
pub(crate) const APF_METRICS_MAX_CONST_LABELS: usize = 64;

/// One constant label: its name (letters, digits and `_`, not starting
/// with a digit or `__`, and none of the labels the metrics use) and its
/// value (any UTF-8).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_metrics_label {
    /// The label's name.
    pub name: apf_str,
    /// Its value on every series.
    pub value: apf_str,
}

/// How `apf_dispatcher_metrics_text_with` names and labels the series.
/// Always start from `apf_metrics_options_default` (no prefix, no labels):
/// it sets `struct_size`, which lets later versions add fields.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct apf_metrics_options {
    /// `sizeof(apf_metrics_options)` as the caller's header knows it; set
    /// by `apf_metrics_options_default`.
    pub struct_size: usize,
    /// Prepended, with `_`, to every metric name (`shop` gives
    /// `shop_apiserver_flowcontrol_...`); empty for none. Letters, digits
    /// and `_`, not starting with a digit.
    pub prefix: apf_str,
    /// Labels added to every series (NULL with 0 for none).
    pub const_labels: *const apf_metrics_label,
    /// How many `const_labels` there are (at most 64).
    pub const_labels_len: usize,
}

impl Growable for apf_metrics_options {
    const NAME: &'static str = "apf_metrics_options";
    const MIN_SIZE: usize = std::mem::size_of::<apf_metrics_options>();
    fn defaults() -> apf_metrics_options {
        apf_metrics_options {
            struct_size: std::mem::size_of::<apf_metrics_options>(),
            prefix: apf_str {
                ptr: std::ptr::null(),
                len: 0,
            },
            const_labels: std::ptr::null(),
            const_labels_len: 0,
        }
    }
}

/// The Rust options of the caller's struct; the error names the field.
///
/// # Safety
/// Every non-NULL pointer in `o` is readable for its length.
unsafe fn to_rust(o: &apf_metrics_options) -> Result<ExpositionOptions, apf_status> {
    let text = |s: apf_str, what: &dyn Fn() -> String| {
        // SAFETY: the caller's contract: readable for `len` bytes.
        unsafe { str_from_raw(s.ptr, s.len) }
            .map(str::to_owned)
            .map_err(|e| fail(e.status(), format_args!("{} {}", what(), e.describe())))
    };
    let prefix = text(o.prefix, &|| "apf_metrics_options.prefix".into())?;
    if o.const_labels_len > APF_METRICS_MAX_CONST_LABELS {
        return Err(fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            format_args!(
                "apf_metrics_options.const_labels_len is {}, more than the limit \
                 ({APF_METRICS_MAX_CONST_LABELS})",
                o.const_labels_len
            ),
        ));
    }
    // SAFETY: the caller's contract: readable for `const_labels_len` labels.
    let labels = unsafe { bytes_from_raw(o.const_labels, o.const_labels_len) }.map_err(|e| {
        fail(
            e.status(),
            format_args!("apf_metrics_options.const_labels {}", e.describe()),
        )
    })?;
    let mut const_labels = Vec::with_capacity(labels.len());
    for (i, label) in labels.iter().enumerate() {
        let name = text(label.name, &|| {
            format!("apf_metrics_options.const_labels[{i}].name")
        })?;
        let value = text(label.value, &|| {
            format!("apf_metrics_options.const_labels[{i}].value")
        })?;
        const_labels.push((name, value));
    }
    let options = ExpositionOptions {
        prefix: (!prefix.is_empty()).then_some(prefix),
        const_labels,
    };
    options.validate().map_err(|e| {
        fail(
            apf_status::APF_ERR_INVALID_PARAMETER,
            format_args!("apf_metrics_options: {e}"),
        )
    })?;
    Ok(options)
}

/// Fill `*out` with the default metrics options: no prefix, no labels.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_metrics_options_default(out: *mut apf_metrics_options) -> apf_status {
    ffi_panic_boundary! {
        let out = try_out!(out);
        out.write(apf_metrics_options::defaults());
        apf_status::APF_OK
    }
}

/// `apf_dispatcher_metrics_text` with a name prefix and constant labels
/// (`options` NULL: none, the same text). The options are checked first:
/// `APF_ERR_INVALID_PARAMETER` (the `apf_error` names the field at fault),
/// `APF_ERR_INVALID_UTF8`, or `APF_ERR_NULL_POINTER` (a NULL string or
/// label array with a non-zero length).
///
/// On `APF_OK`, `*out` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; `options` NULL or readable, with
/// every string and the label array readable for their lengths; `out` NULL
/// or writable.
/// `out_error` must be NULL or writable (on failure it receives an
/// owned `apf_error`: free it with `apf_error_free`).
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_metrics_text_with(
    dispatcher: *const apf_dispatcher,
    options: *const apf_metrics_options,
    out: *mut apf_text,
    out_error: *mut *mut apf_error,
) -> apf_status {
    ffi_error_boundary! { out_error,
        let d = try_ref_from_ptr!(dispatcher);
        // SAFETY: a non-NULL `options` is readable (contract above).
        let options = match unsafe { read_growable(options) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        // SAFETY: the strings and labels are readable (contract above).
        let options = match unsafe { to_rust(&options) } {
            Ok(o) => o,
            Err(status) => return status,
        };
        // `to_rust` validated the options, so this error is not expected;
        // it is still reported, never unwrapped.
        let text = match d.inner.metrics_text_with(&options) {
            Ok(text) => text,
            Err(e) => {
                return fail(
                    apf_status::APF_ERR_INVALID_PARAMETER,
                    format_args!("apf_metrics_options: {e}"),
                )
            }
        };
        // SAFETY: `out` per the contract.
        unsafe { super::text::text_out(out, || text) }
    }
}
