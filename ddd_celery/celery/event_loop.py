"""One event loop per worker thread for async jobs, kept between runs instead of one
``asyncio.run`` each (a sync job needs no loop: ``run_attempt_sync``).

``asyncio.run`` builds a loop (a selector, a self-pipe) and tears it down for every message:
on a worker running short jobs that costs more than the job. ``run_in_thread_loop`` runs each
run on its thread's loop and then does what closing the loop would have done to what the run
left behind: the tasks it left running are cancelled and awaited, so no run leaks work into the
next one. A process forked (prefork) starts its own loops; a thread that ends closes its loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

_local = threading.local()


def run_in_thread_loop(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coroutine)`` on this thread's kept loop; raises what it raises.

    As ``asyncio.run``, refuses to run from inside a running loop (``RuntimeError``).
    """
    runner = _runner()
    try:
        return runner.run(coroutine)
    finally:
        _cancel_left_behind(runner.get_loop())


class _Kept:
    """This thread's runner, closed with the thread: its locals are dropped when it ends."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.runner = asyncio.Runner()

    def __del__(self) -> None:
        if self.pid == os.getpid():
            self.runner.close()


def _runner() -> asyncio.Runner:
    kept: _Kept | None = getattr(_local, "kept", None)
    if kept is None or kept.pid != os.getpid():
        kept = _local.kept = _Kept()
    return kept.runner


def _cancel_left_behind(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await the tasks a run left running, as closing its loop would."""
    pending = asyncio.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
