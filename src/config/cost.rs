//! libapf's own annotation on a FlowSchema choosing how its requests'
//! seats are estimated (an annotation, so the same file still loads in
//! Kubernetes): `apf.libapf.io/cost: static` (the default: Kubernetes' work
//! estimate) or `learned` (the seats learned from the costs the server
//! reports at finish, see `crate::cost` and docs/cost.md).

use super::error::ErrorSink;
use super::types::{FlowSchema, ObjectMeta};

/// The annotation's key.
pub const COST_ANNOTATION: &str = "apf.libapf.io/cost";

/// How a flow schema's requests get their seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CostMode {
    /// The static work estimate, as Kubernetes makes it.
    #[default]
    Static,
    /// Learned from the costs reported when requests finish.
    Learned,
}

const VALUES: [&str; 2] = ["static", "learned"];

fn parse(value: &str) -> Option<CostMode> {
    match value {
        "static" => Some(CostMode::Static),
        "learned" => Some(CostMode::Learned),
        _ => None,
    }
}

/// The schema's cost mode (a validated configuration has a valid value).
pub fn cost_mode(fs: &FlowSchema) -> CostMode {
    fs.metadata
        .annotations
        .get(COST_ANNOTATION)
        .and_then(|v| parse(v))
        .unwrap_or_default()
}

/// An unknown value is an error naming the object and the annotation.
pub(crate) fn check_cost_annotation(meta: &ObjectMeta, sink: &mut ErrorSink<'_>) {
    if let Some(value) = meta.annotations.get(COST_ANNOTATION) {
        if parse(value).is_none() {
            sink.not_supported(
                format!("metadata.annotations[{COST_ANNOTATION}]"),
                value,
                &VALUES,
            );
        }
    }
}
