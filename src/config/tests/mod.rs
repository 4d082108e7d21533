use super::*;

fn errors_of(yaml: &str) -> ConfigErrors {
    let config = Config::from_yaml_str(yaml).unwrap_or_else(|e| panic!("load failed: {e}"));
    match config.validate() {
        Ok(_) => panic!("expected validation errors for:\n{yaml}"),
        Err(e) => e,
    }
}

/// The errors as `(object name, field, type)`, for comparing as a set.
fn summary(errors: &ConfigErrors) -> Vec<(String, String, ErrorType)> {
    let mut v: Vec<_> = errors
        .iter()
        .map(|e| (e.object.name.clone(), e.field.clone(), e.error_type))
        .collect();
    v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    v
}

fn expect(yaml: &str, want: &[(&str, &str, ErrorType)]) {
    let errors = errors_of(yaml);
    let mut want: Vec<_> = want
        .iter()
        .map(|(n, f, t)| (n.to_string(), f.to_string(), *t))
        .collect();
    want.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(summary(&errors), want, "{errors}");
}

fn level(name: &str, limited: &str) -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {{name: {name}}}\nspec: {{type: Limited, limited: {limited}}}\n---\n"
    )
}

fn schema(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: {name}}}\nspec: {spec}\n---\n"
    )
}

const ANY_URL: &str = r#"nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]"#;

fn simple_schema(name: &str, precedence: i32, subjects: &str, rules: &str) -> String {
    schema(
        name,
        &format!(
            "{{priorityLevelConfiguration: {{name: global-default}}, matchingPrecedence: {precedence}, rules: [{{subjects: {subjects}, {rules}}}]}}"
        ),
    ) + &level(
        "global-default",
        "{limitResponse: {type: Queue, queuing: {}}}",
    )
}

