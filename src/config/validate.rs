//! Validation as the API server does it (`pkg/apis/flowcontrol/validation`
//! in Kubernetes), plus the two rules of its config consumers: missing
//! mandatory objects are supplied, and a flow schema naming a priority level
//! that does not exist is reported as Kubernetes reports it in the schema's
//! `Dangling` condition.

use std::collections::HashSet;

use super::builtin;
use super::defaults::{default_flow_schema, default_priority_level, SourceVersion};
use super::error::{ConfigError, ConfigErrors, ErrorSink, ErrorType, ObjectRef};
use super::model::*;
use super::types::*;
use super::Config;

/// What to do with a flow schema whose priority level does not exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DanglingReferences {
    /// An error: the configuration is rejected (a strict check).
    Reject,
    /// Kubernetes' behaviour, the default: the API server accepts such a
    /// schema and its controller marks it `Dangling`; it matches nothing,
    /// and [`ValidConfig::notices`] names it.
    #[default]
    Ignore,
}

/// What to do with a mandatory object (`exempt`, `catch-all`) whose spec
/// differs from Kubernetes' fixed value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChangedMandatory {
    /// An error, as the API server's validation makes it.
    #[default]
    Reject,
    /// Replace the spec with the fixed value, as Kubernetes' configuration
    /// producer does to the objects it finds, and say so in the notices.
    Overwrite,
}

/// How [`super::Config::validate_with`] treats what Kubernetes tolerates or
/// fixes up; the default is Kubernetes' API-server behaviour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValidateOptions {
    /// A flow schema that names a priority level that does not exist.
    pub dangling: DanglingReferences,
    /// A mandatory object whose spec differs from Kubernetes' fixed value.
    pub changed_mandatory: ChangedMandatory,
}

pub(crate) fn validate(
    config: &Config,
    opts: &ValidateOptions,
) -> Result<ValidConfig, ConfigErrors> {
    validate_noting(config, opts).0
}

/// [`validate`], with the notices also when the configuration has errors
/// (a tool shows a dangling schema's notice beside the errors).
pub(crate) fn validate_noting(
    config: &Config,
    opts: &ValidateOptions,
) -> (Result<ValidConfig, ConfigErrors>, Vec<Notice>) {
    let mut config = config.clone();
    // Idempotent for loaded objects; gives objects built in code the same
    // defaults a file would have got.
    for pl in &mut config.priority_levels {
        default_priority_level(pl, SourceVersion::V1);
    }
    for fs in &mut config.flow_schemas {
        default_flow_schema(fs);
    }
    let mut notices = ensure_mandatory(&mut config);
    if opts.changed_mandatory == ChangedMandatory::Overwrite {
        notices.extend(overwrite_changed_mandatory(&mut config));
    }

    let mut errors = Vec::new();
    check_priority_levels(&config.priority_levels, &mut errors);
    let level_names: HashSet<&str> = config
        .priority_levels
        .iter()
        .map(|pl| pl.metadata.name.as_str())
        .collect();
    check_flow_schemas(&config.flow_schemas, &mut errors);
    let dangling = dangling_references(&config.flow_schemas, &level_names);
    match opts.dangling {
        DanglingReferences::Reject => errors.extend(dangling),
        DanglingReferences::Ignore => notices.extend(dangling.into_iter().map(|e| Notice {
            object: e.object,
            message: format!("ignored, matches no request: {}", e.detail),
        })),
    }
    if !errors.is_empty() {
        return (Err(ConfigErrors(errors)), notices);
    }
    (Ok(build(config, notices.clone())), notices)
}

/// Adds the mandatory objects the configuration lacks, as Kubernetes'
/// configuration producer creates any that is missing.
pub(crate) fn ensure_mandatory(config: &mut Config) -> Vec<Notice> {
    let mut notices = Vec::new();
    for pl in builtin::mandatory_priority_levels() {
        if !config
            .priority_levels
            .iter()
            .any(|p| p.metadata.name == pl.metadata.name)
        {
            notices.push(added(KIND_PRIORITY_LEVEL, &pl.metadata.name));
            config.priority_levels.push(pl);
        }
    }
    for fs in builtin::mandatory_flow_schemas() {
        if !config
            .flow_schemas
            .iter()
            .any(|f| f.metadata.name == fs.metadata.name)
        {
            notices.push(added(KIND_FLOW_SCHEMA, &fs.metadata.name));
            config.flow_schemas.push(fs);
        }
    }
    notices
}

