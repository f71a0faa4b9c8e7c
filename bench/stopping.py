"""SIGTERM and SIGHUP taken as Ctrl-C is, so a benchmark stopped by ``kill``, ``timeout`` or a
closed terminal cleans up.

Each benchmark removes its keys, tables and processes in ``finally`` blocks, which Python runs
on ``KeyboardInterrupt`` but not on a SIGTERM's or SIGHUP's default ending. Keys left behind are
not only clutter: tens of thousands of a benchmark's keys in the machine's Redis slow every
``SCAN`` the test suite makes for its own. A SIGKILL still leaves them: each benchmark clears
its prefix when it starts, too.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def clean_up_on_stop() -> None:
    """From now on a SIGTERM or SIGHUP raises ``SystemExit`` in the main thread: the
    ``finally`` blocks run."""
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _exit)