#[test]
fn builtin_is_valid_and_complete() {
    let valid = Config::builtin().validate().unwrap();
    assert!(valid.notices().is_empty(), "{:?}", valid.notices());
    let levels: Vec<_> = valid
        .priority_levels()
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(
        levels,
        [
            "catch-all",
            "exempt",
            "system",
            "node-high",
            "leader-election",
            "workload-high",
            "workload-low",
            "global-default"
        ]
    );
    let schemas: Vec<_> = valid
        .flow_schemas()
        .iter()
        .map(|s| {
            (
                s.matching_precedence,
                s.name.as_str(),
                s.priority_level_name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        schemas,
        [
            (1, "exempt", "exempt"),
            (2, "probes", "exempt"),
            (100, "system-leader-election", "leader-election"),
            (400, "system-node-high", "node-high"),
            (500, "system-nodes", "system"),
            (800, "kube-controller-manager", "workload-high"),
            (800, "kube-scheduler", "workload-high"),
            (900, "kube-system-service-accounts", "workload-high"),
            (9000, "service-accounts", "workload-low"),
            (9900, "global-default", "global-default"),
            (10000, "catch-all", "catch-all"),
        ]
    );
}

/// Kubernetes' bootstrap values, level by level.
#[test]
fn builtin_level_values() {
    let valid = Config::builtin().validate().unwrap();
    let get =
        |name: &str| valid.priority_levels()[valid.priority_level_index(name).unwrap()].clone();
    let queue = |queues, hand_size| {
        LimitPolicy::Queue(QueuingParams {
            queues,
            hand_size,
            queue_length_limit: 50,
        })
    };
    let limited = |ncs, lendable, limit_response| {
        (
            ncs,
            lendable,
            LevelKind::Limited {
                borrowing_limit_percent: None,
                limit_response,
            },
        )
    };
    let table = [
        ("exempt", (0, 0, LevelKind::Exempt)),
        ("catch-all", limited(5, 0, LimitPolicy::Reject)),
        ("system", limited(30, 33, queue(64, 6))),
        ("node-high", limited(40, 25, queue(64, 6))),
        ("leader-election", limited(10, 0, queue(16, 4))),
        ("workload-high", limited(40, 50, queue(128, 6))),
        ("workload-low", limited(100, 90, queue(128, 6))),
        ("global-default", limited(20, 50, queue(128, 6))),
    ];
    for (name, (ncs, lendable, kind)) in table {
        let l = get(name);
        assert_eq!(
            (l.nominal_concurrency_shares, l.lendable_percent, l.kind),
            (ncs, lendable, kind),
            "{name}"
        );
    }
    let by_name = |name: &str| valid.flow_schemas()[valid.flow_schema_index(name).unwrap()].clone();
    use DistinguisherMethod::*;
    for (name, method) in [
        ("exempt", None),
        ("probes", None),
        ("system-leader-election", Some(ByUser)),
        ("system-node-high", Some(ByUser)),
        ("system-nodes", Some(ByUser)),
        ("kube-controller-manager", Some(ByNamespace)),
        ("kube-scheduler", Some(ByNamespace)),
        ("kube-system-service-accounts", Some(ByNamespace)),
        ("service-accounts", Some(ByUser)),
        ("global-default", Some(ByUser)),
        ("catch-all", Some(ByUser)),
    ] {
        assert_eq!(by_name(name).distinguisher, method, "{name}");
    }
}

#[test]
fn builtin_round_trips_through_yaml_and_json() {
    let builtin = Config::builtin();
    let yaml = builtin.to_yaml();
    assert!(
        yaml.starts_with("apiVersion: v1\nkind: List\nitems:\n"),
        "{yaml}"
    );
    assert_eq!(Config::from_yaml_str(&yaml).unwrap(), builtin);
    assert_eq!(Config::from_json_str(&builtin.to_json()).unwrap(), builtin);
    assert_eq!(
        Config::from_slice(builtin.to_json().as_bytes()).unwrap(),
        builtin
    );
    assert_eq!(Config::from_slice(yaml.as_bytes()).unwrap(), builtin);
}

#[test]
fn input_without_objects_is_refused() {
    // kubectl refuses to apply "no objects"; before issue 13 this loaded as
    // an empty configuration, which dropped every suggested object.
    for text in [
        "",
        "---\n",
        "# nothing\n",
        "apiVersion: v1\nkind: List\nitems: []\n",
    ] {
        let errors = Config::from_yaml_str(text).unwrap_err();
        assert_eq!(errors.0, vec![ConfigError::no_objects()], "{text:?}");
    }
    for text in [
        "",
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
    ] {
        let errors = Config::from_json_str(text).unwrap_err();
        assert_eq!(errors.0, vec![ConfigError::no_objects()], "{text:?}");
    }
    // Objects built in code can still be empty; validation adds the
    // mandatory ones (the dispatcher is what refuses an empty one).
    let valid = Config::default().validate().unwrap();
    assert_eq!(valid.notices().len(), 4, "{:?}", valid.notices());
    assert_eq!(valid.priority_levels().len(), 2);
    assert_eq!(valid.flow_schemas().len(), 2);
}

#[test]
fn every_yaml_documents_errors_are_reported_with_lines_of_the_whole_text() {
    let level = |name: &str, version: &str| {
        format!("apiVersion: {version}\nkind: PriorityLevelConfiguration\nmetadata: {{name: {name}}}\nspec: {{type: Limited, limited: {{limitResponse: {{type: Reject}}}}}}\n")
    };
    let text = format!(
        "%YAML 1.2\n---\n{}---\n# a comment\nkey: [unclosed\n---\n{}# trailing\n",
        level("one", "x/v1"),
        level("three", "y/v1")
    );
    let errors = Config::from_yaml_str(&text).unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 3, "{shown:#?}");
    assert!(errors.has("one", "apiVersion"), "{shown:#?}");
    assert!(errors.has("three", "apiVersion"), "{shown:#?}");
    let syntax = &errors.0[1];
    assert_eq!(syntax.object.location, "document 2");
    // The unclosed sequence runs to the end of its document (line 10).
    assert!(
        syntax.detail.contains("line 8")
            || syntax.detail.contains("line 9")
            || syntax.detail.contains("line 10"),
        "{syntax}"
    );
}

#[test]
fn input_over_the_size_cap_is_refused_before_parsing() {
    let big = "#".repeat(crate::input::MAX_INPUT_BYTES + 1);
    for result in [
        Config::from_yaml_str(&big),
        Config::from_json_str(&big),
        Config::from_slice(big.as_bytes()),
    ] {
        let e = result.unwrap_err().to_string();
        assert!(e.contains("MAX_INPUT_BYTES"), "{e}");
    }
}

#[test]
fn errors_quote_a_huge_name_only_in_part() {
    let mut config = Config::builtin();
    let name = "x".repeat(8 << 20);
    config.priority_levels[2].metadata.name = name.clone();
    let text = config.validate().unwrap_err().to_string();
    assert!(text.len() < 4096, "{} bytes", text.len());
    assert!(text.contains(&format!("({} bytes in all)", name.len())));
}

#[test]
fn single_objects_lists_typed_lists_and_documents() {
    let pl = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: a}\nspec: {type: Limited, limited: {limitResponse: {type: Reject}}}\n";
    let one = Config::from_yaml_str(pl).unwrap();
    assert_eq!(one.priority_levels.len(), 1);

    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}",
        pl.replace('\n', "\n  ")
    );
    assert_eq!(Config::from_yaml_str(&list).unwrap(), one);

    // As the API returns a list: items carry neither kind nor apiVersion.
    let typed = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfigurationList\nmetadata: {resourceVersion: '7'}\nitems:\n- metadata: {name: a}\n  spec: {type: Limited, limited: {limitResponse: {type: Reject}}}\n";
    assert_eq!(Config::from_yaml_str(typed).unwrap(), one);

    let docs = format!("{pl}---\n{}---\n", pl.replace("name: a", "name: b"));
    let two = Config::from_yaml_str(&docs).unwrap();
    assert_eq!(
        two.priority_levels
            .iter()
            .map(|p| p.metadata.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );

    let json =
        serde_json::to_string(&serde_saphyr::from_str::<serde_json::Value>(pl).unwrap()).unwrap();
    assert_eq!(Config::from_json_str(&json).unwrap(), one);
    let stream = format!("{json}\n{json}");
    assert_eq!(
        Config::from_json_str(&stream)
            .unwrap()
            .priority_levels
            .len(),
        2
    );
}