fn added(kind: &str, name: &str) -> Notice {
    Notice {
        object: ObjectRef::new(kind, name),
        message: "mandatory object missing from the configuration: added".into(),
    }
}

fn overwrite_changed_mandatory(config: &mut Config) -> Vec<Notice> {
    let mut notices = Vec::new();
    for pl in &mut config.priority_levels {
        if let Some(fixed) = builtin::mandatory_priority_level(&pl.metadata.name) {
            if !mandatory_level_spec_matches(pl, &fixed) {
                pl.spec = fixed.spec;
                notices.push(overwritten(KIND_PRIORITY_LEVEL, &pl.metadata.name));
            }
        }
    }
    for fs in &mut config.flow_schemas {
        if let Some(fixed) = builtin::mandatory_flow_schema(&fs.metadata.name) {
            if fs.spec != fixed.spec {
                fs.spec = fixed.spec;
                notices.push(overwritten(KIND_FLOW_SCHEMA, &fs.metadata.name));
            }
        }
    }
    notices
}

fn overwritten(kind: &str, name: &str) -> Notice {
    Notice {
        object: ObjectRef::new(kind, name),
        message: "spec of a mandatory object differed from the fixed value: overwritten".into(),
    }
}

/// The exempt level's `spec.exempt` may be tuned; nothing else of a
/// mandatory level may.
fn mandatory_level_spec_matches(
    pl: &PriorityLevelConfiguration,
    fixed: &PriorityLevelConfiguration,
) -> bool {
    if pl.metadata.name == NAME_EXEMPT {
        pl.spec.type_ == fixed.spec.type_ && pl.spec.limited == fixed.spec.limited
    } else {
        pl.spec == fixed.spec
    }
}

fn check_priority_levels(levels: &[PriorityLevelConfiguration], errors: &mut Vec<ConfigError>) {
    let mut seen = HashSet::new();
    for pl in levels {
        let mut sink = ErrorSink::new(
            ObjectRef::new(KIND_PRIORITY_LEVEL, &pl.metadata.name),
            errors,
        );
        check_meta(&pl.metadata, &mut seen, &mut sink);
        check_level_spec(&pl.metadata.name, &pl.spec, &mut sink);
        super::fairness::check_fairness(&pl.metadata, &mut sink);
        if let Some(fixed) = builtin::mandatory_priority_level(&pl.metadata.name) {
            if !mandatory_level_spec_matches(pl, &fixed) {
                let detail = if pl.metadata.name == NAME_EXEMPT {
                    "spec of 'exempt' except the 'spec.exempt' field must equal the fixed value"
                        .to_string()
                } else {
                    format!("spec of '{}' must equal the fixed value", pl.metadata.name)
                };
                sink.invalid("spec", "<differs from the fixed value>", detail);
            }
        }
    }
}

fn check_flow_schemas(schemas: &[FlowSchema], errors: &mut Vec<ConfigError>) {
    let mut seen = HashSet::new();
    for fs in schemas {
        let mut sink = ErrorSink::new(ObjectRef::new(KIND_FLOW_SCHEMA, &fs.metadata.name), errors);
        check_meta(&fs.metadata, &mut seen, &mut sink);
        super::cost::check_cost_annotation(&fs.metadata, &mut sink);
        check_schema_spec(&fs.metadata.name, &fs.spec, &mut sink);
        if let Some(fixed) = builtin::mandatory_flow_schema(&fs.metadata.name) {
            if fs.spec != fixed.spec {
                sink.invalid(
                    "spec",
                    "<differs from the fixed value>",
                    format!("spec of '{}' must equal the fixed value", fs.metadata.name),
                );
            }
        }
    }
}

