//! What every HTTP middleware shares, so that no binding re-implements it:
//! the 429 answer ([`apf::rejection`]), the `/metrics` and debug-dump
//! answers ([`apf::observe`]) and the request-to-digest path helper
//! ([`apf::classification::RequestInfo::parse`]).

use super::dispatcher::apf_dispatcher;
use super::names::apf_str;
use super::request::apf_reject_reason;
use super::status::{apf_status, fail};
use super::text::{apf_text, text_out};
use apf::classification::RequestInfo;
use apf::queueset::RejectReason;
use std::ffi::c_char;

/// The rejection reason behind a C `apf_reject_reason` value, checked (a
/// C enum may hold any integer).
fn reject_reason(raw: u32) -> Option<RejectReason> {
    use apf_reject_reason as R;
    [
        (R::APF_REJECT_QUEUE_FULL, RejectReason::QueueFull),
        (R::APF_REJECT_TIME_OUT, RejectReason::TimeOut),
        (R::APF_REJECT_CANCELLED, RejectReason::Cancelled),
        (
            R::APF_REJECT_CONCURRENCY_LIMIT,
            RejectReason::ConcurrencyLimit,
        ),
        (R::APF_REJECT_LEVEL_FAILED, RejectReason::LevelFailed),
    ]
    .into_iter()
    .find(|&(c, _)| c as u32 == raw)
    .map(|(_, r)| r)
}

/// Count a request that was not served and give its HTTP answer, the same
/// in every libapf middleware: status 429, `Retry-After: *out_retry_after`
/// (whole seconds, adapted per priority level to its recent rejections, as
/// Kubernetes does), `Content-Type: application/json` and `*out_body`, a
/// Kubernetes `Status` object naming the priority level and flow schema.
/// Send the decision's `X-Kubernetes-PF-FlowSchema-UID` and
/// `X-Kubernetes-PF-PriorityLevel-UID` headers with it, as with every
/// answer.
///
/// Call it once per request not served (rejected at once, timed out or
/// cancelled while queued) with the names from its `apf_decision` and the
/// reason (`APF_REJECT_NONE` is refused with `APF_ERR_INVALID_PARAMETER`).
/// On `APF_OK`, `*out_body` owns the text: free it with `apf_text_free`.
///
/// # Safety
/// `dispatcher` must be NULL or live; the strings readable for their
/// lengths (or NULL with length 0); the out-parameters NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_reject(
    dispatcher: *const apf_dispatcher,
    priority_level: *const c_char,
    priority_level_len: usize,
    flow_schema: *const c_char,
    flow_schema_len: usize,
    reason: u32,
    out_retry_after: *mut u64,
    out_body: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let level = try_str!(priority_level, priority_level_len, "priority_level");
        let schema = try_str!(flow_schema, flow_schema_len, "flow_schema");
        let Some(reason) = reject_reason(reason) else {
            return fail(
                apf_status::APF_ERR_INVALID_PARAMETER,
                format_args!("reason {reason} is not a rejection reason (1 to 5)"),
            );
        };
        if out_retry_after.is_null() || out_body.is_null() {
            return fail(apf_status::APF_ERR_NULL_POINTER, "out_retry_after or out_body is NULL");
        }
        let rejection = d.inner.reject(level, schema, reason);
        let out_retry_after = try_out!(out_retry_after);
        out_retry_after.write(rejection.retry_after);
        // SAFETY: `out_body` is non-NULL (checked above) and writable
        // (contract).
        unsafe { text_out(out_body, || rejection.body) }
    }
}

