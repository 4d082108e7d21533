//! Round trips of generated configurations through YAML and JSON.

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
                        distinguisher_method: method.map(|type_| FlowDistinguisherMethod { type_ }),
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
                                queuing: queuing.map(|(queues, hand_size, queue_length_limit)| {
                                    QueuingConfiguration {
                                        queues,
                                        hand_size,
                                        queue_length_limit,
                                    }
                                }),
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
