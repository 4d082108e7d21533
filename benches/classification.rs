//! Classification against the built-in configuration: the compiled
//! classifier beside the plain interpreter of the rules (which joins strings
//! and builds service-account names on the heap, as Kubernetes' matcher
//! does), for a few typical requests; and the flow hash on its own.
//!
//! `cargo bench --bench classification`

use std::hint::black_box;

use apf::classification::{hash_flow_id, reference, Classifier, RequestDigest};
use apf::config::Config;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const AUTHENTICATED: &str = "system:authenticated";

/// Requests that end at different depths of the built-in schema list.
fn digests() -> Vec<(&'static str, RequestDigest<'static>)> {
    vec![
        (
            "admin_exempt",
            RequestDigest {
                user: "system:admin",
                groups: &["system:masters", AUTHENTICATED],
                verb: "get",
                is_resource_request: true,
                resource: "pods",
                namespace: "default",
                name: "web-0",
                path: "/api/v1/namespaces/default/pods/web-0",
                ..RequestDigest::default()
            },
        ),
        (
            "node_lease_renewal",
            RequestDigest {
                user: "system:node:worker-17",
                groups: &["system:nodes", AUTHENTICATED],
                verb: "update",
                is_resource_request: true,
                api_group: "coordination.k8s.io",
                resource: "leases",
                namespace: "kube-node-lease",
                name: "worker-17",
                path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker-17",
                ..RequestDigest::default()
            },
        ),
        (
            "controller_status_update",
            RequestDigest {
                user: "system:serviceaccount:kube-system:deployment-controller",
                groups: &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    AUTHENTICATED,
                ],
                verb: "update",
                is_resource_request: true,
                api_group: "apps",
                resource: "deployments",
                subresource: "status",
                namespace: "kube-system",
                name: "coredns",
                path: "/apis/apps/v1/namespaces/kube-system/deployments/coredns/status",
            },
        ),
        (
            "workload_service_account_list",
            RequestDigest {
                user: "system:serviceaccount:shop:frontend",
                groups: &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:shop",
                    AUTHENTICATED,
                ],
                verb: "list",
                is_resource_request: true,
                resource: "configmaps",
                namespace: "shop",
                path: "/api/v1/namespaces/shop/configmaps",
                ..RequestDigest::default()
            },
        ),
        (
            "user_global_default",
            RequestDigest {
                user: "alice@example.com",
                groups: &["developers", AUTHENTICATED],
                verb: "get",
                is_resource_request: false,
                path: "/version",
                ..RequestDigest::default()
            },
        ),
    ]
}

fn classify(c: &mut Criterion) {
    let valid = Config::builtin()
        .validate()
        .expect("built-in config is valid");
    let classifier = Classifier::new(&valid);
    let mut group = c.benchmark_group("classify_builtin");
    for (name, digest) in digests() {
        group.bench_with_input(BenchmarkId::new("compiled", name), &digest, |b, d| {
            b.iter(|| {
                let c = classifier.classify(black_box(d));
                black_box((c.schema_index, c.level_index, c.flow_hash))
            })
        });
        group.bench_with_input(BenchmarkId::new("interpreted", name), &digest, |b, d| {
            b.iter(|| black_box(reference::classify(&valid, black_box(d))))
        });
    }
    group.finish();
}

fn flow_hash(c: &mut Criterion) {
    c.bench_function("hash_flow_id", |b| {
        b.iter(|| {
            hash_flow_id(
                black_box("service-accounts"),
                black_box("system:serviceaccount:shop:frontend"),
            )
        })
    });
}

criterion_group!(benches, classify, flow_hash);
criterion_main!(benches);
