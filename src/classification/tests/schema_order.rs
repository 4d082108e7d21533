//! Which schema wins: precedence, then name; dangling schemas; what a
//! classification reports; configurations beyond the subject tables.

use super::*;

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