fn dangling_references(schemas: &[FlowSchema], level_names: &HashSet<&str>) -> Vec<ConfigError> {
    schemas
        .iter()
        .filter(|fs| {
            // An empty or malformed reference is reported as such already.
            let target = fs.spec.priority_level_configuration.name.as_str();
            is_dns_subdomain(target) && !level_names.contains(target)
        })
        .map(|fs| {
            let target = &fs.spec.priority_level_configuration.name;
            ConfigError {
                object: ObjectRef::new(KIND_FLOW_SCHEMA, &fs.metadata.name),
                field: "spec.priorityLevelConfiguration.name".into(),
                error_type: ErrorType::NotFound,
                value: Some(format!("{target:?}")),
                detail: format!(
                    "This FlowSchema references the PriorityLevelConfiguration object named {target:?} but there is no such object"
                ),
            }
        })
        .collect()
}

fn check_meta<'a>(meta: &'a ObjectMeta, seen: &mut HashSet<&'a str>, sink: &mut ErrorSink<'_>) {
    if meta.name.is_empty() {
        sink.required("metadata.name", "name is required");
    } else {
        check_dns_subdomain("metadata.name", &meta.name, sink);
        if !seen.insert(meta.name.as_str()) {
            sink.push(
                "metadata.name",
                ErrorType::Duplicate,
                Some(format!("{:?}", meta.name)),
                "",
            );
        }
    }
    if !meta.namespace.is_empty() {
        sink.forbidden("metadata.namespace", "not allowed on this type");
    }
}

const SUPPORTED_VERBS: [&str; 9] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];
const SUPPORTED_SUBJECT_KINDS: [&str; 3] = ["Group", "ServiceAccount", "User"];
const SUPPORTED_DISTINGUISHERS: [&str; 2] = ["ByNamespace", "ByUser"];
const SUPPORTED_LEVEL_TYPES: [&str; 2] = ["Exempt", "Limited"];
const SUPPORTED_LIMIT_RESPONSES: [&str; 2] = ["Queue", "Reject"];
const MAX_QUEUES: i32 = 10_000_000;

fn check_schema_spec(name: &str, spec: &FlowSchemaSpec, sink: &mut ErrorSink<'_>) {
    let precedence = spec.matching_precedence;
    if precedence <= 0 {
        sink.invalid(
            "spec.matchingPrecedence",
            precedence,
            "must be a positive value",
        );
    }
    if precedence > MAX_MATCHING_PRECEDENCE {
        sink.invalid(
            "spec.matchingPrecedence",
            precedence,
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        );
    }
    if precedence == 1 && name != NAME_EXEMPT {
        sink.invalid(
            "spec.matchingPrecedence",
            precedence,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        );
    }
    if let Some(method) = &spec.distinguisher_method {
        if !SUPPORTED_DISTINGUISHERS.contains(&method.type_.as_str()) {
            sink.not_supported(
                "spec.distinguisherMethod.type",
                format!("{:?}", method.type_),
                &SUPPORTED_DISTINGUISHERS,
            );
        }
    }
    let level = &spec.priority_level_configuration.name;
    if level.is_empty() {
        sink.required(
            "spec.priorityLevelConfiguration.name",
            "must reference a priority level",
        );
    } else {
        check_dns_subdomain("spec.priorityLevelConfiguration.name", level, sink);
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        check_rule(&format!("spec.rules[{i}]"), rule, sink);
    }
}

fn check_rule(path: &str, rule: &PolicyRulesWithSubjects, sink: &mut ErrorSink<'_>) {
    if rule.subjects.is_empty() {
        sink.required(
            format!("{path}.subjects"),
            "subjects must contain at least one value",
        );
    }
    for (i, subject) in rule.subjects.iter().enumerate() {
        check_subject(&format!("{path}.subjects[{i}]"), subject, sink);
    }
    if rule.resource_rules.is_empty() && rule.non_resource_rules.is_empty() {
        sink.required(
            path,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        );
    }
    for (i, r) in rule.resource_rules.iter().enumerate() {
        check_resource_rule(&format!("{path}.resourceRules[{i}]"), r, sink);
    }
    for (i, r) in rule.non_resource_rules.iter().enumerate() {
        check_non_resource_rule(&format!("{path}.nonResourceRules[{i}]"), r, sink);
    }
}

