//! The compiled classifier against the plain interpreter of the rules,
//! on random configurations and requests.

use proptest::prelude::*;

use super::*;
use crate::classification::OwnedDigest;
use crate::config::{NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule, Subject};

const VERBS: &[&str] = &["get", "list", "create", "update", "watch"];
const USERS: &[&str] = &[
    "alice",
    "bob",
    "system:serviceaccount:ns1:sa1",
    "system:serviceaccount:ns1:sa2",
    "system:serviceaccount:ns2:sa1",
];
const GROUPS: &[&str] = &["g1", "g2", "system:authenticated"];
const NAMESPACES: &[&str] = &["ns1", "ns2", "kube-system"];
const API_GROUPS: &[&str] = &["", "apps", "coordination.k8s.io"];
const RESOURCES: &[&str] = &[
    "pods",
    "pods/status",
    "nodes",
    "leases",
    "deployments/scale",
    "r1",
    "r2",
    "r3",
    "r4",
    "r5",
    "r6",
    "r7",
    "r8",
];
const URLS: &[&str] = &["/healthz", "/healthz/*", "/apis/*", "/api", "/", "/metrics"];

/// A rule list: `["*"]`, or some members (possibly more than the scan
/// limit, to reach the hashed sets).
fn list(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        1 => Just(vec!["*".to_string()]),
        4 => proptest::sample::subsequence(pool, 1..=pool.len())
            .prop_map(|v| v.into_iter().map(String::from).collect()),
    ]
}

fn subject() -> impl Strategy<Value = Subject> {
    prop_oneof![
        proptest::sample::select(USERS).prop_map(Subject::user),
        Just(Subject::user("*")),
        proptest::sample::select(GROUPS).prop_map(Subject::group),
        Just(Subject::group("*")),
        (
            proptest::sample::select(&["ns1", "ns2"][..]),
            proptest::sample::select(&["sa1", "sa2", "*"][..])
        )
            .prop_map(|(ns, n)| Subject::service_account(ns, n)),
    ]
}

fn resource_rule() -> impl Strategy<Value = ResourcePolicyRule> {
    (
        list(VERBS),
        list(API_GROUPS),
        list(RESOURCES),
        any::<bool>(),
        list(NAMESPACES),
    )
        .prop_map(
            |(verbs, api_groups, resources, cluster_scope, namespaces)| ResourcePolicyRule {
                verbs,
                api_groups,
                resources,
                cluster_scope,
                namespaces,
            },
        )
}

fn non_resource_rule() -> impl Strategy<Value = NonResourcePolicyRule> {
    (list(VERBS), list(URLS)).prop_map(|(verbs, non_resource_urls)| NonResourcePolicyRule {
        verbs,
        non_resource_urls,
    })
}

fn rule() -> impl Strategy<Value = PolicyRulesWithSubjects> {
    (
        proptest::collection::vec(subject(), 1..4),
        proptest::collection::vec(resource_rule(), 0..3),
        proptest::collection::vec(non_resource_rule(), 0..3),
    )
        .prop_filter("a rule needs some resource or URL rule", |(_, r, n)| {
            !r.is_empty() || !n.is_empty()
        })
        .prop_map(
            |(subjects, resource_rules, non_resource_rules)| PolicyRulesWithSubjects {
                subjects,
                resource_rules,
                non_resource_rules,
            },
        )
}

fn schemas() -> impl Strategy<Value = Vec<FlowSchema>> {
    proptest::collection::vec(
        (
            2..6i32,
            proptest::sample::select(
                &["workload-low", "catch-all", "exempt", "leader-election"][..],
            ),
            proptest::option::of(proptest::sample::select(&["ByUser", "ByNamespace"][..])),
            proptest::collection::vec(rule(), 1..3),
        ),
        1..6,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (precedence, level, method, rules))| FlowSchema {
                metadata: ObjectMeta::named(format!("fs{}", 5 - i)),
                spec: FlowSchemaSpec {
                    priority_level_configuration: PriorityLevelConfigurationReference {
                        name: level.into(),
                    },
                    matching_precedence: precedence,
                    distinguisher_method: method
                        .map(|t| crate::config::FlowDistinguisherMethod { type_: t.into() }),
                    rules,
                },
            })
            .collect()
    })
}

