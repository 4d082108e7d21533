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

/// Every request of KEP-1040's "Observed Requests", against the built-in
/// configuration.
#[test]
fn kep_observed_requests() {
    let c = builtin();
    let cases = [
        Case {
            what: "loopback list mutatingwebhookconfigurations",
            digest: resource(
                "system:apiserver",
                &[MASTERS],
                "list",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "",
                "",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "loopback watch services",
            digest: resource(
                "system:apiserver",
                &[MASTERS],
                "watch",
                "",
                "services",
                "",
                "",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "loopback get default/kubernetes service",
            digest: resource(
                "system:apiserver",
                &[MASTERS],
                "get",
                "",
                "services",
                "",
                "default",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "TokenReview from kube-controller-manager",
            digest: resource(
                KCM,
                AUTH_ONLY,
                "create",
                "authentication.k8s.io",
                "tokenreviews",
                "",
                "",
            ),
            schema: "kube-controller-manager",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "SubjectAccessReview by an aggregated API server",
            digest: resource(
                "system:serviceaccount:example-com:network-apiserver",
                SA_EXAMPLE,
                "create",
                "authorization.k8s.io",
                "subjectaccessreviews",
                "",
                "",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:network-apiserver",
        },
        Case {
            what: "kubectl GET /openapi/v2 by an administrator",
            digest: non_resource("system:admin", ADMIN_GROUPS, "get", "/openapi/v2"),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "kubectl list of a custom resource by an administrator",
            digest: resource(
                "system:admin",
                ADMIN_GROUPS,
                "list",
                "network.example.com",
                "networkattachments",
                "",
                "default",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "node patches its own status",
            digest: resource(
                "system:node:127.0.0.1",
                NODE_GROUPS,
                "patch",
                "",
                "nodes",
                "status",
                "",
            ),
            schema: "system-node-high",
            level: "node-high",
            distinguisher: "system:node:127.0.0.1",
        },
        Case {
            what: "node renews its lease",
            digest: resource(
                "system:node:127.0.0.1",
                NODE_GROUPS,
                "update",
                "coordination.k8s.io",
                "leases",
                "",
                "kube-node-lease",
            ),
            schema: "system-node-high",
            level: "node-high",
            distinguisher: "system:node:127.0.0.1",
        },
        Case {
            what: "kube-controller-manager lists leases",
            digest: resource(
                KCM,
                AUTH_ONLY,
                "list",
                "coordination.k8s.io",
                "leases",
                "",
                "",
            ),
            schema: "kube-controller-manager",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "kube-controller-manager watches leases",
            digest: resource(
                KCM,
                AUTH_ONLY,
                "watch",
                "coordination.k8s.io",
                "leases",
                "",
                "",
            ),
            schema: "kube-controller-manager",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "deployment controller updates a system deployment's status",
            digest: resource(
                "system:serviceaccount:kube-system:deployment-controller",
                SA_KUBE_SYSTEM,
                "update",
                "apps",
                "deployments",
                "status",
                "kube-system",
            ),
            schema: "kube-system-service-accounts",
            level: "workload-high",
            distinguisher: "kube-system",
        },
        Case {
            what: "etcd operator lists its pods",
            digest: resource(
                "system:serviceaccount:example-com:default",
                SA_EXAMPLE,
                "list",
                "",
                "pods",
                "",
                "example-com",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:default",
        },
        Case {
            what: "etcd operator updates an etcd cluster",
            digest: resource(
                "system:serviceaccount:example-com:default",
                SA_EXAMPLE,
                "update",
                "etcd.database.coreos.com",
                "etcdclusters",
                "",
                "example-com",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:default",
        },
        Case {
            what: "kube-scheduler binds an etcd pod",
            digest: resource(
                SCHEDULER,
                AUTH_ONLY,
                "create",
                "",
                "pods",
                "binding",
                "example-com",
            ),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "example-com",
        },
        Case {
            what: "pod garbage collector lists nodes",
            digest: resource(
                "system:serviceaccount:kube-system:pod-garbage-collector",
                SA_KUBE_SYSTEM,
                "list",
                "",
                "nodes",
                "",
                "",
            ),
            schema: "kube-system-service-accounts",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "generic garbage collector GET /api",
            digest: non_resource(
                "system:serviceaccount:kube-system:generic-garbage-collector",
                SA_KUBE_SYSTEM,
                "get",
                "/api",
            ),
            schema: "kube-system-service-accounts",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "generic garbage collector GET /apis/coordination.k8s.io/v1beta1",
            digest: non_resource(
                "system:serviceaccount:kube-system:generic-garbage-collector",
                SA_KUBE_SYSTEM,
                "get",
                "/apis/coordination.k8s.io/v1beta1",
            ),
            schema: "kube-system-service-accounts",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "kube-scheduler lists storage classes",
            digest: resource(
                SCHEDULER,
                AUTH_ONLY,
                "list",
                "storage.k8s.io",
                "storageclasses",
                "",
                "",
            ),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "kube-scheduler watches services",
            digest: resource(SCHEDULER, AUTH_ONLY, "watch", "", "services", "", ""),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "kube-scheduler updates a system pod's status",
            digest: resource(
                SCHEDULER,
                AUTH_ONLY,
                "update",
                "",
                "pods",
                "status",
                "kube-system",
            ),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "kube-system",
        },
        Case {
            what: "kube-scheduler creates an event",
            digest: resource(
                SCHEDULER,
                AUTH_ONLY,
                "create",
                "events.k8s.io",
                "events",
                "",
                "example-com",
            ),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "example-com",
        },
        Case {
            what: "kubelet updates a pod's status",
            digest: resource(
                "system:node:127.0.0.1",
                NODE_GROUPS,
                "patch",
                "",
                "pods",
                "status",
                "default",
            ),
            schema: "system-nodes",
            level: "system",
            distinguisher: "system:node:127.0.0.1",
        },
        Case {
            what: "hosted controller lists subnets",
            digest: resource(
                "system:serviceaccount:example-com:kos-controller-manager",
                SA_EXAMPLE,
                "list",
                "network.example.com",
                "subnets",
                "",
                "",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:kos-controller-manager",
        },
        Case {
            what: "hosted controller watches subnets",
            digest: resource(
                "system:serviceaccount:example-com:kos-controller-manager",
                SA_EXAMPLE,
                "watch",
                "network.example.com",
                "subnets",
                "",
                "",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:kos-controller-manager",
        },
        Case {
            what: "hosted controller updates a subnet",
            digest: resource(
                "system:serviceaccount:example-com:kos-controller-manager",
                SA_EXAMPLE,
                "update",
                "network.example.com",
                "subnets",
                "",
                "default",
            ),
            schema: "service-accounts",
            level: "workload-low",
            distinguisher: "system:serviceaccount:example-com:kos-controller-manager",
        },
        Case {
            what: "kubectl logs by an administrator",
            digest: resource(
                "system:admin",
                ADMIN_GROUPS,
                "get",
                "",
                "pods",
                "log",
                "default",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "kubectl exec by an administrator",
            digest: resource(
                "system:admin",
                ADMIN_GROUPS,
                "create",
                "",
                "pods",
                "exec",
                "default",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "insecure port GET /healthz/zzz",
            digest: non_resource("system:unsecured", ADMIN_GROUPS, "get", "/healthz/zzz"),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "insecure port GET namespace",
            digest: resource(
                "system:unsecured",
                ADMIN_GROUPS,
                "get",
                "",
                "namespaces",
                "",
                "fooobar",
            ),
            schema: "exempt",
            level: "exempt",
            distinguisher: "",
        },
    ];
    check(&c, &cases);
}

/// The KEP's request with no user at all (before kubernetes#81788): no
/// schema matches, and the catch-all one is taken anyway.
#[test]
fn request_without_user_falls_back_to_catch_all() {
    let c = builtin();
    let digest = non_resource("", &[], "get", "/healthz");
    let got = c.classify(&digest);
    assert!(got.fallback);
    assert_eq!(got.schema.name, "catch-all");
    assert_eq!(got.level.name, "catch-all");
    // catch-all rejects rather than queues: no flow is computed.
    assert_eq!((got.flow_distinguisher, got.flow_hash), ("", 0));
}

#[test]
fn more_built_in_requests() {
    let c = builtin();
    let cases = [
        Case {
            what: "probe by an ordinary user is exempt",
            digest: non_resource("alice", AUTH_ONLY, "get", "/livez"),
            schema: "probes",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "a probe URL's sub-path is a probe too",
            digest: non_resource("alice", AUTH_ONLY, "get", "/readyz/etcd"),
            schema: "probes",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "probes match only get",
            digest: non_resource("alice", AUTH_ONLY, "post", "/healthz"),
            schema: "global-default",
            level: "global-default",
            distinguisher: "alice",
        },
        Case {
            what: "unauthenticated probe",
            digest: non_resource(
                "system:anonymous",
                &["system:unauthenticated"],
                "get",
                "/healthz",
            ),
            schema: "probes",
            level: "exempt",
            distinguisher: "",
        },
        Case {
            what: "kube-system service account renews a lease",
            digest: resource(
                "system:serviceaccount:kube-system:cloud-controller",
                SA_KUBE_SYSTEM,
                "update",
                "coordination.k8s.io",
                "leases",
                "",
                "kube-system",
            ),
            schema: "system-leader-election",
            level: "leader-election",
            distinguisher: "system:serviceaccount:kube-system:cloud-controller",
        },
        Case {
            what: "leader election leases are namespaced only",
            digest: resource(
                SCHEDULER,
                AUTH_ONLY,
                "get",
                "coordination.k8s.io",
                "leases",
                "",
                "",
            ),
            schema: "kube-scheduler",
            level: "workload-high",
            distinguisher: "",
        },
        Case {
            what: "node reads a node: system-node-high",
            digest: resource("system:node:n1", NODE_GROUPS, "get", "", "nodes", "", ""),
            schema: "system-node-high",
            level: "node-high",
            distinguisher: "system:node:n1",
        },
        Case {
            what: "node gets a secret: system-nodes",
            digest: resource(
                "system:node:n1",
                NODE_GROUPS,
                "get",
                "",
                "secrets",
                "",
                "default",
            ),
            schema: "system-nodes",
            level: "system",
            distinguisher: "system:node:n1",
        },
        Case {
            what: "anonymous request",
            digest: resource(
                "system:anonymous",
                &["system:unauthenticated"],
                "list",
                "",
                "pods",
                "",
                "default",
            ),
            schema: "global-default",
            level: "global-default",
            distinguisher: "system:anonymous",
        },
        Case {
            what: "a service account namespace is matched as a whole segment",
            digest: resource(
                "system:serviceaccount:kube-system-extra:sa",
                AUTH_ONLY,
                "list",
                "",
                "pods",
                "",
                "kube-system-extra",
            ),
            schema: "global-default",
            level: "global-default",
            distinguisher: "system:serviceaccount:kube-system-extra:sa",
        },
    ];
    check(&c, &cases);
}

#[test]
fn flow_hash_is_kubernetes_hash_flow_id() {
    // First 8 bytes, little-endian, of SHA-256(name || 0 || distinguisher),
    // computed independently.
    let long_name = "x".repeat(70);
    let long_dist = "y".repeat(70);
    let cases: [(&str, &str, u64); 7] = [
        (
            "service-accounts",
            "system:serviceaccount:example-com:default",
            0x341b_253d_2183_68a9,
        ),
        ("global-default", "alice", 0xf4de_3bd4_2ccd_f6b7),
        ("", "", 0x987a_b3ff_9c0b_346e),
        ("kube-scheduler", "example-com", 0x447e_4c47_12f8_9f05),
        (
            "system-node-high",
            "system:node:127.0.0.1",
            0x1238_111a_3f0a_6a7d,
        ),
        (&long_name, &long_dist, 0xdb59_3450_290d_8a8f),
        ("kube-controller-manager", "", 0xc5de_3c89_e5a0_a139),
    ];
    for (name, dist, want) in cases {
        assert_eq!(hash_flow_id(name, dist), want, "{name:?} {dist:?}");
    }
    let c = builtin();
    let got = c.classify(&resource(
        "system:serviceaccount:example-com:default",
        SA_EXAMPLE,
        "list",
        "",
        "pods",
        "",
        "example-com",
    ));
    assert_eq!(got.flow_hash, 0x341b_253d_2183_68a9);
}

#[test]
fn classification_reports_indices_names_and_uids() {
    let mut config = Config::builtin();
    for pl in &mut config.priority_levels {
        pl.metadata.uid = Some(format!("pl-{}", pl.metadata.name));
    }
    for fs in &mut config.flow_schemas {
        fs.metadata.uid = Some(format!("fs-{}", fs.metadata.name));
    }
    let valid = config.validate().unwrap();
    let c = Classifier::new(&valid);
    let got = c.classify(&non_resource("alice", AUTH_ONLY, "get", "/version"));
    assert_eq!(got.schema.uid.as_deref(), Some("fs-global-default"));
    assert_eq!(got.level.uid.as_deref(), Some("pl-global-default"));
    assert_eq!(
        valid.flow_schemas()[got.schema_index].name,
        "global-default"
    );
    assert_eq!(
        valid.priority_levels()[got.level_index].name,
        "global-default"
    );
    assert_eq!(&c.schemas()[got.schema_index], got.schema);
    assert_eq!(&c.levels()[got.level_index], got.level);
}

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

#[test]
fn equal_precedence_is_broken_by_name() {
    for order in [["bbb", "aaa"], ["aaa", "bbb"]] {
        let mut config = Config::builtin();
        for name in order {
            config
                .flow_schemas
                .push(schema(name, "workload-low", 50, ALICE_ANYTHING));
        }
        let c = Classifier::new(&config.validate().unwrap());
        let got = c.classify(&non_resource("alice", AUTH_ONLY, "get", "/x"));
        assert_eq!(got.schema.name, "aaa", "input order {order:?}");
    }
}

#[test]
fn lower_precedence_wins_over_name() {
    let mut config = Config::builtin();
    config
        .flow_schemas
        .push(schema("aaa", "workload-low", 60, ALICE_ANYTHING));
    config
        .flow_schemas
        .push(schema("zzz", "workload-high", 59, ALICE_ANYTHING));
    let c = Classifier::new(&config.validate().unwrap());
    let got = c.classify(&non_resource("alice", AUTH_ONLY, "get", "/x"));
    assert_eq!(
        (got.schema.name.as_str(), got.level.name.as_str()),
        ("zzz", "workload-high")
    );
}

#[test]
fn dangling_schema_matches_nothing_when_tolerated() {
    let mut config = Config::builtin();
    config
        .flow_schemas
        .push(schema("aaa", "no-such-level", 50, ALICE_ANYTHING));
    assert!(config
        .validate_with(&ValidateOptions {
            dangling: DanglingReferences::Reject,
            ..ValidateOptions::default()
        })
        .is_err());
    // Tolerated by default, as in Kubernetes.
    let valid = config.validate().unwrap();
    let c = Classifier::new(&valid);
    let got = c.classify(&non_resource("alice", AUTH_ONLY, "get", "/x"));
    assert_eq!(got.schema.name, "global-default");
    let dangling = &c.schemas()[valid.flow_schema_index("aaa").unwrap()];
    assert_eq!(dangling.level, None);
}

/// Kubernetes' `TestLiterals` (match_test.go), with valid verbs in place of
/// its made-up ones so the rules pass validation: each rule alone in a
/// schema, matched against one request.
mod literals {
    use super::*;

    const GOOD_USER: &str = "goodu";
    const GOOD_GROUPS: &[&str] = &["goodg1", "goodg2"];

    fn namespaced() -> RequestDigest<'static> {
        RequestDigest {
            name: "eman",
            path: "/apis/goodapig/v1/namespaces/goodns/goodrscs",
            ..resource(
                GOOD_USER,
                GOOD_GROUPS,
                "get",
                "goodapig",
                "goodrscs",
                "",
                "goodns",
            )
        }
    }

    fn cluster_scoped() -> RequestDigest<'static> {
        RequestDigest {
            name: "eman",
            path: "/apis/goodapig/v1/goodrscs",
            ..resource(
                GOOD_USER,
                GOOD_GROUPS,
                "get",
                "goodapig",
                "goodrscs",
                "",
                "",
            )
        }
    }

    fn url() -> RequestDigest<'static> {
        non_resource(GOOD_USER, GOOD_GROUPS, "get", "/openapi/v2")
    }

    fn subject(kind: &str, name: &str) -> String {
        match kind {
            "User" => format!(r#"{{"kind": "User", "user": {{"name": "{name}"}}}}"#),
            _ => format!(r#"{{"kind": "Group", "group": {{"name": "{name}"}}}}"#),
        }
    }

    fn resource_rule(
        subject: &str,
        verb: &str,
        group: &str,
        res: &str,
        ns: Option<&str>,
        cluster: bool,
    ) -> String {
        let namespaces = ns
            .map(|n| format!(r#", "namespaces": ["{n}"]"#))
            .unwrap_or_default();
        format!(
            r#"[{{"subjects": [{subject}], "resourceRules": [{{"verbs": ["{verb}"],
            "apiGroups": ["{group}"], "resources": ["{res}"], "clusterScope": {cluster}{namespaces}}}]}}]"#
        )
    }

    fn url_rule(subject: &str, verb: &str, url: &str) -> String {
        format!(
            r#"[{{"subjects": [{subject}], "nonResourceRules": [{{"verbs": ["{verb}"], "nonResourceURLs": ["{url}"]}}]}}]"#
        )
    }

    /// Whether a schema made of `rules` alone takes the request.
    fn matches(rules: &str, digest: &RequestDigest<'_>) -> bool {
        let mut config = Config::builtin();
        config
            .flow_schemas
            .push(schema("rule", "workload-low", 5, rules));
        let valid = config.validate().unwrap_or_else(|e| panic!("{e}\n{rules}"));
        let c = Classifier::new(&valid);
        let got = c.classify(digest);
        let by_reference = reference::classify(&valid, digest).unwrap();
        assert_eq!(got.schema_index, by_reference.schema_index, "{rules}");
        got.schema.name == "rule"
    }

    #[test]
    fn namespaced_resource_request() {
        let u = subject("User", GOOD_USER);
        let yes = [
            resource_rule(&u, "get", "goodapig", "goodrscs", Some("goodns"), false),
            resource_rule(
                &subject("Group", "goodg1"),
                "get",
                "goodapig",
                "goodrscs",
                Some("goodns"),
                false,
            ),
            resource_rule(
                &subject("User", "*"),
                "get",
                "goodapig",
                "goodrscs",
                Some("goodns"),
                false,
            ),
            resource_rule(
                &subject("Group", "*"),
                "get",
                "goodapig",
                "goodrscs",
                Some("goodns"),
                false,
            ),
            resource_rule(&u, "*", "goodapig", "goodrscs", Some("goodns"), false),
            resource_rule(&u, "get", "*", "goodrscs", Some("goodns"), false),
            resource_rule(&u, "get", "goodapig", "*", Some("goodns"), false),
            resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
        ];
        let no = [
            resource_rule(
                &subject("User", "badu"),
                "get",
                "goodapig",
                "goodrscs",
                Some("goodns"),
                false,
            ),
            resource_rule(
                &subject("Group", "badg"),
                "get",
                "goodapig",
                "goodrscs",
                Some("goodns"),
                false,
            ),
            resource_rule(&u, "list", "goodapig", "goodrscs", Some("goodns"), false),
            resource_rule(&u, "get", "badapig", "goodrscs", Some("goodns"), false),
            resource_rule(&u, "get", "goodapig", "badrscs", Some("goodns"), false),
            resource_rule(&u, "get", "goodapig", "goodrscs", Some("badns"), false),
        ];
        for r in &yes {
            assert!(matches(r, &namespaced()), "expected a match: {r}");
        }
        for r in &no {
            assert!(!matches(r, &namespaced()), "expected no match: {r}");
        }
    }

    #[test]
    fn cluster_scoped_resource_request() {
        let u = subject("User", GOOD_USER);
        let yes = [
            resource_rule(&u, "get", "goodapig", "goodrscs", None, true),
            resource_rule(&u, "*", "goodapig", "goodrscs", None, true),
            resource_rule(&u, "get", "*", "goodrscs", None, true),
            resource_rule(&u, "get", "goodapig", "*", None, true),
        ];
        let no = [
            resource_rule(&u, "list", "goodapig", "goodrscs", None, true),
            resource_rule(&u, "get", "badapig", "goodrscs", None, true),
            resource_rule(&u, "get", "goodapig", "badrscs", None, true),
            resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
        ];
        for r in &yes {
            assert!(matches(r, &cluster_scoped()), "expected a match: {r}");
        }
        for r in &no {
            assert!(!matches(r, &cluster_scoped()), "expected no match: {r}");
        }
    }

    #[test]
    fn non_resource_request() {
        let u = subject("User", GOOD_USER);
        for r in [
            url_rule(&u, "get", "/openapi/v2"),
            url_rule(&u, "*", "/openapi/v2"),
            url_rule(&u, "get", "*"),
        ] {
            assert!(matches(&r, &url()), "expected a match: {r}");
        }
        for r in [
            url_rule(&u, "list", "/openapi/v2"),
            url_rule(&u, "get", "/closedapi/v2"),
        ] {
            assert!(!matches(&r, &url()), "expected no match: {r}");
        }
    }

    #[test]
    fn url_prefixes() {
        let u = subject("User", GOOD_USER);
        let at = |path| non_resource(GOOD_USER, GOOD_GROUPS, "get", path);
        // A plain URL also covers what is below it.
        assert!(matches(
            &url_rule(&u, "get", "/healthz"),
            &at("/healthz/etcd")
        ));
        assert!(!matches(&url_rule(&u, "get", "/healthz"), &at("/healthzz")));
        assert!(matches(&url_rule(&u, "get", "/apis/*"), &at("/apis/apps")));
        assert!(matches(&url_rule(&u, "get", "/apis/*"), &at("/apis/")));
        assert!(!matches(&url_rule(&u, "get", "/apis/*"), &at("/apis")));
        assert!(matches(&url_rule(&u, "get", "/"), &at("/anything/at/all")));
    }

    #[test]
    fn subresources() {
        let u = subject("User", GOOD_USER);
        let status = RequestDigest {
            subresource: "status",
            ..namespaced()
        };
        assert!(matches(
            &resource_rule(&u, "get", "goodapig", "goodrscs/status", Some("*"), false),
            &status
        ));
        assert!(!matches(
            &resource_rule(&u, "get", "goodapig", "goodrscs", Some("*"), false),
            &status
        ));
        assert!(!matches(
            &resource_rule(&u, "get", "goodapig", "goodrscs/status", Some("*"), false),
            &namespaced()
        ));
        assert!(matches(
            &resource_rule(&u, "get", "goodapig", "*", Some("*"), false),
            &status
        ));
    }

    #[test]
    fn service_account_subjects() {
        let sa = |ns: &str, name: &str| {
            format!(
                r#"{{"kind": "ServiceAccount", "serviceAccount": {{"namespace": "{ns}", "name": "{name}"}}}}"#
            )
        };
        let as_user = |user| non_resource(user, &[], "get", "/x");
        let rule = |s: &str| url_rule(s, "get", "*");
        assert!(matches(
            &rule(&sa("ns1", "sa1")),
            &as_user("system:serviceaccount:ns1:sa1")
        ));
        assert!(!matches(
            &rule(&sa("ns1", "sa1")),
            &as_user("system:serviceaccount:ns1:sa2")
        ));
        assert!(!matches(
            &rule(&sa("ns1", "sa1")),
            &as_user("system:serviceaccount:ns1:sa1x")
        ));
        assert!(!matches(&rule(&sa("ns1", "sa1")), &as_user("ns1:sa1")));
        assert!(matches(
            &rule(&sa("ns1", "*")),
            &as_user("system:serviceaccount:ns1:anyone")
        ));
        assert!(!matches(
            &rule(&sa("ns1", "*")),
            &as_user("system:serviceaccount:ns10:anyone")
        ));
        assert!(!matches(
            &rule(&sa("ns1", "*")),
            &as_user("system:serviceaccount:ns1")
        ));
    }

    #[test]
    fn long_lists_are_matched_like_short_ones() {
        let u = subject("User", GOOD_USER);
        let many: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
        let list = |extra: &str| {
            let mut items = many.clone();
            items.push(extra.to_string());
            format!("{items:?}")
        };
        let rules = |resources: String| {
            format!(
                r#"[{{"subjects": [{u}], "resourceRules": [{{"verbs": ["get"], "apiGroups": ["goodapig"],
                "resources": {resources}, "namespaces": ["*"]}}]}}]"#
            )
        };
        let status = RequestDigest {
            subresource: "status",
            ..namespaced()
        };
        assert!(matches(&rules(list("goodrscs")), &namespaced()));
        assert!(!matches(&rules(list("goodrscs")), &status));
        assert!(matches(&rules(list("goodrscs/status")), &status));
        assert!(!matches(&rules(list("goodrscs/status")), &namespaced()));
        let long_sub = "s".repeat(300);
        let long = RequestDigest {
            subresource: &long_sub,
            ..namespaced()
        };
        assert!(matches(
            &rules(list(&format!("goodrscs/{long_sub}"))),
            &long
        ));
    }
}

