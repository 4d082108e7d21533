//! The flow hash: Kubernetes' `hashFlowID`, computed now or deferred.

use super::*;

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
