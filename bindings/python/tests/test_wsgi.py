"""The WSGI middleware, with hand-made environs and with wsgiref's server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

import pytest

from conftest import SECOND, digest, seat_is_free, settle

import apf
import apf.wsgi


def classify(environ):
    user = environ.get("HTTP_X_REMOTE_USER")
    if user is None:
        return None  # not subject to flow control
    return digest(user, environ["REQUEST_METHOD"].lower())


def environ_for(user=None, path="/api/v1/pods"):
    env = {"PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": ""}
    if user is not None:
        env["HTTP_X_REMOTE_USER"] = user
    setup_testing_defaults(env)
    return env


class Response:
    def __init__(self, app, environ):
        self.status = None
        self.headers = None
        result = app(environ, self.start_response)
        try:
            self.body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()

    def start_response(self, status, headers, exc_info=None):
        self.status = status
        self.headers = dict(headers)
        return lambda data: None


def hello(seen=None):
    def app(environ, start_response):
        if seen is not None:
            seen.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]
    return app


def test_admitted_request_gets_the_uid_headers(dispatcher):
    app = validator(apf.wsgi.Middleware(hello(), dispatcher, classify))
    r = Response(app, environ_for("alice"))
    assert r.status == "200 OK"
    assert r.body == b"hello"
    assert r.headers["X-Kubernetes-PF-FlowSchema-UID"] == "uid-fs-tight"
    assert r.headers["X-Kubernetes-PF-PriorityLevel-UID"] == "uid-pl-tight"
    assert seat_is_free(dispatcher)


def test_rejected_request_gets_429_with_retry_after(dispatcher):
    held = dispatcher.start_request(digest("bob"))
    seen = []
    app = validator(apf.wsgi.Middleware(hello(seen), dispatcher, classify))
    r = Response(app, environ_for("bob"))
    assert r.status == "429 Too Many Requests"
    assert r.headers["Retry-After"] == "1"
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["X-Kubernetes-PF-FlowSchema-UID"] == "uid-fs-refuse"
    assert r.headers["X-Kubernetes-PF-PriorityLevel-UID"] == "uid-pl-refuse"
    status = json.loads(r.body)
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 429, "TooManyRequests")
    assert status["details"]["retryAfterSeconds"] == 1
    assert status["message"].endswith('(priority level "refuse", flow schema "refuse")')
    assert status["details"]["causes"][0]["reason"] == "concurrency-limit"
    assert seen == [], "the application never saw the rejected request"
    dispatcher.finish(held.request)


def test_retry_after_grows_with_the_levels_rejections(dispatcher):
    """libapf's rule, as Kubernetes': at least 3 × Retry-After rejections in
    the last Retry-After seconds double it."""
    held = [dispatcher.start_request(digest("carol")) for _ in range(3)]
    app = apf.wsgi.Middleware(hello(), dispatcher, classify)
    for _ in range(3):
        r = Response(app, environ_for("carol"))
        assert (r.status[:3], r.headers["Retry-After"]) == ("429", "1")
    dispatcher.advance_clock(SECOND)
    r = Response(app, environ_for("carol"))
    assert (r.status[:3], r.headers["Retry-After"]) == ("429", "2")
    assert json.loads(r.body)["details"]["causes"][0]["reason"] == "queue-full"
    for h in held:
        settle(dispatcher, h)


def test_unclassified_requests_pass_through(dispatcher):
    r = Response(apf.wsgi.Middleware(hello(), dispatcher, classify), environ_for(None))
    assert r.status == "200 OK"
    assert "X-Kubernetes-PF-FlowSchema-UID" not in r.headers


def test_streaming_response_holds_the_seat_until_closed(dispatcher):
    def streaming(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            yield b"a"
            yield b"b"
        return body()

    app = apf.wsgi.Middleware(streaming, dispatcher, classify)
    result = app(environ_for("alice"), lambda s, h, e=None: None)
    it = iter(result)
    assert next(it) == b"a"
    assert not seat_is_free(dispatcher), "still streaming"
    result.close()
    assert seat_is_free(dispatcher)


def test_application_exception_finishes_the_request(dispatcher):
    def broken(environ, start_response):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        apf.wsgi.Middleware(broken, dispatcher, classify)(environ_for("alice"), None)
    assert seat_is_free(dispatcher)


def test_app_headers_of_the_same_name_are_replaced(dispatcher):
    def spoof(environ, start_response):
        start_response("200 OK", [("X-Kubernetes-PF-FlowSchema-UID", "fake")])
        return [b""]

    r = Response(apf.wsgi.Middleware(spoof, dispatcher, classify), environ_for("alice"))
    assert r.headers["X-Kubernetes-PF-FlowSchema-UID"] == "uid-fs-tight"


def test_custom_work_estimate_is_used(dispatcher):
    used = []

    def estimate(environ, d):
        used.append(d.user)
        return apf.WorkEstimate(initial_seats=1, final_seats=1, additional_latency_ns=10**9)

    Response(apf.wsgi.Middleware(hello(), dispatcher, classify, estimate), environ_for("alice"))
    assert used == ["alice"]
    assert not seat_is_free(dispatcher), "the final seat stays for the extra latency"
    dispatcher.advance_clock(10**9)
    assert seat_is_free(dispatcher)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def test_real_server_on_loopback_queues_then_serves(dispatcher):
    """wsgiref's threaded server: one client holds the only seat, a second
    one queues and is served when the first finishes; a third gets 429."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIServer

    class ThreadingServer(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    release = threading.Event()
    entered = threading.Semaphore(0)

    def app(environ, start_response):
        entered.release()
        if environ["PATH_INFO"] == "/slow":
            release.wait(10)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    server = make_server("127.0.0.1", 0, apf.wsgi.Middleware(app, dispatcher, classify),
                         server_class=ThreadingServer, handler_class=QuietHandler)
    port = server.server_address[1]
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    serving.start()
    try:
        def get(path, user):
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers={"X-Remote-User": user})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, dict(resp.headers), resp.read()
            except urllib.error.HTTPError as e:
                return e.code, dict(e.headers), e.read()

        results = {}
        slow = threading.Thread(target=lambda: results.setdefault("slow", get("/slow", "alice")))
        slow.start()
        assert entered.acquire(timeout=10)
        queued = threading.Thread(target=lambda: results.setdefault("queued", get("/queued", "alice")))
        queued.start()
        assert not entered.acquire(timeout=0.2), "the second request waits in the queue"
        # bob's level rejects instead of queuing: hold its seat, then ask.
        held = dispatcher.start_request(digest("bob"))
        code, headers, _ = get("/x", "bob")
        dispatcher.finish(held.request)
        assert code == 429 and headers["Retry-After"] == "1"
        release.set()
        slow.join(10)
        queued.join(10)
        assert results["slow"][0] == 200 and results["queued"][0] == 200
        assert results["queued"][2] == b"/queued"
        assert results["queued"][1]["X-Kubernetes-PF-PriorityLevel-UID"] == "uid-pl-tight"
    finally:
        server.shutdown()
        server.server_close()
        serving.join(5)
    assert seat_is_free(dispatcher)