/// Kubernetes' `mandFTRExempt` and `mandFTRCatchAll` records: which
/// requests the mandatory schemas take.
#[test]
fn mandatory_schemas() {
    let valid = Config::mandatory().validate().unwrap();
    let exempt = &valid.flow_schemas()[valid.flow_schema_index("exempt").unwrap()];
    let catch_all = &valid.flow_schemas()[valid.flow_schema_index("catch-all").unwrap()];
    let plain = [AUTHENTICATED, "nogroup"];
    let privileged = [AUTHENTICATED, MASTERS];
    let url = |groups| non_resource("nobody", groups, "frobulate", "/foo/bar");
    let res = |groups| {
        resource(
            "nobody", groups, "mandate", "nogroup", "nons", "", "nospace",
        )
    };
    for d in [url(&plain), res(&plain)] {
        assert!(!reference::matches_schema(&d, exempt));
        assert!(reference::matches_schema(&d, catch_all));
    }
    for d in [url(&privileged), res(&privileged)] {
        assert!(reference::matches_schema(&d, exempt));
    }
    let c = Classifier::new(&valid);
    assert_eq!(c.classify(&res(&privileged)).schema.name, "exempt");
    assert_eq!(c.classify(&res(&plain)).schema.name, "catch-all");
    assert!(!c.classify(&res(&plain)).fallback);
}