#[test]
fn v1beta3_is_read_as_v1() {
    let text = "apiVersion: flowcontrol.apiserver.k8s.io/v1beta3\nkind: PriorityLevelConfiguration\nmetadata: {name: a, uid: u-1}\nspec: {type: Limited, limited: {nominalConcurrencyShares: 0, limitResponse: {type: Queue, queuing: {queues: 10}}}}\n---\napiVersion: flowcontrol.apiserver.k8s.io/v1beta3\nkind: PriorityLevelConfiguration\nmetadata:\n  name: b\n  annotations: {flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares: ''}\nspec: {type: Limited, limited: {nominalConcurrencyShares: 0, limitResponse: {type: Reject}}}\n";
    let config = Config::from_yaml_str(text).unwrap();
    let a = config.priority_levels[0].spec.limited.as_ref().unwrap();
    assert_eq!(a.nominal_concurrency_shares, Some(30));
    let q = a.limit_response.queuing.as_ref().unwrap();
    assert_eq!((q.queues, q.hand_size, q.queue_length_limit), (10, 8, 50));
    assert_eq!(
        config.priority_levels[0].metadata.uid.as_deref(),
        Some("u-1")
    );
    let b = &config.priority_levels[1];
    assert_eq!(
        b.spec.limited.as_ref().unwrap().nominal_concurrency_shares,
        Some(0)
    );
    assert!(b.metadata.annotations.is_empty());
    // Printed back as v1, where 0 stays 0.
    let again = Config::from_yaml_str(&config.to_yaml()).unwrap();
    assert_eq!(again, config);
}

#[test]
fn unknown_fields_outside_spec_are_ignored() {
    let text = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: x
  managedFields: [{manager: kubectl, operation: Update}]
  resourceVersion: "12"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  finalizers: []
spec:
  priorityLevelConfiguration: {name: global-default}
  rules: [{subjects: [{kind: Group, group: {name: g}}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}]
status:
  conditions: [{type: Dangling, status: "False"}]
somethingNew: 1
"#;
    let config = Config::from_yaml_str(text).unwrap();
    assert_eq!(config.flow_schemas[0].spec.matching_precedence, 1000);
}

#[test]
fn unknown_spec_fields_are_errors_with_their_path() {
    let text = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: a}\nspec: {type: Limited, limited: {limitResponse: {type: Queue, queuing: {handsize: 4}}}}\n";
    let errors = Config::from_yaml_str(text).unwrap_err();
    assert_eq!(errors.len(), 1);
    let e = &errors.0[0];
    assert_eq!(e.error_type, ErrorType::Parse);
    assert_eq!(
        e.object,
        ObjectRef {
            kind: "PriorityLevelConfiguration".into(),
            name: "a".into(),
            location: "document 1".into()
        }
    );
    assert_eq!(e.field, "spec.limited.limitResponse.queuing.handsize");
    assert!(e.detail.contains("unknown field `handsize`"), "{e}");
}

