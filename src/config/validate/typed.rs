//! The typed form of a configuration that passed validation: levels with
//! their limits and queuing parameters as unsigned values, schemas in
//! Kubernetes' matching order with their level resolved.

use super::super::model::*;
use super::super::types::*;
use super::super::Config;

pub(super) fn build(config: Config, notices: Vec<Notice>) -> ValidConfig {
    let levels: Vec<ValidPriorityLevel> = config.priority_levels.iter().map(typed_level).collect();
    let mut schemas: Vec<ValidFlowSchema> = config
        .flow_schemas
        .iter()
        .map(|fs| typed_schema(fs, &levels))
        .collect();
    // Kubernetes' matching order; names are unique, so the order is total.
    schemas.sort_by(|a, b| (a.matching_precedence, &a.name).cmp(&(b.matching_precedence, &b.name)));
    ValidConfig {
        config,
        levels,
        schemas,
        notices,
    }
}

/// Validated values are non-negative, so the conversions cannot fail.
fn non_negative(v: Option<i32>) -> u32 {
    u32::try_from(v.unwrap_or(0)).unwrap_or(0)
}

fn typed_level(pl: &PriorityLevelConfiguration) -> ValidPriorityLevel {
    let (shares, lendable, kind) = match (&pl.spec.limited, &pl.spec.exempt) {
        (Some(l), _) if pl.spec.type_ == "Limited" => {
            let limit_response = match &l.limit_response.queuing {
                Some(q) if l.limit_response.type_ == "Queue" => LimitPolicy::Queue(QueuingParams {
                    queues: non_negative(Some(q.queues)),
                    hand_size: non_negative(Some(q.hand_size)),
                    queue_length_limit: non_negative(Some(q.queue_length_limit)),
                }),
                _ => LimitPolicy::Reject,
            };
            (
                l.nominal_concurrency_shares,
                l.lendable_percent,
                LevelKind::Limited {
                    borrowing_limit_percent: l
                        .borrowing_limit_percent
                        .map(|b| non_negative(Some(b))),
                    limit_response,
                },
            )
        }
        (_, exempt) => (
            exempt.as_ref().and_then(|e| e.nominal_concurrency_shares),
            exempt.as_ref().and_then(|e| e.lendable_percent),
            LevelKind::Exempt,
        ),
    };
    ValidPriorityLevel {
        name: pl.metadata.name.clone(),
        uid: Some(
            pl.metadata
                .uid
                .clone()
                .filter(|uid| !uid.is_empty())
                .unwrap_or_else(|| crate::uid::priority_level_uid(&pl.metadata.name)),
        ),
        nominal_concurrency_shares: non_negative(shares),
        lendable_percent: non_negative(lendable),
        kind,
        fairness: super::super::fairness::level_fairness(&pl.metadata).unwrap_or_default(),
    }
}

fn typed_schema(fs: &FlowSchema, levels: &[ValidPriorityLevel]) -> ValidFlowSchema {
    let level_name = &fs.spec.priority_level_configuration.name;
    ValidFlowSchema {
        name: fs.metadata.name.clone(),
        uid: Some(
            fs.metadata
                .uid
                .clone()
                .filter(|uid| !uid.is_empty())
                .unwrap_or_else(|| crate::uid::flow_schema_uid(&fs.metadata.name)),
        ),
        matching_precedence: non_negative(Some(fs.spec.matching_precedence)),
        priority_level: levels.iter().position(|l| &l.name == level_name),
        priority_level_name: level_name.clone(),
        distinguisher: fs
            .spec
            .distinguisher_method
            .as_ref()
            .and_then(|m| match m.type_.as_str() {
                "ByUser" => Some(DistinguisherMethod::ByUser),
                "ByNamespace" => Some(DistinguisherMethod::ByNamespace),
                _ => None,
            }),
        rules: fs.spec.rules.clone(),
        cost: super::super::cost::cost_mode(fs),
    }
}
