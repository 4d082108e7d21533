use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn work_estimate_basics() {
    let w = WorkEstimate::new(2, 7, MS);
    assert_eq!(w.max_seats(), 7);
    assert_eq!(WorkEstimate::new(9, 7, MS).max_seats(), 9);
    assert_eq!(
        WorkEstimate::default(),
        WorkEstimate::new(0, 0, Duration::ZERO)
    );
}

/// Kubernetes' Test_GetMaxSeats.
#[test]
fn level_max_seats_table() {
    for (nominal, hand, expected) in [
        (5, 6, 1),
        (10, 6, 1),
        (15, 6, 2),
        (20, 6, 3),
        (35, 6, 5),
        (100, 6, 15),
        (200, 6, 30),
        (10, 1, 2),
        (100, 20, 5),
    ] {
        assert_eq!(level_max_seats(nominal, hand), expected, "{nominal}/{hand}");
    }
    assert_eq!(level_max_seats(0, 0), 1);
    assert_eq!(level_max_seats(u32::MAX, 1), 644_245_095);
}

#[test]
fn config_validation() {
    assert!(WorkEstimator::new(WorkEstimatorConfig::default()).is_ok());
    let bad = |f: fn(&mut WorkEstimatorConfig)| {
        let mut c = WorkEstimatorConfig::default();
        f(&mut c);
        WorkEstimator::new(c).unwrap_err()
    };
    assert_eq!(
        bad(|c| c.objects_per_seat = f64::NAN).to_string(),
        "work estimator: objects_per_seat must be finite and positive, not NaN"
    );
    assert_eq!(
        bad(|c| c.watches_per_seat = 0.0),
        WorkEstimatorConfigError::WatchesPerSeat(0.0)
    );
    assert_eq!(
        bad(|c| c.minimum_seats = 0),
        WorkEstimatorConfigError::ZeroMinimumSeats
    );
    assert_eq!(
        bad(|c| c.maximum_list_seats = 0),
        WorkEstimatorConfigError::ZeroMaximumSeats
    );
    assert_eq!(
        bad(|c| c.bytes_per_seat = 0),
        WorkEstimatorConfigError::ZeroBytesPerSeat
    );
}

#[test]
fn storage_or_cache() {
    let o = |rv, m, limit, cont| ListOptions {
        resource_version: rv,
        resource_version_match: m,
        limit,
        has_continue: cont,
        ..ListOptions::default()
    };
    use ResourceVersion as V;
    use ResourceVersionMatch as M;
    assert!(o(V::Unset, M::Unset, 0, false).reads_from_storage(false));
    assert!(!o(V::Unset, M::Unset, 0, false).reads_from_storage(true));
    assert!(!o(V::Zero, M::Unset, 5, false).reads_from_storage(false));
    assert!(o(V::Specific, M::Unset, 5, false).reads_from_storage(false));
    assert!(!o(V::Specific, M::Unset, 0, false).reads_from_storage(false));
    assert!(o(V::Zero, M::Unset, 0, true).reads_from_storage(true));
    assert!(o(V::Specific, M::Exact, 0, false).reads_from_storage(true));
    assert!(!o(V::Specific, M::NotOlderThan, 0, false).reads_from_storage(false));
    assert!(o(V::Unset, M::Unrecognized, 0, false).reads_from_storage(true));
}

