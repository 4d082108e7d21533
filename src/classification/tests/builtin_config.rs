//! Kubernetes' decisions on its built-in and mandatory configurations.

use super::*;

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
