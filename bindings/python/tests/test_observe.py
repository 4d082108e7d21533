"""Metrics and debug dumps: the Dispatcher methods, and the WSGI and ASGI
middlewares serving /metrics and Kubernetes' debug paths when asked to."""

from __future__ import annotations

import asyncio
import threading
from wsgiref.validate import validator

import pytest

from conftest import digest, make_dispatcher, settle
from test_asgi import call as asgi_call
from test_asgi import hello as asgi_hello
from test_wsgi import Response, environ_for, hello

import apf
import apf.asgi
import apf.observe
import apf.wsgi

PAIR = '{priority_level="tight",flow_schema="tight"}'
LEVEL_COLUMNS = ["PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing",
                 "WaitingRequests", "ExecutingRequests", "DispatchedRequests",
                 "RejectedRequests", "TimedoutRequests", "CancelledRequests"]
QUEUE_COLUMNS = ["PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests",
                 "SeatsInUse", "NextDispatchR", "InitialSeatsSum", "MaxSeatsSum",
                 "TotalWorkSum"]
REQUEST_COLUMNS = ["PriorityLevelName", "FlowSchemaName", "QueueIndex",
                   "RequestIndexInQueue", "FlowDistingsher", "ArriveTime",
                   "InitialSeats", "FinalSeats", "AdditionalLatency", "StartTime"]
DETAIL_COLUMNS = ["UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion",
                  "Resource", "SubResource"]


def sample(text: str, name: str, labels: str = PAIR) -> float:
    key = f"apiserver_flowcontrol_{name}{labels} "
    for line in text.splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    raise KeyError(key)


def table(dump: str):
    lines = dump.splitlines()
    rows = [[cell.strip() for cell in line.split(",")] for line in lines]
    for row in rows[1:]:
        assert len(row) == len(rows[0]), dump
    return rows[0], rows[1:]


@pytest.fixture
def busy(dispatcher):
    """alice's level "tight" (one seat) busy with one request, one more
    queued behind it."""
    running = dispatcher.start_request(digest("alice"))
    waiting = dispatcher.start_request(digest("alice"))
    assert running.outcome == apf.Outcome.EXECUTE
    assert waiting.outcome == apf.Outcome.QUEUED
    yield dispatcher
    dispatcher.cancel(waiting.request)
    dispatcher.finish(running.request)


def test_metrics_follow_the_requests(dispatcher):
    text = dispatcher.metrics_text()
    assert text.endswith("# EOF\n")
    assert sample(text, "dispatched_requests_total") == 0
    running = dispatcher.start_request(digest("alice"))
    waiting = dispatcher.start_request(digest("alice"))
    text = dispatcher.metrics_text()
    assert sample(text, "dispatched_requests_total") == 1
    assert sample(text, "current_executing_requests") == 1
    assert sample(text, "current_inqueue_requests") == 1
    dispatcher.advance_clock(7_000_000)
    dispatcher.finish(running.request)
    settle(dispatcher, waiting)
    text = dispatcher.metrics_text()
    assert sample(text, "dispatched_requests_total") == 2
    assert sample(text, "current_executing_requests") == 0
    assert sample(text, "current_inqueue_requests") == 0
    waited = sample(text, "request_wait_duration_seconds_sum",
                    '{priority_level="tight",flow_schema="tight",execute="true"}')
    assert waited == pytest.approx(0.007)


def test_requests_by_kind_demand_and_virtual_time_are_exposed(dispatcher):
    """The metrics are the library's one exposition: the binding sees the
    last ones added (read_vs_write_current_requests, demand_seats, the
    virtual-time gauges)."""
    running = dispatcher.start_request(digest("alice"))
    waiting = dispatcher.start_request(digest("alice", verb="create"))
    assert waiting.outcome == apf.Outcome.QUEUED
    dispatcher.advance_clock(7_000_000)
    dispatcher.finish(running.request)
    settle(dispatcher, waiting)
    text = dispatcher.metrics_text()
    # A read executed for 7 ms while a write waited (counts x nanoseconds).
    by_kind = "read_vs_write_current_requests_sum"
    assert sample(text, by_kind, '{phase="executing",request_kind="readOnly"}') == 7e6
    assert sample(text, by_kind, '{phase="waiting",request_kind="mutating"}') == 7e6
    assert sample(text, by_kind, '{phase="waiting",request_kind="readOnly"}') == 0
    assert sample(text, "demand_seats_count", '{priority_level="tight"}') == 7e6
    assert sample(text, "latest_s", '{priority_level="tight"}') > 0
    assert sample(text, "next_s_bounds", '{priority_level="tight",bound="min"}') > 0


