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
    /// The level's `metadata.name`.
    pub name: String,
    /// The level's `metadata.uid`, if the input gave one.
    pub uid: Option<String>,
    /// Nominal concurrency shares (NCS); exempt levels count too.
    pub nominal_concurrency_shares: u32,
    /// Share of the nominal concurrency limit other levels may borrow, 0..=100.
    pub lendable_percent: u32,
    /// Exempt or limited, and how a limited level handles excess requests.
    pub kind: LevelKind,
    /// How a queuing level shares its seats (the `apf.libapf.io/fairness`
    /// annotation; Kubernetes' policy by default).
    pub fairness: crate::queueset::Fairness,
}

impl ValidPriorityLevel {
    /// Whether the level is exempt (executes every request at once).
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

/// The type of a priority level, with a limited level's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelKind {
    /// Never queued, never rejected.
    Exempt,
    /// Limited to its share of the server's seats (plus what it borrows).
    Limited {
        /// Percent of the nominal limit this level may borrow on top of it;
        /// `None` is no limit.
        borrowing_limit_percent: Option<u32>,
        /// What happens to requests beyond the limit.
        limit_response: LimitPolicy,
    },
}

/// What a limited level does with a request it cannot execute now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitPolicy {
    /// Reject at once.
    Reject,
    /// Wait in fair queues, rejected when the queue is full or the wait limit
    /// passes.
    Queue(QueuingParams),
}

/// A queuing level's queues, validated: `hand_size <= queues`, and enough
/// entropy for the shuffle-sharding dealer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuingParams {
    /// Number of queues (1 or more).
    pub queues: u32,
    /// Queues dealt to each flow (1..=queues); a request joins the shortest.
    pub hand_size: u32,
    /// Most requests one queue holds (1 or more).
    pub queue_length_limit: u32,
}

/// How a flow schema tells the flows of its requests apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistinguisherMethod {
    /// Flows by the requesting user's name.
    ByUser,
    /// Flows by the request's namespace (empty for cluster-scoped requests).
    ByNamespace,
}

/// A flow schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidFlowSchema {
    /// The schema's `metadata.name`.
    pub name: String,
    /// The schema's `metadata.uid`, if the input gave one.
    pub uid: Option<String>,
    /// 1..=10000; lower matches first.
    pub matching_precedence: u32,
    /// Index into [`ValidConfig::priority_levels`]; `None` when the
    /// referenced level does not exist and dangling references were allowed,
    /// in which case the schema matches no request, as in Kubernetes.
    pub priority_level: Option<usize>,
    /// Name of the referenced level, whether it exists or not.
    pub priority_level_name: String,
    /// How its requests are split into flows; `None`: one flow.
    pub distinguisher: Option<DistinguisherMethod>,
    /// The rules as given; the schema matches a request when any one matches.
    pub rules: Vec<PolicyRulesWithSubjects>,
    /// How its requests' seats are estimated (`apf.libapf.io/cost`).
    pub cost: super::CostMode,
}

/// Something validation changed or tolerated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The object concerned.
    pub object: ObjectRef,
    /// What was changed or tolerated, in words.
    pub message: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}
