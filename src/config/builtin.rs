//! Kubernetes' bootstrap configuration: the mandatory objects (exempt and
//! catch-all) and the suggested ones, with the values of the current
//! `k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap` defaults.
//!
//! Kubernetes dropped the `workload-leader-election` and
//! `endpoint-controller` flow schemas in 2025 (they served leader election
//! through endpoints and config maps, no longer supported), so they are not
//! here either.

use super::types::*;

const GROUP_MASTERS: &str = "system:masters";
const GROUP_AUTHENTICATED: &str = "system:authenticated";
const GROUP_UNAUTHENTICATED: &str = "system:unauthenticated";
const GROUP_NODES: &str = "system:nodes";
const GROUP_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const USER_KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const USER_KUBE_SCHEDULER: &str = "system:kube-scheduler";
const NAMESPACE_KUBE_SYSTEM: &str = "kube-system";
const API_GROUP_CORE: &str = "";
const API_GROUP_COORDINATION: &str = "coordination.k8s.io";

/// The mandatory priority levels, in Kubernetes' order.
pub fn mandatory_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![catch_all_level(), exempt_level()]
}

/// The mandatory flow schemas, in Kubernetes' order.
pub fn mandatory_flow_schemas() -> Vec<FlowSchema> {
    vec![exempt_schema(), catch_all_schema()]
}

/// The suggested priority levels, in Kubernetes' order.
pub fn suggested_priority_levels() -> Vec<PriorityLevelConfiguration> {
    vec![
        queuing_level("system", 30, 33, 64, 6),
        queuing_level("node-high", 40, 25, 64, 6),
        queuing_level("leader-election", 10, 0, 16, 4),
        queuing_level("workload-high", 40, 50, 128, 6),
        queuing_level("workload-low", 100, 90, 128, 6),
        queuing_level("global-default", 20, 50, 128, 6),
    ]
}

/// The suggested flow schemas, in Kubernetes' order.
pub fn suggested_flow_schemas() -> Vec<FlowSchema> {
    vec![
        flow_schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            groups(&[GROUP_NODES]),
            everything(),
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            groups(&[GROUP_NODES]),
            resources_only(vec![
                resource_rule(&["*"], &[API_GROUP_CORE], &["nodes", "nodes/status"], true),
                resource_rule(&["*"], &[API_GROUP_COORDINATION], &["leases"], false),
            ]),
        ),
        flow_schema(
            "probes",
            NAME_EXEMPT,
            2,
            None,
            groups(&[GROUP_UNAUTHENTICATED, GROUP_AUTHENTICATED]),
            (
                vec![],
                vec![non_resource_rule(
                    &["get"],
                    &["/healthz", "/readyz", "/livez"],
                )],
            ),
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            {
                let mut s = users(&[USER_KUBE_CONTROLLER_MANAGER, USER_KUBE_SCHEDULER]);
                s.push(Subject::service_account(NAMESPACE_KUBE_SYSTEM, WILDCARD));
                s
            },
            resources_only(vec![resource_rule(
                &["get", "create", "update"],
                &[API_GROUP_COORDINATION],
                &["leases"],
                false,
            )]),
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&[USER_KUBE_CONTROLLER_MANAGER]),
            everything(),
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&[USER_KUBE_SCHEDULER]),
            everything(),
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            vec![Subject::service_account(NAMESPACE_KUBE_SYSTEM, WILDCARD)],
            everything(),
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            groups(&[GROUP_SERVICE_ACCOUNTS]),
            everything(),
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            groups(&[GROUP_UNAUTHENTICATED, GROUP_AUTHENTICATED]),
            everything(),
        ),
    ]
}

/// The mandatory object of this kind and name, if it is one.
pub fn mandatory_priority_level(name: &str) -> Option<PriorityLevelConfiguration> {
    mandatory_priority_levels()
        .into_iter()
        .find(|pl| pl.metadata.name == name)
}

/// The mandatory object of this kind and name, if it is one.
pub fn mandatory_flow_schema(name: &str) -> Option<FlowSchema> {
    mandatory_flow_schemas()
        .into_iter()
        .find(|fs| fs.metadata.name == name)
}

