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

/// Limits and defaults from the v1 API.
pub const MAX_MATCHING_PRECEDENCE: i32 = 10_000;
pub const DEFAULT_MATCHING_PRECEDENCE: i32 = 1000;
pub const DEFAULT_NOMINAL_CONCURRENCY_SHARES: i32 = 30;
pub const DEFAULT_QUEUES: i32 = 64;
pub const DEFAULT_HAND_SIZE: i32 = 8;
pub const DEFAULT_QUEUE_LENGTH_LIMIT: i32 = 50;

/// The part of `metadata` that matters here; the rest is ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Cluster-scoped objects have none; a value is a validation error.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
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
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: FlowSchemaSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowSchemaSpec {
    #[serde(default)]
    pub priority_level_configuration: PriorityLevelConfigurationReference,
    /// Lower is matched first; 0 means "not set" and defaults to 1000.
    #[serde(default, deserialize_with = "null_as_default")]
    pub matching_precedence: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinguisher_method: Option<FlowDistinguisherMethod>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rules: Vec<PolicyRulesWithSubjects>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityLevelConfigurationReference {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDistinguisherMethod {
    /// `ByUser` or `ByNamespace`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRulesWithSubjects {
    #[serde(default, deserialize_with = "null_as_default")]
    pub subjects: Vec<Subject>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_rules: Vec<ResourcePolicyRule>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserSubject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupSubject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountSubject>,
}

impl Subject {
    pub fn user(name: impl Into<String>) -> Self {
        Self {
            kind: "User".into(),
            user: Some(UserSubject { name: name.into() }),
            ..Self::default()
        }
    }

    pub fn group(name: impl Into<String>) -> Self {
        Self {
            kind: "Group".into(),
            group: Some(GroupSubject { name: name.into() }),
            ..Self::default()
        }
    }

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

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSubject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSubject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccountSubject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub namespace: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourcePolicyRule {
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub api_groups: Vec<String>,
    /// `pods`, or `pods/status` for a subresource.
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub cluster_scope: bool,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub namespaces: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NonResourcePolicyRule {
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
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
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PriorityLevelConfigurationSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityLevelConfigurationSpec {
    /// `Exempt` or `Limited`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited: Option<LimitedPriorityLevelConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<ExemptPriorityLevelConfiguration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitedPriorityLevelConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_concurrency_shares: Option<i32>,
    #[serde(default)]
    pub limit_response: LimitResponse,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lendable_percent: Option<i32>,
    /// `None` means no limit on borrowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit_percent: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitResponse {
    /// `Queue` or `Reject`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queuing: Option<QueuingConfiguration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueuingConfiguration {
    #[serde(default, deserialize_with = "null_as_default")]
    pub queues: i32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub hand_size: i32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub queue_length_limit: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExemptPriorityLevelConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_concurrency_shares: Option<i32>,
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
