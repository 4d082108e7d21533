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
