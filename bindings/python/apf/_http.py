"""What the WSGI and ASGI middlewares share: header names and the 429."""

from __future__ import annotations

import json
from typing import Callable, List, Tuple, Union

from .types import Rejected

FLOW_SCHEMA_UID_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_UID_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"

RetryAfter = Union[int, Callable[[Rejected], int]]


def uid_headers(decision) -> List[Tuple[str, str]]:
    """The two classification headers; an object without a UID (libapf's
    built-in objects have none) gives no header rather than an empty one."""
    pairs = [
        (FLOW_SCHEMA_UID_HEADER, decision.flow_schema_uid),
        (PRIORITY_LEVEL_UID_HEADER, decision.priority_level_uid),
    ]
    return [(k, v) for k, v in pairs if v]


def retry_after_seconds(retry_after: RetryAfter, rejected: Rejected) -> int:
    seconds = retry_after(rejected) if callable(retry_after) else retry_after
    return max(1, int(seconds))


def too_many_requests(rejected: Rejected, retry_after: RetryAfter) -> Tuple[str, List[Tuple[str, str]], bytes]:
    """Status line, headers and body of the 429 answer: a Kubernetes
    ``Status`` object, as the API server sends it."""
    seconds = retry_after_seconds(retry_after, rejected)
    body = json.dumps({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": seconds, "causes": [
            {"reason": rejected.reason.label, "message": str(rejected)},
        ]},
        "code": 429,
    }).encode()
    headers = uid_headers(rejected.decision) + [
        ("Retry-After", str(seconds)),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
    ]
    return "429 Too Many Requests", headers, body
