"""Every dispatcher function through the binding, and its error paths."""

from __future__ import annotations

import gc
import json
import select
import threading
import weakref

import pytest

from conftest import SECOND, SERVER_LIMIT, TEST_CONFIG, WAIT_LIMIT, digest, make_dispatcher, seat_is_free

import apf
from apf import _bindings as b

Outcome = apf.Outcome


# --- construction, options, configuration ----------------------------------

def test_default_options_are_libapfs():
    opts = apf.default_options()
    assert opts.server_concurrency_limit == 600
    assert opts.wait_limit_ns == 15 * SECOND
    assert opts.service_time_guess_ns == 3_000_000
    assert opts.borrowing_period_ns == 10 * SECOND
    assert opts.manual_clock is False
    assert apf.Options.defaults() == opts


def test_builtin_classifies_to_kubernetes_levels(builtin):
    decision = builtin.start_request(apf.RequestDigest(
        user="system:kube-scheduler", groups=("system:authenticated",), verb="update",
        api_group="coordination.k8s.io", resource="leases", namespace="kube-system",
        name="kube-scheduler",
        path="/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"))
    assert decision.outcome == Outcome.EXECUTE
    assert decision.flow_schema == "system-leader-election"
    assert decision.priority_level == "leader-election"
    assert decision.reject_reason is None
    assert decision.request != 0
    builtin.finish(decision.request)


def test_from_config_yaml_gives_names_and_uids(dispatcher):
    decision = dispatcher.start_request(digest("alice"))
    assert (decision.flow_schema, decision.flow_schema_uid) == ("tight", "uid-fs-tight")
    assert (decision.priority_level, decision.priority_level_uid) == ("tight", "uid-pl-tight")
    dispatcher.finish(decision.request)


def test_from_config_json():
    pl = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
          "metadata": {"name": "p", "uid": "u-p"},
          "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
                                                  "limitResponse": {"type": "Reject"}}}}
    fs = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
          "metadata": {"name": "f", "uid": "u-f"},
          "spec": {"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 10,
                   "rules": [{"subjects": [{"kind": "User", "user": {"name": "dave"}}],
                              "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                                 "resources": ["*"], "namespaces": ["*"]}]}]}}
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [pl, fs]})
    with apf.Dispatcher.from_config(text.encode(), manual_clock=True) as d:
        decision = d.start_request(digest("dave"))
        assert (decision.flow_schema_uid, decision.priority_level_uid) == ("u-f", "u-p")
        d.finish(decision.request)
        # Anyone else falls to the mandatory catch-all.
        other = d.start_request(digest("eve"))
        assert other.priority_level == "catch-all"
        d.finish(other.request)


def test_options_object_and_keyword_overrides():
    options = apf.Options(server_concurrency_limit=SERVER_LIMIT, manual_clock=True)
    with apf.Dispatcher(TEST_CONFIG, options, wait_limit_ns=SECOND) as d:
        assert d.manual_clock
        held = d.start_request(digest())
        queued = d.start_request(digest())
        assert queued.outcome == Outcome.QUEUED
        d.advance_clock(SECOND + 1)
        assert d.poll(queued.request) == (Outcome.REJECTED, apf.RejectReason.TIME_OUT)
        d.finish(held.request)


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="wait_limit"):
        apf.Dispatcher(wait_limit=5)


def test_invalid_options_are_an_error():
    with pytest.raises(apf.ApfError) as info:
        apf.Dispatcher(server_concurrency_limit=0)
    assert info.value.status == b.APF_ERR_INVALID_PARAMETER


@pytest.mark.parametrize("text, status", [
    ("kind: FlowSchema\nmetadata: {name: x}\n"
     "spec: {priorityLevelConfiguration: {name: catch-all}, matchingPrecedence: 20000}\n",
     b.APF_ERR_CONFIG),
    ("{ not json", b.APF_ERR_CONFIG),
    (b"kind: \xff\xfe", b.APF_ERR_INVALID_UTF8),
])
def test_bad_config_text_is_refused(text, status):
    with pytest.raises(apf.ApfError) as info:
        apf.Dispatcher.from_config(text)
    assert info.value.status == status
    assert info.value.message


def test_reconfigure_switches_levels(dispatcher):
    before = dispatcher.start_request(digest("alice"))
    assert before.priority_level == "tight"
    dispatcher.finish(before.request)
    dispatcher.reconfigure(TEST_CONFIG.replace("name: alice", "name: zoe"))
    decision = dispatcher.start_request(digest("alice"))
    assert decision.priority_level == "catch-all"
    dispatcher.finish(decision.request)


