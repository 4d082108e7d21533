"""Plain values exchanged with the dispatcher."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _bindings as b


class Outcome(enum.IntEnum):
    """What the dispatcher decided for a request."""

    EXECUTE = b.APF_OUTCOME_EXECUTE
    QUEUED = b.APF_OUTCOME_QUEUED
    REJECTED = b.APF_OUTCOME_REJECTED


class RejectReason(enum.IntEnum):
    """Why a request was rejected (Kubernetes' label values in ``label``)."""

    QUEUE_FULL = b.APF_REJECT_QUEUE_FULL
    TIME_OUT = b.APF_REJECT_TIME_OUT
    CANCELLED = b.APF_REJECT_CANCELLED
    CONCURRENCY_LIMIT = b.APF_REJECT_CONCURRENCY_LIMIT
    LEVEL_FAILED = b.APF_REJECT_LEVEL_FAILED

    @property
    def label(self) -> str:
        """Kubernetes' ``reason`` label (``apiserver_flowcontrol_rejected_requests_total``)."""
        return _LABELS[self]


_LABELS = {
    RejectReason.QUEUE_FULL: "queue-full",
    RejectReason.TIME_OUT: "time-out",
    RejectReason.CANCELLED: "cancelled",
    RejectReason.CONCURRENCY_LIMIT: "concurrency-limit",
    RejectReason.LEVEL_FAILED: "level-failed",
}


@dataclass(frozen=True)
class RequestDigest:
    """What classification looks at: Kubernetes' user and request info.

    For a non-resource request set ``is_resource_request=False`` and
    ``path``; ``verb`` is then the lower-case HTTP method.
    """

    user: str
    verb: str
    groups: Sequence[str] = ()
    is_resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True)
class WorkEstimate:
    """Seats a request occupies while it runs (``initial_seats``) and for
    ``additional_latency_ns`` after it finished (``final_seats``)."""

    initial_seats: int = 1
    final_seats: int = 0
    additional_latency_ns: int = 0


@dataclass
class AdaptiveOptions:
    """The adaptive server concurrency limit's tuning (docs/adaptive-limit.md).
    Give one as ``Options.adaptive`` (or ``Dispatcher(adaptive=...)``) to
    turn the limit on: the seats all levels share then follow the
    backend's measured latency, and ``server_concurrency_limit`` only sizes
    the levels' per-request seat caps. A field left None takes libapf's
    default (``apf_adaptive_options_default``; ``AdaptiveOptions.defaults()``
    shows them); a value out of range makes the dispatcher's constructor
    raise ``ApfError`` (``APF_ERR_INVALID_PARAMETER``) naming the field."""

    min_limit: Optional[int] = None
    max_limit: Optional[int] = None
    update_interval_ns: Optional[int] = None
    tolerance_percent: Optional[int] = None
    smoothing_percent: Optional[int] = None
    gain: Optional[int] = None
    min_window_samples: Optional[int] = None
    probe_interval_ns: Optional[int] = None
    probe_limit: Optional[int] = None
    probe_samples: Optional[int] = None
    probe_timeout_ns: Optional[int] = None

    @classmethod
    def defaults(cls) -> "AdaptiveOptions":
        from .dispatcher import default_adaptive_options

        return default_adaptive_options()


@dataclass(frozen=True)
class AdaptiveState:
    """The adaptive limit's state at one moment (``Dispatcher.adaptive_state``;
    the same figures as the ``apiserver_flowcontrol_adaptive_*`` metrics).
    ``enabled`` is False, and every other field 0, under a fixed limit;
    ``min_latency_ns`` is 0 until a probe measured one."""

    enabled: bool
    probing: bool
    limit: int
    estimate: float
    min_latency_ns: int
    latency_ns: int
    gradient: float
    probes: int
    updates: int


@dataclass
class Options:
    """Server-wide settings. A field left None takes libapf's default
    (``apf_dispatcher_options_default``; ``Options.defaults()`` shows them)."""

    server_concurrency_limit: Optional[int] = None
    service_time_guess_ns: Optional[int] = None
    wait_limit_ns: Optional[int] = None
    borrowing_period_ns: Optional[int] = None
    manual_clock: bool = False
    #: None: the fixed ``server_concurrency_limit``; an
    #: :class:`AdaptiveOptions`: the adaptive limit with that tuning.
    adaptive: Optional[AdaptiveOptions] = None

    @classmethod
    def defaults(cls) -> "Options":
        from .dispatcher import default_options

        return default_options()


@dataclass(frozen=True)
class Decision:
    """The dispatcher's decision and where it classified the request.

    ``request`` is the handle of a queued or executing request (0 when
    rejected). The UIDs are what a server puts in the
    ``X-Kubernetes-PF-FlowSchema-UID`` / ``X-Kubernetes-PF-PriorityLevel-UID``
    response headers.
    """

    outcome: Outcome
    reject_reason: Optional[RejectReason]
    request: int
    flow_schema: str
    flow_schema_uid: str
    priority_level: str
    priority_level_uid: str


class Rejected(Exception):
    """The request was rejected (``reason``); ``decision`` says where it
    was classified."""

    def __init__(self, reason: RejectReason, decision: Decision):
        self.reason = reason
        self.decision = decision
        super().__init__(
            f"rejected ({reason.label}) at priority level {decision.priority_level!r} "
            f"(flow schema {decision.flow_schema!r})"
        )

    @property
    def flow_schema_uid(self) -> str:
        return self.decision.flow_schema_uid

    @property
    def priority_level_uid(self) -> str:
        return self.decision.priority_level_uid
