"""SIGTERM taken as Ctrl-C is, so a benchmark stopped by ``kill`` or ``timeout`` cleans up.

Each benchmark removes its keys, tables and processes in ``finally`` blocks, which Python runs
on ``KeyboardInterrupt`` but not on a SIGTERM's default ending. Keys left behind are not only
clutter: tens of thousands of a benchmark's keys in the machine's Redis slow every ``SCAN`` the
test suite makes for its own. A SIGKILL still leaves them: each benchmark clears its prefix
when it starts, too.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def clean_up_on_sigterm() -> None:
    """From now on a SIGTERM raises ``SystemExit`` in the main thread: the ``finally`` run."""
    signal.signal(signal.SIGTERM, _exit)
