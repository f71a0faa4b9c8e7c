"""Pauses: the scheduled jobs an operator paused at run time, kept where every beat reads them.

A pause is the operator's, not the wiring's: the settings still decide which jobs are declared
and enabled, and a paused job stays enabled. Each beat reads the pauses once per tick that has
an occurrence to send, and records a paused job's occurrence ``skipped-paused`` instead of
sending it; a resume makes the next occurrence run. A disabled job is never started by time,
so pausing it changes nothing until it is enabled again.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ddd_celery.kernel.instants import to_utc


@dataclass(frozen=True, slots=True)
class Pause:
    """One job paused: who paused it, when (aware UTC, to the microsecond) and why, if said."""

    job: str
    by: str
    at: datetime
    reason: str | None = None


class JobPauses(ABC):
    """Where the pauses of the scheduled jobs are kept, shared by every beat and the CLI.

    Every command is safe to send twice: a pause sent again keeps the pause already kept, a
    resume sent again finds nothing left to remove. Texts are kept as given and come back
    unchanged; a reader that prints them escapes them.
    """

    @abstractmethod
    def pause(self, job: str, *, by: str, at: datetime, reason: str | None = None) -> Pause:
        """Pause ``job`` unless it is paused already; the pause kept, the earlier one if any.

        Raises:
            ValueError: ``at`` is naive, or ``job`` or ``by`` empty; nothing is kept.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def resume(self, job: str) -> Pause | None:
        """Remove the pause of ``job``; the pause removed, or None when it was not paused.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def paused(self) -> Mapping[str, Pause]:
        """Every pause kept, by job name, in one round trip: what beat reads per tick.

        A name no job of the application has now (a job removed since it was paused) may be
        among them; beat has nothing to skip for it.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """


class InMemoryJobPauses(JobPauses):
    """The pauses of one process: what a test or an application without a shared store has.

    A ``celery jobs pause`` in another process never reaches it, so the command refuses it.
    """

    def __init__(self) -> None:
        self._pauses: dict[str, Pause] = {}
        self._mutex = threading.Lock()

    def pause(self, job: str, *, by: str, at: datetime, reason: str | None = None) -> Pause:
        asked = new_pause(job, by=by, at=at, reason=reason)
        with self._mutex:
            return self._pauses.setdefault(job, asked)

    def resume(self, job: str) -> Pause | None:
        with self._mutex:
            return self._pauses.pop(job, None)

    def paused(self) -> Mapping[str, Pause]:
        with self._mutex:
            return dict(self._pauses)


def new_pause(job: str, *, by: str, at: datetime, reason: str | None) -> Pause:
    """The pause asked for, checked as every store checks it: ``at`` in UTC to the microsecond.

    Raises ``ValueError`` for a naive ``at`` or an empty ``job`` or ``by``.
    """
    if not job:
        raise ValueError("a pause names the job it pauses")
    if not by:
        raise ValueError(f"a pause of {job!r} names who paused it")
    return Pause(job=job, by=by, at=to_utc(at, "at"), reason=reason)


def pause_as_dict(pause: Pause) -> dict[str, Any]:
    """``pause`` as JSON values, its instant in ISO 8601 UTC to the microsecond."""
    at = to_utc(pause.at, "at").isoformat(timespec="microseconds").replace("+00:00", "Z")
    return {"job": pause.job, "by": pause.by, "at": at, "reason": pause.reason}


def pause_from_dict(record: Mapping[str, Any]) -> Pause:
    """The ``Pause`` of a dict ``pause_as_dict`` wrote; ``ValueError`` for one it did not."""
    try:
        return Pause(
            job=record["job"],
            by=record["by"],
            at=to_utc(datetime.fromisoformat(record["at"])),
            reason=record["reason"],
        )
    except (KeyError, TypeError) as error:
        raise ValueError("not the record of a pause") from error
