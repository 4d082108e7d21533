"""The ASGI application tests/test_asgi_servers.py runs under real servers
(uvicorn, hypercorn): libapf's middleware, on the test configuration, in
front of an app that holds `/hold` until `/control/release`, echoes request
bodies, and remembers what it served. `/control/*` is not classified (it
passes through), so the test can look inside while the level is full."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import digest, make_dispatcher, stats  # noqa: E402

import apf.asgi  # noqa: E402

dispatcher = make_dispatcher()
served: list = []
_release = None


def _release_event() -> asyncio.Event:
    global _release
    if _release is None:
        _release = asyncio.Event()
    return _release


async def _read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def _reply(send, body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def inner(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/control/release":
        _release_event().set()
        await _reply(send, b"released")
        return
    if path == "/control/state":
        level = stats(dispatcher).get("tight", {})
        cancelled = [line for line in dispatcher.metrics_text().splitlines()
                     if line.startswith("apiserver_flowcontrol_rejected_requests_total")
                     and 'priority_level="tight"' in line and 'reason="cancelled"' in line]
        state = {"served": served, "requests_live": stats(dispatcher)[""]["requests_live"],
                 "level": level, "cancelled": cancelled}
        await _reply(send, json.dumps(state).encode())
        return
    served.append(path)
    body = await _read_body(receive)
    if path.endswith("/hold"):
        await _release_event().wait()
    await _reply(send, body)


def classify(scope):
    if scope["path"].startswith("/control/"):
        return None
    return digest("alice")  # level "tight": one seat, then a queue


app = apf.asgi.Middleware(inner, dispatcher, classify)
