//! Kubernetes' defaulting, applied when an object is read, as the API server
//! applies it when it decodes one.

use super::types::*;

/// The API version an object was written in; they differ only in how a
/// zero `nominalConcurrencyShares` of a limited level is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SourceVersion {
    V1,
    V1beta3,
}

pub(crate) fn default_flow_schema(fs: &mut FlowSchema) {
    if fs.spec.matching_precedence == 0 {
        fs.spec.matching_precedence = DEFAULT_MATCHING_PRECEDENCE;
    }
}

pub(crate) fn default_priority_level(pl: &mut PriorityLevelConfiguration, version: SourceVersion) {
    // v1beta3 cannot tell "0" from "absent" (the field is not a pointer
    // there), so a 0 means the default unless an annotation says otherwise.
    // The annotation is consumed here, as Kubernetes' conversion to the
    // internal version drops it.
    let preserve_zero = pl
        .metadata
        .annotations
        .remove(PRESERVE_ZERO_SHARES_ANNOTATION)
        .is_some();
    if let Some(limited) = pl.spec.limited.as_mut() {
        let shares = &mut limited.nominal_concurrency_shares;
        let use_default = match version {
            SourceVersion::V1 => shares.is_none(),
            SourceVersion::V1beta3 => !preserve_zero && shares.unwrap_or(0) == 0,
        };
        if use_default {
            *shares = Some(DEFAULT_NOMINAL_CONCURRENCY_SHARES);
        }
        if version == SourceVersion::V1beta3 && shares.is_none() {
            *shares = Some(0);
        }
        limited.lendable_percent.get_or_insert(0);
        if let Some(q) = limited.limit_response.queuing.as_mut() {
            default_queuing(q);
        }
    }
    if let Some(exempt) = pl.spec.exempt.as_mut() {
        exempt.nominal_concurrency_shares.get_or_insert(0);
        exempt.lendable_percent.get_or_insert(0);
    }
}

fn default_queuing(q: &mut QueuingConfiguration) {
    if q.hand_size == 0 {
        q.hand_size = DEFAULT_HAND_SIZE;
    }
    if q.queues == 0 {
        q.queues = DEFAULT_QUEUES;
    }
    if q.queue_length_limit == 0 {
        q.queue_length_limit = DEFAULT_QUEUE_LENGTH_LIMIT;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn limited(shares: Option<i32>) -> PriorityLevelConfiguration {
        PriorityLevelConfiguration {
            metadata: ObjectMeta::named("l"),
            spec: PriorityLevelConfigurationSpec {
                type_: "Limited".into(),
                limited: Some(LimitedPriorityLevelConfiguration {
                    nominal_concurrency_shares: shares,
                    limit_response: LimitResponse {
                        type_: "Queue".into(),
                        queuing: Some(QueuingConfiguration::default()),
                    },
                    ..Default::default()
                }),
                exempt: None,
            },
        }
    }

    fn shares(pl: &PriorityLevelConfiguration) -> Option<i32> {
        pl.spec.limited.as_ref().unwrap().nominal_concurrency_shares
    }

    #[test]
    fn v1_defaults_absent_shares_and_queuing() {
        let mut pl = limited(None);
        default_priority_level(&mut pl, SourceVersion::V1);
        let l = pl.spec.limited.as_ref().unwrap();
        assert_eq!(l.nominal_concurrency_shares, Some(30));
        assert_eq!(l.lendable_percent, Some(0));
        assert_eq!(l.borrowing_limit_percent, None);
        let q = l.limit_response.queuing.as_ref().unwrap();
        assert_eq!((q.queues, q.hand_size, q.queue_length_limit), (64, 8, 50));
    }

    #[test]
    fn v1_keeps_an_explicit_zero() {
        let mut pl = limited(Some(0));
        default_priority_level(&mut pl, SourceVersion::V1);
        assert_eq!(shares(&pl), Some(0));
    }

    #[test]
    fn v1beta3_zero_means_default_unless_annotated() {
        let mut pl = limited(Some(0));
        default_priority_level(&mut pl, SourceVersion::V1beta3);
        assert_eq!(shares(&pl), Some(30));

        let mut pl = limited(Some(0));
        pl.metadata
            .annotations
            .insert(PRESERVE_ZERO_SHARES_ANNOTATION.into(), String::new());
        default_priority_level(&mut pl, SourceVersion::V1beta3);
        assert_eq!(shares(&pl), Some(0));
        assert!(pl.metadata.annotations.is_empty());
    }

    #[test]
    fn exempt_fields_default_to_zero() {
        let mut pl = PriorityLevelConfiguration {
            metadata: ObjectMeta::named("exempt"),
            spec: PriorityLevelConfigurationSpec {
                type_: "Exempt".into(),
                limited: None,
                exempt: Some(ExemptPriorityLevelConfiguration::default()),
            },
        };
        default_priority_level(&mut pl, SourceVersion::V1);
        let e = pl.spec.exempt.unwrap();
        assert_eq!(
            (e.nominal_concurrency_shares, e.lendable_percent),
            (Some(0), Some(0))
        );
    }

    #[test]
    fn precedence_zero_means_default() {
        let mut fs = FlowSchema::default();
        default_flow_schema(&mut fs);
        assert_eq!(fs.spec.matching_precedence, 1000);
        fs.spec.matching_precedence = 7;
        default_flow_schema(&mut fs);
        assert_eq!(fs.spec.matching_precedence, 7);
    }
}
