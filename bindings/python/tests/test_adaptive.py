"""The adaptive server concurrency limit through the binding: its options
reach libapf, bad values are refused by name, and on the manual clock the
probe measures the execution time and the total leaves it, as
``adaptive_state()`` and the metrics show."""

from __future__ import annotations

import pytest

from conftest import SECOND

import apf

MS = 1_000_000

CONFIG = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: work, uid: uid-work}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 30
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 100}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: work}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"""

ALICE = apf.RequestDigest(user="alice", verb="get", path="/healthz", is_resource_request=False)


def gauge(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[1])
    raise AssertionError(f"no {name} in\n{text}")


def closed_loop(d: apf.Dispatcher, clients: int, service_ns: int, rounds: int) -> int:
    """``clients`` requests always outstanding, each executing ``service_ns``
    of manual time; decisions first, then finishes (a finish dispatches a
    queued request, which must run its own time). Returns completions."""
    outstanding = []
    done = 0
    for _ in range(rounds):
        while len(outstanding) < clients:
            dec = d.start_request(ALICE)
            if dec.outcome != apf.Outcome.REJECTED:
                outstanding.append(dec.request)
        d.advance_clock(service_ns)
        polled = [(h, d.poll(h)[0]) for h in outstanding]
        outstanding = []
        for h, outcome in polled:
            if outcome == apf.Outcome.EXECUTE:
                d.finish(h)
                done += 1
            elif outcome == apf.Outcome.QUEUED:
                outstanding.append(h)
    for h in outstanding:
        if d.poll(h)[0] == apf.Outcome.EXECUTE:
            d.finish(h)
        else:
            d.cancel(h)
    return done


def test_defaults_are_libapfs():
    a = apf.AdaptiveOptions.defaults()
    assert (a.min_limit, a.max_limit, a.gain, a.probe_limit, a.probe_samples) == (8, 10_000, 3, 3, 50)
    assert a.update_interval_ns == 250 * MS
    assert a.probe_interval_ns == 60 * SECOND
    assert apf.default_options().adaptive is None


def test_off_by_default():
    with apf.Dispatcher(config=CONFIG, manual_clock=True) as d:
        s = d.adaptive_state()
        assert not s.enabled and s.limit == 0
        assert "adaptive_" not in d.metrics_text()


def test_options_reach_libapf():
    with apf.Dispatcher(config=CONFIG, manual_clock=True,
                        adaptive=apf.AdaptiveOptions(probe_limit=5)) as d:
        s = d.adaptive_state()
        assert s.enabled and s.probing and s.limit == 5, s
    opts = apf.Options(manual_clock=True, adaptive=apf.AdaptiveOptions())
    with apf.Dispatcher(config=CONFIG, options=opts) as d:
        assert d.adaptive_state().limit == 3


@pytest.mark.parametrize("field,value", [
    ("gain", 9), ("min_limit", 0), ("smoothing_percent", 101),
    ("update_interval_ns", MS), ("probe_timeout_ns", -1),
])
def test_bad_values_are_refused_by_name(field, value):
    with pytest.raises(apf.ApfError) as e:
        apf.Dispatcher(config=CONFIG, adaptive=apf.AdaptiveOptions(**{field: value}))
    assert e.value.status_name == "APF_ERR_INVALID_PARAMETER"
    # The C field's name: libapf's apf_error message (or, for a negative
    # value ctypes would wrap, the binding's own check).
    assert f"apf_adaptive_options.{field}" in e.value.message


def test_the_limit_adapts_under_load():
    a = apf.AdaptiveOptions(probe_samples=20)
    with apf.Dispatcher(config=CONFIG, manual_clock=True, server_concurrency_limit=100,
                        adaptive=a) as d:
        assert d.adaptive_state().limit == 3
        # 40 clients, 20 ms each, 4 s of manual time.
        assert closed_loop(d, 40, 20 * MS, 200) > 500
        s = d.adaptive_state()
        assert not s.probing and s.probes >= 1 and s.updates >= 10, s
        assert s.min_latency_ns == 20 * MS, s
        # The slow start took the total past min_limit (the latency here
        # never grows with concurrency).
        assert s.limit > 8, s
        text = d.metrics_text()
        assert gauge(text, "apiserver_flowcontrol_adaptive_server_concurrency_limit") == s.limit
        assert gauge(text, "apiserver_flowcontrol_adaptive_min_latency_seconds") == pytest.approx(0.020)