def test_names_by_id_follow_a_rename_and_stay_per_dispatcher(dispatcher):
    # start_request learns names by id (apf_start_request_ids) and caches
    # them per dispatcher: a renamed level gets a new id, and another
    # dispatcher's ids name its own objects.
    first = dispatcher.start_request(digest("alice"))
    dispatcher.finish(first.request)
    assert (first.priority_level, first.priority_level_uid) == ("tight", "uid-pl-tight")
    assert (first.flow_schema, first.flow_schema_uid) == ("tight", "uid-fs-tight")
    renamed = TEST_CONFIG.replace("{name: tight, uid: uid-pl-tight}", "{name: snug, uid: uid-pl-snug}")
    renamed = renamed.replace("priorityLevelConfiguration: {name: tight}", "priorityLevelConfiguration: {name: snug}")
    dispatcher.reconfigure(renamed)
    after = dispatcher.start_request(digest("alice"))
    dispatcher.finish(after.request)
    assert (after.priority_level, after.priority_level_uid) == ("snug", "uid-pl-snug")
    assert after.flow_schema == "tight"
    other = apf.Dispatcher()
    try:
        builtin = other.start_request(digest("alice"))
        other.finish(builtin.request)
        assert builtin.flow_schema in ("global-default", "catch-all")
    finally:
        other.close()


def test_reconfigure_error_keeps_the_old_config(dispatcher):
    bad = TEST_CONFIG.replace("queues: 1, handSize: 1", "queues: 1, handSize: 9")
    with pytest.raises(apf.ApfError) as info:
        dispatcher.reconfigure(bad)
    assert info.value.status == b.APF_ERR_CONFIG
    assert "handSize" in info.value.message
    with pytest.raises(apf.ApfError) as info:
        dispatcher.reconfigure(b"\xff")
    assert info.value.status in (b.APF_ERR_INVALID_UTF8, b.APF_ERR_CONFIG)
    decision = dispatcher.start_request(digest("alice"))
    assert (decision.priority_level, decision.outcome) == ("tight", Outcome.EXECUTE)
    dispatcher.finish(decision.request)


def test_stats_text_names_the_levels(dispatcher):
    held = dispatcher.start_request(digest())
    text = dispatcher.stats_text()
    for level in ("tight", "short", "refuse", "catch-all", "exempt"):
        assert level in text
    dispatcher.finish(held.request)


# --- the clock ---------------------------------------------------------------

def test_manual_clock_advances_exactly(dispatcher):
    start = dispatcher.now()
    dispatcher.advance_clock(1234)
    assert dispatcher.now() == start + 1234


def test_advance_clock_needs_a_manual_clock():
    with apf.Dispatcher() as d:
        before = d.now()
        with pytest.raises(apf.ApfError) as info:
            d.advance_clock(SECOND)
        assert info.value.status == b.APF_ERR_NOT_MANUAL_CLOCK
        assert d.now() >= before


# --- decisions and rejection reasons ----------------------------------------

def test_execute_then_queue_then_dispatch_on_finish(dispatcher):
    first = dispatcher.start_request(digest())
    assert first.outcome == Outcome.EXECUTE
    second = dispatcher.start_request(digest())
    assert second.outcome == Outcome.QUEUED and second.request != 0
    assert dispatcher.poll(second.request) == (Outcome.QUEUED, None)
    dispatcher.finish(first.request)
    assert dispatcher.poll(second.request) == (Outcome.EXECUTE, None)
    assert dispatcher.wait(second.request, 0) == (Outcome.EXECUTE, None)
    dispatcher.finish(second.request)
    assert seat_is_free(dispatcher)


def test_queue_full(dispatcher):
    held = dispatcher.start_request(digest("carol"))
    queued = [dispatcher.start_request(digest("carol")) for _ in range(2)]
    assert [q.outcome for q in queued] == [Outcome.QUEUED] * 2
    full = dispatcher.start_request(digest("carol"))
    assert full.outcome == Outcome.REJECTED
    assert full.reject_reason == apf.RejectReason.QUEUE_FULL
    assert full.request == 0
    assert (full.priority_level, full.priority_level_uid) == ("short", "uid-pl-short")
    for q in queued:
        assert dispatcher.cancel(q.request)
    dispatcher.finish(held.request)


def test_concurrency_limit(dispatcher):
    held = dispatcher.start_request(digest("bob"))
    assert held.outcome == Outcome.EXECUTE
    refused = dispatcher.start_request(digest("bob"))
    assert refused.outcome == Outcome.REJECTED
    assert refused.reject_reason == apf.RejectReason.CONCURRENCY_LIMIT
    dispatcher.finish(held.request)


