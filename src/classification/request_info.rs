//! The request attributes Kubernetes' API server derives from an HTTP
//! method, a URL path and its query string, for servers that lay
//! out their URLs as Kubernetes does (`/api/v1/...`,
//! `/apis/GROUP/VERSION/...`): the request-to-digest helper every binding
//! has (Go `ParsePath`, Python `apf.parse_path`), with one set of expectations for all of them in
//! `tests/data/request-info-cases.json`.

use super::list_query::ListQuery;
use super::RequestDigest;
use std::borrow::Cow;

/// What a method and a Kubernetes-style path say about a request. Fill in
/// the user and groups from authentication with [`RequestInfo::digest`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo<'a> {
    /// Kubernetes' verb for a resource request (`get`, `list`, `watch`,
    /// `create`, `update`, `patch`, `delete`, `deletecollection`), the
    /// lower-case method otherwise.
    pub verb: String,
    /// Whether the path names an API resource (`/api/...`, `/apis/...`).
    pub is_resource_request: bool,
    /// The API group, `""` for the core group (`/api/v1`).
    pub api_group: &'a str,
    /// The resource (`pods`), or `""`.
    pub resource: &'a str,
    /// The subresource (`status`), or `""`.
    pub subresource: &'a str,
    /// The namespace (`/namespaces/NS/...`), or `""` for a cluster-scoped
    /// request.
    pub namespace: &'a str,
    /// The object's name, or `""` for a collection. A list or watch whose
    /// `fieldSelector` requires `metadata.name` to equal a name has that
    /// name, as in Kubernetes (the only part not borrowed from the path).
    pub name: Cow<'a, str>,
    /// The URL path as given.
    pub path: &'a str,
}

impl<'a> RequestInfo<'a> {
    /// Reads `path` by Kubernetes' request-info rules (the API server's
    /// `RequestInfoFactory`), so that a middleware sees what Kubernetes
    /// would: `/api/VERSION/...` is the core group,
    /// `/apis/GROUP/VERSION/...` a named group, then optionally a verb
    /// prefix (`watch/` or `proxy/`), then optionally
    /// `namespaces/NAMESPACE`, then `RESOURCE[/NAME[/SUBRESOURCE]]`
    /// (`namespaces/NAME` alone, or with `status` or `finalize`, is the
    /// namespace object itself). Only the slashes at either end are
    /// dropped: an empty segment inside the path is a segment, so
    /// `/api/v1/namespaces//pods` lists pods in namespace `""` (all
    /// namespaces), as in Kubernetes, never a get of one object. Any other
    /// path, and discovery (`/api/v1`, `/apis/GROUP/VERSION`), is a
    /// non-resource request whose verb is the lower-case method; a resource
    /// request's method other than GET, HEAD, POST, PUT, PATCH and DELETE
    /// (exact case) has verb `""`.
    ///
    /// `query` is the request's raw query string, without the `?` (`""`
    /// for none; a `&str` or raw bytes, which need not be UTF-8), read as
    /// Kubernetes reads it for a GET of a collection:
    /// the first `watch` value but `0` or `false` (any case), an empty one
    /// included, makes it a watch, and a `fieldSelector` that requires
    /// `metadata.name=NAME` gives it that name (verb still `list` or
    /// `watch`).
    pub fn parse(method: &str, path: &'a str, query: impl AsRef<[u8]>) -> RequestInfo<'a> {
        Self::parse_with(method, path, || ListQuery::parse(query.as_ref()))
    }

    /// As [`RequestInfo::parse`], given only the decoded `watch` query
    /// value (`None` when absent), for a caller whose framework has
    /// already decoded the query (the C ABI's `apf_request_info_parse`).
    /// Without the query, a `fieldSelector` naming the object is not seen.
    pub fn parse_watch_value(method: &str, path: &'a str, watch: Option<&str>) -> RequestInfo<'a> {
        Self::parse_with(method, path, || ListQuery::from_watch_value(watch))
    }

    fn parse_with(
        method: &str,
        path: &'a str,
        list_query: impl FnOnce() -> ListQuery,
    ) -> RequestInfo<'a> {
        let mut info = RequestInfo {
            verb: method.to_ascii_lowercase(),
            path,
            ..RequestInfo::default()
        };
        let trimmed = path.trim_matches('/');
        if trimmed.is_empty() {
            return info;
        }
        // Kept: empty segments (`a//b`), which Kubernetes reads as segments.
        let parts: Vec<&'a str> = trimmed.split('/').collect();
        // Past the prefix, the group for /apis, and the version: what
        // remains is never empty (a prefix with nothing after its version
        // is discovery).
        let (group, mut rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
            _ => return info,
        };
        info.is_resource_request = true;
        info.api_group = group;
        let verb_from_path = matches!(rest[0], "watch" | "proxy");
        if verb_from_path {
            if rest.len() < 2 {
                // Kubernetes refuses this path (it names no resource);
                // what is known is kept, as Kubernetes keeps it.
                return info;
            }
            info.verb = rest[0].to_string();
            rest = &rest[1..];
        } else {
            info.verb = match method {
                "GET" | "HEAD" => "get",
                "POST" => "create",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if let ["namespaces", namespace, tail @ ..] = rest {
            info.namespace = namespace;
            let names_the_namespace = matches!(tail, [] | ["status" | "finalize", ..]);
            if !names_the_namespace {
                rest = tail;
            }
        }
        info.resource = rest[0];
        info.name = Cow::Borrowed(rest.get(1).copied().unwrap_or(""));
        if info.verb != "proxy" {
            info.subresource = rest.get(2).copied().unwrap_or("");
        }
        // A get or delete that names no object is one of a collection (an
        // empty name segment names none).
        if info.name.is_empty() && info.verb == "get" {
            let query = list_query();
            info.verb = if query.watch { "watch" } else { "list" }.to_string();
            if let Some(name) = query.name {
                info.name = Cow::Owned(name);
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_string();
        }
        info
    }

    /// The digest of this request for `user` in `groups`.
    pub fn digest<'b>(&'b self, user: &'b str, groups: &'b [&'b str]) -> RequestDigest<'b> {
        RequestDigest {
            user,
            groups,
            verb: &self.verb,
            is_resource_request: self.is_resource_request,
            api_group: self.api_group,
            resource: self.resource,
            subresource: self.subresource,
            namespace: self.namespace,
            name: &self.name,
            path: self.path,
        }
    }
}