/// Kubernetes' TestListWorkEstimator: (total size, object count, limit,
/// selector, from cache, single object, count-based seats, size-based
/// seats), before the minimum and maximum apply.
#[test]
fn kubernetes_list_seat_table() {
    let e = WorkEstimator::default();
    type Row = (u64, u64, u64, bool, bool, bool, u64, u64);
    #[rustfmt::skip]
    let table: &[Row] = &[
        (100_000 - 1, 99, 0, false, false, false, 2, 1),
        (100_000 - 1, 10, 0, false, false, false, 1, 1),
        (100_000 - 1, 99, 0, false, true, false, 1, 1),
        (100_000 - 1, 10, 0, false, true, false, 1, 1),
        (1_000_000 - 1, 1000, 0, false, false, false, 20, 10),
        (1_000_000 - 1, 1000, 100, false, false, false, 2, 1),
        (1_000_000 - 1, 1000, 100, true, false, false, 11, 5),
        (1_000_000 - 1, 1000, 0, false, true, false, 10, 10),
        (1_000_000 - 1, 1000, 100, false, true, false, 10, 1),
        (1_000_000 - 1, 1000, 100, true, true, false, 10, 1),
        (1_000_000 - 1, 99, 0, false, false, false, 2, 10),
        (1_000_000 - 1, 99, 10, false, false, false, 1, 2),
        (1_000_000 - 1, 99, 10, true, false, false, 2, 5),
        (1_000_000 - 1, 99, 0, false, true, false, 1, 10),
        (10_000_000 - 1, 1000, 0, false, false, false, 20, 100),
        (10_000_000 - 1, 1000, 100, false, false, false, 2, 10),
        (10_000_000 - 1, 1000, 100, true, false, false, 11, 50),
        (10_000_000 - 1, 1000, 0, false, true, false, 10, 10),
        (10_000_000 - 1, 1000, 100, false, true, false, 10, 10),
        (10_000_000 - 1, 1000, 100, true, true, false, 10, 10),
        (10_000_000 - 1, 99, 0, false, false, false, 2, 100),
        (10_000_000 - 1, 99, 10, false, false, false, 1, 11),
        (10_000_000 - 1, 99, 10, true, false, false, 2, 50),
        (10_000_000 - 1, 99, 0, false, true, false, 1, 10),
        (10_000_000 - 1, 99, 10, false, true, false, 1, 10),
        (10_000_000 - 1, 99, 10, true, true, false, 1, 10),
        (1_000_000_000 - 1, 1000, 0, false, false, true, 1, 10),
        (1_000_000_000 - 1, 1000, 0, false, true, true, 1, 10),
    ];
    for (i, &(total, count, limit, selector, cache, single, by_count, by_size)) in
        table.iter().enumerate()
    {
        let options = ListOptions {
            limit,
            has_selector: selector,
            ..ListOptions::default()
        };
        let size = total / count;
        assert_eq!(
            e.seats_by_object_count(count, &options, cache, single),
            by_count,
            "row {i}"
        );
        assert_eq!(
            e.seats_by_object_size(count, size, &options, cache, single),
            by_size,
            "row {i}"
        );
    }
}

fn list(options: ListOptions, stats: ObjectStats) -> ListRequest {
    ListRequest {
        options,
        ..ListRequest::new(stats)
    }
}

fn known(count: u64, average_size_bytes: u64) -> ObjectStats {
    ObjectStats::Known {
        count,
        average_size_bytes,
    }
}

fn rv(resource_version: ResourceVersion, limit: u64) -> ListOptions {
    ListOptions {
        resource_version,
        limit,
        ..ListOptions::default()
    }
}

fn rv_match(
    resource_version: ResourceVersion,
    resource_version_match: ResourceVersionMatch,
    limit: u64,
) -> ListOptions {
    ListOptions {
        resource_version,
        resource_version_match,
        limit,
        ..ListOptions::default()
    }
}