fn digest() -> impl Strategy<Value = OwnedDigest> {
    let pick =
        |pool: &'static [&'static str]| proptest::sample::select(pool).prop_map(String::from);
    (
        pick(&[
            "alice",
            "bob",
            "carol",
            "system:serviceaccount:ns1:sa1",
            "system:serviceaccount:ns1:sa2",
            "system:serviceaccount:ns1:sa1:extra",
            "system:serviceaccount:ns2:sa1",
            "system:serviceaccount:ns:sa1",
        ]),
        proptest::sample::subsequence(&["g1", "g2", "g3", "system:authenticated"][..], 0..=4)
            .prop_map(|v| v.into_iter().map(String::from).collect()),
        pick(&["get", "list", "create", "update", "watch", "patch"]),
        any::<bool>(),
        pick(&["", "apps", "coordination.k8s.io", "batch"]),
        pick(&["pods", "nodes", "leases", "deployments", "r3", "r9"]),
        pick(&["", "status", "scale"]),
        pick(&["", "ns1", "ns2", "kube-system"]),
        pick(&[
            "/healthz",
            "/healthz/etcd",
            "/apis",
            "/apis/x",
            "/api",
            "/apix",
            "/",
            "/metrics/x",
        ]),
    )
        .prop_map(
            |(
                user,
                groups,
                verb,
                is_resource_request,
                api_group,
                resource,
                subresource,
                namespace,
                path,
            )| {
                OwnedDigest {
                    user,
                    groups,
                    verb,
                    is_resource_request,
                    api_group,
                    resource,
                    subresource,
                    namespace,
                    path,
                    ..OwnedDigest::default()
                }
            },
        )
}

/// `owned` as a borrowed digest for an object named `name`.
fn borrowed<'a>(owned: &'a OwnedDigest, groups: &'a [&'a str], name: &'a str) -> RequestDigest<'a> {
    RequestDigest {
        name,
        ..owned.as_digest(groups)
    }
}

/// `owned` with attribute `field` (0..10) taken from `other`: a request
/// that differs from a recent one in one attribute at most (what any
/// cache of classifications, such as the per-thread memo tried for issue
/// 14, must tell apart).
fn with_one_from(owned: &OwnedDigest, other: &OwnedDigest, field: usize) -> OwnedDigest {
    let mut v = owned.clone();
    match field {
        0 => v.user.clone_from(&other.user),
        1 => v.groups.clone_from(&other.groups),
        2 => v.verb.clone_from(&other.verb),
        3 => v.is_resource_request = other.is_resource_request,
        4 => v.api_group.clone_from(&other.api_group),
        5 => v.resource.clone_from(&other.resource),
        6 => v.subresource.clone_from(&other.subresource),
        7 => v.namespace.clone_from(&other.namespace),
        8 => v.path.clone_from(&other.path),
        _ => {}
    }
    v
}

fn check_against_reference(
    classifier: &Classifier,
    valid: &ValidConfig,
    owned: &OwnedDigest,
    name: &str,
) -> Result<(), TestCaseError> {
    let groups: Vec<&str> = owned.groups.iter().map(String::as_str).collect();
    let d = borrowed(owned, &groups, name);
    let got = classifier.classify(&d);
    let want = reference::classify(valid, &d).expect("catch-all exists");
    prop_assert_eq!(got.schema_index, want.schema_index, "{:?}", owned);
    prop_assert_eq!(got.level_index, want.level_index);
    prop_assert_eq!(got.flow_distinguisher, want.flow_distinguisher.as_str());
    prop_assert_eq!(got.flow_hash, want.flow_hash);
    prop_assert_eq!(got.fallback, want.fallback);
    prop_assert_eq!(
        classifier.classify_deferred(&d),
        Classification {
            flow_hash: 0,
            ..got
        },
        "the deferred classification agrees"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The compiled classifier decides exactly as the plain
    /// interpreter of Kubernetes' rules: every request is
    /// classified, then each variant that differs from it in one
    /// attribute, then the request again (under another
    /// object name), alternately by two classifiers of different
    /// configurations on this one thread.
    #[test]
    fn compiled_matches_reference(extra in schemas(), digests in proptest::collection::vec(digest(), 1..16)) {
        let mut config = Config::builtin();
        config.flow_schemas.extend(extra);
        let valid = config.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let classifier = Classifier::new(&valid);
        let builtin_valid = Config::builtin().validate().expect("built-in config is valid");
        let builtin = Classifier::new(&builtin_valid);
        for (i, owned) in digests.iter().enumerate() {
            let other = &digests[(i + 1) % digests.len()];
            let mut variants = vec![owned.clone()];
            variants.extend((0..9).map(|f| with_one_from(owned, other, f)));
            variants.push(owned.clone());
            for (n, v) in variants.iter().enumerate() {
                let name = if n % 2 == 0 { "" } else { "object" };
                check_against_reference(&classifier, &valid, v, name)?;
                check_against_reference(&builtin, &builtin_valid, v, name)?;
            }
        }
    }
}
