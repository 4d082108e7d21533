//! The `apf.libapf.io/fairness` annotation: a priority level's fairness
//! policy, kept in metadata so that `kubectl`-shaped files still load in
//! Kubernetes (which ignores unknown annotations).

use super::error::ErrorSink;
use super::types::ObjectMeta;
use crate::queueset::Fairness;

/// The annotation naming a priority level's fairness policy.
pub const FAIRNESS_ANNOTATION: &str = "apf.libapf.io/fairness";

/// The policy the level's annotation names (the default when absent), or
/// None for a value that names no policy.
pub(crate) fn level_fairness(meta: &ObjectMeta) -> Option<Fairness> {
    match meta.annotations.get(FAIRNESS_ANNOTATION) {
        None => Some(Fairness::default()),
        Some(value) => Fairness::from_name(value),
    }
}

/// Report a value of the annotation that names no policy.
pub(crate) fn check_fairness(meta: &ObjectMeta, sink: &mut ErrorSink<'_>) {
    if let Some(value) = meta.annotations.get(FAIRNESS_ANNOTATION) {
        if Fairness::from_name(value).is_none() {
            let supported: Vec<&str> = Fairness::ALL.iter().map(|f| f.as_str()).collect();
            sink.not_supported(
                format!("metadata.annotations[{FAIRNESS_ANNOTATION}]"),
                format!("{value:?}"),
                &supported,
            );
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::config::Config;
    use crate::queueset::Fairness;

    fn level(annotations: &str) -> String {
        format!(
            "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata:\n  name: tenants\n{annotations}spec: {{type: Limited, limited: {{nominalConcurrencyShares: 10, limitResponse: {{type: Queue, queuing: {{queues: 64, handSize: 6}}}}}}}}\n"
        )
    }

    fn fairness_of(annotations: &str) -> Fairness {
        let config = Config::from_yaml_str(&level(annotations)).expect("parses");
        let valid = config.validate().expect("valid");
        let i = valid.priority_level_index("tenants").expect("level");
        valid.priority_levels()[i].fairness
    }

    #[test]
    fn the_annotation_chooses_the_policy_and_its_absence_means_kubernetes() {
        assert_eq!(fairness_of(""), Fairness::Kubernetes);
        let flow = "  annotations: {apf.libapf.io/fairness: flow}\n";
        assert_eq!(fairness_of(flow), Fairness::Flow);
        let kubernetes = "  annotations: {apf.libapf.io/fairness: kubernetes}\n";
        assert_eq!(fairness_of(kubernetes), Fairness::Kubernetes);
        let max_min = "  annotations: {apf.libapf.io/fairness: flow-maxmin}\n";
        assert_eq!(fairness_of(max_min), Fairness::FlowMaxMin);
    }

    #[test]
    fn a_bad_value_is_an_error_naming_the_level_and_the_annotation() {
        let text = level("  annotations: {apf.libapf.io/fairness: max-min}\n");
        let err = Config::from_yaml_str(&text)
            .expect("parses")
            .validate()
            .expect_err("an unknown policy");
        let message = err.to_string();
        for part in [
            "tenants",
            "metadata.annotations[apf.libapf.io/fairness]",
            "max-min",
            "\"flow\"",
        ] {
            assert!(message.contains(part), "{part:?} missing from: {message}");
        }
    }
}
