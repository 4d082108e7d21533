"""The workqueue family through the C ABI: every rule on the manual clock,
the limiters, two lanes, priorities, lifetime, and many threads."""

from __future__ import annotations

import datetime
import gc
import queue
import random
import threading
import time

import pytest

import apf
from apf import _bindings as b
from apf.workqueue import Kind, Lane, ShutDown

MS = 0.001


@pytest.fixture
def make():
    """make(kind, **options): a queue on the manual clock, closed after."""
    made = []

    def factory(kind=Kind.FIFO, **options):
        options.setdefault("manual_clock", True)
        q = apf.Workqueue(kind, **options)
        made.append(q)
        return q

    yield factory
    for q in made:
        q.close()


def take(q, want=None):
    item = q.try_get_item()
    assert item is not None, "nothing ready"
    if want is not None:
        assert item.key == want
    return item


def take_done(q, want):
    item = take(q, want)
    q.done(item)
    return item


def lens(q):
    return q.len(), q.waiting_len()


# --- the dirty and processing rules ---------------------------------------------


def test_add_twice_queues_once(make):
    q = make()
    for k in (b"a", b"b", b"a", "c", b"b"):
        q.add(k)
    assert lens(q) == (3, 0)
    assert [q.get(), q.get(), q.get()] == [b"a", b"b", b"c"]
    for k in (b"a", b"b", b"c"):
        q.done(k)
    assert q.try_get() is None


def test_add_while_processing_is_queued_again_by_done(make):
    q = make()
    q.add(b"a")
    assert q.get() == b"a"
    q.add(b"a")
    q.add(b"a")
    assert lens(q) == (0, 0)
    assert q.try_get() is None  # never to a second worker
    q.done(b"a")
    assert lens(q) == (1, 0)
    assert q.get() == b"a"
    q.done(b"a")
    assert q.try_get() is None


def test_done_of_a_key_not_processing_or_twice(make):
    q = make()
    with pytest.raises(apf.ApfError) as e:
        q.done(b"never")
    assert e.value.status == b.APF_ERR_INVALID_HANDLE
    q.add(b"a")
    item = q.get_item()
    q.done(item)
    with pytest.raises(apf.ApfError) as e:
        q.done(item)
    assert e.value.status == b.APF_ERR_INVALID_HANDLE
    with pytest.raises(apf.ApfError):
        q.done(b"a")


def test_shut_down_hands_out_what_is_queued_then_raises(make):
    q = make()
    q.add(b"a")
    q.add(b"b")
    assert not q.shutting_down()
    q.shut_down()
    q.add(b"c")  # ignored
    assert q.shutting_down()
    assert q.len() == 2
    assert q.get() == b"a"
    q.done(b"a")
    assert q.get(timeout=1) == b"b"
    q.done(b"b")
    with pytest.raises(ShutDown):
        q.get()
    with pytest.raises(ShutDown):
        q.try_get()


def test_shut_down_wakes_blocked_getters(make):
    q = make()
    results = []
    threads = [threading.Thread(target=lambda: results.append(_get_or_shutdown(q)))
               for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    q.shut_down()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert results == ["shut down"] * 4


def _get_or_shutdown(q, timeout=None):
    try:
        return q.get(timeout)
    except ShutDown:
        return "shut down"


def test_get_timeout_raises_queue_empty(make):
    q = make()
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.05)
    assert 0.04 < time.monotonic() - start < 5
    with pytest.raises(queue.Empty):
        q.get(timeout=datetime.timedelta(milliseconds=1))
    with pytest.raises(queue.Empty):
        q.get(timeout=0)
    q.add(b"ready")
    assert q.get(timeout=0) == b"ready"  # a zero timeout still takes what is ready
    q.done(b"ready")


def test_get_waits_for_an_add(make):
    q = make()
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    t.start()
    time.sleep(0.02)
    q.add(b"late")
    t.join(10)
    assert got == [b"late"]
    q.done(b"late")


