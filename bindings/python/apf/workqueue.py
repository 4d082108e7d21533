"""client-go's workqueue family, from libapf (``apf_workqueue_*``).

    import apf

    q = apf.Workqueue.two_lane(name="pods")
    q.add(b"default/web")                            # fast lane
    q.add_with_opts(b"default/db", lane=apf.Lane.SLOW)

    for key in q:                                    # until q.shut_down()
        reconcile(key)                               # done() follows each body

One ``Workqueue`` class covers the three orders (``Kind.FIFO``,
``Kind.TWO_LANE``, ``Kind.PRIORITY``). Keys are bytes (``str`` is encoded
as UTF-8 on the way in); ``get`` returns bytes. Durations are seconds
(``int``/``float``) or ``datetime.timedelta``, as in the standard library's
``queue`` and ``threading``.

``get`` follows ``queue.Queue``: it blocks, raises ``queue.Empty`` when a
``timeout`` passes, and raises :class:`ShutDown` once the queue is shut down
and empty (``queue.ShutDown`` of Python 3.13 is its base class there).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import enum
import queue as _queue
import threading
import time
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Sequence, Union

from . import _bindings as b
from ._library import ApfError, ClosedError, check, invoke, lib
from ._managed import Managed

__all__ = [
    "Empty",
    "Item",
    "Kind",
    "Lane",
    "RateLimiter",
    "ShutDown",
    "Workqueue",
    "bucket_rate_limiter",
    "default_controller_rate_limiter",
    "exponential_failure_rate_limiter",
    "fast_slow_rate_limiter",
    "item_bucket_rate_limiter",
    "max_of_rate_limiter",
]

Key = Union[bytes, bytearray, memoryview, str]
Seconds = Union[int, float, datetime.timedelta]

UINT64_MAX = (1 << 64) - 1
# A blocking get returns to Python this often, so that Ctrl-C is seen.
_WAIT_SLICE_NS = 100_000_000

Empty = _queue.Empty


class ShutDown(getattr(_queue, "ShutDown", Exception)):  # type: ignore[misc]
    """``get`` on a queue that is shut down and empty (or closed)."""


class Kind(enum.IntEnum):
    """How a queue orders its ready items."""

    FIFO = b.APF_WORKQUEUE_FIFO
    TWO_LANE = b.APF_WORKQUEUE_TWO_LANE
    PRIORITY = b.APF_WORKQUEUE_PRIORITY


class Lane(enum.IntEnum):
    """A lane of a two-lane queue: slow items wait while fast ones queue."""

    FAST = b.APF_WORKQUEUE_LANE_FAST
    SLOW = b.APF_WORKQUEUE_LANE_SLOW


@dataclass(frozen=True)
class Item:
    """An item handed out by ``get_item``: its key (a copy), the lane and
    priority it came with, and the handle ``done`` releases."""

    key: bytes
    lane: Lane
    priority: int
    handle: int


def _nanos(seconds: Seconds) -> int:
    if isinstance(seconds, datetime.timedelta):
        return (seconds.days * 86_400 + seconds.seconds) * 1_000_000_000 + \
            seconds.microseconds * 1_000
    if not isinstance(seconds, (int, float)) or seconds != seconds:  # NaN
        raise TypeError(f"a duration in seconds, not {seconds!r}")
    return max(0, min(UINT64_MAX, round(seconds * 1_000_000_000)))


def _key(key: Key) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"a key is bytes or str, not {type(key).__name__}")


_U8P = ctypes.POINTER(ctypes.c_uint8)


def _ptr(data: bytes):
    # Points into `data` (no copy); libapf copies what it keeps.
    return ctypes.cast(data, _U8P)


# --- rate limiters ---------------------------------------------------------------


class RateLimiter:
    """A description of one of client-go's rate limiters, made by the
    factories below. Each queue built with it gets its own state on its own
    clock, so one description may serve many queues."""

    __slots__ = ("_kind", "_args", "_children")

    def __init__(self, kind: str, args: tuple = (), children: Sequence["RateLimiter"] = ()):
        self._kind = kind
        self._args = args
        self._children = tuple(children)

    def __repr__(self) -> str:
        inner = [repr(a) for a in self._args] + [repr(c) for c in self._children]
        return f"{self._kind}_rate_limiter({', '.join(inner)})"

    def _build(self):
        """A new ``apf_rate_limiter``; the caller frees it."""
        f = lib()
        out = ctypes.POINTER(b.apf_rate_limiter)()
        if self._kind == "max_of":
            built = []
            try:
                for child in self._children:
                    built.append(child._build())
                array = (ctypes.POINTER(b.apf_rate_limiter) * max(1, len(built)))(*built)
                invoke(f.apf_rate_limiter_new_max_of, "apf_rate_limiter_new_max_of",
                       array, len(built), ctypes.byref(out))
            finally:
                for c in built:
                    f.apf_rate_limiter_free(c)
            return out
        name = f"apf_rate_limiter_new_{self._kind}"
        invoke(getattr(f, name), name, *self._args, ctypes.byref(out))
        return out


def default_controller_rate_limiter() -> RateLimiter:
    """client-go's default: the larger of a per-item exponential backoff
    from 5 ms to 1000 s and a 10 qps / burst 100 token bucket."""
    return RateLimiter("default")


def exponential_failure_rate_limiter(base: Seconds, max_delay: Seconds) -> RateLimiter:
    """An item's n-th failure waits ``base * 2**(n-1)``, at most ``max_delay``."""
    return RateLimiter("exponential", (_nanos(base), _nanos(max_delay)))


