//! [`OwnedDigest`]: the one owned form of a request's digest.

use super::{RequestDigest, RequestInfo};
use smallvec::SmallVec;

/// A [`RequestDigest`] that owns its strings: what a middleware's
/// classification function builds from an HTTP request, what a simulated
/// flow sends, what a test keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedDigest {
    /// Authenticated user name ([`RequestDigest::user`]).
    pub user: String,
    /// The user's groups ([`RequestDigest::groups`]).
    pub groups: Vec<String>,
    /// Kubernetes' verb, or the lower-case HTTP method of a non-resource request.
    pub verb: String,
    /// A request for an API resource rather than a non-resource URL.
    pub is_resource_request: bool,
    /// The API group, `""` for the core group.
    pub api_group: String,
    /// The resource (`pods`), or `""`.
    pub resource: String,
    /// The subresource (`status`), or `""`.
    pub subresource: String,
    /// The namespace, `""` for a cluster-scoped request.
    pub namespace: String,
    /// The object's name, or `""`.
    pub name: String,
    /// The URL path.
    pub path: String,
}

impl OwnedDigest {
    /// The digest of a request whose attributes came from
    /// [`RequestInfo::parse`],
    /// for `user` in `groups` (from your authentication).
    pub fn from_info(info: &RequestInfo<'_>, user: String, groups: Vec<String>) -> OwnedDigest {
        OwnedDigest {
            user,
            groups,
            verb: info.verb.clone(),
            is_resource_request: info.is_resource_request,
            api_group: info.api_group.to_owned(),
            resource: info.resource.to_owned(),
            subresource: info.subresource.to_owned(),
            namespace: info.namespace.to_owned(),
            name: info.name.to_string(),
            path: info.path.to_owned(),
        }
    }

    /// The borrowed digest, with `groups` as its group list (see
    /// [`OwnedDigest::group_refs`]). A `RequestDigest` borrows its groups
    /// as `&[&str]`, which a `Vec<String>` cannot lend by itself.
    pub fn as_digest<'a>(&'a self, groups: &'a [&'a str]) -> RequestDigest<'a> {
        RequestDigest {
            user: &self.user,
            groups,
            verb: &self.verb,
            is_resource_request: self.is_resource_request,
            api_group: &self.api_group,
            resource: &self.resource,
            subresource: &self.subresource,
            namespace: &self.namespace,
            name: &self.name,
            path: &self.path,
        }
    }

    /// The groups as `&str`s, on the stack for up to eight of them.
    pub fn group_refs(&self) -> SmallVec<[&str; 8]> {
        self.groups.iter().map(String::as_str).collect()
    }

    /// Run `f` on the borrowed digest.
    pub fn with_digest<R>(&self, f: impl FnOnce(&RequestDigest<'_>) -> R) -> R {
        let groups = self.group_refs();
        f(&self.as_digest(&groups))
    }
}

impl From<&RequestDigest<'_>> for OwnedDigest {
    fn from(d: &RequestDigest<'_>) -> Self {
        OwnedDigest {
            user: d.user.to_owned(),
            groups: d.groups.iter().map(|g| (*g).to_owned()).collect(),
            verb: d.verb.to_owned(),
            is_resource_request: d.is_resource_request,
            api_group: d.api_group.to_owned(),
            resource: d.resource.to_owned(),
            subresource: d.subresource.to_owned(),
            namespace: d.namespace.to_owned(),
            name: d.name.to_owned(),
            path: d.path.to_owned(),
        }
    }
}
