//! The API objects, in the shape of `flowcontrol.apiserver.k8s.io/v1`.
//!
//! These types hold what a file says, after Kubernetes' defaulting, before
//! validation: enumerations stay strings and numbers stay `i32` so that a bad
//! value can be reported the way the API server reports it (an unsupported
//! `type`, a negative share) instead of failing to parse. Field names follow
//! the JSON names through `rename_all = "camelCase"`.
//!
//! Unknown fields are ignored at the object and metadata level (kubectl
//! prints `status`, `managedFields`, `resourceVersion` and more) but rejected
//! inside `spec`, as `kubectl apply`'s strict field validation does: a
//! misspelt `handsize` would otherwise silently become the default.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// `apiVersion` of the objects this crate prints.
pub const API_VERSION_V1: &str = "flowcontrol.apiserver.k8s.io/v1";
/// The older version accepted on input; its spec has the same shape as v1.
pub const API_VERSION_V1BETA3: &str = "flowcontrol.apiserver.k8s.io/v1beta3";
/// `kind` of a flow schema object.
pub const KIND_FLOW_SCHEMA: &str = "FlowSchema";
/// `kind` of a priority level object.
pub const KIND_PRIORITY_LEVEL: &str = "PriorityLevelConfiguration";

/// The annotation Kubernetes puts on its bootstrap objects; `"true"` lets the
/// API server keep their spec up to date.
pub const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";
/// v1beta3 only: present when a zero `nominalConcurrencyShares` is meant as
/// zero rather than "use the default".
pub const PRESERVE_ZERO_SHARES_ANNOTATION: &str =
    "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares";

/// Name of the mandatory exempt priority level and flow schema.
pub const NAME_EXEMPT: &str = "exempt";
/// Name of the mandatory catch-all priority level and flow schema.
pub const NAME_CATCH_ALL: &str = "catch-all";

/// `*` in a subject name, verb, API group, resource or URL list.
pub const WILDCARD: &str = "*";

/// Largest `matchingPrecedence` the v1 API accepts (1..=10000; lower
/// matches first).
pub const MAX_MATCHING_PRECEDENCE: i32 = 10_000;
/// `matchingPrecedence` when a flow schema leaves it 0 (unset).
pub const DEFAULT_MATCHING_PRECEDENCE: i32 = 1000;
/// `nominalConcurrencyShares` of a limited level that does not set it.
pub const DEFAULT_NOMINAL_CONCURRENCY_SHARES: i32 = 30;
/// `queuing.queues` when unset: the number of queues of a queuing level.
pub const DEFAULT_QUEUES: i32 = 64;
/// `queuing.handSize` when unset: how many queues each flow is dealt.
pub const DEFAULT_HAND_SIZE: i32 = 8;
/// `queuing.queueLengthLimit` when unset: requests one queue may hold.
pub const DEFAULT_QUEUE_LENGTH_LIMIT: i32 = 50;

/// The part of `metadata` that matters here; the rest is ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name; flow schemas refer to priority levels by it. Must be a
    /// valid DNS subdomain name (validation reports it otherwise).
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Cluster-scoped objects have none; a value is a validation error.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub namespace: String,
    /// The object's UID as the API server assigned it, if the input carries
    /// one; reported with each classification (the tower layer's UID headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Labels, kept for printing; they play no part in flow control.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations; [`AUTO_UPDATE_ANNOTATION`] and
    /// [`PRESERVE_ZERO_SHARES_ANNOTATION`] are the ones flow control reads.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

impl ObjectMeta {
    /// Metadata with just a name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// A FlowSchema: which requests it matches, their priority level, and how
/// their flows are told apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSchema {
    /// Name and annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the schema matches and where its requests go.
    #[serde(default)]
    pub spec: FlowSchemaSpec,
}

/// The `spec` of a [`FlowSchema`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowSchemaSpec {
    /// The priority level its requests go to, by name. With a name that no
    /// level has, the schema is *dangling*: by default it matches nothing,
    /// as in Kubernetes ([`super::DanglingReferences`]).
    #[serde(default)]
    pub priority_level_configuration: PriorityLevelConfigurationReference,
    /// Lower is matched first; 0 means "not set" and defaults to 1000.
    #[serde(default, deserialize_with = "null_as_default")]
    pub matching_precedence: i32,
    /// How a request's flow is told apart within the level (its queue is chosen
    /// by hashing the flow); `None` puts all of the schema's requests in one flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinguisher_method: Option<FlowDistinguisherMethod>,
    /// The schema matches a request when any one rule matches it; no rules match
    /// nothing.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rules: Vec<PolicyRulesWithSubjects>,
}

/// A flow schema's reference to a priority level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityLevelConfigurationReference {
    /// The referenced [`PriorityLevelConfiguration`]'s `metadata.name`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// How requests of one flow schema are split into flows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDistinguisherMethod {
    /// `ByUser` or `ByNamespace`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
}

/// One rule of a flow schema: it matches a request made by any one of its
/// subjects that matches any one of its resource or non-resource rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRulesWithSubjects {
    /// Who: users, groups or service accounts (at least one).
    #[serde(default, deserialize_with = "null_as_default")]
    pub subjects: Vec<Subject>,
    /// Requests for API resources this rule matches.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_rules: Vec<ResourcePolicyRule>,
    /// Requests for non-resource URLs (`/healthz`, `/metrics`, ...) this rule
    /// matches.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_rules: Vec<NonResourcePolicyRule>,
}

