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
fn flow_schema_validation() {
    use ErrorType::*;
    // Kubernetes' TestFlowSchemaValidation cases, as YAML.
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            "resourceRules: []",
        ),
        &[("system-foo", "spec.rules[0]", Required)],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: ServiceAccount, user: {name: fred}, group: {name: fred}}]",
            ANY_URL,
        ),
        &[
            (
                "system-foo",
                "spec.rules[0].subjects[0].serviceAccount",
                Required,
            ),
            ("system-foo", "spec.rules[0].subjects[0].user", Forbidden),
            ("system-foo", "spec.rules[0].subjects[0].group", Forbidden),
        ],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, group: {name: fred}, serviceAccount: {namespace: s, name: n}}]",
            ANY_URL,
        ),
        &[
            (
                "system-foo",
                "spec.rules[0].subjects[0].serviceAccount",
                Forbidden,
            ),
            ("system-foo", "spec.rules[0].subjects[0].user", Required),
            ("system-foo", "spec.rules[0].subjects[0].group", Forbidden),
        ],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: Group, user: {name: fred}, serviceAccount: {namespace: s, name: n}}]",
            ANY_URL,
        ),
        &[
            (
                "system-foo",
                "spec.rules[0].subjects[0].serviceAccount",
                Forbidden,
            ),
            ("system-foo", "spec.rules[0].subjects[0].user", Forbidden),
            ("system-foo", "spec.rules[0].subjects[0].group", Required),
        ],
    );
    expect(
        &simple_schema("fred", 1, "[{kind: Group, group: {name: gorp}}]", ANY_URL),
        &[("fred", "spec.matchingPrecedence", Invalid)],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"resourceRules: [{verbs: ["*", create], apiGroups: ["*", tak], resources: ["*", tok], namespaces: ["*"]}]"#,
        ),
        &[
            (
                "system-foo",
                "spec.rules[0].resourceRules[0].verbs",
                Invalid,
            ),
            (
                "system-foo",
                "spec.rules[0].resourceRules[0].apiGroups",
                Invalid,
            ),
            (
                "system-foo",
                "spec.rules[0].resourceRules[0].resources",
                Invalid,
            ),
        ],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*", tik]}]"#,
        ),
        &[(
            "system-foo",
            "spec.rules[0].nonResourceRules[0].nonResourceURLs",
            Invalid,
        )],
    );
    expect(
        &simple_schema("system-foo", 50, "[{kind: FooKind}]", ANY_URL),
        &[("system-foo", "spec.rules[0].subjects[0].kind", NotSupported)],
    );
    expect(
        &simple_schema("system-foo", 50, "[{kind: ''}]", ANY_URL),
        &[("system-foo", "spec.rules[0].subjects[0].kind", NotSupported)],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"resourceRules: [{verbs: [feed], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]"#,
        ),
        &[(
            "system-foo",
            "spec.rules[0].resourceRules[0].verbs",
            NotSupported,
        )],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: ServiceAccount, serviceAccount: {name: noxu}}]",
            ANY_URL,
        ),
        &[(
            "system-foo",
            "spec.rules[0].subjects[0].serviceAccount.namespace",
            Required,
        )],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"]}]"#,
        ),
        &[(
            "system-foo",
            "spec.rules[0].resourceRules[0].namespaces",
            Required,
        )],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: [foo, "*"]}]"#,
        ),
        &[(
            "system-foo",
            "spec.rules[0].resourceRules[0].namespaces",
            Invalid,
        )],
    );
    expect(
        &simple_schema(
            "system-foo",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: [-foo]}]"#,
        ),
        &[(
            "system-foo",
            "spec.rules[0].resourceRules[0].namespaces[0]",
            Invalid,
        )],
    );
    expect(
        &simple_schema(
            "system-foo",
            10001,
            "[{kind: User, user: {name: noxu}}]",
            ANY_URL,
        ),
        &[("system-foo", "spec.matchingPrecedence", Invalid)],
    );
    expect(
        &simple_schema(
            "system-foo",
            -3,
            "[{kind: User, user: {name: noxu}}]",
            ANY_URL,
        ),
        &[("system-foo", "spec.matchingPrecedence", Invalid)],
    );
    expect(
        &(schema(
            "system-foo",
            r#"{priorityLevelConfiguration: {name: "system+++$$"}, rules: [{subjects: [{kind: User, user: {name: noxu}}], nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]}]}"#,
        )),
        &[(
            "system-foo",
            "spec.priorityLevelConfiguration.name",
            Invalid,
        )],
    );
    expect(
        &schema(
            "x",
            r#"{distinguisherMethod: {type: ByColour}, priorityLevelConfiguration: {name: ""}}"#,
        ),
        &[
            ("x", "spec.distinguisherMethod.type", NotSupported),
            ("x", "spec.priorityLevelConfiguration.name", Required),
        ],
    );
    expect(
        &simple_schema(
            "urls",
            50,
            "[{kind: User, user: {name: noxu}}]",
            r#"nonResourceRules: [{verbs: [get], nonResourceURLs: [healthz, "/a b", "//x", "/x*", "/*/y", ""]}]"#,
        ),
        &[
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]",
                Invalid,
            ),
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[1]",
                Invalid,
            ),
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[2]",
                Invalid,
            ),
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[3]",
                Invalid,
            ),
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[4]",
                Invalid,
            ),
            (
                "urls",
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[5]",
                Invalid,
            ),
        ],
    );
}

