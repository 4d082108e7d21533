//! A validated configuration, in typed form.

use std::fmt;

use super::error::ObjectRef;
use super::types::PolicyRulesWithSubjects;
use super::Config;

/// A configuration that passed validation: every mandatory object present,
/// every field within Kubernetes' rules, flow schemas in matching order.
#[derive(Clone, Debug)]
pub struct ValidConfig {
    pub(crate) config: Config,
    pub(crate) levels: Vec<ValidPriorityLevel>,
    pub(crate) schemas: Vec<ValidFlowSchema>,
    pub(crate) notices: Vec<Notice>,
}

impl ValidConfig {
    /// The configuration in force: the input, defaulted, with any missing
    /// mandatory object added.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Priority levels, in the configuration's order.
    pub fn priority_levels(&self) -> &[ValidPriorityLevel] {
        &self.levels
    }

    /// Flow schemas in matching order: by matching precedence, then by name.
    pub fn flow_schemas(&self) -> &[ValidFlowSchema] {
        &self.schemas
    }

    /// What validation changed or tolerated (mandatory objects added, flow
    /// schemas ignored for dangling references when that is allowed).
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// Index of the priority level of this name.
    pub fn priority_level_index(&self, name: &str) -> Option<usize> {
        self.levels.iter().position(|l| l.name == name)
    }

    /// Index, in matching order, of the flow schema of this name.
    pub fn flow_schema_index(&self, name: &str) -> Option<usize> {
        self.schemas.iter().position(|s| s.name == name)
    }
}

/// A priority level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidPriorityLevel {
    pub name: String,
    pub uid: Option<String>,
    /// Nominal concurrency shares (NCS); exempt levels count too.
    pub nominal_concurrency_shares: u32,
    /// Share of the nominal concurrency limit other levels may borrow, 0..=100.
    pub lendable_percent: u32,
    pub kind: LevelKind,
    /// How a queuing level shares its seats (the `apf.libapf.io/fairness`
    /// annotation; Kubernetes' policy by default).
    pub fairness: crate::queueset::Fairness,
}

impl ValidPriorityLevel {
    pub fn is_exempt(&self) -> bool {
        matches!(self.kind, LevelKind::Exempt)
    }

    /// Number of queues a request of this level is dealt among: 0 for
    /// exempt and rejecting levels.
    pub fn queues(&self) -> u32 {
        match &self.kind {
            LevelKind::Limited {
                limit_response: LimitPolicy::Queue(q),
                ..
            } => q.queues,
            _ => 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelKind {
    /// Never queued, never rejected.
    Exempt,
    Limited {
        /// Percent of the nominal limit this level may borrow on top of it;
        /// `None` is no limit.
        borrowing_limit_percent: Option<u32>,
        limit_response: LimitPolicy,
    },
}

/// What a limited level does with a request it cannot execute now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitPolicy {
    Reject,
    Queue(QueuingParams),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuingParams {
    pub queues: u32,
    pub hand_size: u32,
    pub queue_length_limit: u32,
}

/// How a flow schema tells the flows of its requests apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistinguisherMethod {
    ByUser,
    ByNamespace,
}

/// A flow schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidFlowSchema {
    pub name: String,
    pub uid: Option<String>,
    pub matching_precedence: u32,
    /// Index into [`ValidConfig::priority_levels`]; `None` when the
    /// referenced level does not exist and dangling references were allowed,
    /// in which case the schema matches no request, as in Kubernetes.
    pub priority_level: Option<usize>,
    /// Name of the referenced level, whether it exists or not.
    pub priority_level_name: String,
    pub distinguisher: Option<DistinguisherMethod>,
    pub rules: Vec<PolicyRulesWithSubjects>,
}

/// Something validation changed or tolerated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub object: ObjectRef,
    pub message: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}