def test_shut_down_with_drain_waits_for_done(make):
    q = make()
    q.add(b"a")
    q.add(b"b")
    item = q.get_item()
    drained = threading.Event()
    t = threading.Thread(target=lambda: (q.shut_down_with_drain(), drained.set()))
    t.start()
    deadline = time.monotonic() + 10
    while not q.shutting_down():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    take_done(q, b"b")  # still handed out during the drain
    assert not drained.wait(0.05)
    q.done(item)
    assert drained.wait(10)
    t.join(10)


# --- the context manager and iteration ---------------------------------------------


def test_processing_context_manager_calls_done(make):
    q = make()
    q.add(b"a")
    with q.processing() as key:
        assert key == b"a"
        q.add(b"a")
        assert q.try_get() is None
    assert q.len() == 1  # done queued it again
    with pytest.raises(RuntimeError):
        with q.processing() as key:
            raise RuntimeError("reconcile failed")
    q.add(b"a")  # done ran despite the exception: queued, not dirty-in-processing
    assert q.len() == 1


def test_iteration_until_shut_down(make):
    q = make()
    for k in (b"a", b"b", b"c"):
        q.add(k)
    seen = []
    for key in q:
        seen.append(key)
        if len(seen) == 1:
            q.add(b"a")  # processing: queued again after this body
        if len(seen) == 4:
            q.shut_down()
    assert seen == [b"a", b"b", b"c", b"a"]
    assert q._processing == {}


# --- delays on the manual clock ---------------------------------------------------


def test_add_after_on_the_manual_clock(make):
    q = make()
    q.add_after(b"a", 5)
    assert lens(q) == (0, 1)
    q.advance_clock(5 - 1e-9)
    assert lens(q) == (0, 1)
    q.advance_clock(1e-9)
    assert lens(q) == (1, 0)
    take_done(q, b"a")

    q.add_after(b"early-first", 2)
    q.add_after(b"early-first", 10)
    q.add_after(b"late-first", 10)
    q.add_after(b"late-first", datetime.timedelta(seconds=2))
    q.advance_clock(2)
    assert lens(q) == (2, 0)
    take_done(q, b"early-first")
    take_done(q, b"late-first")
    q.advance_clock(10)
    assert q.try_get() is None

    q.add_after(b"zero", 0)
    q.add_after(b"negative", -1)
    assert lens(q) == (2, 0)
    take_done(q, b"zero")
    take_done(q, b"negative")

    q.add_after(b"never", 1)
    q.shut_down()
    q.advance_clock(3600)
    with pytest.raises(ShutDown):
        q.try_get()


def test_delayed_item_wakes_a_blocked_get(make):
    q = make()
    q.add_after(b"a", 60)
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    t.start()
    time.sleep(0.02)
    q.advance_clock(60)
    t.join(10)
    assert got == [b"a"]
    q.done(b"a")


def test_advance_clock_needs_the_manual_clock():
    with apf.Workqueue() as q:
        with pytest.raises(apf.ApfError) as e:
            q.advance_clock(1)
        assert e.value.status == b.APF_ERR_NOT_MANUAL_CLOCK
        with pytest.raises(ValueError):
            q.advance_clock(-1)


# --- rate limiters -------------------------------------------------------------------


def retry(q, key, delay_ns):
    """add_rate_limited, then: not ready 1 ns early, ready at delay_ns."""
    q.add_rate_limited(key)
    if delay_ns:
        q.advance_clock((delay_ns - 1) / 1e9)
        assert q.len() == 0, f"{key!r} ready before {delay_ns} ns"
        q.advance_clock(1e-9)
    assert q.len() == 1, f"{key!r} not ready after {delay_ns} ns"
    take_done(q, key)


MS_NS = 1_000_000
S_NS = 1_000_000_000


def test_exponential_backoff_and_forget(make):
    q = make(rate_limiter=apf.exponential_failure_rate_limiter(MS, 8 * MS))
    for i, d in enumerate((1, 2, 4, 8, 8, 8)):
        retry(q, b"a", d * MS_NS)
        assert q.num_requeues(b"a") == i + 1
    retry(q, b"b", MS_NS)
    q.forget(b"a")
    assert q.num_requeues(b"a") == 0
    retry(q, b"a", MS_NS)


