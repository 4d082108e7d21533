"""Awaiting queued requests on an event loop, without a thread per waiter."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conftest import SECOND, TEST_CONFIG, WAIT_LIMIT, digest, make_dispatcher, seat_is_free, stats

import apf


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def until(predicate, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


def test_async_with_executes_at_once(dispatcher):
    async def main():
        async with dispatcher.request_async(digest()) as r:
            assert r.decision.outcome == apf.Outcome.EXECUTE
            assert r.priority_level_uid == "uid-pl-tight"
            assert not seat_is_free(dispatcher)
        assert r.finished

    run(main())
    assert seat_is_free(dispatcher)


def test_two_hundred_waiters_on_one_thread(dispatcher):
    threads_before = threading.active_count()
    n = 200
    order = []

    async def client(i):
        async with dispatcher.request_async(digest()) as r:
            order.append(i)
            assert r.decision.outcome == apf.Outcome.EXECUTE
            await asyncio.sleep(0)

    async def main():
        held = dispatcher.start_request(digest())
        tasks = [asyncio.create_task(client(i)) for i in range(n)]
        hub = None
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == n)
        hub = dispatcher._hub
        assert order == []
        # Every waiter is a future on this loop: no thread was started.
        assert threading.active_count() == threads_before
        dispatcher.finish(held.request)
        await asyncio.gather(*tasks)
        assert hub.pending == 0
        assert threading.active_count() == threads_before

    run(main())
    assert sorted(order) == list(range(n))
    # One flow, one queue: first come, first served.
    assert order == list(range(n))
    assert seat_is_free(dispatcher)


def test_awaitable_form_and_explicit_finish(dispatcher):
    async def main():
        held = dispatcher.start_request(digest())
        pending = asyncio.ensure_future(dispatcher.request_async(digest()))
        await asyncio.sleep(0.01)
        assert not pending.done()
        dispatcher.finish(held.request)
        r = await pending
        assert r.decision.outcome == apf.Outcome.EXECUTE
        assert not seat_is_free(dispatcher)
        r.finish()

    run(main())
    assert seat_is_free(dispatcher)


def test_manual_clock_times_out_an_awaited_request(dispatcher):
    async def main():
        held = dispatcher.start_request(digest())
        task = asyncio.create_task(dispatcher.request_async(digest()).__aenter__())
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 1)
        dispatcher.advance_clock(WAIT_LIMIT)
        with pytest.raises(apf.Rejected) as info:
            await task
        assert info.value.reason == apf.RejectReason.TIME_OUT
        assert info.value.decision.priority_level == "tight"
        dispatcher.finish(held.request)

    run(main())
    assert seat_is_free(dispatcher)


def test_immediate_rejection_raises(dispatcher):
    async def main():
        held = dispatcher.start_request(digest("bob"))
        with pytest.raises(apf.Rejected) as info:
            async with dispatcher.request_async(digest("bob")):
                pytest.fail("must not run")
        assert info.value.reason == apf.RejectReason.CONCURRENCY_LIMIT
        dispatcher.finish(held.request)

    run(main())


def test_cancelling_a_waiting_task_withdraws_the_request(dispatcher):
    async def main():
        held = dispatcher.start_request(digest("carol"))
        tasks = [asyncio.create_task(dispatcher.request_async(digest("carol")).__aenter__())
                 for _ in range(2)]
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 2)
        # The queue (length 2) is full now.
        assert dispatcher.start_request(digest("carol")).outcome == apf.Outcome.REJECTED
        tasks[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        # Its slot is free again.
        again = dispatcher.start_request(digest("carol"))
        assert again.outcome == apf.Outcome.QUEUED
        assert dispatcher.cancel(again.request)
        dispatcher.finish(held.request)
        r = await tasks[1]
        r.finish()

    run(main())
    assert seat_is_free(dispatcher, "carol")


def test_cancel_racing_with_dispatch_does_not_leak_the_seat(dispatcher):
    async def main():
        held = dispatcher.start_request(digest())
        task = asyncio.create_task(dispatcher.request_async(digest()).__aenter__())
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 1)
        # Dispatched and cancelled in the same loop iteration: the waiter
        # sees CancelledError although its request got the seat.
        dispatcher.finish(held.request)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert seat_is_free(dispatcher)


def test_exception_in_body_finishes(dispatcher):
    async def main():
        with pytest.raises(KeyError):
            async with dispatcher.request_async(digest()):
                raise KeyError("boom")

    run(main())
    assert seat_is_free(dispatcher)


def test_blocking_and_async_waiters_share_the_completion_queue(dispatcher):
    """A thread blocked in `request` and a coroutine awaiting, on one level."""

    async def main():
        held = dispatcher.start_request(digest())
        ran = []

        def blocking():
            with dispatcher.request(digest()):
                ran.append("thread")

        t = threading.Thread(target=blocking)
        t.start()
        await asyncio.sleep(0.05)
        task = asyncio.create_task(dispatcher.request_async(digest()).__aenter__())
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 1)
        dispatcher.finish(held.request)
        r = await task
        ran.append("task")
        r.finish()
        await asyncio.get_running_loop().run_in_executor(None, t.join, 5)
        assert sorted(ran) == ["task", "thread"]

    run(main())
    assert seat_is_free(dispatcher)


def test_waiters_on_two_event_loops():
    d = make_dispatcher()
    held = d.start_request(digest())
    results = {}
    ready = threading.Barrier(3)

    def loop_thread(name):
        async def main():
            waiting = asyncio.create_task(d.request_async(digest()).__aenter__())
            await until(lambda: d._hub is not None and d._hub.pending >= 1)
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            r = await waiting
            results[name] = r.decision.outcome
            await asyncio.sleep(0.01)
            r.finish()

        asyncio.run(asyncio.wait_for(main(), 30))

    threads = [threading.Thread(target=loop_thread, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    ready.wait(10)
    d.finish(held.request)
    for t in threads:
        t.join(30)
    assert results == {"a": apf.Outcome.EXECUTE, "b": apf.Outcome.EXECUTE}
    assert seat_is_free(d)
    d.close()


def test_close_fails_pending_waiters():
    d = make_dispatcher()

    async def main():
        held = d.start_request(digest())
        task = asyncio.create_task(d.request_async(digest()).__aenter__())
        await until(lambda: d._hub is not None and d._hub.pending == 1)
        d.close()
        with pytest.raises(apf.ClosedError):
            await task
        del held
        await asyncio.sleep(0.01)  # the reader is removed on the loop

    run(main())
    assert d.closed and d._ptr is None, "freed once the loop stopped watching its fd"


def test_timeout_ns_in_async(dispatcher):
    async def main():
        held = dispatcher.start_request(digest())
        task = asyncio.create_task(
            dispatcher.request_async(digest(), timeout_ns=SECOND).__aenter__())
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 1)
        dispatcher.advance_clock(SECOND)
        with pytest.raises(apf.Rejected):
            await task
        dispatcher.finish(held.request)

    run(main())


def test_real_clock_time_out_wakes_the_loop_from_libapfs_timer_thread():
    """On the real clock the wait limit fires on libapf's timer thread: the
    completion fd wakes the loop, with nothing polling."""
    with make_dispatcher(manual_clock=False, wait_limit_ns=50_000_000) as d:
        async def main():
            held = d.start_request(digest())
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(apf.Rejected) as info:
                async with d.request_async(digest()):
                    pytest.fail("must time out")
            assert info.value.reason == apf.RejectReason.TIME_OUT
            assert loop.time() - started >= 0.04
            d.finish(held.request)

        run(main())
        assert stats(d)[""]["requests_live"] == 0


def test_reconfiguration_keeps_async_waiters(dispatcher):
    async def main():
        held = dispatcher.start_request(digest())
        tasks = [asyncio.create_task(dispatcher.request_async(digest()).__aenter__())
                 for _ in range(10)]
        await until(lambda: dispatcher._hub is not None and dispatcher._hub.pending == 10)
        # Same level name and type: its queue and waiters stay.
        dispatcher.reconfigure(TEST_CONFIG.replace("uid: uid-fs-tight", "uid: uid-fs-new"))
        dispatcher.finish(held.request)
        for task in tasks:
            r = await task
            assert r.priority_level == "tight"
            r.finish()
        fresh = dispatcher.start_request(digest())
        assert fresh.flow_schema_uid == "uid-fs-new"
        dispatcher.finish(fresh.request)

    run(main())


def test_mixed_threads_and_coroutines_under_contention():
    """Ten seats, 300 coroutines on one loop and 4 threads of blocking
    requests, all at once: everyone runs exactly once, nothing leaks."""
    with make_dispatcher(manual_clock=False, server_concurrency_limit=40,
                         wait_limit_ns=60 * SECOND) as d:
        assert stats(d)["tight"]["concurrency_limit"] == 10
        ran = []
        lock = threading.Lock()

        def worker(w):
            for i in range(25):
                with d.request(digest()):
                    with lock:
                        ran.append(("thread", w, i))

        async def client(i):
            async with d.request_async(digest()):
                await asyncio.sleep(0)
                ran.append(("task", i))

        async def main():
            threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
            for t in threads:
                t.start()
            await asyncio.gather(*(client(i) for i in range(300)))
            for t in threads:
                await asyncio.get_running_loop().run_in_executor(None, t.join, 30)

        run(main())
        assert len(ran) == 300 + 100 and len(set(ran)) == 400
        figures = stats(d)
        assert figures[""]["requests_live"] == 0
        assert figures["tight"]["seats_in_use"] == 0
        assert d._hub.pending == 0