fn check_subject(path: &str, subject: &Subject, sink: &mut ErrorSink<'_>) {
    let forbid_user = |sink: &mut ErrorSink<'_>| {
        if subject.user.is_some() {
            sink.forbidden(
                format!("{path}.user"),
                "user is forbidden when subject kind is not 'User'",
            );
        }
    };
    let forbid_group = |sink: &mut ErrorSink<'_>| {
        if subject.group.is_some() {
            sink.forbidden(
                format!("{path}.group"),
                "group is forbidden when subject kind is not 'Group'",
            );
        }
    };
    let forbid_service_account = |sink: &mut ErrorSink<'_>| {
        if subject.service_account.is_some() {
            sink.forbidden(
                format!("{path}.serviceAccount"),
                "serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
            );
        }
    };
    match subject.kind.as_str() {
        "ServiceAccount" => {
            check_service_account(&format!("{path}.serviceAccount"), subject, sink);
            forbid_user(sink);
            forbid_group(sink);
        }
        "User" => {
            match &subject.user {
                None => sink.required(
                    format!("{path}.user"),
                    "user is required when subject kind is 'User'",
                ),
                Some(u) if u.name.is_empty() => sink.required(format!("{path}.user.name"), ""),
                Some(_) => {}
            }
            forbid_service_account(sink);
            forbid_group(sink);
        }
        "Group" => {
            match &subject.group {
                None => sink.required(
                    format!("{path}.group"),
                    "group is required when subject kind is 'Group'",
                ),
                Some(g) if g.name.is_empty() => sink.required(format!("{path}.group.name"), ""),
                Some(_) => {}
            }
            forbid_service_account(sink);
            forbid_user(sink);
        }
        other => sink.not_supported(
            format!("{path}.kind"),
            format!("{other:?}"),
            &SUPPORTED_SUBJECT_KINDS,
        ),
    }
}

fn check_service_account(path: &str, subject: &Subject, sink: &mut ErrorSink<'_>) {
    let Some(sa) = &subject.service_account else {
        sink.required(
            path,
            "serviceAccount is required when subject kind is 'ServiceAccount'",
        );
        return;
    };
    if sa.name.is_empty() {
        sink.required(format!("{path}.name"), "");
    } else if sa.name != WILDCARD {
        check_dns_subdomain(&format!("{path}.name"), &sa.name, sink);
    }
    if sa.namespace.is_empty() {
        sink.required(
            format!("{path}.namespace"),
            "must specify namespace for service account",
        );
    } else {
        check_dns_label(&format!("{path}.namespace"), &sa.namespace, "", sink);
    }
}

/// A list may be `["*"]`, or name things; not both.
fn check_wildcard_list(
    field: &str,
    list: &[String],
    what: &str,
    required_detail: &str,
    sink: &mut ErrorSink<'_>,
) -> bool {
    if list.is_empty() {
        sink.required(field, required_detail);
        return false;
    }
    if list.len() > 1 && list.iter().any(|s| s == WILDCARD) {
        sink.invalid(
            field,
            format!("{list:?}"),
            format!("if '*' is present, must not specify other {what}"),
        );
        return false;
    }
    true
}

fn check_verbs(field: &str, verbs: &[String], sink: &mut ErrorSink<'_>) {
    if check_wildcard_list(
        field,
        verbs,
        "verbs",
        "verbs must contain at least one value",
        sink,
    ) && verbs.iter().all(|v| v != WILDCARD)
        && !verbs.iter().all(|v| SUPPORTED_VERBS.contains(&v.as_str()))
    {
        sink.not_supported(field, format!("{verbs:?}"), &SUPPORTED_VERBS);
    }
}

fn check_resource_rule(path: &str, rule: &ResourcePolicyRule, sink: &mut ErrorSink<'_>) {
    check_verbs(&format!("{path}.verbs"), &rule.verbs, sink);
    check_wildcard_list(
        &format!("{path}.apiGroups"),
        &rule.api_groups,
        "api groups",
        "resource rules must supply at least one api group",
        sink,
    );
    check_wildcard_list(
        &format!("{path}.resources"),
        &rule.resources,
        "resources",
        "resource rules must supply at least one resource",
        sink,
    );
    let namespaces = format!("{path}.namespaces");
    if rule.namespaces.is_empty() {
        if !rule.cluster_scope {
            sink.required(
                namespaces,
                "resource rules that are not cluster scoped must supply at least one namespace",
            );
        }
    } else if rule.namespaces.iter().any(|n| n == WILDCARD) {
        if rule.namespaces.len() > 1 {
            sink.invalid(
                namespaces,
                format!("{:?}", rule.namespaces),
                "if '*' is present, must not specify other namespaces",
            );
        }
    } else {
        for (i, ns) in rule.namespaces.iter().enumerate() {
            check_dns_label(
                &format!("{namespaces}[{i}]"),
                ns,
                "each member of this list must be '*' or a DNS-1123 label; ",
                sink,
            );
        }
    }
}

