"""The dispatcher: classify a request, admit it, queue it, or reject it."""

from __future__ import annotations

import ctypes
import dataclasses
from typing import TYPE_CHECKING, Callable, Dict, NamedTuple, Optional, Sequence, Tuple, Union

from . import _bindings as b
from ._library import ApfError, ClosedError, call, invoke, lib
from ._managed import Managed
from .types import (
    AdaptiveOptions,
    AdaptiveState,
    Decision,
    Options,
    Outcome,
    RejectReason,
    Rejected,
    RequestDigest,
    WorkEstimate,
)

UINT64_MAX = (1 << 64) - 1
# A blocking wait returns this often so that signals (Ctrl-C) are seen.
_WAIT_SLICE_NS = 100_000_000
_ONE_SEAT = WorkEstimate()

Text = Union[str, bytes]


def _encode(text: Text) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _str_field(data: bytes):
    # A POINTER(c_char) into `data`; the caller keeps `data` alive.
    return ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_char))


def _read_str(s: b.apf_str) -> str:
    if not s.len:
        return ""
    return ctypes.string_at(s.ptr, s.len).decode("utf-8", "replace")


class Rejection(NamedTuple):
    """The 429 answer of a request that was not served: ``retry_after``
    seconds for the ``Retry-After`` header, and ``body``, a Kubernetes
    ``Status`` object (``application/json``)."""

    retry_after: int
    body: bytes


class ObserveAnswer(NamedTuple):
    """libapf's answer to an observability path."""

    status: int
    content_type: str
    body: bytes


def default_options() -> Options:
    """libapf's default options (``apf_dispatcher_options_default``)."""
    raw = b.apf_dispatcher_options()
    call("apf_dispatcher_options_default", ctypes.byref(raw))
    return Options(
        server_concurrency_limit=raw.server_concurrency_limit,
        service_time_guess_ns=raw.service_time_guess_ns,
        wait_limit_ns=raw.wait_limit_ns,
        borrowing_period_ns=raw.borrowing_period_ns,
        manual_clock=bool(raw.manual_clock),
    )


def default_adaptive_options() -> AdaptiveOptions:
    """libapf's default adaptive tuning (``apf_adaptive_options_default``)."""
    raw = b.apf_adaptive_options()
    call("apf_adaptive_options_default", ctypes.byref(raw))
    return AdaptiveOptions(**{name: getattr(raw, name) for name in vars(AdaptiveOptions())})


def _raw_adaptive(adaptive: AdaptiveOptions) -> b.apf_adaptive_options:
    if not isinstance(adaptive, AdaptiveOptions):
        raise TypeError(f"adaptive: expected AdaptiveOptions, got {type(adaptive).__name__}")
    raw = b.apf_adaptive_options()
    call("apf_adaptive_options_default", ctypes.byref(raw))
    for name, value in vars(adaptive).items():
        if value is not None:
            if value < 0:
                # ctypes would wrap it to a huge unsigned value.
                raise ApfError(b.APF_ERR_INVALID_PARAMETER,
                               f"apf_adaptive_options.{name}: must not be negative, not {value}")
            setattr(raw, name, value)
    return raw


def _raw_options(options: Optional[Options], overrides: dict) -> b.apf_dispatcher_options:
    raw = b.apf_dispatcher_options()
    call("apf_dispatcher_options_default", ctypes.byref(raw))
    merged = dict(vars(options)) if options is not None else {}
    unknown = set(overrides) - set(vars(Options()))
    if unknown:
        raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    merged.update(overrides)
    adaptive = merged.pop("adaptive", None)
    for name, value in merged.items():
        if value is not None:
            setattr(raw, name, value)
    if adaptive is not None:
        # ctypes keeps the struct alive as long as `raw` (its _objects).
        raw.adaptive = ctypes.pointer(_raw_adaptive(adaptive))
    return raw