#[test]
fn well_formed_schemas_pass() {
    let ok = simple_schema(
        "system-foo",
        50,
        "[{kind: Group, group: {name: noxu}}, {kind: ServiceAccount, serviceAccount: {namespace: ns, name: '*'}}]",
        r#"resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true}], nonResourceRules: [{verbs: [get], nonResourceURLs: ["/apis/*", "/"]}]"#,
    );
    Config::from_yaml_str(&ok).unwrap().validate().unwrap();
}

#[test]
fn priority_level_validation() {
    use ErrorType::*;
    let queuing = |q: &str| format!("{{limitResponse: {{type: Queue, queuing: {q}}}}}");
    // Kubernetes' entropy limit: ceil(log2(queues) * handSize) <= 60.
    expect(
        &level(
            "system-foo",
            &queuing("{queues: 512, handSize: 8, queueLengthLimit: 100}"),
        ),
        &[(
            "system-foo",
            "spec.limited.limitResponse.queuing.handSize",
            Invalid,
        )],
    );
    expect(
        &level(
            "system-foo",
            &queuing("{queues: 128, handSize: 10, queueLengthLimit: 100}"),
        ),
        &[(
            "system-foo",
            "spec.limited.limitResponse.queuing.handSize",
            Invalid,
        )],
    );
    expect(
        &level(
            "system-foo",
            &queuing("{queues: 2147483647, handSize: 3, queueLengthLimit: 100}"),
        ),
        &[
            (
                "system-foo",
                "spec.limited.limitResponse.queuing.handSize",
                Invalid,
            ),
            (
                "system-foo",
                "spec.limited.limitResponse.queuing.queues",
                Invalid,
            ),
        ],
    );
    Config::from_yaml_str(&level(
        "ok",
        &queuing("{queues: 10000000, handSize: 2, queueLengthLimit: 100}"),
    ))
    .unwrap()
    .validate()
    .unwrap();
    expect(
        &level(
            "system-foo",
            &queuing("{queues: 7, handSize: 8, queueLengthLimit: 100}"),
        ),
        &[(
            "system-foo",
            "spec.limited.limitResponse.queuing.handSize",
            Invalid,
        )],
    );
    expect(
        &level(
            "q",
            &queuing("{queues: -1, handSize: -2, queueLengthLimit: -3}"),
        ),
        &[
            ("q", "spec.limited.limitResponse.queuing.handSize", Invalid),
            (
                "q",
                "spec.limited.limitResponse.queuing.queueLengthLimit",
                Invalid,
            ),
            ("q", "spec.limited.limitResponse.queuing.queues", Invalid),
        ],
    );
    expect(
        &level(
            "system-foo",
            "{limitResponse: {type: Reject, queuing: {queues: 512}}}",
        ),
        &[(
            "system-foo",
            "spec.limited.limitResponse.queuing",
            Forbidden,
        )],
    );
    expect(
        &level("system-foo", "{limitResponse: {type: Queue}}"),
        &[("system-foo", "spec.limited.limitResponse.queuing", Required)],
    );
    expect(
        &level("system-foo", "{limitResponse: {type: Drop}}"),
        &[(
            "system-foo",
            "spec.limited.limitResponse.type",
            NotSupported,
        )],
    );
    expect(
        &level(
            "pct",
            "{nominalConcurrencyShares: -1, lendablePercent: 101, borrowingLimitPercent: -1, limitResponse: {type: Reject}}",
        ),
        &[
            ("pct", "spec.limited.borrowingLimitPercent", Invalid),
            ("pct", "spec.limited.lendablePercent", Invalid),
            ("pct", "spec.limited.nominalConcurrencyShares", Invalid),
        ],
    );
    expect(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: broken-limited}\nspec: {type: Limited, exempt: {}}\n",
        &[
            ("broken-limited", "spec.exempt", Forbidden),
            ("broken-limited", "spec.limited", Required),
        ],
    );
    expect(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: other}\nspec: {type: Exempt}\n",
        &[("other", "spec.type", Invalid)],
    );
    expect(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: other}\nspec: {type: Sometimes}\n",
        &[("other", "spec.type", NotSupported)],
    );
    // A zero share is allowed since Kubernetes 1.30; borrowing may exceed 100%.
    Config::from_yaml_str(&level(
        "jail",
        "{nominalConcurrencyShares: 0, borrowingLimitPercent: 300, limitResponse: {type: Reject}}",
    ))
    .unwrap()
    .validate()
    .unwrap();
}