fn check_non_resource_rule(path: &str, rule: &NonResourcePolicyRule, sink: &mut ErrorSink<'_>) {
    check_verbs(&format!("{path}.verbs"), &rule.verbs, sink);
    let field = format!("{path}.nonResourceURLs");
    if check_wildcard_list(
        &field,
        &rule.non_resource_urls,
        "non-resource URLs",
        "nonResourceURLs must contain at least one value",
        sink,
    ) && rule.non_resource_urls.iter().all(|u| u != WILDCARD)
    {
        for (i, url) in rule.non_resource_urls.iter().enumerate() {
            if let Err(detail) = check_url_path(url) {
                sink.invalid(format!("{field}[{i}]"), format!("{url:?}"), detail);
            }
        }
    }
}

/// A non-resource URL starts with `/`, has no blank and no `//`, and may end
/// in `/*` for a prefix; `*` elsewhere is not a pattern.
fn check_url_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("must not be empty");
    }
    if path == "/" {
        return Ok(());
    }
    if !path.starts_with('/') {
        return Err("must start with slash");
    }
    if path.contains(' ') {
        return Err("must not contain white-space");
    }
    if path.contains("//") {
        return Err("must not contain double slash");
    }
    let stars = path.matches('*').count();
    if stars > 1 || (stars == 1 && !path.ends_with("/*")) {
        return Err("wildcard can only do suffix matching");
    }
    Ok(())
}

fn check_level_spec(name: &str, spec: &PriorityLevelConfigurationSpec, sink: &mut ErrorSink<'_>) {
    if (name == NAME_EXEMPT) != (spec.type_ == "Exempt") {
        sink.invalid(
            "spec.type",
            &spec.type_,
            "type must be 'Exempt' if and only if name is 'exempt'",
        );
    }
    match spec.type_.as_str() {
        "Exempt" => {
            if spec.limited.is_some() {
                sink.forbidden("spec.limited", "must be nil if the type is not Limited");
            }
            if let Some(exempt) = &spec.exempt {
                check_shares(
                    "spec.exempt.nominalConcurrencyShares",
                    exempt.nominal_concurrency_shares,
                    sink,
                );
                check_percent("spec.exempt.lendablePercent", exempt.lendable_percent, sink);
            }
        }
        "Limited" => {
            if spec.exempt.is_some() {
                sink.forbidden("spec.exempt", "must be nil if the type is Limited");
            }
            match &spec.limited {
                None => sink.required("spec.limited", "must not be empty when type is Limited"),
                Some(limited) => check_limited(limited, sink),
            }
        }
        other => sink.not_supported("spec.type", format!("{other:?}"), &SUPPORTED_LEVEL_TYPES),
    }
}

fn check_shares(field: &str, shares: Option<i32>, sink: &mut ErrorSink<'_>) {
    if let Some(s) = shares.filter(|s| *s < 0) {
        sink.invalid(field, s, "must be a non-negative integer");
    }
}

fn check_percent(field: &str, percent: Option<i32>, sink: &mut ErrorSink<'_>) {
    if let Some(p) = percent.filter(|p| !(0..=100).contains(p)) {
        sink.invalid(field, p, "must be between 0 and 100, inclusive");
    }
}