class _Marshalled:
    """A digest and estimate as C structs, with the bytes they point into."""

    __slots__ = ("digest", "estimate", "_keep")

    def __init__(self, digest: RequestDigest, estimate: WorkEstimate):
        if not isinstance(digest, RequestDigest):
            raise TypeError(f"expected RequestDigest, got {type(digest).__name__}")
        keep = []
        d = b.apf_request_digest()

        for name, (ptr_field, len_field) in _DIGEST_FIELDS.items():
            data = _encode(getattr(digest, name))
            keep.append(data)
            setattr(d, ptr_field, _str_field(data))
            setattr(d, len_field, len(data))
        groups = [_encode(g) for g in digest.groups]
        keep.extend(groups)
        array = (b.apf_str * max(len(groups), 1))()
        for i, g in enumerate(groups):
            array[i].ptr = _str_field(g)
            array[i].len = len(g)
        keep.append(array)
        d.groups = ctypes.cast(array, ctypes.POINTER(b.apf_str))
        d.n_groups = len(groups)
        d.is_resource_request = bool(digest.is_resource_request)
        e = b.apf_work_estimate()
        e.initial_seats = estimate.initial_seats
        e.final_seats = estimate.final_seats
        e.additional_latency_nanos = estimate.additional_latency_ns
        self.digest = d
        self.estimate = e
        self._keep = keep


if TYPE_CHECKING:
    from .aio import AsyncRequestScope


# RequestDigest's strings and their (pointer, length) fields in C. ctypes
# would accept a misspelt field silently (as a plain attribute), so a test
# checks these against apf_request_digest._fields_.
_DIGEST_FIELDS = {
    "user": ("user", "user_len"),
    "verb": ("verb", "verb_len"),
    "api_group": ("api_group", "api_group_len"),
    "resource": ("resource", "resource_len"),
    "subresource": ("subresource", "subresource_len"),
    "namespace": ("namespace_", "namespace_len"),
    "name": ("name", "name_len"),
    "path": ("path", "path_len"),
}


def _decision(raw: b.apf_decision_ids, schema: Tuple[str, str],
              level: Tuple[str, str]) -> Decision:
    outcome = Outcome(raw.outcome)
    return Decision(
        outcome=outcome,
        reject_reason=RejectReason(raw.reject_reason) if outcome == Outcome.REJECTED else None,
        request=raw.request,
        flow_schema=schema[0],
        flow_schema_uid=schema[1],
        priority_level=level[0],
        priority_level_uid=level[1],
    )


_DECISION_IDS_SIZE = ctypes.sizeof(b.apf_decision_ids)


