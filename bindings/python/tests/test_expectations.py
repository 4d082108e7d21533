"""The shared middleware expectations (tests/data/middleware-expectations.json
at the repository root; see its comment), which the Rust tower layer and the
Go net/http middleware meet too, against the WSGI and ASGI middlewares with
their ready metrics and dump answers (``serve_metrics_and_dumps``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

import apf
import apf.asgi
import apf.wsgi

DOC = json.loads((Path(__file__).resolve().parents[3] / "tests" / "data"
                  / "middleware-expectations.json").read_text())
GROUPS = ["tenants", "system:authenticated"]


def _digest(method, path, query, user):
    return dataclasses.replace(apf.parse_path(method, path, query), user=user, groups=GROUPS)


def wsgi_app(dispatcher):
    def ok(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"ok\n"]

    def classify(environ):
        return _digest(environ["REQUEST_METHOD"], environ["PATH_INFO"],
                       environ.get("QUERY_STRING", ""), environ.get("HTTP_X_REMOTE_USER", ""))

    app = apf.wsgi.Middleware(ok, dispatcher, classify, serve_metrics_and_dumps=True)

    def request(method, path, user):
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "",
                   "HTTP_X_REMOTE_USER": user, "wsgi.input": None}
        seen = {}

        def start_response(status, headers, exc_info=None):
            seen["status"] = int(status.split()[0])
            seen["headers"] = headers

        body = app(environ, start_response)
        try:
            data = b"".join(body)
        finally:
            close = getattr(body, "close", None)
            if close:
                close()
        return seen["status"], seen["headers"], data

    return request


def asgi_app(dispatcher):
    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"ok\n"})

    def classify(scope):
        user = dict(scope["headers"]).get(b"x-remote-user", b"").decode()
        return _digest(scope["method"], scope["path"], scope["query_string"].decode(), user)

    app = apf.asgi.Middleware(ok, dispatcher, classify, serve_metrics_and_dumps=True)

    def request(method, path, user):
        scope = {"type": "http", "method": method, "path": path, "query_string": b"",
                 "headers": [(b"x-remote-user", user.encode())]}
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        asyncio.run(app(scope, receive, send))
        start = sent[0]
        headers = [(k.decode(), v.decode()) for k, v in start["headers"]]
        return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])

    return request


def check(step, status, headers, body, expect):
    def values(name):
        return [v for k, v in headers if k.lower() == name.lower()]

    text = body.decode()
    assert status == expect["status"], f"{step}: status (body {text!r})"
    for name, value in expect.get("headers", {}).items():
        assert values(name) == [value], f"{step}: header {name}"
    for name in expect.get("absent_headers", []):
        assert values(name) == [], f"{step}: header {name} should be absent"
    if "body" in expect:
        assert text == expect["body"], f"{step}: body"
    if "body_starts_with" in expect:
        assert text.startswith(expect["body_starts_with"]), f"{step}: body {text!r}"


@pytest.mark.parametrize("make_app", [wsgi_app, asgi_app], ids=["wsgi", "asgi"])
def test_the_middleware_meets_the_shared_expectations(make_app):
    dispatcher = apf.Dispatcher.from_config(
        DOC["config"], server_concurrency_limit=DOC["server_concurrency_limit"],
        wait_limit_ns=DOC["wait_limit_seconds"] * 1_000_000_000, manual_clock=True)
    request = make_app(dispatcher)
    held = []
    assert len(DOC["steps"]) >= 10
    try:
        for step in DOC["steps"]:
            name = step["name"]
            if "request" in step:
                r = step["request"]
                check(name, *request(r["method"], r["path"], r["user"]), step["expect"])
            elif "hold" in step:
                digest = _digest("GET", "/api/v1/pods", "", step["hold"]["user"])
                decision = dispatcher.start_request(digest)
                assert decision.outcome == apf.Outcome.EXECUTE, name
                held.append(decision.request)
            elif "release" in step:
                while held:
                    dispatcher.finish(held.pop())
            elif "advance_seconds" in step:
                dispatcher.advance_clock(step["advance_seconds"] * 1_000_000_000)
            else:
                pytest.fail(f"unknown step {step}")
    finally:
        for h in held:
            dispatcher.finish(h)
        dispatcher.close()