#[test]
fn metadata_validation() {
    use ErrorType::*;
    let pl = |meta: &str| {
        format!("apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {meta}\nspec: {{type: Limited, limited: {{limitResponse: {{type: Reject}}}}}}\n---\n")
    };
    expect(&pl("{}"), &[("", "metadata.name", Required)]);
    expect(
        &pl("{name: Bad_Name}"),
        &[("Bad_Name", "metadata.name", Invalid)],
    );
    expect(
        &pl("{name: a, namespace: default}"),
        &[("a", "metadata.namespace", Forbidden)],
    );
    expect(
        &(pl("{name: twice}") + &pl("{name: twice}")),
        &[("twice", "metadata.name", Duplicate)],
    );
    let long = "a".repeat(254);
    expect(
        &pl(&format!("{{name: {long}}}")),
        &[(long.as_str(), "metadata.name", Invalid)],
    );
}

#[test]
fn all_errors_are_reported_at_once() {
    let text = level("a", "{lendablePercent: 200, limitResponse: {type: Reject}}")
        + &level(
            "b",
            "{limitResponse: {type: Queue, queuing: {queues: 4, handSize: 5}}}",
        )
        + &schema(
            "c",
            "{priorityLevelConfiguration: {name: nowhere}, matchingPrecedence: 20000}",
        );
    let errors = errors_of(&text);
    assert!(errors.has("a", "spec.limited.lendablePercent"), "{errors}");
    assert!(
        errors.has("b", "spec.limited.limitResponse.queuing.handSize"),
        "{errors}"
    );
    assert!(errors.has("c", "spec.matchingPrecedence"), "{errors}");
    // The dangling reference is no error by default (Kubernetes keeps such
    // a schema); the strict check adds it.
    assert_eq!(errors.len(), 3, "{errors}");
    let strict = Config::from_yaml_str(&text)
        .unwrap()
        .validate_with(&ValidateOptions {
            dangling: DanglingReferences::Reject,
            ..ValidateOptions::default()
        })
        .unwrap_err();
    assert!(
        strict.has("c", "spec.priorityLevelConfiguration.name"),
        "{strict}"
    );
    assert_eq!(strict.len(), 4, "{strict}");
}