def bucket_rate_limiter(qps: float, burst: int) -> RateLimiter:
    """One token bucket shared by all items."""
    return RateLimiter("token_bucket", (float(qps), _u32(burst)))


def item_bucket_rate_limiter(qps: float, burst: int) -> RateLimiter:
    """A token bucket per item."""
    return RateLimiter("item_token_bucket", (float(qps), _u32(burst)))


def fast_slow_rate_limiter(fast: Seconds, slow: Seconds, max_fast_attempts: int) -> RateLimiter:
    """``fast`` for an item's first ``max_fast_attempts`` failures, then ``slow``."""
    return RateLimiter("fast_slow", (_nanos(fast), _nanos(slow), _u32(max_fast_attempts)))


def max_of_rate_limiter(*limiters: RateLimiter) -> RateLimiter:
    """The longest delay of all ``limiters`` (each counts the failure)."""
    for limiter in limiters:
        if not isinstance(limiter, RateLimiter):
            raise TypeError(f"expected RateLimiter, got {type(limiter).__name__}")
    return RateLimiter("max_of", (), limiters)


def _u32(n: int) -> int:
    if not isinstance(n, int) or not 0 <= n <= 0xFFFF_FFFF:
        raise ValueError(f"expected an integer in [0, 2**32), got {n!r}")
    return n


# --- the queue -------------------------------------------------------------------


