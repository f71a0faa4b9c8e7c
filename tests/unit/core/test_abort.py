"""AbortSignal and AbortController: cooperative cancellation of a run."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ddd_celery.kernel import AbortController


class Stop(Exception):
    pass


def test_a_fresh_signal_is_not_aborted_and_lets_the_job_go_on() -> None:
    signal = AbortController().signal

    assert not signal.aborted
    assert signal.reason is None
    signal.throw_if_aborted()


def test_abort_sets_the_reason_and_throw_if_aborted_raises_it() -> None:
    controller = AbortController()
    reason = Stop("timeout")

    assert controller.abort(reason) is True

    assert controller.signal.aborted
    assert controller.signal.reason is reason
    with pytest.raises(Stop) as raised:
        controller.signal.throw_if_aborted()
    assert raised.value is reason


def test_the_first_reason_wins() -> None:
    controller = AbortController()
    first, second = Stop("timeout"), Stop("stop")

    controller.abort(first)

    assert controller.abort(second) is False
    assert controller.signal.reason is first


def test_a_sync_job_blocked_on_wait_wakes_when_aborted_from_another_thread() -> None:
    controller = AbortController()
    woke: list[bool] = []
    waiting = threading.Thread(target=lambda: woke.append(controller.signal.wait(timeout=30)))
    waiting.start()

    controller.abort(Stop("stop"))
    waiting.join(timeout=30)

    assert woke == [True]


def test_wait_answers_false_when_not_aborted_in_time() -> None:
    assert AbortController().signal.wait(timeout=0) is False


class InterleavingEvent(threading.Event):
    """Runs ``interleave`` at the first look at or change of the event.

    It plays another thread that aborts entirely between two steps of this thread's abort.
    """

    def __init__(self, interleave: Callable[[], None]) -> None:
        super().__init__()
        self._interleave: Callable[[], None] | None = interleave

    def _once(self) -> None:
        interleave, self._interleave = self._interleave, None
        if interleave is not None:
            interleave()

    def is_set(self) -> bool:
        self._once()
        return super().is_set()

    def set(self) -> None:
        self._once()
        super().set()


def test_an_abort_interleaved_inside_another_cannot_win_too() -> None:
    controller = AbortController()
    first, second = Stop("timeout"), Stop("stop")
    interleaved: list[bool] = []
    controller.signal._event = InterleavingEvent(
        lambda: interleaved.append(controller.abort(second))
    )

    won = controller.abort(first)

    assert [won, *interleaved] == [True, False]
    assert controller.signal.reason is first


def test_aborts_racing_from_many_threads_leave_one_winner_whose_reason_is_kept() -> None:
    controller = AbortController()
    reasons = [Stop(str(index)) for index in range(8)]
    winners: list[Stop] = []
    barrier = threading.Barrier(len(reasons))

    def abort(reason: Stop) -> None:
        barrier.wait()
        if controller.abort(reason):
            winners.append(reason)

    threads = [threading.Thread(target=abort, args=(reason,)) for reason in reasons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(winners) == 1
    assert controller.signal.reason is winners[0]