#[test]
fn dangling_reference_is_reported_like_kubernetes() {
    let text = schema(
        "lost",
        "{priorityLevelConfiguration: {name: nowhere}, rules: [{subjects: [{kind: Group, group: {name: g}}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}]}",
    );
    // The strict check reports it as the API server's Dangling condition
    // words it...
    let errors = Config::from_yaml_str(&text)
        .unwrap()
        .validate_with(&ValidateOptions {
            dangling: DanglingReferences::Reject,
            ..ValidateOptions::default()
        })
        .unwrap_err();
    assert_eq!(errors.len(), 1);
    let e = &errors.0[0];
    assert_eq!(e.error_type, ErrorType::NotFound);
    assert_eq!(e.field, "spec.priorityLevelConfiguration.name");
    assert_eq!(
        e.to_string(),
        "FlowSchema \"lost\": spec.priorityLevelConfiguration.name: Not found: \"nowhere\": This FlowSchema references the PriorityLevelConfiguration object named \"nowhere\" but there is no such object"
    );
    // ...and by default, as Kubernetes, the schema is kept, matches
    // nothing, and is named in the notices.
    let valid = Config::from_yaml_str(&text).unwrap().validate().unwrap();
    let lost = &valid.flow_schemas()[valid.flow_schema_index("lost").unwrap()];
    assert_eq!(lost.priority_level, None);
    assert!(valid.notices().iter().any(|n| n.object.name == "lost"));
}

#[test]
fn mandatory_objects_must_keep_their_fixed_spec() {
    let mut config = Config::builtin();
    let catch_all = config
        .priority_levels
        .iter_mut()
        .find(|p| p.metadata.name == "catch-all")
        .unwrap();
    catch_all
        .spec
        .limited
        .as_mut()
        .unwrap()
        .nominal_concurrency_shares = Some(42);
    let exempt_fs = config
        .flow_schemas
        .iter_mut()
        .find(|f| f.metadata.name == "exempt")
        .unwrap();
    exempt_fs.spec.rules[0].non_resource_rules[0].non_resource_urls = vec!["/".into()];
    let errors = config.validate().unwrap_err();
    assert_eq!(errors.len(), 2, "{errors}");
    assert!(errors.has("catch-all", "spec"));
    assert!(errors.has("exempt", "spec"));

    let valid = config
        .validate_with(&ValidateOptions {
            changed_mandatory: ChangedMandatory::Overwrite,
            ..ValidateOptions::default()
        })
        .unwrap();
    assert_eq!(valid.config(), &Config::builtin());
    assert_eq!(valid.notices().len(), 2);
}

#[test]
fn exempt_level_may_tune_its_exempt_fields_only() {
    let mut config = Config::builtin();
    let exempt = config
        .priority_levels
        .iter_mut()
        .find(|p| p.metadata.name == "exempt")
        .unwrap();
    exempt.spec.exempt = Some(ExemptPriorityLevelConfiguration {
        nominal_concurrency_shares: Some(10),
        lendable_percent: Some(10),
    });
    let valid = config.validate().unwrap();
    let level = &valid.priority_levels()[valid.priority_level_index("exempt").unwrap()];
    assert_eq!(
        (level.nominal_concurrency_shares, level.lendable_percent),
        (10, 10)
    );

    let exempt = config
        .priority_levels
        .iter_mut()
        .find(|p| p.metadata.name == "exempt")
        .unwrap();
    exempt.spec.exempt = Some(ExemptPriorityLevelConfiguration {
        nominal_concurrency_shares: Some(-1),
        lendable_percent: Some(101),
    });
    let errors = config.validate().unwrap_err();
    assert!(
        errors.has("exempt", "spec.exempt.nominalConcurrencyShares"),
        "{errors}"
    );
    assert!(
        errors.has("exempt", "spec.exempt.lendablePercent"),
        "{errors}"
    );

    let exempt = config
        .priority_levels
        .iter_mut()
        .find(|p| p.metadata.name == "exempt")
        .unwrap();
    exempt.spec.type_ = "Limited".into();
    exempt.spec.exempt = Some(ExemptPriorityLevelConfiguration::default());
    exempt.spec.limited = Some(LimitedPriorityLevelConfiguration {
        nominal_concurrency_shares: Some(42),
        limit_response: LimitResponse {
            type_: "Reject".into(),
            queuing: None,
        },
        ..Default::default()
    });
    let errors = config.validate().unwrap_err();
    assert!(errors.has("exempt", "spec.type"), "{errors}");
    assert!(errors.has("exempt", "spec.exempt"), "{errors}");
    assert!(errors.has("exempt", "spec"), "{errors}");
}