def test_long_texts_are_read_whole_in_one_call(builtin):
    text = builtin.metrics_text()
    assert len(text) > 4096
    assert text.endswith("# EOF\n") and "\0" not in text
    assert builtin.metrics_text() == text


def test_metrics_content_type_is_openmetrics():
    assert apf.metrics_content_type().startswith("application/openmetrics-text")
    assert apf.observe.metrics_content_type() == apf.metrics_content_type()


def test_dumps_have_kubernetes_columns(busy):
    header, rows = table(busy.dump_priority_levels())
    assert header == LEVEL_COLUMNS
    tight = next(r for r in rows if r[0] == "tight")
    assert tight[1:] == ["1", "false", "false", "1", "1", "1", "0", "0", "0"]
    header, rows = table(busy.dump_queues())
    assert header == QUEUE_COLUMNS
    assert [r[:5] for r in rows if r[0] == "tight"] == [["tight", "0", "1", "1", "1"]]
    header, rows = table(busy.dump_requests())
    assert header == REQUEST_COLUMNS
    assert len(rows) == 1 and rows[0][:2] == ["tight", "tight"]
    header, rows = table(busy.dump_requests(include_details=True))
    assert header == REQUEST_COLUMNS + DETAIL_COLUMNS
    assert rows[0][10:13] == ["alice", "get", "/api/v1/namespaces/default/pods"]


def test_closed_dispatcher_raises():
    d = make_dispatcher()
    d.close()
    for read in (d.metrics_text, d.dump_priority_levels, d.dump_queues, d.dump_requests):
        with pytest.raises(apf.ClosedError):
            read()


def test_scrapes_race_requests_on_other_threads(dispatcher):
    stop = threading.Event()
    errors = []

    def work():
        try:
            while not stop.is_set():
                with dispatcher.request(digest("alice")):
                    pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(30):
            text = dispatcher.metrics_text()
            assert text.endswith("# EOF\n")
            assert sample(text, "current_executing_requests") <= 1
            dispatcher.dump_requests(include_details=True)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert sample(dispatcher.metrics_text(), "current_executing_requests") == 0


# ----- the middlewares ----------------------------------------------------------

def no_classify(_):
    raise AssertionError("metrics and dumps are answered before classification")


def wsgi_get(app, path, query=""):
    env = environ_for(None, path)
    env["QUERY_STRING"] = query
    return Response(validator(app), env)


def test_wsgi_serves_metrics_and_dumps_when_enabled(busy):
    app = apf.wsgi.Middleware(hello(), busy, no_classify, serve_metrics_and_dumps=True)
    r = wsgi_get(app, "/metrics")
    assert r.status == "200 OK"
    assert r.headers["Content-Type"] == apf.metrics_content_type()
    assert sample(r.body.decode(), "current_inqueue_requests") == 1
    r = wsgi_get(app, apf.observe.DUMP_PRIORITY_LEVELS_PATH)
    assert r.status == "200 OK" and r.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert table(r.body.decode())[0] == LEVEL_COLUMNS
    assert table(wsgi_get(app, apf.observe.DUMP_QUEUES_PATH).body.decode())[0] == QUEUE_COLUMNS
    for query, columns in [("", REQUEST_COLUMNS), ("includeRequestDetails=", REQUEST_COLUMNS),
                           ("includeRequestDetails=1", REQUEST_COLUMNS + DETAIL_COLUMNS),
                           ("includeRequestDetails=true&x=1", REQUEST_COLUMNS + DETAIL_COLUMNS)]:
        r = wsgi_get(app, apf.observe.DUMP_REQUESTS_PATH, query)
        assert table(r.body.decode())[0] == columns, query