/// Kubernetes' TestWorkEstimator (width_test.go) with its default
/// configuration (size-based LIST cost, WatchList on), each row as
/// (request, level max seats, initial, final, additional latency).
#[test]
fn kubernetes_work_estimator_table() {
    use ResourceVersion::{Specific, Unset, Zero};
    use ResourceVersionMatch as M;
    let e = WorkEstimator::default();
    let k = known;
    let none = ListOptions::default();
    let sel = |o: ListOptions| ListOptions {
        has_selector: true,
        ..o
    };
    let single = |o: ListOptions, stats| ListRequest {
        single_object: true,
        ..list(o, stats)
    };
    let malformed = ListRequest {
        malformed_options: true,
        ..ListRequest::new(k(799, 10_000))
    };
    let cont = ListOptions {
        has_continue: true,
        limit: 399,
        ..none
    };
    let watch = |o: ListOptions| WorkRequest::Watch(list(o, k(799, 1_000)));
    let send = |send, resource_version| ListOptions {
        send_initial_events: Some(send),
        resource_version,
        ..none
    };
    let mutating = |watchers| {
        WorkRequest::Mutating(MutatingRequest {
            watchers,
            produces_no_event: false,
        })
    };
    let l = WorkRequest::List;
    use ObjectStats::{NotFound, Stale, Unavailable};
    #[rustfmt::skip]
    let cases: Vec<(WorkRequest, u32, u32, u32, Duration)> = vec![
        (WorkRequest::Unknown, 100, 100, 0, Duration::ZERO),
        (WorkRequest::Other, 10, 1, 0, Duration::ZERO),
        (l(malformed), 100, 100, 0, Duration::ZERO),
        (l(list(rv(Specific, 399), k(699, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(rv(Specific, 0), k(699, 10_000))), 100, 10, 0, Duration::ZERO),
        (l(list(rv(Specific, 0), k(69, 10_000))), 100, 7, 0, Duration::ZERO),
        (l(list(rv(Unset, 399), k(699, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(none, k(399, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(none, NotFound)), 100, 1, 0, Duration::ZERO),
        (l(list(cont, k(699, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(rv(Zero, 299), k(399, 10_000))), 100, 10, 0, Duration::ZERO),
        (l(list(rv(Zero, 20), k(399, 10_000))), 100, 2, 0, Duration::ZERO),
        (l(list(rv(Zero, 0), k(799, 10_000))), 100, 10, 0, Duration::ZERO),
        (l(list(rv(Zero, 0), k(79, 10_000))), 100, 8, 0, Duration::ZERO),
        (l(list(rv_match(Specific, M::Exact, 399), k(699, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(rv_match(Specific, M::NotOlderThan, 0), k(799, 10_000))), 100, 10, 0, Duration::ZERO),
        (l(list(rv_match(Specific, M::NotOlderThan, 0), k(79, 10_000))), 100, 8, 0, Duration::ZERO),
        (l(list(rv_match(Specific, M::Exact, 0), k(5000, 10_000))), 20, 20, 0, Duration::ZERO),
        (l(list(rv_match(Unset, M::Unrecognized, 0), k(200, 10_000))), 100, 20, 0, Duration::ZERO),
        (l(list(rv_match(Specific, M::Exact, 399), k(699, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(rv(Zero, 0), NotFound)), 100, 1, 0, Duration::ZERO),
        (l(list(none, Stale)), 100, 100, 0, Duration::ZERO),
        (l(list(none, k(1, 0))), 100, 15, 0, Duration::ZERO),
        (l(list(none, Unavailable)), 100, 100, 0, Duration::ZERO),
        (l(list(rv(Zero, 1), NotFound)), 100, 1, 0, Duration::ZERO),
        (l(list(rv(Unset, 1), Stale)), 100, 15, 0, Duration::ZERO),
        (l(list(rv(Unset, 1), k(1, 0))), 100, 15, 0, Duration::ZERO),
        (l(list(rv(Unset, 1), Unavailable)), 100, 15, 0, Duration::ZERO),
        (l(list(rv(Unset, 499), Stale)), 100, 100, 0, Duration::ZERO),
        (l(list(rv(Unset, 499), k(1, 0))), 100, 15, 0, Duration::ZERO),
        (l(list(rv(Zero, 499), k(1, 0))), 100, 10, 0, Duration::ZERO),
        (l(list(rv(Unset, 499), Unavailable)), 100, 100, 0, Duration::ZERO),
        (l(single(sel(none), k(799, 200_000))), 100, 2, 0, Duration::ZERO),
        (l(single(sel(none), k(799, 1_500_000))), 100, 15, 0, Duration::ZERO),
        (l(single(sel(rv(Zero, 500)), k(799, 200_000))), 100, 2, 0, Duration::ZERO),
        (l(single(sel(rv(Zero, 500)), k(799, 1_500_000))), 100, 10, 0, Duration::ZERO),
        (l(list(sel(none), k(799, 10_000))), 100, 80, 0, Duration::ZERO),
        (l(list(sel(rv(Unset, 49)), k(799, 10_000))), 100, 40, 0, Duration::ZERO),
        (l(list(sel(rv(Unset, 699)), k(799, 10_000))), 100, 70, 0, Duration::ZERO),
        (l(list(sel(rv(Zero, 0)), k(799, 10_000))), 100, 10, 0, Duration::ZERO),
        (l(list(sel(rv(Zero, 29)), k(799, 10_000))), 100, 3, 0, Duration::ZERO),
        (watch(none), 100, 8, 0, Duration::ZERO),
        (watch(rv(Zero, 0)), 100, 8, 0, Duration::ZERO),
        (watch(rv(Specific, 0)), 100, 1, 0, Duration::ZERO),
        (watch(send(false, Unset)), 100, 8, 0, Duration::ZERO),
        (watch(send(false, Zero)), 100, 8, 0, Duration::ZERO),
        (watch(send(false, Specific)), 100, 1, 0, Duration::ZERO),
        (watch(send(true, Unset)), 100, 8, 0, Duration::ZERO),
        (watch(send(true, Zero)), 100, 8, 0, Duration::ZERO),
        (watch(send(true, Specific)), 100, 8, 0, Duration::ZERO),
        (mutating(0), 10, 1, 0, Duration::ZERO),
        (mutating(29), 10, 1, 3, 5 * MS),
        (mutating(5), 10, 1, 0, Duration::ZERO),
        (mutating(199), 10, 1, 10, 10 * MS),
        (mutating(100), 5, 1, 5, 10 * MS),
        (
            WorkRequest::Mutating(MutatingRequest {
                watchers: 5777,
                produces_no_event: produces_no_watch_event("serviceaccounts", "token"),
            }),
            10, 1, 0, Duration::ZERO,
        ),
        (mutating(1000), 20, 1, 10, 50 * MS),
    ];
    for (i, (request, level_max, initial, fin, latency)) in cases.into_iter().enumerate() {
        let got = e.estimate(&request, level_max);
        assert_eq!(
            got,
            WorkEstimate::new(initial, fin, latency),
            "case {i}: {request:?}"
        );
    }
    assert!(!produces_no_watch_event("serviceaccounts", ""));
}

/// The count-based cost (Kubernetes with SizeBasedListCostEstimate off,
/// LIST maximum 10).
#[test]
fn count_based_lists() {
    let e = WorkEstimator::new(WorkEstimatorConfig::count_based()).unwrap();
    let est = |o, stats| {
        e.estimate(&WorkRequest::List(list(o, stats)), 0)
            .initial_seats
    };
    // From storage without selector: 2 · 399 objects → 8 seats.
    assert_eq!(est(ListOptions::default(), known(399, 0)), 8);
    // 2 · 799 → 16, capped at the LIST maximum of 10.
    assert_eq!(est(ListOptions::default(), known(799, 0)), 10);
    // From cache: 250 objects → 3 seats.
    assert_eq!(est(rv(ResourceVersion::Zero, 0), known(250, 0)), 3);
    // Stale: the maximum; not found: the minimum.
    assert_eq!(est(ListOptions::default(), ObjectStats::Stale), 10);
    assert_eq!(est(ListOptions::default(), ObjectStats::NotFound), 1);
    // An empty resource still costs the minimum.
    assert_eq!(est(ListOptions::default(), known(0, 0)), 1);
}

#[test]
fn switches_and_minimums() {
    let cfg = WorkEstimatorConfig {
        watch_initialization_cost: false,
        mutating_enabled: false,
        minimum_seats: 2,
        ..WorkEstimatorConfig::default()
    };
    let e = WorkEstimator::new(cfg).unwrap();
    let watch = WorkRequest::Watch(ListRequest::new(known(100_000, 100_000)));
    assert_eq!(
        e.estimate(&watch, 0),
        WorkEstimate::new(2, 0, Duration::ZERO)
    );
    let m = WorkRequest::Mutating(MutatingRequest {
        watchers: 1000,
        produces_no_event: false,
    });
    assert_eq!(e.estimate(&m, 0), WorkEstimate::new(2, 0, Duration::ZERO));
    assert_eq!(e.estimate(&WorkRequest::Other, 0).initial_seats, 2);
    // An empty list: the minimum of 2 seats.
    let empty = WorkRequest::List(ListRequest::new(known(0, 0)));
    assert_eq!(e.estimate(&empty, 0).initial_seats, 2);
}

#[test]
fn extreme_inputs_stay_capped() {
    let e = WorkEstimator::default();
    let huge = WorkRequest::List(ListRequest::new(known(u64::MAX, u64::MAX)));
    assert_eq!(e.estimate(&huge, 0).initial_seats, 100);
    assert_eq!(e.estimate(&huge, 7).initial_seats, 7);
    let m = WorkRequest::Mutating(MutatingRequest {
        watchers: u64::MAX,
        produces_no_event: false,
    });
    let got = e.estimate(&m, 0);
    assert_eq!((got.initial_seats, got.final_seats), (1, 10));
    assert!(got.additional_latency > Duration::from_secs(1_000_000));
    // A fractional watches_per_seat compares with its whole part.
    let e = WorkEstimator::new(WorkEstimatorConfig {
        watches_per_seat: 2.5,
        ..WorkEstimatorConfig::default()
    })
    .unwrap();
    let two = WorkRequest::Mutating(MutatingRequest {
        watchers: 2,
        produces_no_event: false,
    });
    assert_eq!(e.estimate(&two, 0), WorkEstimate::new(1, 1, 5 * MS));
}