#[test]
fn entropy_bits_follow_kubernetes() {
    assert_eq!(required_entropy_bits(64, 6), 36);
    assert_eq!(required_entropy_bits(128, 6), 42);
    assert_eq!(required_entropy_bits(512, 8), 72);
    assert_eq!(required_entropy_bits(1, 1), 0);
    assert_eq!(required_entropy_bits(10_000_000, 2), 47);
    assert_eq!(required_entropy_bits(0, 1), 0);
    assert!(required_entropy_bits(2_147_483_647, 3) > MAX_HASH_BITS);
}

#[test]
fn errors_print_like_the_api_server() {
    let errors = errors_of(&level(
        "q",
        "{limitResponse: {type: Queue, queuing: {queues: 7, handSize: 8}}}",
    ));
    assert_eq!(
        errors.to_string(),
        "PriorityLevelConfiguration \"q\": spec.limited.limitResponse.queuing.handSize: Invalid value: 8: should not be greater than queues (7)"
    );
}

#[test]
fn plain_scalars_read_as_yaml_1_2() {
    let text = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: s}\nspec:\n  priorityLevelConfiguration: {name: global-default}\n  rules:\n  - subjects: [{kind: ServiceAccount, serviceAccount: {namespace: '0123', name: n}}, {kind: User, user: {name: no}}, {kind: Group, group: {name: 0755}}]\n    nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]\n";
    let config = Config::from_yaml_str(text).unwrap();
    let subjects = &config.flow_schemas[0].spec.rules[0].subjects;
    assert_eq!(subjects[0].service_account.as_ref().unwrap().name, "n");
    assert_eq!(subjects[1].user.as_ref().unwrap().name, "no");
    assert_eq!(subjects[2].group.as_ref().unwrap().name, "0755");
}

#[test]
fn alias_bombs_are_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
    }
    // Refused by the node budget before the 9^10 expansion is built (a
    // regression would hang or exhaust memory here, not slow down a bit:
    // no timing in the assertion, so a loaded machine cannot fail it).
    let err = Config::from_yaml_str(&text)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("alias") || err.contains("nodes") || err.contains("budget"),
        "{err}"
    );
}

#[test]
fn deep_nesting_is_refused() {
    let deep = "[".repeat(100_000);
    assert!(Config::from_yaml_str(&deep).is_err());
    assert!(Config::from_json_str(&deep).is_err());
    let deep_map = "{a: ".repeat(100_000);
    assert!(Config::from_yaml_str(&deep_map).is_err());
}

