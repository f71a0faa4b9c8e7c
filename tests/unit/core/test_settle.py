"""A run's wait ends once, and the first abort reason wins for the signal and the waiter alike."""

from __future__ import annotations

import asyncio

from ddd_celery.kernel.abort import AbortController, settle


class Stop(Exception):
    pass


async def test_the_first_reason_settles_the_run_and_aborts_its_signal() -> None:
    controller = AbortController()
    settled: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    timeout, stop = Stop("timeout"), Stop("stop")

    settle(settled, controller, timeout)
    settle(settled, controller, stop)
    settle(settled, controller, None)

    assert settled.result() is timeout
    assert controller.signal.reason is timeout


async def test_a_signal_aborted_before_the_run_settles_keeps_its_first_reason() -> None:
    controller = AbortController()
    settled: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    first, later = Stop("lease lost"), Stop("timeout")
    controller.abort(first)

    settle(settled, controller, later)

    assert settled.result() is first
    assert controller.signal.reason is first


async def test_a_run_that_ended_by_itself_settles_with_none_and_stays_unaborted() -> None:
    controller = AbortController()
    settled: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    settle(settled, controller, None)
    settle(settled, controller, Stop("too late"))

    assert settled.result() is None
    assert not controller.signal.aborted