class Dispatcher(Managed):
    """An APF dispatcher (``apf_dispatcher``): thread-safe, usable from any
    thread and from asyncio.

    ``Dispatcher()`` runs Kubernetes' built-in configuration;
    ``Dispatcher(config=text)`` runs a YAML or JSON configuration. Options
    are an :class:`Options` and/or keyword overrides
    (``Dispatcher(manual_clock=True, server_concurrency_limit=10)``).
    ``close()`` (or ``with``) frees it; it is also freed when collected.
    """

    def __init__(self, config: Optional[Text] = None, options: Optional[Options] = None,
                 **overrides):
        raw = _raw_options(options, overrides)
        out = ctypes.POINTER(b.apf_dispatcher)()
        if config is None:
            call("apf_dispatcher_new_builtin", ctypes.byref(raw), ctypes.byref(out))
        else:
            text = _encode(config)
            call("apf_dispatcher_new_from_config", text, len(text), ctypes.byref(raw),
                 ctypes.byref(out))
        self._lib = lib()
        self._manual_clock = bool(raw.manual_clock)
        self._callback = None
        self._hub = None
        # (name, uid) by the ids of apf_start_request_ids: libapf never
        # reuses an id within a dispatcher, so entries never go stale.
        self._names: Dict[int, Tuple[str, str]] = {}
        self._set_ptr(out)

    @classmethod
    def builtin(cls, options: Optional[Options] = None, **overrides) -> "Dispatcher":
        """A dispatcher on Kubernetes' built-in configuration."""
        return cls(None, options, **overrides)

    @classmethod
    def from_config(cls, text: Text, options: Optional[Options] = None,
                    **overrides) -> "Dispatcher":
        """A dispatcher on a YAML or JSON configuration (FlowSchema and
        PriorityLevelConfiguration objects; mandatory ones are added)."""
        return cls(text, options, **overrides)

    def _delete(self, ptr) -> None:
        self._lib.apf_dispatcher_free(ptr)
        self._callback = None

    def _before_close(self) -> None:
        if self._hub is not None:
            self._hub.close()

    def _call(self, name: str, *args) -> None:
        ptr = self._enter()
        try:
            invoke(getattr(self._lib, name), name, ptr, *args)
        finally:
            self._exit()

    # --- configuration and clock ------------------------------------------
    def reconfigure(self, config: Text) -> None:
        """Switch to a new YAML/JSON configuration. On error (ApfError with
        ``APF_ERR_CONFIG``) the configuration in force is unchanged."""
        text = _encode(config)
        self._call("apf_dispatcher_reconfigure", text, len(text))

    def advance_clock(self, nanos: int) -> None:
        """Move the manual clock forward (dispatchers with ``manual_clock``
        only); timers due by then fire before this returns."""
        self._call("apf_dispatcher_advance_clock", nanos)

    def now(self) -> int:
        """The dispatcher clock's time in nanoseconds since its epoch."""
        out = ctypes.c_uint64()
        self._call("apf_dispatcher_now", ctypes.byref(out))
        return out.value

    @property
    def manual_clock(self) -> bool:
        return self._manual_clock

    def stats_text(self) -> str:
        """Per-level statistics as text."""
        return self._read_text("apf_dispatcher_stats_text")

    def adaptive_state(self) -> AdaptiveState:
        """The adaptive limit's state now (``apf_dispatcher_read_adaptive``);
        ``enabled`` is False under a fixed limit."""
        out = b.apf_adaptive_state()
        self._call("apf_dispatcher_read_adaptive", ctypes.byref(out))
        return AdaptiveState(
            enabled=bool(out.enabled), probing=bool(out.probing), limit=out.limit,
            estimate=out.estimate, min_latency_ns=out.min_latency_ns,
            latency_ns=out.latency_ns, gradient=out.gradient, probes=out.probes,
            updates=out.updates)

    # --- metrics and debug dumps -------------------------------------------
    def metrics_text(self) -> str:
        """Kubernetes' API Priority and Fairness metrics in the OpenMetrics
        text format, for Prometheus (serve it with
        :func:`apf.observe.metrics_content_type`)."""
        return self._read_text("apf_dispatcher_metrics_text")

    def metrics_text_with(self, prefix: str = "",
                          const_labels: Sequence[Tuple[str, str]] = ()) -> str:
        """:meth:`metrics_text` with ``prefix`` (and ``_``) before every
        metric name and ``const_labels`` (name, value pairs, in order; at
        most 64) on every series, for a service that is not an API server
        or runs several dispatchers. Invalid options raise :class:`ApfError`
        whose message names the one at fault."""
        keep = []  # the encoded bytes must outlive the call

        def c_str(s: str) -> "b.apf_str":
            data = s.encode("utf-8", "surrogateescape")
            keep.append(data)
            return b.apf_str(ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_char)), len(data))

        options = b.apf_metrics_options()
        call("apf_metrics_options_default", ctypes.byref(options))
        options.prefix = c_str(prefix)
        labels = list(const_labels)
        if labels:
            array = (b.apf_metrics_label * len(labels))(
                *(b.apf_metrics_label(c_str(n), c_str(v)) for n, v in labels))
            keep.append(array)
            options.const_labels = ctypes.cast(array, ctypes.POINTER(b.apf_metrics_label))
            options.const_labels_len = len(labels)
        return self._read_text("apf_dispatcher_metrics_text_with", ctypes.byref(options))

    def dump_priority_levels(self) -> str:
        """The table of Kubernetes' ``/debug/api_priority_and_fairness/
        dump_priority_levels``: one line per priority level."""
        return self._read_text("apf_dispatcher_dump_priority_levels")

    def dump_queues(self) -> str:
        """The table of Kubernetes' ``/debug/api_priority_and_fairness/
        dump_queues``: one line per queue of every level that queues."""
        return self._read_text("apf_dispatcher_dump_queues")

    def dump_requests(self, include_details: bool = False) -> str:
        """The table of Kubernetes' ``/debug/api_priority_and_fairness/
        dump_requests``: one line per waiting request; ``include_details``
        adds the user, verb, path and object columns."""
        return self._read_text("apf_dispatcher_dump_requests", bool(include_details))

    def _read_text(self, name: str, *args) -> str:
        """One of libapf's texts, handed over whole as an owned apf_text."""
        text = b.apf_text()
        self._call(name, *args, ctypes.byref(text))
        try:
            return ctypes.string_at(text.ptr, text.len).decode("utf-8", "replace")
        finally:
            lib().apf_text_free(ctypes.byref(text))

    def reject(self, priority_level: str, flow_schema: str, reason: RejectReason) -> "Rejection":
        """Count a request classified to ``priority_level`` / ``flow_schema``
        that was not served (rejected, timed out or cancelled while queued)
        and give its answer (``apf_dispatcher_reject``), the same in every
        libapf middleware: ``Retry-After`` adapted to the level's recent
        rejections as Kubernetes does, and a Kubernetes ``Status`` JSON
        body. Call it once per such request; the middlewares do."""
        level, schema = _encode(priority_level), _encode(flow_schema)
        retry_after = ctypes.c_uint64()
        text = b.apf_text()
        self._call("apf_dispatcher_reject", level, len(level), schema, len(schema),
                   int(reason), ctypes.byref(retry_after), ctypes.byref(text))
        try:
            body = ctypes.string_at(text.ptr, text.len)
        finally:
            lib().apf_text_free(ctypes.byref(text))
        return Rejection(retry_after.value, body)

    def observe(self, path: str, query: str = "") -> Optional["ObserveAnswer"]:
        """The answer to ``/metrics`` or one of Kubernetes' debug dump paths
        (``apf_dispatcher_observe``), or None for any other path."""
        p, q = _encode(path), _encode(query)
        status = ctypes.c_uint16()
        content_type, body = b.apf_text(), b.apf_text()
        self._call("apf_dispatcher_observe", p, len(p), q, len(q), ctypes.byref(status),
                   ctypes.byref(content_type), ctypes.byref(body))
        try:
            if status.value == 0:
                return None
            return ObserveAnswer(status.value,
                                 ctypes.string_at(content_type.ptr, content_type.len).decode(),
                                 ctypes.string_at(body.ptr, body.len))
        finally:
            lib().apf_text_free(ctypes.byref(content_type))
            lib().apf_text_free(ctypes.byref(body))

    # --- the raw request operations (one C function each) ------------------
    def start_request(self, digest: RequestDigest, estimate: WorkEstimate = _ONE_SEAT,
                      deadline_ns: int = 0) -> Decision:
        """Classify and decide (``apf_start_request``). A queued or executing
        request must later be finished, waited on, or cancelled by handle
        (``decision.request``); :meth:`request` does all that for you.
        ``deadline_ns`` (dispatcher clock, 0 = none) bounds the wait."""
        m = _Marshalled(digest, estimate)
        # The decision names the schema and level by id: decoding four C
        # strings per request cost more than two dict look-ups.
        out = b.apf_decision_ids(struct_size=_DECISION_IDS_SIZE)
        self._call("apf_start_request_ids", ctypes.byref(m.digest), ctypes.byref(m.estimate),
                   deadline_ns, ctypes.byref(out))
        names = self._names
        schema = names.get(out.flow_schema_id) or self._name(out.flow_schema_id)
        level = names.get(out.priority_level_id) or self._name(out.priority_level_id)
        return _decision(out, schema, level)

    def _name(self, id_: int) -> Tuple[str, str]:
        """The name and UID behind an id (``apf_dispatcher_name``), cached."""
        name, uid = b.apf_str(), b.apf_str()
        self._call("apf_dispatcher_name", id_, ctypes.byref(name), ctypes.byref(uid))
        pair = (_read_str(name), _read_str(uid))
        self._names[id_] = pair
        return pair

    def wait(self, request: int, timeout_ns: Optional[int] = None) -> Tuple[Outcome, Optional[RejectReason]]:
        """Block (without the GIL) until a queued request is decided or
        ``timeout_ns`` of real time passed (None: forever); the outcome is
        QUEUED if it is still waiting."""
        outcome = b.apf_outcome()
        reason = b.apf_reject_reason()
        timeout = UINT64_MAX if timeout_ns is None else timeout_ns
        self._call("apf_request_wait", request, timeout, ctypes.byref(outcome),
                   ctypes.byref(reason))
        return _outcome(outcome.value, reason.value)

    def poll(self, request: int) -> Tuple[Outcome, Optional[RejectReason]]:
        """The request's state now, without blocking."""
        outcome = b.apf_outcome()
        reason = b.apf_reject_reason()
        self._call("apf_request_poll", request, ctypes.byref(outcome), ctypes.byref(reason))
        return _outcome(outcome.value, reason.value)

    def cancel(self, request: int) -> bool:
        """Withdraw a queued request; the handle is retired either way.
        False if it had just been decided (a dispatch nobody was told of is
        finished at once). An executing request raises
        ``APF_ERR_REQUEST_EXECUTING``: finish it instead."""
        out = ctypes.c_bool()
        self._call("apf_request_cancel", request, ctypes.byref(out))
        return out.value

    def finish(self, request: int, end_ns: Optional[int] = None) -> None:
        """Release an executing request's seats; ``end_ns`` (dispatcher
        clock) is when it really ended (default: now)."""
        self._call("apf_finish", request, 0 if end_ns is None else end_ns)

    def release_seats(self, request: int, seats: int = 0) -> None:
        """Give back ``seats`` of an executing request's seats now while it
        keeps executing (0: every seat it still holds); its ``finish`` later
        gives back only the rest. A second release of all seats, or more
        than held, raises ``APF_ERR_INVALID_PARAMETER``; after the finish,
        ``APF_ERR_INVALID_HANDLE``."""
        if not 0 <= seats <= 0xFFFF_FFFF:
            raise ValueError(f"seats: {seats} is not a 32-bit unsigned count")
        self._call("apf_request_release_seats", request, seats)

    def finish_with_cost(self, request: int, cost: float, end_ns: Optional[int] = None) -> None:
        """:meth:`finish`, reporting what the request really cost in seats;
        a flow schema with ``apf.libapf.io/cost: learned`` gives later
        requests of the same schema, verb and resource seats from these
        reports. A cost that is not a finite number of 0 or more raises
        ``APF_ERR_INVALID_PARAMETER`` and the request is not finished."""
        self._call("apf_finish_with_cost", request, 0 if end_ns is None else end_ns, float(cost))

    def completion_fd(self) -> int:
        """A file descriptor, owned by the dispatcher, that becomes readable
        when a queued request is decided (see :meth:`take_completion`)."""
        out = ctypes.c_int()
        self._call("apf_dispatcher_completion_fd", ctypes.byref(out))
        return out.value

    def take_completion(self) -> Optional[int]:
        """The handle of a decided queued request, or None."""
        handle = ctypes.c_uint64()
        some = ctypes.c_bool()
        self._call("apf_dispatcher_take_completion", ctypes.byref(handle), ctypes.byref(some))
        return handle.value if some.value else None

    def set_completion_callback(self, fn: Optional[Callable[[int], None]]) -> None:
        """Call ``fn(handle)`` whenever a queued request is decided. It runs
        on a libapf thread and must be quick (hand the handle to your own
        loop); an exception in it is printed and ignored. None removes it."""
        if fn is None:
            callback = ctypes.cast(None, b.apf_completion_callback)
        else:
            def trampoline(_user, handle):
                fn(handle)

            callback = b.apf_completion_callback(trampoline)
        self._call("apf_dispatcher_set_completion_callback", callback, None)
        # The C side keeps the pointer: keep the Python object alive with it.
        self._callback = callback if fn is not None else None

    # --- the high-level request API ------------------------------------------
    def request(self, digest: RequestDigest, estimate: WorkEstimate = _ONE_SEAT, *,
                deadline_ns: int = 0, timeout_ns: Optional[int] = None) -> "RequestScope":
        """``with dispatcher.request(digest, estimate) as r:`` runs the body
        once the request may execute (waiting if it is queued) and finishes
        it on exit, also on an exception. A rejection raises
        :class:`Rejected` from the ``with`` line. ``timeout_ns`` (dispatcher
        clock) is a deadline relative to now."""
        return RequestScope(self, digest, estimate, self._deadline(deadline_ns, timeout_ns))

    def request_async(self, digest: RequestDigest, estimate: WorkEstimate = _ONE_SEAT, *,
                      deadline_ns: int = 0, timeout_ns: Optional[int] = None) -> "AsyncRequestScope":
        """The asyncio form: ``async with dispatcher.request_async(...) as
        r:``, or ``r = await dispatcher.request_async(...)`` then
        ``r.finish()``. A queued request is awaited on the event loop through
        the completion fd: no thread per waiter. Cancelling the awaiting
        task withdraws the request."""
        from .aio import AsyncRequestScope

        return AsyncRequestScope(self, digest, estimate, self._deadline(deadline_ns, timeout_ns))

    def _deadline(self, deadline_ns: int, timeout_ns: Optional[int]) -> int:
        if timeout_ns is None:
            return deadline_ns
        relative = self.now() + timeout_ns
        return min(deadline_ns, relative) if deadline_ns else relative

    def _admit(self, digest, estimate, deadline_ns) -> Tuple[Decision, bool]:
        """Start a request; True if it is queued. Raises Rejected."""
        decision = self.start_request(digest, estimate, deadline_ns)
        if decision.outcome == Outcome.REJECTED:
            raise Rejected(decision.reject_reason, decision)
        return decision, decision.outcome == Outcome.QUEUED

    def _wait_blocking(self, decision: Decision) -> None:
        """Wait for a queued request in slices (so signals get through);
        raises Rejected; on any exception the request is withdrawn."""
        try:
            while True:
                outcome, reason = self.wait(decision.request, _WAIT_SLICE_NS)
                if outcome != Outcome.QUEUED:
                    break
        except BaseException:
            self._abandon(decision.request)
            raise
        if self._hub is not None:
            # Once asyncio has switched the completion queue on, a blocking
            # waiter's completion lands there too: take it out.
            self._hub.drain()
        if outcome == Outcome.REJECTED:
            raise Rejected(reason, decision)

    def _abandon(self, request: int) -> None:
        """Withdraw a request whose waiter went away. libapf finishes at
        once a dispatch nobody was told about; a dispatch that was reported
        (the waiter died after learning it) is finished here."""
        if self.closed:
            return
        try:
            self.cancel(request)
        except ApfError as exc:
            if exc.status == b.APF_ERR_REQUEST_EXECUTING:
                self.finish(request)
            elif exc.status not in (b.APF_ERR_REQUEST_REJECTED, b.APF_ERR_INVALID_HANDLE):
                raise

    def _async_hub(self):
        if self._hub is None:
            from .aio import CompletionHub

            if self.closed:
                raise ClosedError("Dispatcher has been closed")
            self._hub = CompletionHub(self)
        return self._hub