#[test]
fn load_errors_are_all_collected() {
    let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: flowcontrol.apiserver.k8s.io/v1
  kind: FlowSchema
  metadata: {name: a}
  spec: {matchingPrecedence: "high"}
- apiVersion: flowcontrol.apiserver.k8s.io/v1beta1
  kind: FlowSchema
  metadata: {name: b}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: c}
- 42
- apiVersion: flowcontrol.apiserver.k8s.io/v1
  kind: PriorityLevelConfiguration
  metadata: {name: d}
  spec: {limited: {limitResponse: {queuing: {queues: 99999999999}}}}
"#;
    let errors = Config::from_yaml_str(text).unwrap_err();
    let got: Vec<_> = errors
        .iter()
        .map(|e| {
            (
                e.object.name.as_str(),
                e.field.as_str(),
                e.object.location.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a", "spec.matchingPrecedence", "document 1, items[0]"),
            ("b", "apiVersion", "document 1, items[1]"),
            ("c", "apiVersion", "document 1, items[2]"),
            ("", "", "document 1, items[3]"),
            (
                "d",
                "spec.limited.limitResponse.queuing.queues",
                "document 1, items[4]"
            ),
        ],
        "{errors}"
    );
    let text = errors.to_string();
    assert!(
        text.contains(
            "FlowSchema \"a\" (document 1, items[0]): spec.matchingPrecedence: Parse error"
        ),
        "{text}"
    );
}

#[test]
fn syntax_errors_say_where() {
    // The first document's own error is reported too (it lacks an
    // apiVersion), and the syntax error's line is the whole text's.
    let errors = Config::from_yaml_str("kind: FlowSchema\n---\n[unclosed\n").unwrap_err();
    assert_eq!(errors.len(), 2, "{errors}");
    assert_eq!(errors.0[0].object.location, "document 1");
    assert_eq!(errors.0[0].field, "apiVersion");
    assert_eq!(errors.0[1].object.location, "document 2");
    assert!(errors.0[1].detail.contains("line 3"), "{errors}");
    // A single document that does not parse is the whole input.
    let errors = Config::from_yaml_str("[unclosed\n").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].object.location, "YAML input");
    let errors = Config::from_json_str("{\"kind\": ").unwrap_err();
    assert_eq!(errors.0[0].object.location, "document 1");
    let errors = Config::from_slice(&[0xff, 0xfe]).unwrap_err();
    assert_eq!(errors.0[0].error_type, ErrorType::Parse);
    let errors = Config::from_yaml_str("just a string").unwrap_err();
    assert_eq!(errors.0[0].object.kind, "Document");
}

#[test]
fn overrides_replace_by_kind_and_name_in_place_and_add_the_rest() {
    let builtin = Config::builtin();
    let mut low = builtin
        .priority_levels
        .iter()
        .find(|p| p.metadata.name == "workload-low")
        .unwrap()
        .clone();
    low.spec
        .limited
        .as_mut()
        .unwrap()
        .nominal_concurrency_shares = Some(7);
    let mut new = low.clone();
    new.metadata.name = "new-level".into();
    let file = Config {
        priority_levels: vec![low.clone(), new.clone()],
        flow_schemas: vec![],
    };
    let merged = builtin.with_overrides(&file);
    assert_eq!(merged.flow_schemas, builtin.flow_schemas);
    assert_eq!(
        merged.priority_levels.len(),
        builtin.priority_levels.len() + 1
    );
    let at = builtin
        .priority_levels
        .iter()
        .position(|p| p.metadata.name == "workload-low")
        .unwrap();
    assert_eq!(merged.priority_levels[at], low, "replaced in its place");
    assert_eq!(merged.priority_levels.last(), Some(&new), "added after");
    // A FlowSchema named like a level replaces nothing: kinds are apart.
    let mut schema = builtin.flow_schemas[0].clone();
    schema.metadata.name = "workload-low".into();
    let merged = builtin.with_overrides(&Config {
        priority_levels: vec![],
        flow_schemas: vec![schema],
    });
    assert_eq!(merged.priority_levels, builtin.priority_levels);
    assert_eq!(merged.flow_schemas.len(), builtin.flow_schemas.len() + 1);
}

#[cfg(not(loom))]
mod properties;
mod validation;