#[cfg(all(test, not(loom)))]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::config::{
        NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule, Subject,
    };

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

    #[derive(Debug, Clone)]
    struct OwnedDigest {
        user: String,
        groups: Vec<String>,
        verb: String,
        is_resource_request: bool,
        api_group: String,
        resource: String,
        subresource: String,
        namespace: String,
        path: String,
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
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The compiled classifier decides exactly as the plain
        /// interpreter of Kubernetes' rules.
        #[test]
        fn compiled_matches_reference(extra in schemas(), digests in proptest::collection::vec(digest(), 1..16)) {
            let mut config = Config::builtin();
            config.flow_schemas.extend(extra);
            let valid = config.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let classifier = Classifier::new(&valid);
            for owned in &digests {
                let groups: Vec<&str> = owned.groups.iter().map(String::as_str).collect();
                let d = RequestDigest {
                    user: &owned.user,
                    groups: &groups,
                    verb: &owned.verb,
                    is_resource_request: owned.is_resource_request,
                    api_group: &owned.api_group,
                    resource: &owned.resource,
                    subresource: &owned.subresource,
                    namespace: &owned.namespace,
                    name: "",
                    path: &owned.path,
                };
                let got = classifier.classify(&d);
                let want = reference::classify(&valid, &d).expect("catch-all exists");
                prop_assert_eq!(got.schema_index, want.schema_index, "{:?}", owned);
                prop_assert_eq!(got.level_index, want.level_index);
                prop_assert_eq!(got.flow_distinguisher, want.flow_distinguisher.as_str());
                prop_assert_eq!(got.flow_hash, want.flow_hash);
                prop_assert_eq!(got.fallback, want.fallback);
            }
        }
    }
}

