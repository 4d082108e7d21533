"""What the WSGI and ASGI middlewares share: header names and the 429,
which libapf makes (``Dispatcher.reject``) so that every libapf middleware
answers alike."""

from __future__ import annotations

from typing import List, Tuple

from .types import Rejected

FLOW_SCHEMA_UID_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_UID_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
REJECTION_CONTENT_TYPE = "application/json"


def uid_headers(decision) -> List[Tuple[str, str]]:
    """The two classification headers (every object has a UID: libapf
    derives a stable one for objects configured without)."""
    return [
        (FLOW_SCHEMA_UID_HEADER, decision.flow_schema_uid),
        (PRIORITY_LEVEL_UID_HEADER, decision.priority_level_uid),
    ]


def too_many_requests(dispatcher, rejected: Rejected) -> Tuple[str, List[Tuple[str, str]], bytes]:
    """Status line, headers and body of the answer to a request that was
    not served: libapf's 429 (a Kubernetes ``Status`` object and the
    adaptive ``Retry-After``), with the classification headers."""
    decision = rejected.decision
    answer = dispatcher.reject(decision.priority_level, decision.flow_schema, rejected.reason)
    headers = uid_headers(decision) + [
        ("Retry-After", str(answer.retry_after)),
        ("Content-Type", REJECTION_CONTENT_TYPE),
        ("Content-Length", str(len(answer.body))),
    ]
    return "429 Too Many Requests", headers, answer.body
