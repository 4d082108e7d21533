"""The ASGI middleware with hand-made scopes."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import SECOND, digest, seat_is_free

import apf
import apf.asgi


async def classify(scope):
    headers = dict(scope.get("headers", []))
    user = headers.get(b"x-remote-user")
    if user is None:
        return None
    return digest(user.decode(), scope["method"].lower())


def scope_for(user=None, path="/api/v1/pods"):
    headers = [(b"x-remote-user", user.encode())] if user else []
    return {"type": "http", "method": "GET", "path": path, "headers": headers}


async def call(app, scope):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def hello(seen=None, gate=None):
    async def app(scope, receive, send):
        if seen is not None:
            seen.append(scope["path"])
        if gate is not None:
            await gate.wait()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hello"})
    return app


def test_admitted_request_gets_the_uid_headers(dispatcher):
    status, headers, body = asyncio.run(
        call(apf.asgi.Middleware(hello(), dispatcher, classify), scope_for("alice")))
    assert (status, body) == (200, b"hello")
    assert headers["x-kubernetes-pf-flowschema-uid"] == "uid-fs-tight"
    assert headers["x-kubernetes-pf-prioritylevel-uid"] == "uid-pl-tight"
    assert seat_is_free(dispatcher)


def test_built_in_objects_send_their_uid_headers(builtin):
    """Built-in objects have no metadata.uid; libapf derives a stable one,
    and the headers carry it (the README says so)."""
    status, headers, _ = asyncio.run(
        call(apf.asgi.Middleware(hello(), builtin, classify), scope_for("alice")))
    assert status == 200
    assert headers["x-kubernetes-pf-flowschema-uid"]
    assert headers["x-kubernetes-pf-prioritylevel-uid"]


def test_rejected_request_gets_429(dispatcher):
    held = dispatcher.start_request(digest("bob"))
    seen = []
    status, headers, body = asyncio.run(
        call(apf.asgi.Middleware(hello(seen), dispatcher, classify),
             scope_for("bob")))
    assert status == 429
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "application/json"
    assert headers["x-kubernetes-pf-prioritylevel-uid"] == "uid-pl-refuse"
    assert json.loads(body)["code"] == 429
    assert seen == []
    dispatcher.finish(held.request)


def test_queued_requests_are_served_in_turn_on_one_loop(dispatcher):
    async def main():
        gate = asyncio.Event()
        app = apf.asgi.Middleware(hello(gate=gate), dispatcher, classify)
        tasks = [asyncio.create_task(call(app, scope_for("alice", f"/{i}"))) for i in range(50)]
        await asyncio.sleep(0.05)
        assert dispatcher._hub.pending == 49, "one runs, 49 wait on the loop"
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert [r[0] for r in results] == [200] * 50

    asyncio.run(main())
    assert seat_is_free(dispatcher)


def test_disconnect_while_queued_withdraws_the_request(dispatcher):
    _disconnect_while_queued(dispatcher)


def _disconnect_while_queued(dispatcher):
    """A queued request whose client goes away; gives its level and schema."""

    async def main():
        held = dispatcher.start_request(digest("carol"))
        app = apf.asgi.Middleware(hello(), dispatcher, classify)
        task = asyncio.create_task(call(app, scope_for("carol")))
        await asyncio.sleep(0.05)
        assert dispatcher._hub.pending == 1
        task.cancel()  # what a server does when the client goes away
        with pytest.raises(asyncio.CancelledError):
            await task
        assert dispatcher._hub.pending == 0
        dispatcher.finish(held.request)
        return held.priority_level, held.flow_schema

    level, schema = asyncio.run(main())
    assert seat_is_free(dispatcher, "carol")
    return level, schema


def test_http_disconnect_while_queued_withdraws_the_request(dispatcher):
    """uvicorn's way: the task is not cancelled, only http.disconnect comes."""

    async def main():
        held = dispatcher.start_request(digest("carol"))
        seen = []
        gone = asyncio.Event()
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            seen.append(message)

        app = apf.asgi.Middleware(hello(seen), dispatcher, classify)
        task = asyncio.create_task(app(scope_for("carol"), receive, send))
        await asyncio.sleep(0.05)
        assert dispatcher._hub.pending == 1
        gone.set()
        await asyncio.wait_for(task, 5)  # ends, not cancelled
        assert dispatcher._hub.pending == 0 and seen == []
        dispatcher.finish(held.request)
        return held.priority_level, held.flow_schema

    asyncio.run(main())
    assert seat_is_free(dispatcher, "carol")
    cancelled = [line for line in dispatcher.metrics_text().splitlines()
                 if line.startswith("apiserver_flowcontrol_rejected_requests_total")
                 and 'priority_level="short"' in line and 'reason="cancelled"' in line]
    assert len(cancelled) == 1 and cancelled[0].endswith(" 1"), cancelled


def test_disconnects_while_queued_count_toward_retry_after(dispatcher):
    """Three requests not served in one second (cancelled by their clients)
    double the next second's Retry-After, as every middleware counts them."""
    for _ in range(3):
        level, schema = _disconnect_while_queued(dispatcher)
    dispatcher.advance_clock(SECOND)
    assert dispatcher.reject(level, schema, apf.RejectReason.QUEUE_FULL).retry_after == 2


def test_app_exception_finishes(dispatcher):
    async def broken(scope, receive, send):
        raise ValueError("boom")

    with pytest.raises(ValueError):
        asyncio.run(call(apf.asgi.Middleware(broken, dispatcher, classify), scope_for("alice")))
    assert seat_is_free(dispatcher)


def test_non_http_scopes_and_unclassified_pass_through(dispatcher):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    mw = apf.asgi.Middleware(app, dispatcher, classify)

    async def main():
        await mw({"type": "lifespan"}, None, None)
        return await call(mw, scope_for(None))

    status, headers, _ = asyncio.run(main())
    assert seen == ["lifespan", "http"]
    assert status == 204 and "x-kubernetes-pf-flowschema-uid" not in headers
