"""An ASGI middleware that puts every HTTP request through APF.

    app = apf.asgi.Middleware(app, dispatcher, classify)

``classify(scope)`` (a function or a coroutine function) returns the
:class:`apf.RequestDigest`, or None to let the request through without flow
control. A queued request is awaited on the event loop (no thread per
waiter); one not served gets libapf's ``429`` (adaptive ``Retry-After``,
Kubernetes ``Status`` JSON body), as every libapf middleware answers. A
client that disconnects while its request is queued withdraws the request,
whether the server tells it by cancelling the task (hypercorn) or only by
an ``http.disconnect`` message (uvicorn): the middleware reads the request's
messages while it waits (keeping them for the application, up to
``WATCH_BODY_LIMIT`` bytes of body: past that the client is still sending,
so alive, and the rest stays with the server). Responses carry the ``X-Kubernetes-PF-FlowSchema-UID`` and
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
        early: list = []  # messages read while the request waited, for the app
        try:
            # Executing at once (the common case) costs no task; only a
            # queued request is waited for beside the client's messages.
            request = pending._admit_now()
            if request is None:
                request = await _admitted_unless_left(pending, receive, early)
            if request is None:
                # The client left while queued: the request is withdrawn;
                # nobody reads an answer, but it counts toward Retry-After.
                _count_cancelled(self.dispatcher, pending)
                return
        except asyncio.CancelledError:
            # The client went away before the request was served: it counts
            # toward Retry-After like every request not served, as in the
            # other middlewares (nobody reads the answer).
            _count_cancelled(self.dispatcher, pending)
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

        async def replay_then_receive():
            if early:
                return early.pop(0)
            return await receive()

        try:
            await self.app(scope, replay_then_receive, send_with_headers)
        finally:
            request.finish()


#: Bytes of request body the middleware reads (and keeps for the
#: application) while the request waits in a queue, watching for the
#: client's ``http.disconnect``.
WATCH_BODY_LIMIT = 64 * 1024


async def _admitted_unless_left(pending, receive, early: list):
    """The executing request, or None if the client disconnected while it
    was queued (then it is withdrawn). Raises Rejected. Messages read while
    waiting are appended to ``early``. A cancellation of the calling task
    withdraws the request too.

    ``waiting`` takes its first step (registering the wait, after which
    cancelling it withdraws the request) before this task can run again:
    the loop runs ready callbacks in order, and its step was scheduled
    first. So every cancellation below reaches a wait that can withdraw."""
    waiting = asyncio.ensure_future(pending._wait_queued())
    watcher = asyncio.ensure_future(_until_disconnect(receive, early))
    handed_over = False
    try:
        await asyncio.wait((waiting, watcher), return_when=asyncio.FIRST_COMPLETED)
        # A receive that failed is no disconnect seen: the request waits on,
        # and the application meets the failure when it reads.
        left = watcher.done() and watcher.exception() is None and watcher.result()
        if not waiting.done() and left:
            waiting.cancel()  # the client left: withdraw (seat or queue slot)
        await asyncio.wait((waiting,))
        if waiting.cancelled():
            return None
        request = waiting.result()  # raises Rejected
        handed_over = True
        return request
    finally:
        watcher.cancel()
        if not handed_over:
            if not waiting.done():
                waiting.cancel()  # this task was cancelled: withdraw
            elif not waiting.cancelled() and waiting.exception() is None:
                # Admitted just as this task was cancelled: give it back.
                waiting.result().finish()


async def _until_disconnect(receive, early: list) -> bool:
    """True once the client disconnects; False when it has sent more than
    WATCH_BODY_LIMIT bytes of body while queued (alive: stop reading)."""
    size = 0
    body_complete = False
    while True:
        message = await receive()
        early.append(message)
        kind = message.get("type")
        if kind == "http.disconnect":
            return True
        if kind != "http.request" or body_complete:
            # Past the body, a server sends only the disconnect (ASGI); one
            # that answers otherwise is not watched further.
            return False
        size += len(message.get("body", b""))
        if size > WATCH_BODY_LIMIT:
            return False
        body_complete = not message.get("more_body", False)


def _count_cancelled(dispatcher: Dispatcher, pending) -> None:
    """A request not served because its client left counts toward
    Retry-After like every request not served, as in the other
    middlewares."""
    decision = pending.decision
    if decision is not None:
        dispatcher.reject(decision.priority_level, decision.flow_schema, RejectReason.CANCELLED)


async def _maybe_await(value):
    return await value if inspect.isawaitable(value) else value


__all__ = ["Middleware", "WATCH_BODY_LIMIT"]