/// A union: `kind` says which one of the three members is meant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub kind: String,
    /// The user, when `kind` is `User`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserSubject>,
    /// The group, when `kind` is `Group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupSubject>,
    /// The service account, when `kind` is `ServiceAccount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountSubject>,
}

impl Subject {
    /// A `User` subject; `"*"` matches every user.
    pub fn user(name: impl Into<String>) -> Self {
        Self {
            kind: "User".into(),
            user: Some(UserSubject { name: name.into() }),
            ..Self::default()
        }
    }

    /// A `Group` subject; `"system:authenticated"` matches every authenticated
    /// request, `"*"` every request.
    pub fn group(name: impl Into<String>) -> Self {
        Self {
            kind: "Group".into(),
            group: Some(GroupSubject { name: name.into() }),
            ..Self::default()
        }
    }

    /// A `ServiceAccount` subject: the account `name` in `namespace` (`"*"` for
    /// every account of the namespace).
    pub fn service_account(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: "ServiceAccount".into(),
            service_account: Some(ServiceAccountSubject {
                namespace: namespace.into(),
                name: name.into(),
            }),
            ..Self::default()
        }
    }
}

/// A user subject.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSubject {
    /// The user name, or `"*"` for every user.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// A group subject.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSubject {
    /// The group name, or `"*"` for every group.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// A service account subject.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccountSubject {
    /// The account's namespace (required).
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
    /// The account's name, or `"*"` for every account of the namespace.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// Matches requests for API resources by verb, API group, resource and
/// namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourcePolicyRule {
    /// Verbs (`get`, `list`, `watch`, `create`, ...) or `["*"]`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    /// API groups (`""` is the core group) or `["*"]`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub api_groups: Vec<String>,
    /// `pods`, or `pods/status` for a subresource.
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: Vec<String>,
    /// Whether the rule matches cluster-scoped requests (those without a
    /// namespace).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub cluster_scope: bool,
    /// Namespaces the rule matches namespaced requests in; `["*"]` matches every
    /// namespace. Empty with `cluster_scope` false matches nothing namespaced.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub namespaces: Vec<String>,
}

/// Matches requests for non-resource URLs by verb and path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NonResourcePolicyRule {
    /// HTTP verbs in lower case (`get`, `post`, ...) or `["*"]`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    /// Paths: exact (`/healthz`), a prefix ending in `/*` (`/apis/*`), or `"*"`.
    #[serde(
        rename = "nonResourceURLs",
        default,
        deserialize_with = "null_as_default"
    )]
    pub non_resource_urls: Vec<String>,
}

/// A PriorityLevelConfiguration: an exempt level or a limited one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityLevelConfiguration {
    /// Name and annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The level's type and limits.
    #[serde(default)]
    pub spec: PriorityLevelConfigurationSpec,
}

/// The `spec` of a [`PriorityLevelConfiguration`]: one of `limited` and
/// `exempt`, as `type_` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityLevelConfigurationSpec {
    /// `Exempt` or `Limited`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
    /// The limits of a `Limited` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited: Option<LimitedPriorityLevelConfiguration>,
    /// The shares of an `Exempt` level (it executes its requests at once, but its
    /// shares still count when the server's seats are divided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<ExemptPriorityLevelConfiguration>,
}

/// A limited priority level: its share of the server's seats and what happens
/// to requests beyond them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitedPriorityLevelConfiguration {
    /// Its weight when the server's concurrency limit is divided among the
    /// levels: a level's nominal seats are
    /// `ceil(serverLimit * shares / sum of all levels' shares)`. `None` means
    /// [`DEFAULT_NOMINAL_CONCURRENCY_SHARES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_concurrency_shares: Option<i32>,
    /// Whether requests that find no free seat wait in queues or are rejected.
    #[serde(default)]
    pub limit_response: LimitResponse,
    /// Percent (0..=100) of its nominal seats the level lends to others when it
    /// does not need them; `None` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lendable_percent: Option<i32>,
    /// `None` means no limit on borrowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit_percent: Option<i32>,
}

/// What a limited level does with a request that finds no free seat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitResponse {
    /// `Queue` or `Reject`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
    /// The queues, when `type_` is `Queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queuing: Option<QueuingConfiguration>,
}

/// Shuffle-sharded fair queuing of a limited level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueuingConfiguration {
    /// Number of queues (1 or more; 0 means [`DEFAULT_QUEUES`]).
    #[serde(default, deserialize_with = "null_as_default")]
    pub queues: i32,
    /// Queues dealt to each flow, of which it uses the shortest (1..=queues;
    /// 0 means [`DEFAULT_HAND_SIZE`]).
    #[serde(default, deserialize_with = "null_as_default")]
    pub hand_size: i32,
    /// Most requests one queue holds before it rejects (0 means
    /// [`DEFAULT_QUEUE_LENGTH_LIMIT`]).
    #[serde(default, deserialize_with = "null_as_default")]
    pub queue_length_limit: i32,
}

/// An exempt priority level's share and lending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExemptPriorityLevelConfiguration {
    /// Its weight when the server's seats are divided (`None` is 0); the level
    /// executes its requests regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_concurrency_shares: Option<i32>,
    /// Percent (0..=100) of its nominal seats it lends to limited levels; `None`
    /// is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lendable_percent: Option<i32>,
}

/// Go's JSON decoding leaves a field at its zero value when the input says
/// `null`; serde would fail instead. kubectl prints `null` for some empty
/// lists, so accept it.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}