def test_bucket_limiter(make):
    q = make(rate_limiter=apf.bucket_rate_limiter(1, 2))
    retry(q, b"a", 0)
    retry(q, b"b", 0)
    retry(q, b"c", S_NS)
    retry(q, b"a", S_NS)


def test_item_bucket_limiter(make):
    q = make(rate_limiter=apf.item_bucket_rate_limiter(1, 1))
    retry(q, b"a", 0)
    retry(q, b"b", 0)
    retry(q, b"a", S_NS)


def test_fast_slow_limiter(make):
    q = make(rate_limiter=apf.fast_slow_rate_limiter(MS, 1, 2))
    for d in (MS_NS, MS_NS, S_NS, S_NS):
        retry(q, b"a", d)
    assert q.num_requeues(b"a") == 4


def test_max_of_limiter(make):
    q = make(rate_limiter=apf.max_of_rate_limiter(
        apf.exponential_failure_rate_limiter(MS, 60), apf.bucket_rate_limiter(1, 1)))
    # At one instant: a takes the bucket's token and waits its backoff
    # (1 ms); b finds the bucket empty and waits for the next token (1 s).
    q.add_rate_limited(b"a")
    q.add_rate_limited(b"b")
    assert lens(q) == (0, 2)
    q.advance_clock(MS)
    take_done(q, b"a")
    q.advance_clock(1 - MS - 1e-9)
    assert lens(q) == (0, 1)
    q.advance_clock(1e-9)
    take_done(q, b"b")
    assert q.num_requeues(b"a") == 1


@pytest.mark.parametrize("limiter", [None, apf.default_controller_rate_limiter()])
def test_default_controller_limiter(make, limiter):
    q = make(rate_limiter=limiter)
    retry(q, b"a", 5 * MS_NS)
    retry(q, b"a", 10 * MS_NS)
    retry(q, b"b", 5 * MS_NS)


@pytest.mark.parametrize("limiter", [
    apf.bucket_rate_limiter(0, 1),
    apf.item_bucket_rate_limiter(10, 0),
    apf.max_of_rate_limiter(apf.default_controller_rate_limiter(), apf.bucket_rate_limiter(-1, 1)),
])
def test_invalid_limiter_raises_apf_error(limiter):
    with pytest.raises(apf.ApfError):
        apf.Workqueue(rate_limiter=limiter)


def test_limiter_arguments_are_checked():
    with pytest.raises(ValueError):
        apf.bucket_rate_limiter(1, -1)
    with pytest.raises(TypeError):
        apf.max_of_rate_limiter("not a limiter")
    with pytest.raises(TypeError):
        apf.Workqueue(rate_limiter="not a limiter")


# --- two lanes -----------------------------------------------------------------------


def test_two_lane_serves_fast_first(make):
    q = make(Kind.TWO_LANE)
    q.add_with_opts(b"s1", lane=Lane.SLOW)
    q.add_with_opts(b"s2", lane=Lane.SLOW)
    q.add(b"f1")
    q.add_with_opts(b"f2", lane=Lane.FAST)
    order = [take_done(q, k) for k in (b"f1", b"f2", b"s1", b"s2")]
    assert [i.lane for i in order] == [Lane.FAST, Lane.FAST, Lane.SLOW, Lane.SLOW]


def test_two_lane_moves_a_queued_item(make):
    q = make(Kind.TWO_LANE)
    q.add_with_opts(b"x", lane=Lane.SLOW)
    q.add_with_opts(b"y", lane=Lane.SLOW)
    q.add_with_opts(b"x", lane=Lane.FAST)
    assert q.len() == 2
    assert take_done(q, b"x").lane == Lane.FAST
    take_done(q, b"y")
    q.add(b"a")
    q.add(b"b")
    q.add_with_opts(b"a", lane=Lane.SLOW)
    take_done(q, b"b")
    assert take_done(q, b"a").lane == Lane.SLOW
    q.add(b"c")
    q.add(b"d")
    q.add(b"c")  # same lane: keeps its place
    take_done(q, b"c")
    take_done(q, b"d")