def test_wsgi_leaves_the_paths_to_the_app_unless_enabled(dispatcher):
    seen = []
    app = apf.wsgi.Middleware(hello(seen), dispatcher, lambda env: None)
    r = wsgi_get(app, "/metrics")
    assert (r.status, r.body) == ("200 OK", b"hello")
    enabled = apf.wsgi.Middleware(hello(seen), dispatcher, lambda env: None,
                                  serve_metrics_and_dumps=True)
    r = wsgi_get(enabled, apf.observe.DEBUG_PATH_PREFIX + "dump_everything")
    assert r.body == b"hello"
    assert seen == ["/metrics", apf.observe.DEBUG_PATH_PREFIX + "dump_everything"]


def test_wsgi_answers_503_once_the_dispatcher_is_closed():
    d = make_dispatcher()
    app = apf.wsgi.Middleware(hello(), d, no_classify, serve_metrics_and_dumps=True)
    d.close()
    assert wsgi_get(app, "/metrics").status == "503 Service Unavailable"


def asgi_get(app, path, query=b""):
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query,
             "headers": []}
    return asyncio.run(asgi_call(app, scope))


def test_asgi_serves_metrics_and_dumps_when_enabled(busy):
    app = apf.asgi.Middleware(asgi_hello(), busy, no_classify, serve_metrics_and_dumps=True)
    status, headers, body = asgi_get(app, "/metrics")
    assert status == 200
    assert headers["content-type"] == apf.metrics_content_type()
    assert int(headers["content-length"]) == len(body)
    assert sample(body.decode(), "current_executing_requests") == 1
    status, headers, body = asgi_get(app, apf.observe.DUMP_PRIORITY_LEVELS_PATH)
    assert table(body.decode())[0] == LEVEL_COLUMNS
    _, _, body = asgi_get(app, apf.observe.DUMP_REQUESTS_PATH, b"includeRequestDetails=1")
    header, rows = table(body.decode())
    assert header == REQUEST_COLUMNS + DETAIL_COLUMNS and rows[0][10] == "alice"
    _, _, body = asgi_get(app, apf.observe.DUMP_REQUESTS_PATH)
    assert table(body.decode())[0] == REQUEST_COLUMNS


def test_asgi_leaves_the_paths_to_the_app_unless_enabled(dispatcher):
    async def let_through(scope):
        return None

    status, _, body = asgi_get(apf.asgi.Middleware(asgi_hello(), dispatcher, let_through), "/metrics")
    assert (status, body) == (200, b"hello")


def test_metrics_text_with_prefix_and_constant_labels(dispatcher):
    assert dispatcher.metrics_text_with() == dispatcher.metrics_text()
    text = dispatcher.metrics_text_with("shop", [("dispatcher", "public"), ("region", 'e"u')])
    key = ('shop_apiserver_flowcontrol_dispatched_requests_total'
           '{dispatcher="public",region="e\\"u",priority_level="tight",flow_schema="tight"} ')
    assert any(line.startswith(key) for line in text.splitlines()), text
    for line in text.splitlines():
        if line != "# EOF":
            name = line.removeprefix("# HELP ").removeprefix("# TYPE ")
            assert name.startswith("shop_"), line


@pytest.mark.parametrize("prefix,labels,status,names", [
    ("9lives", [], "APF_ERR_INVALID_PARAMETER", "prefix"),
    ("", [("reason", "x")], "APF_ERR_INVALID_PARAMETER", '"reason"'),
    ("", [("zone", "\udcff")], "APF_ERR_INVALID_UTF8", "const_labels[0].value"),
    ("", [("a", "b")] * 65, "APF_ERR_INVALID_PARAMETER", "const_labels_len"),
])
def test_metrics_text_with_refuses_bad_options_naming_them(dispatcher, prefix, labels, status, names):
    with pytest.raises(apf.ApfError) as info:
        dispatcher.metrics_text_with(prefix, labels)
    assert info.value.status == getattr(apf._bindings, status)
    assert names in str(info.value)
