//! The configuration as a cluster prints it: a hand-written `kubectl get
//! flowschemas,prioritylevelconfigurations -o yaml` of a cluster running
//! Kubernetes' bootstrap objects plus a custom level and two custom schemas.

use apf::classification::{Classifier, RequestDigest};
use apf::config::{Config, LevelKind, LimitPolicy, QueuingParams};

const FIXTURE: &str = include_str!("../data/kubectl-get-flowcontrol.yaml");

fn fixture() -> Config {
    Config::from_yaml_str(FIXTURE).unwrap_or_else(|e| panic!("fixture must load:\n{e}"))
}

#[test]
fn fixture_loads_with_names_uids_and_defaults() {
    let config = fixture();
    assert_eq!(config.flow_schemas.len(), 13);
    assert_eq!(config.priority_levels.len(), 9);
    let batch_jobs = &config.flow_schemas[0];
    assert_eq!(batch_jobs.metadata.name, "batch-jobs");
    assert_eq!(
        batch_jobs.metadata.uid.as_deref(),
        Some("6513270e-269e-4d37-b2a7-4de452e6b438")
    );
    assert!(config
        .flow_schemas
        .iter()
        .all(|fs| fs.metadata.uid.is_some()));
    assert!(config
        .priority_levels
        .iter()
        .all(|pl| pl.metadata.uid.is_some()));
    // Defaulting applies to what the file leaves out.
    let batch = &config.priority_levels[0];
    assert_eq!(batch.metadata.name, "batch");
    assert_eq!(
        batch.spec.limited.as_ref().unwrap().lendable_percent,
        Some(75)
    );
}

#[test]
fn fixture_round_trips() {
    let config = fixture();
    let printed = config.to_yaml();
    let again = Config::from_yaml_str(&printed).unwrap();
    assert_eq!(again, config);
    assert_eq!(again.to_yaml(), printed, "printing is stable");
    let json = Config::from_json_str(&config.to_json()).unwrap();
    assert_eq!(json, config);
}

#[test]
fn fixture_is_a_valid_configuration() {
    let valid = fixture().validate().unwrap_or_else(|e| panic!("{e}"));
    assert!(valid.notices().is_empty(), "{:?}", valid.notices());
    let batch = &valid.priority_levels()[valid.priority_level_index("batch").unwrap()];
    assert_eq!(batch.nominal_concurrency_shares, 15);
    assert_eq!(batch.lendable_percent, 75);
    assert_eq!(
        batch.kind,
        LevelKind::Limited {
            borrowing_limit_percent: Some(200),
            limit_response: LimitPolicy::Queue(QueuingParams {
                queues: 32,
                hand_size: 5,
                queue_length_limit: 100
            }),
        }
    );
    // The cluster's bootstrap objects are Kubernetes' defaults, so beside
    // the custom objects the fixture is the built-in configuration.
    let builtin = Config::builtin();
    for pl in &builtin.priority_levels {
        let found = valid
            .config()
            .priority_levels
            .iter()
            .find(|p| p.metadata.name == pl.metadata.name)
            .unwrap();
        assert_eq!(found.spec, pl.spec, "{}", pl.metadata.name);
    }
    for fs in &builtin.flow_schemas {
        let found = valid
            .config()
            .flow_schemas
            .iter()
            .find(|f| f.metadata.name == fs.metadata.name)
            .unwrap();
        assert_eq!(found.spec, fs.spec, "{}", fs.metadata.name);
    }
}

#[test]
fn fixture_classifies_with_cluster_uids() {
    let valid = fixture().validate().unwrap();
    let classifier = Classifier::new(&valid);

    let job = RequestDigest {
        user: "system:serviceaccount:batch:runner",
        groups: &[
            "system:serviceaccounts",
            "system:serviceaccounts:batch",
            "system:authenticated",
        ],
        verb: "update",
        is_resource_request: true,
        api_group: "batch",
        resource: "jobs",
        subresource: "status",
        namespace: "batch",
        name: "nightly",
        path: "/apis/batch/v1/namespaces/batch/jobs/nightly/status",
    };
    let c = classifier.classify(&job);
    assert_eq!(c.schema.name, "batch-jobs");
    assert_eq!(
        c.schema.uid.as_deref(),
        Some("6513270e-269e-4d37-b2a7-4de452e6b438")
    );
    assert_eq!(c.level.name, "batch");
    assert!(c.level.uid.is_some());
    assert_eq!(c.flow_distinguisher, "batch");

    // Outside the listed namespaces the custom schema does not apply.
    let elsewhere = RequestDigest {
        namespace: "default",
        ..job
    };
    assert_eq!(
        classifier.classify(&elsewhere).schema.name,
        "service-accounts"
    );

    let scrape = RequestDigest {
        user: "system:serviceaccount:monitoring:prometheus",
        groups: &["system:serviceaccounts", "system:authenticated"],
        verb: "get",
        is_resource_request: false,
        path: "/metrics/slis",
        ..RequestDigest::default()
    };
    let c = classifier.classify(&scrape);
    assert_eq!(
        (c.schema.name.as_str(), c.level.name.as_str()),
        ("metrics-scrapers", "exempt")
    );
    assert!(c.level.exempt);
}

#[test]
fn builtin_prints_what_kubectl_apply_accepts() {
    let yaml = Config::builtin().to_yaml();
    // A v1 List of v1 objects, each with its kind, name and the bootstrap
    // annotation, as the API server's own bootstrap objects carry.
    assert!(yaml.starts_with("apiVersion: v1\nkind: List\nitems:\n"));
    assert_eq!(
        yaml.matches("- apiVersion: flowcontrol.apiserver.k8s.io/v1\n")
            .count(),
        19
    );
    assert_eq!(yaml.matches("  kind: FlowSchema\n").count(), 11);
    assert_eq!(
        yaml.matches("  kind: PriorityLevelConfiguration\n").count(),
        8
    );
    assert_eq!(
        yaml.matches("apf.kubernetes.io/autoupdate-spec: \"true\"")
            .count(),
        19,
        "{yaml}"
    );
}