#[test]
fn deferred_hash_is_the_same_hash() {
    let c = builtin();
    let d = resource(
        "system:serviceaccount:example-com:default",
        SA_EXAMPLE,
        "list",
        "",
        "pods",
        "",
        "example-com",
    );
    let deferred = c.classify_deferred(&d);
    assert_eq!(deferred.flow_hash, 0);
    let full = c.classify(&d);
    assert_eq!(c.flow_hash(&deferred), full.flow_hash);
    assert_eq!(
        Classification {
            flow_hash: full.flow_hash,
            ..deferred
        },
        full
    );
    // No queues, no hash.
    let exempt = c.classify_deferred(&non_resource("a", ADMIN_GROUPS, "get", "/"));
    assert_eq!(c.flow_hash(&exempt), 0);
}

/// More distinct names than the 64 bits of a subject table: the rest are
/// compared as strings and still match exactly as the rules say.
#[test]
fn configurations_beyond_the_subject_tables() {
    let groups: Vec<String> = (0..70)
        .map(|i| format!(r#"{{"kind": "Group", "group": {{"name": "g{i}"}}}}"#))
        .collect();
    let users: Vec<String> = (0..70)
        .map(|i| format!(r#"{{"kind": "User", "user": {{"name": "u{i}"}}}}"#))
        .collect();
    let sas: Vec<String> = (0..70)
        .map(|i| format!(r#"{{"kind": "ServiceAccount", "serviceAccount": {{"namespace": "ns{i}", "name": "*"}}}}"#))
        .collect();
    let rules = format!(
        r#"[{{"subjects": [{}], "nonResourceRules": [{{"verbs": ["*"], "nonResourceURLs": ["*"]}}]}}]"#,
        [groups, users, sas].concat().join(", ")
    );
    let mut config = Config::builtin();
    config
        .flow_schemas
        .push(schema("many", "workload-low", 5, &rules));
    let valid = config.validate().unwrap();
    let c = Classifier::new(&valid);
    let cases: [(&str, &[&str], bool); 8] = [
        ("nobody", &["g0"], true),
        ("nobody", &["x", "g69"], true),
        ("nobody", &["g70"], false),
        ("u63", &[], true),
        ("u69", &[], true),
        ("u70", &[], false),
        ("system:serviceaccount:ns69:any", &[], true),
        ("system:serviceaccount:ns70:any", &[], false),
    ];
    for (user, groups, many) in cases {
        let d = non_resource(user, groups, "get", "/x");
        let got = c.classify(&d);
        assert_eq!(got.schema.name == "many", many, "{user} {groups:?}");
        assert_eq!(
            got.schema_index,
            reference::classify(&valid, &d).unwrap().schema_index
        );
    }
}
