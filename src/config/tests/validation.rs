//! Validation as the API server does it: flow schemas, priority levels, metadata, mandatory objects.

use super::*;

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