/// The answer to `/metrics` and Kubernetes'
/// `/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues`
/// and `dump_requests` (`?includeRequestDetails=1` adds each request's
/// details), for a server to send before admission (so they stay reachable
/// when it is saturated). `path` is the URL path, `query` the raw query
/// string without `?` (either may be `(NULL, 0)`).
///
/// On `APF_OK`: `*out_status` is the HTTP status (200), or 0 when `path`
/// is none of these (then the texts are zeroed: let the request through);
/// `*out_content_type` and `*out_body` own their texts: free both with
/// `apf_text_free`. The dumps name users and paths: serve them where only
/// operators reach.
///
/// # Safety
/// `dispatcher` must be NULL or live; the strings readable for their
/// lengths (or NULL with length 0); the out-parameters NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_dispatcher_observe(
    dispatcher: *const apf_dispatcher,
    path: *const c_char,
    path_len: usize,
    query: *const c_char,
    query_len: usize,
    out_status: *mut u16,
    out_content_type: *mut apf_text,
    out_body: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let d = try_ref_from_ptr!(dispatcher);
        let path = try_str!(path, path_len, "path");
        let query = try_str!(query, query_len, "query");
        if out_status.is_null() || out_content_type.is_null() || out_body.is_null() {
            return fail(
                apf_status::APF_ERR_NULL_POINTER,
                "out_status, out_content_type or out_body is NULL",
            );
        }
        let (status, content_type, body) = match apf::observe::answer(&d.inner, path, query) {
            Some(a) => (a.status, Some(a.content_type), Some(a.body)),
            None => (0, None, None),
        };
        // SAFETY (all three writes): non-NULL, checked above, and writable
        // (contract); `write` does not drop what was there.
        unsafe {
            out_status.write(status);
            match (content_type, body) {
                (Some(content_type), Some(body)) => {
                    text_out(out_content_type, || content_type.to_owned());
                    text_out(out_body, || body);
                }
                _ => {
                    out_content_type.write(apf_text::empty());
                    out_body.write(apf_text::empty());
                }
            }
        }
        apf_status::APF_OK
    }
}

/// The request attributes Kubernetes' API server derives from a method, a
/// URL path and its query string (`apf_request_info_parse_query`): the
/// digest's fields but the user and groups, which come from your
/// authentication.
///
/// Every `apf_str` points into the `path` given (valid while it is), except
/// a `name` taken from the query's field selector, which points into the
/// `out_name` text of `apf_request_info_parse_query`; `verb` is owned: free
/// it with `apf_text_free`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct apf_request_info {
    /// Kubernetes' verb for a resource request (`get`, `list`, `watch`,
    /// `create`, `update`, `patch`, `delete`, `deletecollection`), the
    /// lower-case method otherwise. Owned: free it with `apf_text_free`.
    pub verb: apf_text,
    /// A resource request (true) or a non-resource URL (false).
    pub is_resource_request: bool,
    /// API group, empty for the core group.
    pub api_group: apf_str,
    /// Resource (`pods`), empty for a non-resource request.
    pub resource: apf_str,
    /// Subresource (`status`), empty for none.
    pub subresource: apf_str,
    /// Namespace, empty when cluster-scoped. (`namespace_`: a C++ keyword.)
    pub namespace_: apf_str,
    /// Object name (from the path, or from a list's
    /// `fieldSelector=metadata.name=NAME`).
    pub name: apf_str,
    /// The whole path.
    pub path: apf_str,
}

/// Parse a Kubernetes-style request by Kubernetes' request-info rules:
/// `/api/v1/...` is the core group, `/apis/GROUP/VERSION/...` a named
/// group, then optionally a verb prefix (`watch/`, `proxy/`), then
/// optionally `namespaces/NAMESPACE`, then `RESOURCE[/NAME[/SUBRESOURCE]]`;
/// an empty segment inside the path is a segment
/// (`/api/v1/namespaces//pods` lists pods in every namespace). Any other
/// path is a non-resource request whose verb is the lower-case method.
/// `query` is the raw query string, without `?` (empty for none), read as
/// Kubernetes reads a collection GET's: the first `watch` value but `0` or
/// `false` (any case), an empty one included, makes it a watch, and a
/// `fieldSelector` requiring `metadata.name=NAME` gives it that name. The
/// one implementation behind every binding's path helper
/// (`tests/data/request-info-cases.json`).
///
/// On `APF_OK`, `*out` and `*out_name` are written: `out->name` points into
/// `path` or into `*out_name`'s text (empty when unused). Free `out->verb`
/// and `*out_name` with `apf_text_free`, `out_name` once done with
/// `out->name`.
///
/// `method` and `path` must be UTF-8 (else `APF_ERR_INVALID_UTF8`); `query`
/// may hold any bytes.
///
/// # Safety
/// The strings readable for their lengths (or NULL with length 0); `out`
/// and `out_name` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_request_info_parse_query(
    method: *const c_char,
    method_len: usize,
    path: *const c_char,
    path_len: usize,
    query: *const c_char,
    query_len: usize,
    out: *mut apf_request_info,
    out_name: *mut apf_text,
) -> apf_status {
    ffi_panic_boundary! {
        let method = try_str!(method, method_len, "method");
        let path = try_str!(path, path_len, "path");
        // The query is taken as bytes, UTF-8 or not, as Kubernetes takes it.
        // SAFETY: the caller vouches that a non-NULL `query` is readable for
        // `query_len` bytes during the call.
        let query = match unsafe { super::cast::bytes_from_raw(query.cast::<u8>(), query_len) } {
            Ok(query) => query,
            Err(e) => return fail(e.status(), format_args!("query {}", e.describe())),
        };
        if out.is_null() || out_name.is_null() {
            return fail(apf_status::APF_ERR_NULL_POINTER, "out or out_name is NULL");
        }
        let info = RequestInfo::parse(method, path, query);
        let mut name = apf_text::empty();
        if let std::borrow::Cow::Owned(owned) = &info.name {
            // SAFETY: `name` is a local, writable `apf_text`.
            unsafe { text_out(&mut name, || owned.clone()) };
        }
        let name_str = match &info.name {
            std::borrow::Cow::Owned(_) => apf_str { ptr: name.ptr, len: name.len },
            std::borrow::Cow::Borrowed(part) => apf_str { ptr: part.as_ptr().cast(), len: part.len() },
        };
        // SAFETY: `out` and `out_name` are non-NULL (checked above) and
        // writable (contract).
        unsafe {
            write_request_info(out, &info, name_str);
            out_name.write(name);
        }
        apf_status::APF_OK
    }
}