class Workqueue(Managed):
    """client-go's workqueue (``apf_workqueue``): thread-safe.

    The rules: an item added several times before a worker takes it is
    queued once; an item added while it is being processed is queued again
    by ``done`` and never handed to two workers at once; after
    ``shut_down`` adds are ignored and ``get`` hands out what is queued,
    then raises :class:`ShutDown`.

    ``Workqueue(kind, name=..., manual_clock=..., rate_limiter=...,
    limiter_state_capacity=..., limiter_idle_expiry=..., capacity=...)``:
    ``name`` labels the metrics (an unnamed queue exports none);
    ``rate_limiter`` None is :func:`default_controller_rate_limiter`; a
    per-item limiter remembers at most ``limiter_state_capacity`` keys per
    generation (0: 2**20) and forgets keys idle ``limiter_idle_expiry``
    seconds (0: twice its longest delay, at least a minute); ``capacity``
    presizes the queue's index (0: grow as needed). ``close()`` (or ``with``)
    shuts it down and frees it; so does garbage collection.
    """

    def __init__(self, kind: Kind = Kind.FIFO, *, name: str = "", manual_clock: bool = False,
                 rate_limiter: Optional[RateLimiter] = None, limiter_state_capacity: int = 0,
                 limiter_idle_expiry: Seconds = 0, capacity: int = 0):
        f = lib()
        kind = Kind(kind)
        if rate_limiter is not None and not isinstance(rate_limiter, RateLimiter):
            raise TypeError(f"expected RateLimiter, got {type(rate_limiter).__name__}")
        opts = b.apf_workqueue_options()
        check(f.apf_workqueue_options_default(ctypes.byref(opts)), "apf_workqueue_options_default")
        name_bytes = name.encode("utf-8")
        opts.kind = kind
        opts.manual_clock = bool(manual_clock)
        opts.name = ctypes.cast(ctypes.c_char_p(name_bytes), ctypes.POINTER(ctypes.c_char))
        opts.name_len = len(name_bytes)
        opts.limiter_state_capacity = limiter_state_capacity
        opts.limiter_idle_expiry_nanos = _nanos(limiter_idle_expiry)
        opts.capacity = capacity
        built = rate_limiter._build() if rate_limiter is not None else None
        out = ctypes.POINTER(b.apf_workqueue)()
        try:
            if built is not None:
                opts.limiter = built
            invoke(f.apf_workqueue_new, "apf_workqueue_new", ctypes.byref(opts), ctypes.byref(out))
        finally:
            if built is not None:
                f.apf_rate_limiter_free(built)
        self._lib = f
        self._kind = kind
        self.name = name
        # Keys being processed and their handles, so that done(key) works as
        # in client-go: a key is processed by one worker at a time.
        self._processing: Dict[bytes, int] = {}
        self._processing_lock = threading.Lock()
        self._set_ptr(out)

    @classmethod
    def fifo(cls, **kwargs) -> "Workqueue":
        """A FIFO queue (client-go's rate-limiting queue)."""
        return cls(Kind.FIFO, **kwargs)

    @classmethod
    def two_lane(cls, **kwargs) -> "Workqueue":
        """A queue with a fast and a slow lane."""
        return cls(Kind.TWO_LANE, **kwargs)

    @classmethod
    def priority(cls, **kwargs) -> "Workqueue":
        """controller-runtime's priority queue: highest priority first, FIFO
        within a priority."""
        return cls(Kind.PRIORITY, **kwargs)

    @property
    def kind(self) -> Kind:
        return self._kind

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"len={self.len()}"
        return f"<Workqueue {self._kind.name} {self.name!r} {state}>"

    # --- lifetime ----------------------------------------------------------------
    def _delete(self, ptr) -> None:
        self._lib.apf_workqueue_free(ptr)

    def close(self) -> None:
        """Shut down (unless already shutting down), then free once no call
        is inside libapf. Blocked ``get`` calls raise :class:`ShutDown`;
        other uses raise ``ClosedError``, except ``done``, which works until
        the queue is freed: a ``shut_down_with_drain`` in progress keeps it
        (close does not cut the drain short) and the dones it waits for end
        it."""
        if getattr(self, "_guard", None) is not None and not self._closed:
            with contextlib.suppress(ClosedError):
                # A second shutdown would end a drain's wait early.
                if not self.shutting_down():
                    self.shut_down()
        super().close()

    def _enter_even_closed(self):
        with self._guard:
            if self._ptr is None:
                raise ClosedError("Workqueue has been freed")
            self._users += 1
            return self._ptr

    def _call(self, name: str, *args) -> None:
        ptr = self._enter()
        try:
            invoke(getattr(self._lib, name), name, ptr, *args)
        finally:
            self._exit()

    # --- adding ------------------------------------------------------------------
    def add(self, key: Key) -> None:
        """Queue ``key`` (once, however often it is added before a get)."""
        data = _key(key)
        self._call("apf_workqueue_add", _ptr(data), len(data))

    def add_after(self, key: Key, delay: Seconds) -> None:
        """Add ``key`` once ``delay`` has passed (at once for 0 or less); a
        waiting key keeps the earlier ready time."""
        data = _key(key)
        self._call("apf_workqueue_add_after", _ptr(data), len(data), _nanos(delay))

    def add_rate_limited(self, key: Key) -> None:
        """Add ``key`` after the rate limiter's delay (counts a requeue)."""
        data = _key(key)
        self._call("apf_workqueue_add_rate_limited", _ptr(data), len(data))

    def add_with_opts(self, key: Key, *, after: Seconds = 0, rate_limited: bool = False,
                      lane: Optional[Lane] = None, priority: Optional[int] = None) -> None:
        """Add with a delay, the rate limiter, a ``lane`` (two-lane queues)
        or a ``priority`` (priority queues; higher first). A lane or priority
        the queue does not have raises ``ApfError`` (``APF_ERR_WORKQUEUE_WRONG_KIND``).
        On a priority queue, a rate-limited add with ``after`` waits for the
        shorter of the two."""
        data = _key(key)
        opts = b.apf_workqueue_add_options()
        check(self._lib.apf_workqueue_add_options_default(ctypes.byref(opts)), "apf_workqueue_add_options_default")
        opts.after_nanos = _nanos(after)
        opts.rate_limited = bool(rate_limited)
        opts.lane = Lane(lane) if lane is not None else Lane.FAST
        opts.has_priority = priority is not None
        opts.priority = priority if priority is not None else 0
        self._call("apf_workqueue_add_with_options", _ptr(data), len(data), ctypes.byref(opts))

    # --- getting -----------------------------------------------------------------
    def get_item(self, timeout: Optional[Seconds] = None) -> Item:
        """The next ready :class:`Item`, waiting up to ``timeout`` seconds
        (None: for ever) with the GIL released. Raises ``queue.Empty`` when
        the timeout passes and :class:`ShutDown` once the queue is shut down
        and empty."""
        deadline = None if timeout is None else time.monotonic_ns() + _nanos(timeout)
        while True:
            wait_ns = _WAIT_SLICE_NS
            if deadline is not None:
                wait_ns = min(wait_ns, max(0, deadline - time.monotonic_ns()))
            # A wait of 0 takes a ready item without waiting.
            item = self._get("apf_workqueue_get", wait_ns)
            if item is not None:
                return item
            if deadline is not None and time.monotonic_ns() >= deadline:
                raise Empty

    def get(self, timeout: Optional[Seconds] = None) -> bytes:
        """The next ready key (see :meth:`get_item`); ``done(key)`` ends its
        processing."""
        return self.get_item(timeout).key

    def try_get_item(self) -> Optional[Item]:
        """The next ready item without waiting, or None. Raises
        :class:`ShutDown` once the queue is shut down and empty."""
        return self._get("apf_workqueue_try_get")

    def try_get(self) -> Optional[bytes]:
        """The next ready key without waiting, or None (see try_get_item)."""
        item = self.try_get_item()
        return None if item is None else item.key

    def _get(self, name: str, *args) -> Optional[Item]:
        raw = b.apf_workqueue_item()
        try:
            ptr = self._enter()
        except ClosedError:
            raise ShutDown("Workqueue has been closed") from None
        try:
            status = getattr(self._lib, name)(ptr, *args, ctypes.byref(raw))
            if status == b.APF_OK and raw.result == b.APF_WORKQUEUE_ITEM:
                # Copied before anything can release libapf's copy.
                key = ctypes.string_at(raw.key, raw.key_len) if raw.key_len else b""
        finally:
            self._exit()
        if status != b.APF_OK:
            check(status, name)
        if raw.result == b.APF_WORKQUEUE_SHUT_DOWN:
            raise ShutDown("Workqueue is shut down")
        if raw.result != b.APF_WORKQUEUE_ITEM:
            return None  # empty, or the wait timed out
        item = Item(key, Lane(raw.lane), raw.priority, raw.item)
        with self._processing_lock:
            self._processing[key] = raw.item
        return item

    def done(self, key: Union[Key, Item]) -> None:
        """End the processing of a key (or Item) that get handed out; if it
        was added meanwhile it is queued again. A key not being processed,
        or an Item done twice, raises ``ApfError`` with
        ``APF_ERR_INVALID_HANDLE``."""
        if isinstance(key, Item):
            handle = key.handle
            with self._processing_lock:
                if self._processing.get(key.key) == handle:
                    del self._processing[key.key]
        else:
            data = _key(key)
            with self._processing_lock:
                handle = self._processing.pop(data, None)
            if handle is None:
                raise ApfError(b.APF_ERR_INVALID_HANDLE,
                               f"{data!r} is not being processed", "done")
        ptr = self._enter_even_closed()
        try:
            status = self._lib.apf_workqueue_done(ptr, handle)
        finally:
            self._exit()
        if status != b.APF_OK:
            check(status, "apf_workqueue_done")

    @contextlib.contextmanager
    def processing(self, timeout: Optional[Seconds] = None) -> Iterator[bytes]:
        """``with q.processing() as key:`` gets a key and calls ``done`` when
        the block ends, however it ends."""
        item = self.get_item(timeout)
        try:
            yield item.key
        finally:
            self.done(item)

    def __iter__(self) -> Iterator[bytes]:
        """Keys until the queue is shut down and empty; each is ``done`` when
        the loop asks for the next one or leaves (``break``, an exception:
        when the iterator is closed or collected)."""
        while True:
            try:
                item = self.get_item()
            except ShutDown:
                return
            try:
                yield item.key
            finally:
                self.done(item)

    # --- rate limiter ------------------------------------------------------------
    def forget(self, key: Key) -> None:
        """Clear ``key``'s rate-limiter history (``done`` is still needed)."""
        data = _key(key)
        self._call("apf_workqueue_forget", _ptr(data), len(data))

    def num_requeues(self, key: Key) -> int:
        """How often the rate limiter delayed ``key`` since it was forgotten."""
        data = _key(key)
        out = ctypes.c_uint32()
        self._call("apf_workqueue_num_requeues", _ptr(data), len(data), ctypes.byref(out))
        return out.value

    # --- state -------------------------------------------------------------------
    def len(self) -> int:
        """Ready items (client-go's Len): not the waiting or processing ones.
        (A method, not ``__len__``: iterating a queue blocks until it is
        shut down, so it has no length in Python's sense.)"""
        out = ctypes.c_size_t()
        self._call("apf_workqueue_len", ctypes.byref(out))
        return out.value

    def waiting_len(self) -> int:
        """Delayed items not yet ready."""
        out = ctypes.c_size_t()
        self._call("apf_workqueue_waiting_len", ctypes.byref(out))
        return out.value

    def processing_len(self) -> int:
        """Items handed out and not yet done."""
        out = ctypes.c_size_t()
        self._call("apf_workqueue_processing", ctypes.byref(out))
        return out.value

    def lane_len(self, lane: Lane) -> int:
        """Ready items in one lane of a two-lane queue (``ApfError`` with
        ``APF_ERR_WORKQUEUE_WRONG_KIND`` for other kinds)."""
        out = ctypes.c_size_t()
        self._call("apf_workqueue_lane_len", Lane(lane), ctypes.byref(out))
        return out.value

    def shut_down(self) -> None:
        """Ignore adds from now on, drop the waiting delays, and let get
        hand out what is queued before it raises ShutDown."""
        self._call("apf_workqueue_shut_down")

    def shut_down_with_drain(self) -> None:
        """shut_down, then wait (GIL released) until every item being
        processed is done."""
        self._call("apf_workqueue_shut_down_with_drain")

    def shutting_down(self) -> bool:
        """Whether shut_down was called (True once closed)."""
        out = ctypes.c_bool()
        try:
            self._call("apf_workqueue_shutting_down", ctypes.byref(out))
        except ClosedError:
            return True
        return out.value

    def advance_clock(self, seconds: Seconds) -> None:
        """Move a manual clock forward (``manual_clock=True`` queues only),
        making due delays ready."""
        if isinstance(seconds, (int, float)) and seconds < 0:
            raise ValueError("cannot move the clock backwards")
        self._call("apf_workqueue_advance_clock", _nanos(seconds))

    def metrics_text(self) -> str:
        """client-go's workqueue metrics of this queue, Prometheus text."""
        text = b.apf_text()
        ptr = self._enter()
        try:
            status = self._lib.apf_workqueue_metrics_text(ptr, ctypes.byref(text))
        finally:
            self._exit()
        if status != b.APF_OK:
            check(status, "apf_workqueue_metrics_text")
        try:
            return ctypes.string_at(text.ptr, text.len).decode("utf-8")
        finally:
            self._lib.apf_text_free(ctypes.byref(text))
