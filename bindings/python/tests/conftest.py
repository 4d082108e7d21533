"""Shared fixtures: configurations with small, known limits and a manual clock."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PACKAGE_ROOT))

import apf  # noqa: E402

SECOND = 1_000_000_000

# Server concurrency 6 split by shares: exempt 0, catch-all 5, and one share
# for each test level below over a total of ... see LEVEL_SHARES. Nothing is
# lendable, so every level keeps exactly its nominal limit.
TEST_CONFIG = """
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tight, uid: uid-pl-tight}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 1000}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: short, uid: uid-pl-short}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: refuse, uid: uid-pl-refuse}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 5
    lendablePercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: tight, uid: uid-fs-tight}
spec:
  priorityLevelConfiguration: {name: tight}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules:
    - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}
    nonResourceRules:
    - {verbs: ["*"], nonResourceURLs: ["*"]}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: short, uid: uid-fs-short}
spec:
  priorityLevelConfiguration: {name: short}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: carol}}]
    resourceRules:
    - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: refuse, uid: uid-fs-refuse}
spec:
  priorityLevelConfiguration: {name: refuse}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: bob}}]
    resourceRules:
    - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}
"""

# Shares: tight 5, short 5, refuse 5, catch-all 5 (mandatory), exempt 0:
# a server limit of 4 gives each limited level one seat.
SERVER_LIMIT = 4
WAIT_LIMIT = 10 * SECOND


def digest(user: str = "alice", verb: str = "get", resource: str = "pods") -> apf.RequestDigest:
    return apf.RequestDigest(
        user=user,
        groups=("system:authenticated",),
        verb=verb,
        resource=resource,
        namespace="default",
        path=f"/api/v1/namespaces/default/{resource}",
    )


def make_dispatcher(**overrides) -> apf.Dispatcher:
    options = dict(server_concurrency_limit=SERVER_LIMIT, wait_limit_ns=WAIT_LIMIT,
                   manual_clock=True)
    options.update(overrides)
    return apf.Dispatcher.from_config(TEST_CONFIG, **options)


def stats(d: apf.Dispatcher) -> dict:
    """stats_text() as {"": dispatcher figures, level: figures} (the text
    format is for people; tests only read numbers from it)."""
    out = {}
    for line in d.stats_text().splitlines():
        words = line.split()
        if words and words[0] == "level":
            name, words = words[1], words[2:]
        else:
            name = ""
        out[name] = {k: _number(v) for k, v in zip(words[::2], words[1::2])}
    return out


def _number(v: str):
    return int(v) if v.isdigit() else v


@pytest.fixture
def dispatcher():
    d = make_dispatcher()
    yield d
    if not d.closed:
        # Every test retires what it started: nothing may leak.
        figures = stats(d)
        assert figures[""]["requests_live"] == 0, figures
        assert all(f.get("seats_in_use", 0) == 0 for f in figures.values()), figures
    d.close()


@pytest.fixture
def builtin():
    d = apf.Dispatcher.builtin(manual_clock=True)
    yield d
    d.close()


def seat_is_free(d: apf.Dispatcher, user: str = "alice") -> bool:
    """True if a new request of `user` executes at once (then finished)."""
    decision = d.start_request(digest(user))
    if decision.outcome == apf.Outcome.EXECUTE:
        d.finish(decision.request)
        return True
    if decision.outcome == apf.Outcome.QUEUED:
        assert d.cancel(decision.request)
    return False


def settle(d: apf.Dispatcher, decision: apf.Decision) -> None:
    """Retire a request a test started: finish it if it executes (a queued
    one is polled first, so its dispatch is reported), else cancel it."""
    if decision.outcome == apf.Outcome.REJECTED:
        return
    if decision.outcome == apf.Outcome.QUEUED:
        outcome, _ = d.poll(decision.request)
        if outcome == apf.Outcome.QUEUED:
            d.cancel(decision.request)
            return
        if outcome == apf.Outcome.REJECTED:
            return
    d.finish(decision.request)


class QueuedWatch:
    """Records the decisions a dispatcher hands out, so a test knows when a
    request started on another thread is really in a queue."""

    def __init__(self, d: apf.Dispatcher):
        self.decisions = []
        self._cond = threading.Condition()
        original = d.start_request

        def start_request(*args, **kwargs):
            decision = original(*args, **kwargs)
            with self._cond:
                self.decisions.append(decision)
                self._cond.notify_all()
            return decision

        d.start_request = start_request

    def wait_queued(self, n: int = 1, timeout: float = 5) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: sum(x.outcome == apf.Outcome.QUEUED for x in self.decisions) >= n,
                timeout)
        assert ok, f"fewer than {n} queued requests: {self.decisions}"