/// Parse a Kubernetes-style request as `apf_request_info_parse_query`
/// does, given only the `watch` query parameter's decoded value (empty
/// when absent) instead of the query: no field selector is read, so
/// `out->name` always points into `path`.
///
/// On `APF_OK`, `*out` is written; free `out->verb` with `apf_text_free`.
///
/// # Safety
/// The strings readable for their lengths (or NULL with length 0); `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn apf_request_info_parse(
    method: *const c_char,
    method_len: usize,
    path: *const c_char,
    path_len: usize,
    watch: *const c_char,
    watch_len: usize,
    out: *mut apf_request_info,
) -> apf_status {
    ffi_panic_boundary! {
        let method = try_str!(method, method_len, "method");
        let path = try_str!(path, path_len, "path");
        let watch = try_str!(watch, watch_len, "watch");
        if out.is_null() {
            return fail(apf_status::APF_ERR_NULL_POINTER, "out is NULL");
        }
        let watch = (!watch.is_empty()).then_some(watch);
        let info = RequestInfo::parse_watch_value(method, path, watch);
        let name = apf_str { ptr: info.name.as_ptr().cast(), len: info.name.len() };
        // SAFETY: `out` is non-NULL (checked above) and writable (contract).
        unsafe { write_request_info(out, &info, name) };
        apf_status::APF_OK
    }
}

/// Fill `*out` from `info`, with `name` for its name.
///
/// # Safety
/// `out` is non-NULL and writable for one `apf_request_info`.
unsafe fn write_request_info(out: *mut apf_request_info, info: &RequestInfo<'_>, name: apf_str) {
    let s = |part: &str| apf_str {
        ptr: part.as_ptr().cast(),
        len: part.len(),
    };
    let mut verb = apf_text::empty();
    // SAFETY: `verb` is a local, writable `apf_text`.
    unsafe { text_out(&mut verb, || info.verb.clone()) };
    let value = apf_request_info {
        verb,
        is_resource_request: info.is_resource_request,
        api_group: s(info.api_group),
        resource: s(info.resource),
        subresource: s(info.subresource),
        namespace_: s(info.namespace),
        name,
        path: s(info.path),
    };
    // SAFETY: `out` is non-NULL and writable (contract); `write` does not
    // drop what was there.
    unsafe { out.write(value) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_c_reason_but_none_maps_to_a_rejection_reason() {
        assert_eq!(
            reject_reason(apf_reject_reason::APF_REJECT_NONE as u32),
            None
        );
        assert_eq!(reject_reason(99), None);
        for raw in 1..=5 {
            let reason = reject_reason(raw).expect("a reason");
            assert_eq!(apf_reject_reason::from(reason) as u32, raw);
        }
    }
}
