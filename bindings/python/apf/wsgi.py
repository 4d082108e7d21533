"""A WSGI middleware that puts every request through APF.

    app = apf.wsgi.Middleware(app, dispatcher, classify)

``classify(environ)`` returns the :class:`apf.RequestDigest` of a request,
or None to let it through without flow control (as Kubernetes does for
long-running requests). A queued request blocks its worker thread until it
may execute; one not served (rejected, or timed out in its queue) gets
libapf's ``429 Too Many Requests``, the same in every libapf middleware:
the adaptive ``Retry-After`` and a Kubernetes ``Status`` JSON body. Every classified response carries the
``X-Kubernetes-PF-FlowSchema-UID`` and ``X-Kubernetes-PF-PriorityLevel-UID``
headers. The request is finished when the server closes the response
iterable, so streaming responses hold their seats while they stream.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from ._http import (
    FLOW_SCHEMA_UID_HEADER,
    PRIORITY_LEVEL_UID_HEADER,
    too_many_requests,
    uid_headers,
)
from .dispatcher import Dispatcher, Request
from .observe import answer as observe_answer
from .types import Rejected, RequestDigest, WorkEstimate


class Middleware:
    def __init__(
        self,
        app,
        dispatcher: Dispatcher,
        classify: Callable[[dict], Optional[RequestDigest]],
        estimate: Optional[Callable[[dict, RequestDigest], WorkEstimate]] = None,
        timeout_ns: Optional[int] = None,
        serve_metrics_and_dumps: bool = False,
    ):
        """``estimate(environ, digest)`` gives the work estimate (default:
        one seat); ``timeout_ns`` bounds the wait in a queue
        (dispatcher clock; the dispatcher's wait limit applies anyway).
        ``serve_metrics_and_dumps`` answers ``/metrics`` and Kubernetes'
        ``/debug/api_priority_and_fairness/dump_*`` paths from the
        dispatcher (see :mod:`apf.observe`) before classification, so they
        stay reachable when the server is saturated; the dumps name users
        and paths, so enable it only where operators alone can reach."""
        self.app = app
        self.dispatcher = dispatcher
        self.classify = classify
        self.estimate = estimate
        self.timeout_ns = timeout_ns
        self.serve_metrics_and_dumps = serve_metrics_and_dumps

    def __call__(self, environ, start_response):
        if self.serve_metrics_and_dumps:
            found = observe_answer(self.dispatcher, environ.get("PATH_INFO", ""),
                                   environ.get("QUERY_STRING", ""))
            if found is not None:
                start_response(f"{found.status} {found.reason}", found.headers)
                return [found.body]
        digest = self.classify(environ)
        if digest is None:
            return self.app(environ, start_response)
        estimate = self.estimate(environ, digest) if self.estimate else WorkEstimate()
        scope = self.dispatcher.request(digest, estimate, timeout_ns=self.timeout_ns)
        try:
            request = scope.__enter__()
        except Rejected as rejected:
            status, headers, body = too_many_requests(self.dispatcher, rejected)
            start_response(status, headers)
            return [body]
        extra = uid_headers(request.decision)

        def start(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers
                    if k.lower() not in (FLOW_SCHEMA_UID_HEADER.lower(),
                                         PRIORITY_LEVEL_UID_HEADER.lower())]
            return start_response(status, kept + extra, exc_info)

        try:
            body = self.app(environ, start)
        except BaseException:
            request.finish()
            raise
        return _FinishOnClose(body, request)


class _FinishOnClose:
    """The application's response iterable; closing it finishes the request."""

    def __init__(self, body: Iterable[bytes], request: Request):
        self._body = body
        self._request = request

    def __iter__(self):
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._request.finish()


__all__ = ["Middleware", "FLOW_SCHEMA_UID_HEADER", "PRIORITY_LEVEL_UID_HEADER"]