fn check_limited(limited: &LimitedPriorityLevelConfiguration, sink: &mut ErrorSink<'_>) {
    // Kubernetes accepts a zero share since 1.30 (a level that only borrows).
    check_shares(
        "spec.limited.nominalConcurrencyShares",
        limited.nominal_concurrency_shares,
        sink,
    );
    check_limit_response(&limited.limit_response, sink);
    check_percent(
        "spec.limited.lendablePercent",
        limited.lendable_percent,
        sink,
    );
    if let Some(b) = limited.borrowing_limit_percent.filter(|b| *b < 0) {
        sink.invalid(
            "spec.limited.borrowingLimitPercent",
            b,
            "if specified, must be a non-negative integer",
        );
    }
}

fn check_limit_response(response: &LimitResponse, sink: &mut ErrorSink<'_>) {
    const QUEUING: &str = "spec.limited.limitResponse.queuing";
    match response.type_.as_str() {
        "Reject" => {
            if response.queuing.is_some() {
                sink.forbidden(
                    QUEUING,
                    "must be nil if limited.limitResponse.type is not Limited",
                );
            }
        }
        "Queue" => match &response.queuing {
            None => sink.required(
                QUEUING,
                "must not be empty if limited.limitResponse.type is Limited",
            ),
            Some(q) => check_queuing(QUEUING, q, sink),
        },
        other => sink.not_supported(
            "spec.limited.limitResponse.type",
            format!("{other:?}"),
            &SUPPORTED_LIMIT_RESPONSES,
        ),
    }
}

fn check_queuing(path: &str, q: &QueuingConfiguration, sink: &mut ErrorSink<'_>) {
    if q.queue_length_limit <= 0 {
        sink.invalid(
            format!("{path}.queueLengthLimit"),
            q.queue_length_limit,
            "must be positive",
        );
    }
    if q.queues <= 0 {
        sink.invalid(format!("{path}.queues"), q.queues, "must be positive");
    } else if q.queues > MAX_QUEUES {
        sink.invalid(
            format!("{path}.queues"),
            q.queues,
            format!("must not be greater than {MAX_QUEUES}"),
        );
    }
    let hand = format!("{path}.handSize");
    if q.hand_size <= 0 {
        sink.invalid(hand, q.hand_size, "must be positive");
    } else if q.hand_size > q.queues {
        sink.invalid(
            hand,
            q.hand_size,
            format!("should not be greater than queues ({})", q.queues),
        );
    } else if required_entropy_bits(q.queues, q.hand_size) > MAX_HASH_BITS {
        sink.invalid(
            hand,
            q.hand_size,
            format!(
                "required entropy bits of deckSize {} and handSize {} should not be greater than {MAX_HASH_BITS}",
                q.queues, q.hand_size
            ),
        );
    }
}

/// Bits of hash the shuffle-sharding dealer may use.
pub const MAX_HASH_BITS: u32 = 60;

/// Bits of hash needed to deal `hand_size` of `deck_size` queues:
/// ceil(log2(deck_size) * hand_size), computed in floating point as
/// Kubernetes computes it so the same configurations pass. Kept here rather
/// than taken from the dealer module so that validation stands alone; both
/// must agree.
pub fn required_entropy_bits(deck_size: i32, hand_size: i32) -> u32 {
    let bits = (f64::from(deck_size).log2() * f64::from(hand_size)).ceil();
    if bits.is_nan() || bits <= 0.0 {
        0
    } else if bits >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        bits as u32
    }
}

const SUBDOMAIN_DETAIL: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_DETAIL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";

fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_dns_label)
}

fn check_dns_subdomain(field: &str, value: &str, sink: &mut ErrorSink<'_>) {
    if value.len() > 253 {
        sink.invalid(
            field,
            format!("{value:?}"),
            "must be no more than 253 characters",
        );
    }
    if !value.split('.').all(is_dns_label) {
        sink.invalid(field, format!("{value:?}"), SUBDOMAIN_DETAIL);
    }
}

fn check_dns_label(field: &str, value: &str, intro: &str, sink: &mut ErrorSink<'_>) {
    if value.len() > 63 {
        sink.invalid(
            field,
            format!("{value:?}"),
            format!("{intro}must be no more than 63 characters"),
        );
    }
    if !is_dns_label(value) {
        sink.invalid(
            field,
            format!("{value:?}"),
            format!("{intro}{LABEL_DETAIL}"),
        );
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, length not checked.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

/// Building the typed configuration (validate/typed.rs).
mod typed;
use typed::build;
