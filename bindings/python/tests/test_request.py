"""The blocking request context manager."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import SECOND, WAIT_LIMIT, QueuedWatch, digest, seat_is_free, stats

import apf


def test_executes_at_once_and_finishes_on_exit(dispatcher):
    with dispatcher.request(digest()) as r:
        assert isinstance(r, apf.Request)
        assert r.decision.outcome == apf.Outcome.EXECUTE
        assert (r.flow_schema, r.priority_level) == ("tight", "tight")
        assert (r.flow_schema_uid, r.priority_level_uid) == ("uid-fs-tight", "uid-pl-tight")
        assert not seat_is_free(dispatcher)
    assert r.finished
    assert seat_is_free(dispatcher)


def test_finishes_on_exception(dispatcher):
    with pytest.raises(ZeroDivisionError):
        with dispatcher.request(digest()):
            1 / 0
    assert seat_is_free(dispatcher)


def test_early_finish_with_end_time_is_not_repeated(dispatcher):
    with dispatcher.request(digest(), apf.WorkEstimate(1, 1, SECOND)) as r:
        r.finish(dispatcher.now())
        r.finish()  # idempotent
        assert not seat_is_free(dispatcher), "final seat for the extra latency"
    dispatcher.advance_clock(SECOND)
    assert seat_is_free(dispatcher)


def test_waits_while_queued_then_runs(dispatcher):
    held = dispatcher.start_request(digest())
    entered = threading.Event()
    results = []

    def client():
        with dispatcher.request(digest()) as r:
            entered.set()
            results.append(r.decision.outcome)

    t = threading.Thread(target=client)
    t.start()
    assert not entered.wait(0.2), "queued behind the held request"
    dispatcher.finish(held.request)
    t.join(5)
    assert results == [apf.Outcome.EXECUTE]
    assert seat_is_free(dispatcher)


def test_manual_clock_times_out_a_waiting_thread(dispatcher):
    held = dispatcher.start_request(digest())
    outcome = []

    def client():
        try:
            with dispatcher.request(digest()):
                outcome.append("ran")
        except apf.Rejected as e:
            outcome.append(e)

    watch = QueuedWatch(dispatcher)
    t = threading.Thread(target=client)
    t.start()
    watch.wait_queued()
    dispatcher.advance_clock(WAIT_LIMIT)
    t.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], apf.Rejected)
    rejected = outcome[0]
    assert rejected.reason == apf.RejectReason.TIME_OUT
    assert rejected.decision.priority_level == "tight"
    assert rejected.priority_level_uid == "uid-pl-tight"
    assert "time-out" in str(rejected)
    dispatcher.finish(held.request)


@pytest.mark.parametrize("user, reason", [
    ("bob", apf.RejectReason.CONCURRENCY_LIMIT),
    ("carol", apf.RejectReason.QUEUE_FULL),
])
def test_rejection_raises_with_the_reason(dispatcher, user, reason):
    held = [dispatcher.start_request(digest(user)) for _ in range(1 if user == "bob" else 3)]
    with pytest.raises(apf.Rejected) as info:
        with dispatcher.request(digest(user)):
            pytest.fail("a rejected request must not run")
    assert info.value.reason == reason
    assert info.value.decision.outcome == apf.Outcome.REJECTED
    for h in held:
        if h.outcome == apf.Outcome.EXECUTE:
            dispatcher.finish(h.request)
        else:
            dispatcher.cancel(h.request)


def test_timeout_ns_is_a_relative_deadline(dispatcher):
    held = dispatcher.start_request(digest())
    errors = []

    def client():
        try:
            with dispatcher.request(digest(), timeout_ns=SECOND):
                pass
        except apf.Rejected as e:
            errors.append(e.reason)

    watch = QueuedWatch(dispatcher)
    t = threading.Thread(target=client)
    t.start()
    watch.wait_queued()
    dispatcher.advance_clock(SECOND)
    t.join(5)
    assert errors == [apf.RejectReason.TIME_OUT]
    dispatcher.finish(held.request)


def test_scope_cannot_be_entered_twice(dispatcher):
    scope = dispatcher.request(digest())
    with scope:
        with pytest.raises(RuntimeError):
            scope.__enter__()


def test_collected_request_is_finished(dispatcher):
    r = dispatcher.request(digest()).__enter__()
    assert not seat_is_free(dispatcher)
    del r
    assert seat_is_free(dispatcher)


def test_many_threads_through_one_seat(dispatcher):
    ran = []
    lock = threading.Lock()
    inside = [0]

    def client(i):
        with dispatcher.request(digest()):
            with lock:
                inside[0] += 1
                assert inside[0] == 1, "one seat: one request at a time"
            time.sleep(0.001)
            with lock:
                inside[0] -= 1
                ran.append(i)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(ran) == list(range(20))
    assert seat_is_free(dispatcher)


def test_interrupted_blocking_wait_withdraws_the_request(dispatcher):
    """A signal handler raising in the waiting thread (Ctrl-C) ends the
    wait within a slice, and the request leaves its queue."""
    import signal

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    held = dispatcher.start_request(digest())
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.15)
        started = time.monotonic()
        with pytest.raises(Interrupted):
            with dispatcher.request(digest()):
                pytest.fail("must not run")
        assert time.monotonic() - started < 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert stats(dispatcher)["tight"]["waiting"] == 0
    dispatcher.finish(held.request)


def test_racing_finishes_of_one_request_finish_it_once(dispatcher):
    for _ in range(50):
        r = dispatcher.request(digest()).__enter__()
        errors = []
        barrier = threading.Barrier(4)

        def finish():
            barrier.wait()
            try:
                r.finish()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=finish) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and r.finished
    assert seat_is_free(dispatcher)


def test_request_outliving_its_dispatcher():
    from conftest import make_dispatcher

    d = make_dispatcher()
    r = d.request(digest()).__enter__()
    d.close()
    r.finish()  # nothing left to finish: no error
    assert r.finished


def test_released_seats_let_another_request_run(dispatcher):
    with dispatcher.request(digest()) as watch:
        assert not seat_is_free(dispatcher)
        with pytest.raises(apf.ApfError) as too_many:
            watch.release_seats(2)
        assert too_many.value.status_name == "APF_ERR_INVALID_PARAMETER"
        watch.release_seats()  # the initial burst is over
        assert seat_is_free(dispatcher), "the watch no longer holds its seat"
        with pytest.raises(apf.ApfError) as again:
            watch.release_seats()
        assert again.value.status_name == "APF_ERR_INVALID_PARAMETER"
    assert seat_is_free(dispatcher)
    with pytest.raises(apf.ApfError) as after:
        watch.release_seats(1)
    assert after.value.status_name == "APF_ERR_INVALID_HANDLE"


def test_finish_with_cost_refuses_a_bad_cost(dispatcher):
    r = dispatcher.request(digest()).__enter__()
    with pytest.raises(apf.ApfError) as bad:
        r.finish_with_cost(float("nan"))
    assert bad.value.status_name == "APF_ERR_INVALID_PARAMETER"
    assert not r.finished and not seat_is_free(dispatcher)
    r.finish_with_cost(2.5)
    assert r.finished and seat_is_free(dispatcher)
