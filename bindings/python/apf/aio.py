"""asyncio support: await a queued request on the event loop itself.

Waiting does not take a thread. The dispatcher's completion fd is watched
with ``loop.add_reader`` on every loop that has waiters; when it becomes
readable, the loop drains the completed handles (``take_completion``) and
resolves the futures awaiting them, on their own loops.

A handle may be decided before its waiter is registered, and another loop
may take its completion first; so a waiter polls once after registering,
and a completion that arrives while someone polls marks the waiter
"signalled" so the poller looks again. Only one party polls a handle at a
time: a rejection is reported once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Dict, Optional, Tuple

from ._library import ApfError, ClosedError
from .types import Outcome, RejectReason, Rejected


class _Waiter:
    __slots__ = ("handle", "loop", "future", "polling", "signalled")

    def __init__(self, handle: int, loop: asyncio.AbstractEventLoop, future: asyncio.Future):
        self.handle = handle
        self.loop = loop
        self.future = future
        self.polling = False
        self.signalled = False


class CompletionHub:
    """One per dispatcher: routes completions to asyncio futures."""

    def __init__(self, dispatcher):
        self._d = dispatcher
        self._lock = threading.Lock()
        self._waiters: Dict[int, _Waiter] = {}
        self._per_loop: Dict[asyncio.AbstractEventLoop, int] = {}
        self._watching: set = set()
        self._fd: Optional[int] = None
        self._closed = False

    # --- registration, on the waiter's loop ---------------------------------
    async def wait(self, handle: int) -> Tuple[Outcome, Optional[RejectReason]]:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(handle, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise ClosedError("Dispatcher has been closed")
            self._waiters[handle] = waiter
            self._per_loop[loop] = self._per_loop.get(loop, 0) + 1
            watch = loop not in self._watching
            if watch:
                self._watching.add(loop)
        try:
            if watch:
                self._watch(loop)
            self._resolve(waiter)
            return await waiter.future
        except BaseException:
            # Cancelled (or the loop is going away): the request must not
            # keep a seat or a queue slot.
            self._forget(waiter)
            try:
                self._d._abandon(handle)
            except (ApfError, ClosedError):
                pass  # the original exception says more
            raise

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        entered = False
        try:
            if self._fd is None:
                self._fd = self._d.completion_fd()
            # Hold the dispatcher open while its fd is in a selector.
            self._d._enter()
            entered = True
            loop.add_reader(self._fd, self._drain, loop)
        except BaseException:
            with self._lock:
                self._watching.discard(loop)
            if entered:
                self._d._exit()
            raise

    def _unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``'s thread: stop watching if it has no waiters left."""
        with self._lock:
            if self._per_loop.get(loop, 0) or loop not in self._watching:
                return
            self._watching.discard(loop)
            self._per_loop.pop(loop, None)
        try:
            loop.remove_reader(self._fd)
        finally:
            self._d._exit()

    def _schedule_unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        if _running_loop() is loop:
            self._unwatch(loop)
            return
        try:
            loop.call_soon_threadsafe(self._unwatch, loop)
        except RuntimeError:
            # The loop is closed: its selector is gone with it.
            with self._lock:
                gone = loop in self._watching
                self._watching.discard(loop)
                self._per_loop.pop(loop, None)
            if gone:
                self._d._exit()

    # --- completions ---------------------------------------------------------
    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Reader callback."""
        self.drain()

    def drain(self) -> None:
        """Take every completed handle and resolve its waiter (handles no
        coroutine awaits are dropped: a blocking waiter got them)."""
        if self._d.closed:
            return
        while True:
            try:
                handle = self._d.take_completion()
            except ClosedError:
                return
            if handle is None:
                return
            with self._lock:
                waiter = self._waiters.get(handle)
                if waiter is None:
                    continue  # awaited by no coroutine (a blocking waiter)
                if waiter.polling:
                    waiter.signalled = True
                    continue
            self._resolve(waiter)

    def _resolve(self, waiter: _Waiter) -> None:
        """Poll the waiter's request; deliver the outcome once it is decided."""
        with self._lock:
            if waiter.polling or self._waiters.get(waiter.handle) is not waiter:
                return
            waiter.polling = True
        while True:
            try:
                result = self._d.poll(waiter.handle)
            except (ApfError, ClosedError) as exc:
                self._finish_waiter(waiter, error=exc)
                return
            if result[0] != Outcome.QUEUED:
                self._finish_waiter(waiter, result=result)
                return
            with self._lock:
                if not waiter.signalled:
                    waiter.polling = False
                    return
                waiter.signalled = False

    def _finish_waiter(self, waiter: _Waiter, result=None, error=None) -> None:
        with self._lock:
            if self._waiters.get(waiter.handle) is waiter:
                del self._waiters[waiter.handle]
                self._per_loop[waiter.loop] -= 1
                last = self._per_loop[waiter.loop] == 0
            else:
                last = False
        _deliver(waiter, result, error)
        if last:
            self._schedule_unwatch(waiter.loop)

    def _forget(self, waiter: _Waiter) -> None:
        with self._lock:
            if self._waiters.get(waiter.handle) is not waiter:
                return
            del self._waiters[waiter.handle]
            self._per_loop[waiter.loop] -= 1
            last = self._per_loop[waiter.loop] == 0
        if last:
            self._schedule_unwatch(waiter.loop)

    @property
    def pending(self) -> int:
        """Waiters not yet resolved (for tests and monitoring)."""
        with self._lock:
            return len(self._waiters)

    def close(self) -> None:
        """The dispatcher is closing: fail every waiter, stop watching."""
        with self._lock:
            self._closed = True
            waiters = list(self._waiters.values())
            self._waiters.clear()
            loops = list(self._watching)
            for loop in loops:
                self._per_loop[loop] = 0
        for waiter in waiters:
            _deliver(waiter, None, ClosedError("Dispatcher has been closed"))
        for loop in loops:
            self._schedule_unwatch(loop)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _deliver(waiter: _Waiter, result, error) -> None:
    def settle() -> None:
        if waiter.future.done():
            return  # the awaiting task was cancelled; it cleans up itself
        if error is not None:
            waiter.future.set_exception(error)
        else:
            waiter.future.set_result(result)

    if _running_loop() is waiter.loop:
        settle()
    else:
        try:
            waiter.loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the loop is closed; nobody awaits any more