def test_manual_clock_times_out_a_queued_request(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    dispatcher.advance_clock(WAIT_LIMIT - 1)
    assert dispatcher.poll(queued.request) == (Outcome.QUEUED, None)
    dispatcher.advance_clock(1)
    assert dispatcher.wait(queued.request, 0) == (Outcome.REJECTED, apf.RejectReason.TIME_OUT)
    dispatcher.finish(held.request)


def test_own_deadline_times_out_before_the_wait_limit(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest(), deadline_ns=dispatcher.now() + SECOND)
    dispatcher.advance_clock(SECOND)
    assert dispatcher.poll(queued.request) == (Outcome.REJECTED, apf.RejectReason.TIME_OUT)
    dispatcher.finish(held.request)


def test_wait_with_a_timeout_returns_queued(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    assert dispatcher.wait(queued.request, 1_000_000) == (Outcome.QUEUED, None)
    assert dispatcher.cancel(queued.request)
    dispatcher.finish(held.request)


def test_wait_blocks_until_another_thread_finishes(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    finisher = threading.Timer(0.05, dispatcher.finish, args=(held.request,))
    finisher.start()
    assert dispatcher.wait(queued.request) == (Outcome.EXECUTE, None)
    finisher.join()
    dispatcher.finish(queued.request)


def test_finish_at_an_end_time(dispatcher):
    decision = dispatcher.start_request(digest(), apf.WorkEstimate(1, 1, SECOND))
    end = dispatcher.now() + 1000
    dispatcher.advance_clock(2000)
    dispatcher.finish(decision.request, end)
    # The final seat is held for the extra latency after the given end.
    assert not seat_is_free(dispatcher)
    dispatcher.advance_clock(SECOND)
    assert seat_is_free(dispatcher)


def test_cancel_frees_the_queue_slot(dispatcher):
    held = dispatcher.start_request(digest("carol"))
    a = dispatcher.start_request(digest("carol"))
    b_ = dispatcher.start_request(digest("carol"))
    assert dispatcher.cancel(a.request)
    c = dispatcher.start_request(digest("carol"))
    assert c.outcome == Outcome.QUEUED
    for d in (b_, c):
        dispatcher.cancel(d.request)
    dispatcher.finish(held.request)


# --- invalid and stale handles -------------------------------------------------

def expect_status(status, fn, *args):
    with pytest.raises(apf.ApfError) as info:
        fn(*args)
    assert info.value.status == status, info.value
    assert info.value.message
    return info.value


@pytest.mark.parametrize("handle", [0, 1, 0xDEAD_BEEF_0000_0001, (1 << 64) - 1])
def test_unknown_handles_are_errors(dispatcher, handle):
    for fn in (dispatcher.finish, dispatcher.poll, dispatcher.cancel, dispatcher.wait):
        expect_status(b.APF_ERR_INVALID_HANDLE, fn, handle)


def test_double_finish_and_stale_handles(dispatcher):
    decision = dispatcher.start_request(digest())
    dispatcher.finish(decision.request)
    expect_status(b.APF_ERR_INVALID_HANDLE, dispatcher.finish, decision.request)
    expect_status(b.APF_ERR_INVALID_HANDLE, dispatcher.poll, decision.request)
    # The slot is reused with a new generation: the old handle stays stale.
    again = dispatcher.start_request(digest())
    assert again.request != decision.request
    expect_status(b.APF_ERR_INVALID_HANDLE, dispatcher.finish, decision.request)
    dispatcher.finish(again.request)


def test_finish_of_a_queued_request_is_an_error(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    expect_status(b.APF_ERR_REQUEST_QUEUED, dispatcher.finish, queued.request)
    assert dispatcher.cancel(queued.request)
    dispatcher.finish(held.request)


def test_cancel_of_an_executing_request_is_an_error(dispatcher):
    held = dispatcher.start_request(digest())
    expect_status(b.APF_ERR_REQUEST_EXECUTING, dispatcher.cancel, held.request)
    dispatcher.finish(held.request)


def test_finish_of_a_rejected_request_is_an_error(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    dispatcher.advance_clock(WAIT_LIMIT)
    assert dispatcher.poll(queued.request)[0] == Outcome.REJECTED
    err = expect_status_any(dispatcher.finish, queued.request)
    assert err.status in (b.APF_ERR_REQUEST_REJECTED, b.APF_ERR_INVALID_HANDLE)
    dispatcher.finish(held.request)


def expect_status_any(fn, *args):
    with pytest.raises(apf.ApfError) as info:
        fn(*args)
    return info.value


def test_handles_belong_to_their_dispatcher(dispatcher):
    with make_dispatcher() as other:
        decision = other.start_request(digest())
        err = expect_status_any(dispatcher.finish, decision.request)
        assert err.status == b.APF_ERR_INVALID_PARAMETER, "not its dispatcher's"
        other.finish(decision.request)


def test_panics_are_caught_and_the_library_stays_usable(dispatcher):
    """apf_test_panic (exported, not in the header) panics inside libapf
    while holding a request-slab lock."""
    import ctypes
    from apf._library import lib

    try:
        fn = lib().apf_test_panic
    except AttributeError:
        pytest.skip("this build has no panic test hook")
    fn.restype = b.apf_status
    fn.argtypes = [ctypes.POINTER(b.apf_dispatcher), ctypes.POINTER(ctypes.POINTER(b.apf_error))]
    held = dispatcher.start_request(digest())
    error = ctypes.POINTER(b.apf_error)()
    assert fn(dispatcher._enter(), ctypes.byref(error)) == b.APF_ERR_PANIC
    dispatcher._exit()
    from apf._library import take_error
    assert "panic" in take_error(error)
    # The poisoned lock is recovered: the same requests work on.
    dispatcher.finish(held.request)
    assert seat_is_free(dispatcher)
    assert fn(None, None) == b.APF_ERR_PANIC


# --- completion notification -------------------------------------------------

def test_completion_fd_and_take_completion(dispatcher):
    fd = dispatcher.completion_fd()
    assert fd >= 0
    assert dispatcher.take_completion() is None
    assert select.select([fd], [], [], 0)[0] == []
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    dispatcher.finish(held.request)
    assert select.select([fd], [], [], 1)[0] == [fd]
    assert dispatcher.take_completion() == queued.request
    assert dispatcher.take_completion() is None
    assert select.select([fd], [], [], 0)[0] == [], "the fd is cleared once drained"
    assert dispatcher.poll(queued.request) == (Outcome.EXECUTE, None)
    dispatcher.finish(queued.request)


def test_completion_of_a_time_out(dispatcher):
    dispatcher.completion_fd()
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    dispatcher.advance_clock(WAIT_LIMIT)
    assert dispatcher.take_completion() == queued.request
    assert dispatcher.poll(queued.request) == (Outcome.REJECTED, apf.RejectReason.TIME_OUT)
    dispatcher.finish(held.request)


def test_completion_callback(dispatcher):
    seen = []
    dispatcher.set_completion_callback(seen.append)
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    dispatcher.finish(held.request)
    assert seen == [queued.request]
    dispatcher.set_completion_callback(None)
    again = dispatcher.start_request(digest())
    assert dispatcher.poll(queued.request)[0] == Outcome.EXECUTE
    dispatcher.finish(queued.request)
    assert seen == [queued.request], "a removed callback is not called"
    assert dispatcher.poll(again.request)[0] == Outcome.EXECUTE
    dispatcher.finish(again.request)


def test_completion_callback_from_another_thread(dispatcher):
    seen = threading.Event()
    threads = []

    def callback(handle):
        threads.append(threading.get_ident())
        seen.set()

    dispatcher.set_completion_callback(callback)
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    worker = threading.Thread(target=dispatcher.finish, args=(held.request,))
    worker.start()
    worker.join()
    assert seen.wait(5)
    assert threads == [worker.ident]
    dispatcher.set_completion_callback(None)
    assert dispatcher.poll(queued.request)[0] == Outcome.EXECUTE
    dispatcher.finish(queued.request)


# --- lifetime ----------------------------------------------------------------

def test_use_after_close_raises_closed_error():
    d = make_dispatcher()
    d.close()
    assert d.closed
    for call in (lambda: d.now(), lambda: d.start_request(digest()),
                 lambda: d.reconfigure(TEST_CONFIG), lambda: d.advance_clock(1),
                 lambda: d.finish(1), lambda: d.stats_text(), lambda: d.completion_fd()):
        with pytest.raises(apf.ClosedError, match="closed"):
            call()
    with pytest.raises(apf.ClosedError):
        with d.request(digest()):
            pass


def test_close_is_idempotent_and_a_context_manager():
    with make_dispatcher() as d:
        d.close()
        d.close()
    d.close()
    assert d.closed


def test_collected_dispatcher_is_freed():
    d = make_dispatcher()
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None


def test_close_while_another_thread_waits(dispatcher):
    held = dispatcher.start_request(digest())
    queued = dispatcher.start_request(digest())
    errors = []

    def waiter():
        try:
            while True:
                dispatcher.wait(queued.request, 10_000_000)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    dispatcher.close()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], apf.ClosedError)
    del held