def test_two_lane_slow_work_does_not_block_fast(make):
    q = make(Kind.TWO_LANE)
    for i in range(100):
        q.add_with_opts(f"resync{i}", lane=Lane.SLOW)
    busy = q.get_item()
    q.add(b"event")
    take_done(q, b"event")
    q.done(busy)
    q.add_with_opts(b"later", lane=Lane.SLOW, after=1)
    q.add_with_opts(b"soon", after=1)
    q.advance_clock(1)
    take_done(q, b"soon")
    for i in range(1, 100):
        take_done(q, f"resync{i}".encode())
    assert take_done(q, b"later").lane == Lane.SLOW


def test_lane_or_priority_on_the_wrong_kind(make):
    fifo, lanes, prio = make(Kind.FIFO), make(Kind.TWO_LANE), make(Kind.PRIORITY)
    for q, opts in ((fifo, dict(lane=Lane.SLOW)), (fifo, dict(priority=3)),
                    (lanes, dict(priority=3)), (prio, dict(lane=Lane.SLOW))):
        with pytest.raises(apf.ApfError) as e:
            q.add_with_opts(b"a", **opts)
        assert e.value.status == b.APF_ERR_WORKQUEUE_WRONG_KIND, (q, opts)
    assert fifo.len() == lanes.len() == prio.len() == 0
    fifo.add_with_opts(b"ok")
    take_done(fifo, b"ok")


# --- priorities ----------------------------------------------------------------------


def test_priority_order_and_fifo_within_a_priority(make):
    q = make(Kind.PRIORITY)
    for key, p in ((b"a", 1), (b"b", 5), (b"c", 5), (b"d", 0), (b"e", 1), (b"f", -3), (b"g", 5)):
        q.add_with_opts(key, priority=p)
    got = []
    while (item := q.try_get_item()) is not None:
        got.append((item.key, item.priority))
        q.done(item)
    assert got == [(b"b", 5), (b"c", 5), (b"g", 5), (b"a", 1), (b"e", 1), (b"d", 0), (b"f", -3)]


def test_priority_duplicate_keeps_the_highest(make):
    q = make(Kind.PRIORITY)
    q.add_with_opts(b"x", priority=1)
    q.add_with_opts(b"y", priority=3)
    q.add_with_opts(b"x", priority=3)
    q.add_with_opts(b"y", priority=0)
    assert q.len() == 2
    assert take_done(q, b"y").priority == 3
    assert take_done(q, b"x").priority == 3


def test_priority_waiting_items_never_ahead_of_ready_ones(make):
    q = make(Kind.PRIORITY)
    q.add_with_opts(b"urgent-later", priority=100, after=1)
    q.add_with_opts(b"low-now", priority=-1)
    assert lens(q) == (1, 1)
    take_done(q, b"low-now")
    assert q.try_get() is None
    q.add_with_opts(b"low-2", priority=0)
    q.advance_clock(1)
    take_done(q, b"urgent-later")
    take_done(q, b"low-2")
    q.add_with_opts(b"w", after=10)
    q.add_with_opts(b"w", after=1)
    q.advance_clock(1)
    take_done(q, b"w")


def test_priority_rate_limited(make):
    q = make(Kind.PRIORITY, rate_limiter=apf.exponential_failure_rate_limiter(1, 60))
    q.add_with_opts(b"a", rate_limited=True, after=10 * MS, priority=2)
    q.advance_clock(10 * MS)
    assert take_done(q, b"a").priority == 2
    retry(q, b"a", 2 * S_NS)
    assert q.num_requeues(b"a") == 2


# --- keys, metrics, lifetime ------------------------------------------------------------


def test_keys_are_bytes_and_copied(make):
    q = make()
    buf = bytearray(b"ns/pod-1")
    q.add(buf)
    buf[:] = b"XXXXXXXX"
    q.add(b"")
    q.add(b"\x00\xff\x00")
    q.add("caf\u00e9")
    assert [take_done(q, k).key for k in (b"ns/pod-1", b"", b"\x00\xff\x00", "café".encode())]
    with pytest.raises(TypeError):
        q.add(42)