#[cfg(not(loom))]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Strings YAML likes to misread: numbers, booleans, nulls, `*`,
    /// leading blanks, quotes, colons.
    fn tricky() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(
                &[
                    "",
                    "*",
                    "yes",
                    "no",
                    "true",
                    "null",
                    "~",
                    "123",
                    "0x1f",
                    "1e3",
                    "-",
                    "- a",
                    "a: b",
                    "#c",
                    "'q'",
                    "\"d\"",
                    " lead",
                    "trail ",
                    "multi\nline",
                    "tab\t",
                    "é",
                    "@x",
                    "!tag",
                    "&a",
                    "*a",
                    "[x]",
                    "{y}",
                    "%z",
                    "`b`",
                ][..]
            )
            .prop_map(String::from),
            "[ -~]{0,12}",
        ]
    }

    fn subject() -> impl Strategy<Value = Subject> {
        (tricky(), tricky(), 0..4u8).prop_map(|(a, b, k)| match k {
            0 => Subject::user(a),
            1 => Subject::group(a),
            2 => Subject::service_account(a, b),
            _ => Subject {
                kind: a,
                ..Subject::default()
            },
        })
    }

    fn flow_schema() -> impl Strategy<Value = FlowSchema> {
        (
            tricky(),
            proptest::option::of(tricky()),
            tricky(),
            any::<i32>(),
            proptest::option::of(tricky()),
            proptest::collection::vec(subject(), 0..3),
            proptest::collection::vec(tricky(), 0..3),
            any::<bool>(),
        )
            .prop_map(
                |(name, uid, level, precedence, method, subjects, words, cluster_scope)| {
                    FlowSchema {
                        metadata: ObjectMeta {
                            name,
                            uid,
                            ..ObjectMeta::default()
                        },
                        spec: FlowSchemaSpec {
                            priority_level_configuration: PriorityLevelConfigurationReference {
                                name: level,
                            },
                            // 0 would be defaulted on reading.
                            matching_precedence: if precedence == 0 { 1 } else { precedence },
                            distinguisher_method: method
                                .map(|type_| FlowDistinguisherMethod { type_ }),
                            rules: vec![PolicyRulesWithSubjects {
                                subjects,
                                resource_rules: vec![ResourcePolicyRule {
                                    verbs: words.clone(),
                                    api_groups: words.clone(),
                                    resources: words.clone(),
                                    cluster_scope,
                                    namespaces: words.clone(),
                                }],
                                non_resource_rules: vec![NonResourcePolicyRule {
                                    verbs: words.clone(),
                                    non_resource_urls: words,
                                }],
                            }],
                        },
                    }
                },
            )
    }

    fn nonzero() -> impl Strategy<Value = i32> {
        any::<i32>().prop_filter("0 is defaulted", |v| *v != 0)
    }

    fn priority_level() -> impl Strategy<Value = PriorityLevelConfiguration> {
        (
            tricky(),
            tricky(),
            proptest::option::of((nonzero(), nonzero(), nonzero())),
            any::<i32>(),
            any::<i32>(),
            proptest::option::of(any::<i32>()),
            proptest::collection::btree_map(tricky(), tricky(), 0..3),
        )
            .prop_map(
                |(name, type_, queuing, shares, lendable, borrowing, annotations)| {
                    PriorityLevelConfiguration {
                        metadata: ObjectMeta {
                            name,
                            annotations: annotations
                                .into_iter()
                                .filter(|(k, _)| k != PRESERVE_ZERO_SHARES_ANNOTATION)
                                .collect(),
                            ..ObjectMeta::default()
                        },
                        spec: PriorityLevelConfigurationSpec {
                            type_,
                            limited: Some(LimitedPriorityLevelConfiguration {
                                nominal_concurrency_shares: Some(shares),
                                limit_response: LimitResponse {
                                    type_: "Queue".into(),
                                    queuing: queuing.map(
                                        |(queues, hand_size, queue_length_limit)| {
                                            QueuingConfiguration {
                                                queues,
                                                hand_size,
                                                queue_length_limit,
                                            }
                                        },
                                    ),
                                },
                                lendable_percent: Some(lendable),
                                borrowing_limit_percent: borrowing,
                            }),
                            exempt: Some(ExemptPriorityLevelConfiguration {
                                nominal_concurrency_shares: Some(shares),
                                lendable_percent: Some(lendable),
                            }),
                        },
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Print, read back: the same objects, whatever the strings.
        #[test]
        fn yaml_and_json_round_trip(
            // At least one object: a text with none is refused.
            levels in proptest::collection::vec(priority_level(), 1..3),
            schemas in proptest::collection::vec(flow_schema(), 0..3),
        ) {
            let config = Config { priority_levels: levels, flow_schemas: schemas };
            let yaml = config.to_yaml();
            prop_assert_eq!(Config::from_yaml_str(&yaml).map_err(|e| e.to_string()), Ok(config.clone()), "{}", yaml);
            prop_assert_eq!(Config::from_json_str(&config.to_json()).map_err(|e| e.to_string()), Ok(config));
        }
    }
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
