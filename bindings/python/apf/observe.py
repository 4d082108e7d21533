"""Metrics and debug dumps over HTTP, shared by the WSGI and ASGI
middlewares: ``/metrics`` (Kubernetes' API Priority and Fairness metrics in
the OpenMetrics text format) and Kubernetes' debug paths
``/debug/api_priority_and_fairness/dump_priority_levels``, ``dump_queues``
and ``dump_requests`` (``?includeRequestDetails=1`` adds each request's
details, as in Kubernetes)."""

from __future__ import annotations

import ctypes
from typing import List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qs

from ._library import ApfError, ClosedError, check, lib

METRICS_PATH = "/metrics"
DEBUG_PATH_PREFIX = "/debug/api_priority_and_fairness/"
DUMP_PRIORITY_LEVELS_PATH = DEBUG_PATH_PREFIX + "dump_priority_levels"
DUMP_QUEUES_PATH = DEBUG_PATH_PREFIX + "dump_queues"
DUMP_REQUESTS_PATH = DEBUG_PATH_PREFIX + "dump_requests"

TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


def metrics_content_type() -> str:
    """The HTTP Content-Type of :meth:`Dispatcher.metrics_text`
    (``apf_metrics_content_type``)."""
    text = ctypes.POINTER(ctypes.c_char)()
    length = ctypes.c_size_t()
    check(lib().apf_metrics_content_type(ctypes.byref(text), ctypes.byref(length)),
          "apf_metrics_content_type")
    return ctypes.string_at(text, length.value).decode()


class Answer(NamedTuple):
    status: int
    reason: str
    headers: List[Tuple[str, str]]
    body: bytes


def _include_details(query: str) -> bool:
    # Kubernetes: any non-empty value of the first includeRequestDetails.
    values = parse_qs(query, keep_blank_values=True).get("includeRequestDetails", [""])
    return values[0] != ""


def answer(dispatcher, path: str, query: str) -> Optional[Answer]:
    """The response for ``path`` if it is one of the metrics or dump paths,
    else None. A closed dispatcher gives 503, a library error 500."""
    if path == METRICS_PATH:
        content_type = metrics_content_type()
        read = dispatcher.metrics_text
    elif path == DUMP_PRIORITY_LEVELS_PATH:
        content_type, read = TEXT_CONTENT_TYPE, dispatcher.dump_priority_levels
    elif path == DUMP_QUEUES_PATH:
        content_type, read = TEXT_CONTENT_TYPE, dispatcher.dump_queues
    elif path == DUMP_REQUESTS_PATH:
        details = _include_details(query)
        content_type = TEXT_CONTENT_TYPE

        def read():
            return dispatcher.dump_requests(include_details=details)
    else:
        return None
    try:
        return _answer(200, "OK", content_type, read().encode())
    except ClosedError as exc:
        return _answer(503, "Service Unavailable", TEXT_CONTENT_TYPE, f"{exc}\n".encode())
    except ApfError as exc:
        return _answer(500, "Internal Server Error", TEXT_CONTENT_TYPE, f"{exc}\n".encode())


def _answer(status: int, reason: str, content_type: str, body: bytes) -> Answer:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    return Answer(status, reason, headers, body)


__all__ = [
    "DEBUG_PATH_PREFIX",
    "DUMP_PRIORITY_LEVELS_PATH",
    "DUMP_QUEUES_PATH",
    "DUMP_REQUESTS_PATH",
    "METRICS_PATH",
    "answer",
    "metrics_content_type",
]
