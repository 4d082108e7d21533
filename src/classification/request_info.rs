//! The request attributes Kubernetes' API server derives from an HTTP
//! method, a URL path and the `watch` query parameter, for servers that lay
//! out their URLs as Kubernetes does (`/api/v1/...`,
//! `/apis/GROUP/VERSION/...`): the request-to-digest helper every binding
//! has (Go `ParsePath`, Python `apf.parse_path`), with one set of expectations for all of them in
//! `tests/data/request-info-cases.json`.

use super::RequestDigest;

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
    /// The object's name, or `""` for a collection.
    pub name: &'a str,
    /// The URL path as given.
    pub path: &'a str,
}

impl<'a> RequestInfo<'a> {
    /// Reads `path` as Kubernetes does: `/api/v1/...` is the core group,
    /// `/apis/GROUP/VERSION/...` a named group, then optionally
    /// `namespaces/NAMESPACE`, then `RESOURCE[/NAME[/SUBRESOURCE]]`
    /// (`namespaces/NAME` alone, or with `status` or `finalize`, is the
    /// namespace object itself). Any other path, and a group version's
    /// discovery, is a non-resource request. `watch` is the value of the
    /// `watch` query parameter: `true` or `1` turns get and list into watch.
    pub fn parse(method: &str, path: &'a str, watch: &str) -> RequestInfo<'a> {
        let mut info = RequestInfo {
            verb: method.to_ascii_lowercase(),
            path,
            ..RequestInfo::default()
        };
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let group = match (parts.next(), parts.next()) {
            (Some("api"), Some(_version)) => "",
            (Some("apis"), Some(group)) => {
                if parts.next().is_none() {
                    return info; // /apis/GROUP: discovery
                }
                group
            }
            _ => return info,
        };
        let rest: Vec<&'a str> = parts.collect();
        if rest.is_empty() {
            return info; // a group version's discovery
        }
        info.is_resource_request = true;
        info.api_group = group;
        let mut rest = rest.as_slice();
        if let ["namespaces", namespace, tail @ ..] = rest {
            info.namespace = namespace;
            let names_the_namespace = matches!(tail, [] | ["status" | "finalize", ..]);
            if !names_the_namespace {
                rest = tail;
            }
        }
        info.resource = rest[0];
        info.name = rest.get(1).copied().unwrap_or("");
        info.subresource = rest.get(2).copied().unwrap_or("");
        let watching = watch == "true" || watch == "1";
        let named = !info.name.is_empty();
        let verb = match method.to_ascii_uppercase().as_str() {
            "GET" | "HEAD" if watching => "watch",
            "GET" | "HEAD" if named => "get",
            "GET" | "HEAD" => "list",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if named => "delete",
            "DELETE" => "deletecollection",
            _ => return info,
        };
        info.verb = verb.to_string();
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
            name: self.name,
            path: self.path,
        }
    }
}
