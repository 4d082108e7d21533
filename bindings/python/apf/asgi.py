"""An ASGI middleware that puts every HTTP request through APF.

    app = apf.asgi.Middleware(app, dispatcher, classify)

``classify(scope)`` (a function or a coroutine function) returns the
:class:`apf.RequestDigest`, or None to let the request through without flow
control. A queued request is awaited on the event loop (no thread per
waiter); one not served gets libapf's ``429`` (adaptive ``Retry-After``,
Kubernetes ``Status`` JSON body), as every libapf middleware answers; a client
that disconnects while queued cancels its task, which withdraws the
request. Responses carry the ``X-Kubernetes-PF-FlowSchema-UID`` and
``X-Kubernetes-PF-PriorityLevel-UID`` headers. Non-HTTP scopes (lifespan,
websocket) pass through.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Optional

from ._http import too_many_requests, uid_headers
from .dispatcher import Dispatcher
from .observe import answer as observe_answer
from .types import Rejected, RejectReason, WorkEstimate


class Middleware:
    def __init__(self, app, dispatcher: Dispatcher, classify, estimate=None,
                 timeout_ns: Optional[int] = None,
                 serve_metrics_and_dumps: bool = False):
        """``serve_metrics_and_dumps`` answers ``/metrics`` and Kubernetes'
        ``/debug/api_priority_and_fairness/dump_*`` paths from the
        dispatcher (see :mod:`apf.observe`) before classification; the
        dumps name users and paths, so enable it only where operators
        alone can reach."""
        self.app = app
        self.dispatcher = dispatcher
        self.classify = classify
        self.estimate = estimate
        self.timeout_ns = timeout_ns
        self.serve_metrics_and_dumps = serve_metrics_and_dumps

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        if self.serve_metrics_and_dumps:
            found = observe_answer(self.dispatcher, scope.get("path", ""),
                                   scope.get("query_string", b"").decode("latin-1"))
            if found is not None:
                await send({
                    "type": "http.response.start",
                    "status": found.status,
                    "headers": [(k.lower().encode(), v.encode()) for k, v in found.headers],
                })
                await send({"type": "http.response.body", "body": found.body})
                return
        digest = await _maybe_await(self.classify(scope))
        if digest is None:
            await self.app(scope, receive, send)
            return
        estimate = (await _maybe_await(self.estimate(scope, digest))
                    if self.estimate else WorkEstimate())
        pending = self.dispatcher.request_async(digest, estimate, timeout_ns=self.timeout_ns)
        try:
            request = await pending
        except asyncio.CancelledError:
            # The client went away before the request was served: it counts
            # toward Retry-After like every request not served, as in the
            # other middlewares (nobody reads the answer).
            decision = pending.decision
            if decision is not None:
                self.dispatcher.reject(decision.priority_level, decision.flow_schema,
                                       RejectReason.CANCELLED)
            raise
        except Rejected as rejected:
            status, headers, body = too_many_requests(self.dispatcher, rejected)
            await send({
                "type": "http.response.start",
                "status": 429,
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
            })
            await send({"type": "http.response.body", "body": body})
            return
        extra = [(k.lower().encode(), v.encode()) for k, v in uid_headers(request.decision)]
        names = {k for k, _ in extra}

        async def send_with_headers(message):
            if message.get("type") == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if bytes(k).lower() not in names]
                message = dict(message, headers=headers + extra)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            request.finish()


async def _maybe_await(value):
    return await value if inspect.isawaitable(value) else value


__all__ = ["Middleware"]