def test_metrics_text(make):
    q = make(name="controller-x")
    q.add(b"a")
    q.add(b"b")
    q.add_rate_limited(b"c")
    take_done(q, b"a")
    text = q.metrics_text()
    for want in ('workqueue_depth{name="controller-x"} 1',
                 'workqueue_adds_total{name="controller-x"} 2',
                 'workqueue_retries_total{name="controller-x"} 1',
                 "workqueue_queue_duration_seconds_bucket",
                 "workqueue_work_duration_seconds_count",
                 "workqueue_unfinished_work_seconds",
                 "workqueue_longest_running_processor_seconds"):
        assert want in text, text


def test_close_is_idempotent_and_wakes_getters():
    q = apf.Workqueue(manual_clock=True)
    results = []
    threads = [threading.Thread(target=lambda: results.append(_get_or_shutdown(q)))
               for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    q.close()
    q.close()
    for t in threads:
        t.join(10)
    assert results == ["shut down"] * 3
    with pytest.raises(apf.ClosedError):
        q.add(b"a")
    with pytest.raises(ShutDown):
        q.get()
    assert q.shutting_down()
    assert list(q) == []


def test_close_during_a_drain_lets_done_finish_it():
    q = apf.Workqueue(manual_clock=True)
    q.add(b"a")
    item = q.get_item()
    drained = threading.Event()
    t = threading.Thread(target=lambda: (q.shut_down_with_drain(), drained.set()))
    t.start()
    while not q.shutting_down():
        time.sleep(0.001)
    q.close()
    assert q._ptr is not None  # the drain is still inside libapf
    q.done(item)
    assert drained.wait(10)
    t.join(10)
    assert q._ptr is None
    with pytest.raises(apf.ClosedError):
        q.done(item)


def test_garbage_collection_frees_the_queue(monkeypatch):
    freed = []
    original = apf.Workqueue._delete
    monkeypatch.setattr(apf.Workqueue, "_delete",
                        lambda self, ptr: (freed.append(True), original(self, ptr)))
    q = apf.Workqueue.two_lane()
    q.add(b"a")
    del q
    gc.collect()
    assert freed == [True]


# --- many threads -------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [8, 4096])
@pytest.mark.parametrize("kind", list(Kind))
def test_threads_lose_nothing_and_never_process_twice(kind, keys):
    """No add is lost (each key is processed after its last add began) and
    no key is processed by two threads at once. Few keys make collisions
    likely, many make each key's last add matter (both checks were seen to
    fail on a binding that dropped 1 add in 200 / did done at get)."""
    producers, consumers, adds = 4, 4, 500
    q = apf.Workqueue(kind, manual_clock=True)
    added = [0] * keys      # adds begun, per key
    covered = [0] * keys    # adds begun before the last processing started
    lock = threading.Lock()
    in_flight = set()
    errors = []

    def consume():
        try:
            for key in q:
                k = int(key.split(b"-")[1])
                with lock:
                    if key in in_flight:
                        errors.append(f"{key!r} processed twice at once")
                    in_flight.add(key)
                    covered[k] = added[k]
                time.sleep(0)
                with lock:
                    in_flight.discard(key)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    def produce(seed):
        r = random.Random(seed)
        try:
            for _ in range(adds):
                k = r.randrange(keys)
                with lock:
                    added[k] += 1
                opts = {}
                if kind == Kind.TWO_LANE:
                    opts["lane"] = Lane(r.randrange(2))
                elif kind == Kind.PRIORITY:
                    opts["priority"] = r.randrange(5)
                if r.randrange(10) == 0:
                    opts["after"] = 1e-9 * (1 + r.randrange(3))
                q.add_with_opts(f"key-{k}", **opts)
                if r.randrange(50) == 0:
                    q.advance_clock(1e-9 * r.randrange(4))
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))

    workers = [threading.Thread(target=consume) for _ in range(consumers)]
    makers = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for t in workers + makers:
        t.start()
    for t in makers:
        t.join(60)
    q.advance_clock(1)
    assert q.waiting_len() == 0
    q.shut_down_with_drain()
    for t in workers:
        t.join(60)
        assert not t.is_alive()
    q.close()
    assert errors == []
    assert added == covered
