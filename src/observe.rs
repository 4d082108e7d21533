//! `/metrics` and Kubernetes' `/debug/api_priority_and_fairness/dump_*`
//! over HTTP, as one plain function every server can call
//! ([`answer`]); the tower service (`apf::tower::observe`, feature `tower`) and the C
//! ABI (`apf_dispatcher_observe`, which the C++ binding wraps) answer
//! through it.
//!
//! The dumps name users and paths: serve them where only operators reach.

use crate::dispatcher::Dispatcher;

/// The metrics path Prometheus scrapes.
pub const METRICS_PATH: &str = "/metrics";
/// Kubernetes' prefix of the debug dumps.
pub const DEBUG_PATH_PREFIX: &str = "/debug/api_priority_and_fairness/";
/// The `Content-Type` of the dumps.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// The HTTP answer to one of the observability paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserveAnswer {
    /// The HTTP status code (200).
    pub status: u16,
    /// The `Content-Type` header's value.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

/// The answer for `path` (the URL path, without the query) and `query`
/// (the raw query string, without `?`), or `None` when `path` is none of
/// `/metrics`, `…/dump_priority_levels`, `…/dump_queues`,
/// `…/dump_requests`. As in Kubernetes, `dump_requests` adds each request's
/// details when the first `includeRequestDetails` in the query has a
/// non-empty value.
pub fn answer(dispatcher: &Dispatcher, path: &str, query: &str) -> Option<ObserveAnswer> {
    if path == METRICS_PATH {
        return Some(ok(crate::metrics::CONTENT_TYPE, dispatcher.metrics_text()));
    }
    let body = match path.strip_prefix(DEBUG_PATH_PREFIX)? {
        "dump_priority_levels" => dispatcher.dump_priority_levels(),
        "dump_queues" => dispatcher.dump_queues(),
        "dump_requests" => dispatcher.dump_requests(include_details(query)),
        _ => return None,
    };
    Some(ok(TEXT_CONTENT_TYPE, body))
}

fn ok(content_type: &'static str, body: String) -> ObserveAnswer {
    ObserveAnswer {
        status: 200,
        content_type,
        body,
    }
}

/// Kubernetes reads `includeRequestDetails` with Go's `Query().Get`: the
/// first occurrence, any non-empty value.
fn include_details(query: &str) -> bool {
    query
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == "includeRequestDetails").then_some(value)
        })
        .next()
        .is_some_and(|value| !value.is_empty())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::dispatcher::DispatcherOptions;

    #[test]
    fn answers_the_four_paths_and_nothing_else() {
        let d = Dispatcher::builtin(DispatcherOptions::default(), Clock::manual().0);
        let metrics = answer(&d, "/metrics", "").expect("metrics");
        assert_eq!(metrics.content_type, crate::metrics::CONTENT_TYPE);
        assert!(metrics.body.ends_with("# EOF\n"), "{}", metrics.body);
        let levels = answer(
            &d,
            "/debug/api_priority_and_fairness/dump_priority_levels",
            "",
        )
        .expect("levels");
        assert_eq!(levels.body, d.dump_priority_levels());
        assert_eq!(levels.content_type, TEXT_CONTENT_TYPE);
        let queues = answer(&d, "/debug/api_priority_and_fairness/dump_queues", "");
        assert_eq!(queues.map(|a| a.body), Some(d.dump_queues()));
        for other in [
            "/",
            "/metrics/",
            "/debug/api_priority_and_fairness/",
            "/dump_queues",
        ] {
            assert_eq!(answer(&d, other, ""), None, "{other}");
        }
    }

    #[test]
    fn request_details_follow_the_first_include_request_details() {
        for (query, expected) in [
            ("", false),
            ("includeRequestDetails=1", true),
            ("a=b&includeRequestDetails=yes", true),
            ("includeRequestDetails=", false),
            ("includeRequestDetails", false),
            ("includeRequestDetails=&includeRequestDetails=1", false),
            ("xincludeRequestDetails=1", false),
        ] {
            assert_eq!(include_details(query), expected, "{query}");
        }
    }
}
