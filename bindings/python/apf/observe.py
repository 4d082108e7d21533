"""Metrics and debug dumps over HTTP, shared by the WSGI and ASGI
middlewares: ``/metrics`` (Kubernetes' API Priority and Fairness metrics in
the OpenMetrics text format) and Kubernetes' debug paths
``/debug/api_priority_and_fairness/dump_priority_levels``, ``dump_queues``
and ``dump_requests`` (``?includeRequestDetails=1`` adds each request's
details, as in Kubernetes)."""

from __future__ import annotations

import ctypes
from typing import List, NamedTuple, Optional, Tuple

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


def answer(dispatcher, path: str, query: str) -> Optional[Answer]:
    """The response for ``path`` if it is one of the metrics or dump paths,
    else None: libapf's own routing (``apf_dispatcher_observe``), the same
    in every binding. A closed dispatcher gives 503, a library error 500."""
    if path != METRICS_PATH and not path.startswith(DEBUG_PATH_PREFIX):
        return None
    try:
        found = dispatcher.observe(path, query)
    except ClosedError as exc:
        return _answer(503, "Service Unavailable", TEXT_CONTENT_TYPE, f"{exc}\n".encode())
    except ApfError as exc:
        return _answer(500, "Internal Server Error", TEXT_CONTENT_TYPE, f"{exc}\n".encode())
    if found is None:
        return None
    return _answer(found.status, "OK", found.content_type, found.body)


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
