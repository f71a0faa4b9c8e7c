"""``StoreClock``: the local clock set by the job store's own, so one clock judges every instant.

A due time is written by the process that enqueues and compared by the worker that claims; a
lease is written by the worker and compared by the relay. Judged on each machine's clock, a
worker a few milliseconds behind the enqueuer finds a job "not due" when its wake-up arrives, and
a relay a lease ahead of a worker hands back jobs still running. So every ``now`` the Celery
wiring gives a store is read on the store's clock (``JobStore.store_time``: Redis ``TIME``,
PostgreSQL ``clock_timestamp()``), through an offset measured as NTP does: the store's instant
against the midpoint of the round trip that read it.

The offset is measured (the shorter of two round trips) at first use and again every
``every_ms``; between two measures ``now`` costs what the local clock does. A measure that fails
keeps the last offset (the local clock until one succeeds) and is tried again after
``retry_ms``; one whose round trip took longer than ``max_round_trip_ms`` (a late reply: its
midpoint is uncertain by half of it) is kept only when it is better than what is known, and
tried again after ``retry_ms`` too. A store whose clock is
its caller's (``store_time`` None: memory, SQLite) leaves the local clock as it is.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from ddd_celery.background.observability import DEFAULT_LOGGER
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.instants import require_aware

DEFAULT_MEASURE_EVERY_MS = 60_000
"""A minute: clocks drift by microseconds a minute, and NTP steps are rare."""
DEFAULT_RETRY_MS = 5_000
MEASURE_SAMPLES = 2
"""Round trips per measure, the shortest kept: its midpoint is the surest."""
DEFAULT_MAX_ROUND_TRIP_MS = 250
"""Longer than a healthy round trip on a loaded host, far shorter than a late reply."""

ReadStoreTime = Callable[[], datetime | None]
"""``JobStore.store_time``: the store's instant, None when its clock is the caller's."""


class StoreClock(Clock):
    """The local clock plus the measured offset of the store's clock; safe to share by threads.

    ``read`` is the store's ``store_time``; ``local`` the clock it corrects (the system clock in
    production); ``monotonic`` (seconds) times the measures and their round trips.
    """

    def __init__(
        self,
        read: ReadStoreTime,
        *,
        local: Clock,
        every_ms: int = DEFAULT_MEASURE_EVERY_MS,
        retry_ms: int = DEFAULT_RETRY_MS,
        max_round_trip_ms: int = DEFAULT_MAX_ROUND_TRIP_MS,
        monotonic: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        for name, value in (
            ("every_ms", every_ms),
            ("retry_ms", retry_ms),
            ("max_round_trip_ms", max_round_trip_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int of milliseconds, not {value!r}")
        self._read = read
        self._local = local
        self._every_s = every_ms / 1000
        self._retry_s = retry_ms / 1000
        self._max_round_trip_s = max_round_trip_ms / 1000
        self._monotonic = monotonic
        self._logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._offset = timedelta(0)
        self._round_trip_s: float | None = None
        """The round trip of the offset in use; None until a measure succeeded."""
        self._next_measure_s: float | None = None
        """When to measure again (``monotonic``); None: at the next ``now``."""
        self._failing = False
        self._pid = os.getpid()
        self._mutex = threading.Lock()

    @property
    def offset(self) -> timedelta:
        """What is added to the local clock: the store's clock minus it, as last measured."""
        return self._offset

    def now(self) -> datetime:
        due = self._next_measure_s
        if due is None or self._monotonic() >= due:
            self._measure()
        return self._local.now() + self._offset

    def _measure(self) -> None:
        """Measure the offset, unless another thread does: a first use waits for its measure,
        a later one goes on with the last offset."""
        if self._pid != os.getpid():  # forked while a thread may have held the mutex
            self._mutex, self._pid = threading.Lock(), os.getpid()
        if not self._mutex.acquire(blocking=self._next_measure_s is None):
            return
        try:
            due = self._next_measure_s
            if due is not None and self._monotonic() < due:
                return  # measured by the thread this one waited for
            self._next_measure_s = self._monotonic() + self._measured()
        finally:
            self._mutex.release()

    def _measured(self) -> float:
        """Take one measure (the better of ``MEASURE_SAMPLES`` round trips: the first of a
        process also opens its connection); how many seconds until the next."""
        best: tuple[float, timedelta] | None = None
        for _ in range(MEASURE_SAMPLES):
            try:
                sample = self._sample()
            except Exception as error:
                if best is not None:
                    break
                if not self._failing:
                    self._failing = True
                    self._logger.warning(
                        "Store clock could not be read (%s): keeping an offset of %.1f ms",
                        type(error).__name__,
                        self._offset / timedelta(milliseconds=1),
                        extra={"error_type": type(error).__name__},
                    )
                return self._retry_s
            if sample is None:
                self._failing = False
                self._offset, self._round_trip_s = timedelta(0), 0.0
                return float("inf")  # the store's clock is this one: nothing to measure, ever
            if best is None or sample[0] < best[0]:
                best = sample
        assert best is not None
        self._failing = False
        round_trip_s, offset = best
        if self._round_trip_s is None or round_trip_s <= max(
            self._round_trip_s, self._max_round_trip_s
        ):
            self._offset, self._round_trip_s = offset, round_trip_s
        return self._retry_s if round_trip_s > self._max_round_trip_s else self._every_s

    def _sample(self) -> tuple[float, timedelta] | None:
        """One round trip's length (seconds) and offset; None when the store has no clock."""
        started = self._monotonic()
        sent_at = self._local.now()
        store_now = self._read()
        received_at = self._local.now()
        round_trip_s = self._monotonic() - started
        if store_now is None:
            return None
        midpoint = sent_at + (received_at - sent_at) / 2
        return round_trip_s, require_aware(store_now, "store_time") - midpoint
