//! The answer to a request APF did not serve: one implementation of the
//! 429 for every middleware (the tower layer, and through the C ABI the Go,
//! Python and C++ ones), so that they answer alike byte for byte.
//!
//! - Status `429 Too Many Requests`.
//! - `Retry-After`: whole seconds from the dispatcher's
//!   [`DroppedRequests`] tracker, which adapts the value to how often the
//!   request's priority level has been rejecting lately, as Kubernetes'
//!   API server does. Every request not served counts: rejected at once,
//!   timed out in its queue, or cancelled while it waited.
//! - Body: a Kubernetes `Status` object (`application/json`), the shape
//!   Kubernetes' API errors have (`reason: TooManyRequests`, `code: 429`,
//!   `details.retryAfterSeconds`), whose message is Kubernetes' sentence
//!   followed by the priority level and flow schema that rejected it, and
//!   whose one cause is the rejection reason (`queue-full`, `time-out`,
//!   `cancelled`, `concurrency-limit`). Kubernetes' own filter sends the
//!   bare sentence as `text/plain` (see docs/differences-from-kubernetes.md).
//! - The `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID`
//!   headers, as on every answer (see [`crate::uid`]).

use crate::dispatcher::Dispatcher;
use crate::queueset::RejectReason;
use crate::retry_after::DroppedRequests;
use serde::Serialize;

/// The HTTP status code of a rejection.
pub const STATUS_CODE: u16 = 429;
/// The `Content-Type` of [`Rejection::body`].
pub const CONTENT_TYPE: &str = "application/json";
/// Kubernetes' sentence for a request its APF filter did not serve.
pub const MESSAGE: &str = "Too many requests, please try again later.";
/// The header naming the matched flow schema's UID.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
/// The header naming the matched priority level's UID.
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// What to answer a request that was not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The `Retry-After` header's value, in whole seconds (at least 1).
    pub retry_after: u64,
    /// The `Status` JSON body ([`CONTENT_TYPE`]).
    pub body: String,
}

impl Dispatcher {
    /// Count a request classified to `priority_level` / `flow_schema` that
    /// was not served for `reason`, and give its 429 answer. Call it once
    /// per such request (the count drives `Retry-After`).
    pub fn reject(
        &self,
        priority_level: &str,
        flow_schema: &str,
        reason: RejectReason,
    ) -> Rejection {
        let retry_after = self.dropped_requests().record(priority_level);
        Rejection {
            retry_after,
            body: status_body(priority_level, flow_schema, reason, retry_after),
        }
    }
}

/// The `Status` object of a rejection, with Kubernetes' field order.
pub fn status_body(
    priority_level: &str,
    flow_schema: &str,
    reason: RejectReason,
    retry_after: u64,
) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Status<'a> {
        kind: &'static str,
        api_version: &'static str,
        metadata: Empty,
        status: &'static str,
        message: String,
        reason: &'static str,
        details: Details<'a>,
        code: u16,
    }
    #[derive(Serialize)]
    struct Empty {}
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Details<'a> {
        causes: [Cause<'a>; 1],
        retry_after_seconds: u64,
    }
    #[derive(Serialize)]
    struct Cause<'a> {
        reason: &'a str,
        message: String,
    }
    let status = Status {
        kind: "Status",
        api_version: "v1",
        metadata: Empty {},
        status: "Failure",
        message: format!(
            "{MESSAGE} (priority level {priority_level:?}, flow schema {flow_schema:?})"
        ),
        reason: "TooManyRequests",
        details: Details {
            causes: [Cause {
                reason: reason.as_str(),
                message: cause_message(reason).to_owned(),
            }],
            retry_after_seconds: retry_after,
        },
        code: STATUS_CODE,
    };
    // Serialising plain strings and numbers cannot fail.
    serde_json::to_string(&status).unwrap_or_default()
}

fn cause_message(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::QueueFull => "its queue was full",
        RejectReason::TimeOut => "it waited in its queue too long",
        RejectReason::Cancelled => "it was cancelled while it waited",
        RejectReason::ConcurrencyLimit => "its priority level had no free seat and does not queue",
        RejectReason::LevelFailed => "its priority level failed",
    }
}

/// The rejection history of a dispatcher (see [`Dispatcher::reject`]).
impl Dispatcher {
    /// The per-level history of rejections behind `Retry-After`.
    pub fn dropped_requests(&self) -> &DroppedRequests {
        &self.drops
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::dispatcher::DispatcherOptions;
    use std::time::Duration;

    #[test]
    fn the_body_is_a_kubernetes_status_naming_level_and_schema() {
        let body = status_body(
            "workload-low",
            "service-accounts",
            RejectReason::QueueFull,
            4,
        );
        assert_eq!(
            body,
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Too many requests, please try again later. (priority level \"workload-low\", flow schema \"service-accounts\")","#,
                r#""reason":"TooManyRequests","details":{"causes":[{"reason":"queue-full","message":"its queue was full"}],"retryAfterSeconds":4},"code":429}"#
            )
        );
        let parsed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(parsed["details"]["retryAfterSeconds"], 4);
    }

    #[test]
    fn names_with_quotes_stay_valid_json() {
        let body = status_body("a\"b", "c\\d", RejectReason::TimeOut, 1);
        let parsed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let message = parsed["message"].as_str().unwrap_or_default();
        assert!(message.contains(r#""a\"b""#), "{message}");
    }

    #[test]
    fn reject_counts_toward_the_levels_retry_after() {
        let (clock, manual) = Clock::manual();
        let d = Dispatcher::builtin(DispatcherOptions::default(), clock);
        for _ in 0..4 {
            assert_eq!(d.reject("pl", "fs", RejectReason::QueueFull).retry_after, 1);
        }
        manual.advance(Duration::from_secs(1));
        let r = d.reject("pl", "fs", RejectReason::QueueFull);
        assert_eq!(r.retry_after, 2, "4 rejections in 1 s are at least 3 × 1");
        assert!(r.body.contains(r#""retryAfterSeconds":2"#), "{}", r.body);
        assert_eq!(d.dropped_requests().retry_after("other"), 1);
    }
}