fn exempt_level() -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: bootstrap_meta(NAME_EXEMPT),
        spec: PriorityLevelConfigurationSpec {
            type_: "Exempt".into(),
            limited: None,
            exempt: Some(ExemptPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(0),
                lendable_percent: Some(0),
            }),
        },
    }
}

fn catch_all_level() -> PriorityLevelConfiguration {
    limited_level(
        NAME_CATCH_ALL,
        5,
        0,
        LimitResponse {
            type_: "Reject".into(),
            queuing: None,
        },
    )
}

fn queuing_level(
    name: &str,
    shares: i32,
    lendable_percent: i32,
    queues: i32,
    hand_size: i32,
) -> PriorityLevelConfiguration {
    limited_level(
        name,
        shares,
        lendable_percent,
        LimitResponse {
            type_: "Queue".into(),
            queuing: Some(QueuingConfiguration {
                queues,
                hand_size,
                queue_length_limit: 50,
            }),
        },
    )
}

fn limited_level(
    name: &str,
    shares: i32,
    lendable_percent: i32,
    limit_response: LimitResponse,
) -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: bootstrap_meta(name),
        spec: PriorityLevelConfigurationSpec {
            type_: "Limited".into(),
            limited: Some(LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(shares),
                limit_response,
                lendable_percent: Some(lendable_percent),
                borrowing_limit_percent: None,
            }),
            exempt: None,
        },
    }
}

fn exempt_schema() -> FlowSchema {
    flow_schema(
        NAME_EXEMPT,
        NAME_EXEMPT,
        1,
        None,
        groups(&[GROUP_MASTERS]),
        everything(),
    )
}

fn catch_all_schema() -> FlowSchema {
    flow_schema(
        NAME_CATCH_ALL,
        NAME_CATCH_ALL,
        MAX_MATCHING_PRECEDENCE,
        Some("ByUser"),
        groups(&[GROUP_UNAUTHENTICATED, GROUP_AUTHENTICATED]),
        everything(),
    )
}

type Rules = (Vec<ResourcePolicyRule>, Vec<NonResourcePolicyRule>);

fn flow_schema(
    name: &str,
    level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    subjects: Vec<Subject>,
    (resource_rules, non_resource_rules): Rules,
) -> FlowSchema {
    FlowSchema {
        metadata: bootstrap_meta(name),
        spec: FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference {
                name: level.into(),
            },
            matching_precedence: precedence,
            distinguisher_method: distinguisher
                .map(|t| FlowDistinguisherMethod { type_: t.into() }),
            rules: vec![PolicyRulesWithSubjects {
                subjects,
                resource_rules,
                non_resource_rules,
            }],
        },
    }
}

fn bootstrap_meta(name: &str) -> ObjectMeta {
    let mut meta = ObjectMeta::named(name);
    meta.annotations
        .insert(AUTO_UPDATE_ANNOTATION.into(), "true".into());
    meta
}

/// Every verb on every resource, namespaced or not, and every URL.
fn everything() -> Rules {
    (
        vec![resource_rule(&["*"], &["*"], &["*"], true)],
        vec![non_resource_rule(&["*"], &["*"])],
    )
}

fn resources_only(rules: Vec<ResourcePolicyRule>) -> Rules {
    (rules, vec![])
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn groups(names: &[&str]) -> Vec<Subject> {
    names.iter().map(|n| Subject::group(*n)).collect()
}

fn users(names: &[&str]) -> Vec<Subject> {
    names.iter().map(|n| Subject::user(*n)).collect()
}

/// Every bootstrap resource rule covers all namespaces.
fn resource_rule(
    verbs: &[&str],
    api_groups: &[&str],
    resources: &[&str],
    cluster_scope: bool,
) -> ResourcePolicyRule {
    ResourcePolicyRule {
        verbs: strings(verbs),
        api_groups: strings(api_groups),
        resources: strings(resources),
        cluster_scope,
        namespaces: strings(&[WILDCARD]),
    }
}

fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> NonResourcePolicyRule {
    NonResourcePolicyRule {
        verbs: strings(verbs),
        non_resource_urls: strings(urls),
    }
}
