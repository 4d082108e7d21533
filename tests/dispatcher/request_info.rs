//! The request-to-digest helper against the expectations every binding
//! shares (tests/data/request-info-cases.json; Go's ParsePath reads the same
//! file).
#![cfg(not(loom))]

use apf::classification::{Classifier, RequestInfo};
use apf::config::Config;
use serde_json::Value;

#[test]
fn every_shared_case() {
    let text = include_str!("../data/request-info-cases.json");
    let doc: Value = serde_json::from_str(text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 70);
    let s = |v: &Value, k: &str| v[k].as_str().unwrap().to_string();
    for case in cases {
        let (method, path, query) = (s(case, "method"), s(case, "path"), s(case, "query"));
        let got = RequestInfo::parse(&method, &path, &query);
        let want = &case["want"];
        let got_json = serde_json::json!({
            "verb": got.verb,
            "is_resource_request": got.is_resource_request,
            "api_group": got.api_group,
            "resource": got.resource,
            "subresource": got.subresource,
            "namespace": got.namespace,
            "name": &*got.name,
            "path": got.path,
        });
        assert_eq!(&got_json, want, "{method} {path} query={query:?}");
    }
}

#[test]
fn a_parsed_request_classifies_as_kubernetes_would() {
    let classifier = Classifier::new(&Config::builtin().validate().unwrap());
    let info = RequestInfo::parse(
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
        "",
    );
    let groups = ["system:nodes", "system:authenticated"];
    let c = classifier.classify(&info.digest("system:node:n1", &groups));
    assert_eq!(c.schema.name, "system-node-high");
    assert_eq!(c.level.name, "node-high");
}
