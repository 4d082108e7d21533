//! A plain interpreter of the configuration, rule by rule, as Kubernetes'
//! `rule.go` does it (joining `resource/subresource` and building service
//! account user names on the heap). It is the oracle the compiled
//! [`super::Classifier`] is tested against and the baseline it is
//! benchmarked against; it is not meant for serving requests.

use crate::config::{
    DistinguisherMethod, NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule,
    Subject, ValidConfig, ValidFlowSchema, NAME_CATCH_ALL, WILDCARD,
};

use super::{hash_flow_id, RequestDigest};

/// What [`classify`] found, owning its strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceClassification {
    pub schema_index: usize,
    pub level_index: usize,
    pub flow_distinguisher: String,
    pub flow_hash: u64,
    pub fallback: bool,
}

/// Classifies by scanning the validated configuration's schemas in matching
/// order; `None` only if the configuration had no usable catch-all schema,
/// which validation rules out.
pub fn classify(
    config: &ValidConfig,
    digest: &RequestDigest<'_>,
) -> Option<ReferenceClassification> {
    let schemas = config.flow_schemas();
    let matched = schemas
        .iter()
        .position(|fs| fs.priority_level.is_some() && matches_schema(digest, fs));
    let (schema_index, fallback) = match matched {
        Some(i) => (i, false),
        None => (
            schemas
                .iter()
                .position(|fs| fs.name == NAME_CATCH_ALL && fs.priority_level.is_some())?,
            true,
        ),
    };
    let schema = &schemas[schema_index];
    let level_index = schema.priority_level?;
    let level = &config.priority_levels()[level_index];
    let (flow_distinguisher, flow_hash) = if level.queues() > 1 {
        let d = match schema.distinguisher {
            None => String::new(),
            Some(DistinguisherMethod::ByUser) => digest.user.to_string(),
            Some(DistinguisherMethod::ByNamespace) => digest.namespace.to_string(),
        };
        let h = hash_flow_id(&schema.name, &d);
        (d, h)
    } else {
        (String::new(), 0)
    };
    Some(ReferenceClassification {
        schema_index,
        level_index,
        flow_distinguisher,
        flow_hash,
        fallback,
    })
}

/// Whether any rule of the schema accepts the request.
pub fn matches_schema(digest: &RequestDigest<'_>, schema: &ValidFlowSchema) -> bool {
    schema.rules.iter().any(|r| matches_rule(digest, r))
}

/// Whether one rule (subjects and resource or non-resource rules) accepts
/// the request.
pub fn matches_rule(digest: &RequestDigest<'_>, rule: &PolicyRulesWithSubjects) -> bool {
    if !rule.subjects.iter().any(|s| matches_subject(digest, s)) {
        return false;
    }
    if digest.is_resource_request {
        rule.resource_rules
            .iter()
            .any(|r| matches_resource_rule(digest, r))
    } else {
        rule.non_resource_rules
            .iter()
            .any(|r| matches_non_resource_rule(digest, r))
    }
}

fn matches_subject(digest: &RequestDigest<'_>, subject: &Subject) -> bool {
    match subject.kind.as_str() {
        "User" => subject
            .user
            .as_ref()
            .is_some_and(|u| u.name == WILDCARD || u.name == digest.user),
        "Group" => subject
            .group
            .as_ref()
            .is_some_and(|g| g.name == WILDCARD || digest.groups.iter().any(|ug| *ug == g.name)),
        "ServiceAccount" => subject.service_account.as_ref().is_some_and(|sa| {
            if sa.name == WILDCARD {
                digest
                    .user
                    .starts_with(&format!("system:serviceaccount:{}:", sa.namespace))
            } else {
                digest.user == format!("system:serviceaccount:{}:{}", sa.namespace, sa.name)
            }
        }),
        _ => false,
    }
}

fn matches_resource_rule(digest: &RequestDigest<'_>, rule: &ResourcePolicyRule) -> bool {
    let resource = if digest.subresource.is_empty() {
        digest.resource.to_string()
    } else {
        format!("{}/{}", digest.resource, digest.subresource)
    };
    if !contains(&rule.verbs, digest.verb)
        || !contains(&rule.resources, &resource)
        || !contains(&rule.api_groups, digest.api_group)
    {
        return false;
    }
    if digest.namespace.is_empty() {
        rule.cluster_scope
    } else {
        contains(&rule.namespaces, digest.namespace)
    }
}

fn matches_non_resource_rule(digest: &RequestDigest<'_>, rule: &NonResourcePolicyRule) -> bool {
    contains(&rule.verbs, digest.verb)
        && rule.non_resource_urls.iter().any(|url| {
            if url == WILDCARD || url == digest.path {
                return true;
            }
            let mut prefix = url.strip_suffix('*').unwrap_or(url).to_string();
            if !prefix.ends_with('/') {
                prefix.push('/');
            }
            digest.path.starts_with(&prefix)
        })
}

/// `["*"]` alone means everything; otherwise membership.
fn contains(list: &[String], x: &str) -> bool {
    (list.len() == 1 && list[0] == WILDCARD) || list.iter().any(|s| s == x)
}
