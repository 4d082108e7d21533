//! Any bytes: a configuration or errors, never a panic. Whatever loads must
//! print and load back unchanged; whatever validates must compile into a
//! classifier that classifies a few requests, agreeing with the plain
//! interpreter of the rules.
#![no_main]

use apf::classification::{reference, Classifier, RequestDigest};
use apf::config::{Config, DanglingReferences, ValidateOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(config) = Config::from_slice(data) else {
        return;
    };
    let again = Config::from_yaml_str(&config.to_yaml()).expect("printed YAML must load");
    assert_eq!(again, config, "YAML round trip");
    let again = Config::from_json_str(&config.to_json()).expect("printed JSON must load");
    assert_eq!(again, config, "JSON round trip");

    let options = ValidateOptions {
        dangling: DanglingReferences::Ignore,
        ..ValidateOptions::default()
    };
    let Ok(valid) = config.validate_with(&options) else {
        return;
    };
    let classifier = Classifier::new(&valid);
    let groups = ["system:authenticated", "system:serviceaccounts"];
    let digests = [
        RequestDigest {
            user: "system:serviceaccount:default:app",
            groups: &groups,
            verb: "list",
            is_resource_request: true,
            resource: "pods",
            namespace: "default",
            ..RequestDigest::default()
        },
        RequestDigest {
            user: "alice",
            groups: &groups[..1],
            verb: "get",
            path: "/healthz/etcd",
            ..RequestDigest::default()
        },
        RequestDigest::default(),
    ];
    for d in &digests {
        let got = classifier.classify(d);
        let want = reference::classify(&valid, d).expect("catch-all exists");
        assert_eq!(got.schema_index, want.schema_index);
        assert_eq!(got.flow_hash, want.flow_hash);
    }
});
