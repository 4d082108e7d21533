//! The classifier's tests, by concept: Kubernetes' decisions on the
//! built-in configuration, the flow hash, which schema wins, Kubernetes'
//! rule literals, and the compiled classifier against the interpreter.

use super::*;
use crate::config::{
    Config, DanglingReferences, FlowSchema, FlowSchemaSpec, ObjectMeta,
    PriorityLevelConfigurationReference, ValidateOptions,
};

fn builtin() -> Classifier {
    Classifier::new(
        &Config::builtin()
            .validate()
            .expect("built-in config is valid"),
    )
}

const AUTHENTICATED: &str = "system:authenticated";
const MASTERS: &str = "system:masters";
const NODES: &str = "system:nodes";
const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

fn resource<'a>(
    user: &'a str,
    groups: &'a [&'a str],
    verb: &'a str,
    api_group: &'a str,
    resource: &'a str,
    subresource: &'a str,
    namespace: &'a str,
) -> RequestDigest<'a> {
    RequestDigest {
        user,
        groups,
        verb,
        is_resource_request: true,
        api_group,
        resource,
        subresource,
        namespace,
        ..RequestDigest::default()
    }
}

fn non_resource<'a>(
    user: &'a str,
    groups: &'a [&'a str],
    verb: &'a str,
    path: &'a str,
) -> RequestDigest<'a> {
    RequestDigest {
        user,
        groups,
        verb,
        is_resource_request: false,
        path,
        ..RequestDigest::default()
    }
}

struct Case<'a> {
    what: &'a str,
    digest: RequestDigest<'a>,
    schema: &'a str,
    level: &'a str,
    distinguisher: &'a str,
}

fn check(classifier: &Classifier, cases: &[Case<'_>]) {
    for case in cases {
        let c = classifier.classify(&case.digest);
        assert_eq!(
            (
                c.schema.name.as_str(),
                c.level.name.as_str(),
                c.flow_distinguisher
            ),
            (case.schema, case.level, case.distinguisher),
            "{}",
            case.what
        );
        let expected_hash = if c.level.queues > 1 {
            hash_flow_id(case.schema, case.distinguisher)
        } else {
            0
        };
        assert_eq!(c.flow_hash, expected_hash, "{}", case.what);
        assert!(!c.fallback, "{}", case.what);
    }
}

const KCM: &str = "system:kube-controller-manager";
const SCHEDULER: &str = "system:kube-scheduler";
const ADMIN_GROUPS: &[&str] = &[MASTERS, AUTHENTICATED];
const NODE_GROUPS: &[&str] = &[NODES, AUTHENTICATED];
const AUTH_ONLY: &[&str] = &[AUTHENTICATED];
const SA_EXAMPLE: &[&str] = &[
    SERVICE_ACCOUNTS,
    "system:serviceaccounts:example-com",
    AUTHENTICATED,
];
const SA_KUBE_SYSTEM: &[&str] = &[
    SERVICE_ACCOUNTS,
    "system:serviceaccounts:kube-system",
    AUTHENTICATED,
];

fn schema(name: &str, level: &str, precedence: i32, rules: &str) -> FlowSchema {
    let rules = serde_json::from_str(rules).expect("test rules parse");
    FlowSchema {
        metadata: ObjectMeta::named(name),
        spec: FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference {
                name: level.into(),
            },
            matching_precedence: precedence,
            distinguisher_method: None,
            rules,
        },
    }
}

const ALICE_ANYTHING: &str = r#"[{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]"#;

mod builtin_config;
mod flow_hash;
mod literals;
#[cfg(all(test, not(loom)))]
mod properties;
mod schema_order;