def _outcome(outcome: int, reason: int) -> Tuple[Outcome, Optional[RejectReason]]:
    o = Outcome(outcome)
    return o, (RejectReason(reason) if o == Outcome.REJECTED else None)


class Request:
    """An executing request. ``finish()`` (idempotent) releases its seats;
    it is also finished by ``with`` exit and, as a last resort, when
    collected."""

    def __init__(self, dispatcher: Dispatcher, decision: Decision):
        self.dispatcher = dispatcher
        self.decision = decision
        # One token: list.pop() is atomic, so two threads finishing the same
        # request at once finish it once.
        self._unfinished = [True]

    @property
    def handle(self) -> int:
        return self.decision.request

    @property
    def flow_schema(self) -> str:
        return self.decision.flow_schema

    @property
    def flow_schema_uid(self) -> str:
        return self.decision.flow_schema_uid

    @property
    def priority_level(self) -> str:
        return self.decision.priority_level

    @property
    def priority_level_uid(self) -> str:
        return self.decision.priority_level_uid

    @property
    def finished(self) -> bool:
        return not self._unfinished

    def release_seats(self, seats: int = 0) -> None:
        """Give back ``seats`` of this request's seats now while it keeps
        running (0: all it still holds), e.g. a watch after its initial
        burst; see :meth:`Dispatcher.release_seats`."""
        self.dispatcher.release_seats(self.handle, seats)

    def finish(self, end_ns: Optional[int] = None) -> None:
        """Finish now, or with the actual end time ``end_ns`` (dispatcher
        clock) so that extra latency is accounted for. Idempotent; after
        the dispatcher's ``close()`` there is nothing left to finish."""
        try:
            self._unfinished.pop()
        except IndexError:
            return
        try:
            self.dispatcher.finish(self.handle, end_ns)
        except ClosedError:
            pass  # freeing the dispatcher finished every request

    def finish_with_cost(self, cost: float, end_ns: Optional[int] = None) -> None:
        """Finish, reporting the request's real cost in seats (see
        :meth:`Dispatcher.finish_with_cost`). A bad cost raises and leaves
        the request unfinished."""
        if not self._unfinished:
            return
        self.dispatcher.finish_with_cost(self.handle, cost, end_ns)
        try:
            self._unfinished.pop()
        except IndexError:
            pass

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def __del__(self) -> None:
        try:
            self.finish()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass

    def __repr__(self) -> str:
        state = "finished" if self.finished else "executing"
        return (f"<apf.Request {self.handle:#x} {state} level={self.priority_level!r} "
                f"schema={self.flow_schema!r}>")


class RequestScope:
    """What :meth:`Dispatcher.request` returns: a context manager."""

    def __init__(self, dispatcher: Dispatcher, digest: RequestDigest,
                 estimate: WorkEstimate, deadline_ns: int):
        self._dispatcher = dispatcher
        self._args = (digest, estimate, deadline_ns)
        self._request: Optional[Request] = None

    def __enter__(self) -> Request:
        if self._request is not None:
            raise RuntimeError("a request scope can be entered only once")
        decision, queued = self._dispatcher._admit(*self._args)
        if queued:
            self._dispatcher._wait_blocking(decision)
            decision = dataclasses.replace(decision, outcome=Outcome.EXECUTE)
        self._request = Request(self._dispatcher, decision)
        return self._request

    def __exit__(self, *exc) -> None:
        if self._request is not None:
            self._request.finish()


__all__ = [
    "Dispatcher",
    "Request",
    "RequestScope",
    "default_options",
    "UINT64_MAX",
]