class AsyncRequestScope:
    """What :meth:`Dispatcher.request_async` returns: awaitable (gives an
    executing :class:`apf.Request`) and an async context manager (finishes
    the request on exit)."""

    def __init__(self, dispatcher, digest, estimate, deadline_ns: int):
        self._dispatcher = dispatcher
        self._args = (digest, estimate, deadline_ns)
        self._request = None
        self._started = False
        # Where the request was classified, once admission decided (so a
        # caller whose await is cancelled can still answer or count it).
        self.decision = None

    async def _acquire(self):
        request = self._admit_now()
        return request if request is not None else await self._wait_queued()

    def _admit_now(self):
        """Admission, without waiting: the executing Request, or None when
        the request is queued (then :meth:`_wait_queued`). Raises Rejected."""
        from .dispatcher import Request

        if self._started:
            raise RuntimeError("a request scope can be awaited only once")
        self._started = True
        d = self._dispatcher
        decision, queued = d._admit(*self._args)
        self.decision = decision
        if queued:
            return None
        self._request = Request(d, decision)
        return self._request

    async def _wait_queued(self):
        """The wait of a request :meth:`_admit_now` queued. Cancelling it
        (once it has started) withdraws the request."""
        from .dispatcher import Request

        d, decision = self._dispatcher, self.decision
        outcome, reason = await d._async_hub().wait(decision.request)
        if outcome == Outcome.REJECTED:
            raise Rejected(reason, decision)
        decision = dataclasses.replace(decision, outcome=Outcome.EXECUTE)
        self._request = Request(d, decision)
        return self._request

    def __await__(self):
        return self._acquire().__await__()

    async def __aenter__(self):
        return await self._acquire()

    async def __aexit__(self, *exc) -> None:
        if self._request is not None:
            self._request.finish()


__all__ = ["AsyncRequestScope", "CompletionHub"]
