"""The operator's queries and commands on a ``JobStore``: what ``celery -A app jobs background``
prints and does, and what a web page shows and does, as one set of calls.

Everything here reads and changes the store through its port (``list_page``, ``find``,
``cancel``, ``retry_dead``, ``purge_finished``, ``stats``), so each costs what those cost on
their indexes; the faces only format. What a job carries of its caller's data is kept out: its
payload is shown as its shape (keys and types, never a value), its error as its code and type.

The library's own jobs, the timeouts of process managers and the outbox of their commands, are
told apart from the application's by ``JobOrigins`` (the wiring knows each job's class). An
armed timeout is not cancelled unless forced: its instance would wait for it for good.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ddd_celery.background.store import (
    AttemptRecord,
    AttemptState,
    JobFilter,
    JobPage,
    JobState,
    JobStats,
    JobStatus,
    JobStore,
    JsonValue,
    StoredJob,
)
from ddd_celery.kernel.actor import system_actor
from ddd_celery.kernel.instants import iso_ms, typed_instant

SELECTION_PAGE = 500
"""How many jobs a bulk command reads per page while it selects what it acts on."""
PURGE_BATCH = 1_000
"""How many jobs ``purge`` deletes per call to the store by default: a batch, never a scan."""
CANCELLABLE_STATES = (JobState.SCHEDULED, JobState.READY, JobState.RETRYING, JobState.RUNNING)
PURGED_BY_DEFAULT = (JobStatus.SUCCEEDED, JobStatus.CANCELLED)
"""What ``purge`` deletes unless asked for the dead too: a dead job waits for an operator."""
_SHAPE_DEPTH = 4
_SHAPE_KEYS = 20
_SHAPE_ITEMS = 3


def printable(text: str) -> str:
    """``text`` with each character that is not printable escaped (``\\n``, ``\\x1b``,
    ``\\u202e``): a value read from a store cannot forge a line or move a terminal's cursor."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def json_text(document: Any) -> str:
    """``document`` as indented JSON whose text is printable ASCII: ``json`` escapes every
    control and non-ASCII character but DEL, escaped here, so a stored value cannot reach the
    terminal raw through ``--json`` either."""
    return json.dumps(document, indent=2).replace("\x7f", "\\u007f")


class JobOrigin(StrEnum):
    """Whose a job is: the application's, or one the library enqueues for process managers."""

    APPLICATION = "application"
    PROCESS_TIMEOUT = "process-timeout"
    """A process manager's timeout (a ``ProcessTimeoutJob``): cancelled when disarmed."""
    PROCESS_COMMANDS = "process-commands"
    """The outbox of a step's commands: cancelled once the runner has sent them itself."""

    @property
    def library(self) -> bool:
        return self is not JobOrigin.APPLICATION


@dataclass(frozen=True, slots=True)
class JobOrigins:
    """The library's jobs by name; any other name is the application's (``of``)."""

    library: Mapping[str, JobOrigin] = field(default_factory=dict)

    def of(self, name: str) -> JobOrigin:
        return self.library.get(name, JobOrigin.APPLICATION)


# --- instants an operator types ------------------------------------------------------------

_AGE_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
LONGEST_AGE = timedelta(days=36_525)
"""A hundred years: longer than any job is kept, and short enough that ``now`` less the age is
still a date (``3000000d`` overflowed ``datetime`` into a traceback)."""


def parse_age(text: str) -> timedelta:
    """An age as an operator writes it: ``30m``, ``2h``, ``7d``, ``1h30m`` (ms, s, m, h, d, w).

    Raises:
        ValueError: ``text`` is not such an age, it is zero, or longer than ``LONGEST_AGE``.
    """
    if not _is_age_text(text):
        raise ValueError(f"{text!r} is not an age such as 30m, 2h or 7d")
    try:
        age = sum(
            (int(number) * _UNITS[unit] for number, unit in _AGE_PART.findall(text)), timedelta()
        )
    except OverflowError:
        age = timedelta.max
    if age <= timedelta():
        raise ValueError(f"{text!r} is no age: give one longer than 0")
    if age > LONGEST_AGE:
        raise ValueError(f"{text!r} is longer than 100 years: no job is that old")
    return age


def _is_age_text(text: str) -> bool:
    parts = _AGE_PART.findall(text)
    return bool(parts) and "".join(number + unit for number, unit in parts) == text


def parse_since(text: str, now: datetime) -> datetime:
    """An instant given as an ISO 8601 instant with its offset (``2026-03-02T09:00:00Z``) or as
    an age before ``now`` (``2h``): what ``--enqueued-since`` and ``--finished-since`` take.

    Raises:
        ValueError: neither, an age refused by ``parse_age`` (said in its words), or an instant
            without its offset (its meaning is the machine's).
    """
    if _is_age_text(text):
        return now - parse_age(text)
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 instant (2026-03-02T09:00:00Z) nor an age "
            "(30m, 2h, 7d)"
        ) from None
    if instant.utcoffset() is None:
        raise ValueError(f"{text!r} has no offset: add Z for UTC, or +01:00")
    return typed_instant(instant, text)


# --- what a job is made of -------------------------------------------------------------------


def payload_shape(value: JsonValue, depth: int = 0) -> str:
    """The shape of a stored JSON value: an object's keys (sorted) with the shapes of their
    values, a list's length and its items' shapes, a scalar's type; never a scalar's value.

    ``{"items": list[2] of {"qty": int, "sku": str}, "note": null}``. Bounded: 4 levels, 20
    keys an object, 3 kinds of item a list, the rest counted.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if depth >= _SHAPE_DEPTH:
        return "{...}" if isinstance(value, dict) else "[...]"
    if isinstance(value, dict):
        keys = sorted(value, key=str)
        shown = [f"{json.dumps(str(key))}: {payload_shape(value[key], depth + 1)}" for key in keys]
        if len(shown) > _SHAPE_KEYS:
            shown = [*shown[:_SHAPE_KEYS], f"... {len(shown) - _SHAPE_KEYS} more keys"]
        return "{" + ", ".join(shown) + "}"
    if isinstance(value, list):
        if not value:
            return "list[0]"
        kinds = list(dict.fromkeys(payload_shape(item, depth + 1) for item in value))
        if len(kinds) > _SHAPE_ITEMS:
            kinds = [*kinds[:_SHAPE_ITEMS], f"{len(kinds) - _SHAPE_ITEMS} more kinds"]
        return f"list[{len(value)}] of " + " | ".join(kinds)
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class ProcessTimeout:
    """Which timeout of which process instance a timeout job fires (its payload)."""

    process: str
    instance: str
    timeout: str


def process_timeout(job: StoredJob, origins: JobOrigins) -> ProcessTimeout | None:
    """The timeout ``job`` fires, when it is a process manager's timeout job with a readable
    payload; None for any other job (a damaged payload is dead at once and fires nothing)."""
    if origins.of(job.name) is not JobOrigin.PROCESS_TIMEOUT or not isinstance(job.payload, dict):
        return None
    process, instance, timeout = (job.payload.get(key) for key in ("process", "id", "timeout"))
    if isinstance(process, str) and isinstance(instance, str) and isinstance(timeout, str):
        return ProcessTimeout(process, instance, timeout)
    return None


def armed_timeout(job: StoredJob, origins: JobOrigins) -> ProcessTimeout | None:
    """The timeout ``job`` fires while it is still to fire (not finished): what an instance
    waits for, so cancelling it strands the instance in its step."""
    return None if job.status.finished else process_timeout(job, origins)


@dataclass(frozen=True, slots=True)
class JobStory:
    """What ``find`` tells of a job: what the store holds of it and each of its attempts."""

    job: StoredJob
    state: JobState
    origin: JobOrigin
    payload_shape: str
    timeout: ProcessTimeout | None
    """The process timeout it fires, when it is one."""

    @property
    def history(self) -> tuple[AttemptRecord, ...]:
        return self.job.history

    @property
    def runs_as(self) -> str:
        """The actor its attempts run as: the one that enqueued it, or the job's system actor."""
        return self.job.enqueued_by.actor or str(system_actor(self.job.name))

    def as_data(self) -> dict[str, Any]:
        """The story as JSON data (``find --json``, a page), its instants ``iso_ms``."""
        job, by = self.job, self.job.enqueued_by
        timeout = self.timeout
        return {
            **job_data(job, self.state, self.origin),
            "progress": job.progress,
            "actor": by.actor,
            "runs_as": self.runs_as,
            "correlation_id": by.correlation_id,
            "traceparent": by.traceparent,
            "payload_shape": self.payload_shape,
            "process_timeout": None
            if timeout is None
            else {
                "process": timeout.process,
                "instance": timeout.instance,
                "timeout": timeout.timeout,
            },
            "history": [
                attempt_data(attempt, again=again)
                for attempt, again in zip(job.history, queued_again(job.history), strict=True)
            ],
        }


def story(
    store: JobStore, job_id: str, *, tenant_id: str | None, now: datetime, origins: JobOrigins
) -> JobStory | None:
    """The story of the job ``job_id`` (None when unknown or another tenant's)."""
    job = store.find(job_id, tenant_id=tenant_id)
    if job is None:
        return None
    return JobStory(
        job=job,
        state=job.state(now),
        origin=origins.of(job.name),
        payload_shape=payload_shape(job.payload),
        timeout=process_timeout(job, origins),
    )


def job_data(job: StoredJob, state: JobState, origin: JobOrigin) -> dict[str, Any]:
    """A job's line of a listing as JSON data: no payload, no progress, no error message."""
    return {
        "id": job.id,
        "name": job.name,
        "origin": origin.value,
        "queue": job.queue,
        "state": state.value,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "enqueued_at": iso_ms(job.enqueued_at),
        "run_at": iso_ms(job.run_at),
        "finished_at": _instant(job.finished_at),
        "last_error_code": job.last_error_code,
        "last_error_type": job.last_error_type,
        "tenant_id": job.tenant_id,
    }


def queued_again(history: Sequence[AttemptRecord]) -> list[bool]:
    """For each attempt, whether the job was queued again (``retry_dead``) before it: its
    number starts over, where a released attempt's successor keeps the same number."""
    return [
        index > 0
        and (
            attempt.number < history[index - 1].number
            or (
                attempt.number == history[index - 1].number
                and history[index - 1].outcome is not AttemptState.RELEASED
            )
        )
        for index, attempt in enumerate(history)
    ]


def attempt_data(attempt: AttemptRecord, *, again: bool = False) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "queued_again": again,
        "started_at": iso_ms(attempt.started_at),
        "ended_at": _instant(attempt.ended_at),
        "worker": attempt.worker,
        "outcome": attempt.outcome.value,
        "error_code": attempt.error_code,
        "error_type": attempt.error_type,
    }


def page_data(page: JobPage, now: datetime, origins: JobOrigins) -> list[dict[str, Any]]:
    """The jobs of ``page`` as ``job_data``."""
    return [job_data(job, job.state(now), origins.of(job.name)) for job in page.jobs]


# --- counts --------------------------------------------------------------------------------

Counts = Mapping[JobStatus, int]


@dataclass(frozen=True, slots=True)
class StatsView:
    """``JobStats`` with the library's jobs counted apart from the application's."""

    queues: Mapping[str, Counts]
    application: Mapping[str, Counts]
    """Per job name, the application's jobs."""
    library: Mapping[str, Counts]
    """Per job name, the process timeouts and the commands' outbox."""
    origins: JobOrigins

    def as_data(self) -> dict[str, Any]:
        """The counts as JSON data (``stats --json``, a page), every status of every row."""
        names = {**self.application, **self.library}
        return {
            "queues": {queue: _counts(counts) for queue, counts in sorted(self.queues.items())},
            "jobs": {
                name: {"origin": self.origins.of(name).value, "counts": _counts(counts)}
                for name, counts in sorted(names.items())
            },
            "totals": {
                "all": _counts(total(self.queues.values())),
                "application": _counts(total(self.application.values())),
                "library": _counts(total(self.library.values())),
            },
        }


def stats_view(store: JobStore, origins: JobOrigins) -> StatsView:
    """The store's counters per queue and per job name, the library's names apart."""
    stats: JobStats = store.stats()
    application: dict[str, Counts] = {}
    library: dict[str, Counts] = {}
    for name, counts in sorted(stats.by_name.items()):
        (library if origins.of(name).library else application)[name] = counts
    return StatsView(
        queues=dict(sorted(stats.counts.items())),
        application=application,
        library=library,
        origins=origins,
    )


def total(rows: Iterable[Counts]) -> dict[JobStatus, int]:
    """The counts of ``rows`` added up, status by status."""
    added = dict.fromkeys(JobStatus, 0)
    for counts in rows:
        for status, count in counts.items():
            added[status] += count
    return added


def _counts(counts: Counts) -> dict[str, int]:
    return {status.value: counts.get(status, 0) for status in JobStatus}


# --- acting on one job ---------------------------------------------------------------------


class Answer(StrEnum):
    """How a command on one job ended."""

    DONE = "done"
    NOT_FOUND = "not-found"
    """Unknown, or another tenant's."""
    REFUSED = "refused"
    """Its status does not allow it (a dead job is not cancelled, a queued one not retried)."""
    ARMED_TIMEOUT = "armed-timeout"
    """A process manager's timeout still to fire: cancelled only when forced."""


@dataclass(frozen=True, slots=True)
class JobAnswer:
    answer: Answer
    job: StoredJob | None = None
    """The job as it was found before the command (None when not found)."""
    timeout: ProcessTimeout | None = None
    """The armed timeout that refused a cancel."""


def cancel_job(
    store: JobStore,
    job_id: str,
    *,
    tenant_id: str | None,
    now: datetime,
    origins: JobOrigins,
    force: bool = False,
) -> JobAnswer:
    """Cancel the job ``job_id``, unless it is an armed process timeout and ``force`` is not
    given: then nothing changes, and the answer names the process and the instance."""
    job = store.find(job_id, tenant_id=tenant_id)
    if job is None:
        return JobAnswer(Answer.NOT_FOUND)
    timeout = armed_timeout(job, origins)
    if timeout is not None and not force:
        return JobAnswer(Answer.ARMED_TIMEOUT, job, timeout)
    done = store.cancel(job_id, tenant_id=tenant_id, now=now)
    return JobAnswer(Answer.DONE if done else Answer.REFUSED, job)


def retry_dead_job(
    store: JobStore, job_id: str, *, tenant_id: str | None, now: datetime
) -> JobAnswer:
    """Queue the dead job ``job_id`` again (the relay publishes it)."""
    if store.retry_dead(job_id, tenant_id=tenant_id, now=now):
        return JobAnswer(Answer.DONE)
    job = store.find(job_id, tenant_id=tenant_id)
    return JobAnswer(Answer.NOT_FOUND if job is None else Answer.REFUSED, job)


# --- acting on many ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """The jobs a bulk command acts on, read before it acts: what the operator confirms."""

    job_ids: tuple[str, ...]
    skipped_timeouts: int = 0
    """Armed process timeouts the filter reached and the command leaves alone."""


def select_to_cancel(
    store: JobStore,
    where: JobFilter,
    *,
    now: datetime,
    origins: JobOrigins,
    force: bool = False,
) -> Selection:
    """The jobs ``where`` reaches that a cancel can end, armed process timeouts apart unless
    ``force``. Without a state, each cancellable state is read on its own index.

    Raises:
        ValueError: ``where.state`` is one no cancel ends (dead, succeeded, cancelled).
    """
    if where.state is not None and where.state not in CANCELLABLE_STATES:
        raise ValueError(
            f"a {where.state.value} job is not cancelled: only "
            + ", ".join(state.value for state in CANCELLABLE_STATES)
            + " ones"
        )
    states = CANCELLABLE_STATES if where.state is None else (where.state,)
    chosen: list[str] = []
    skipped = 0
    for state in states:
        for job in jobs_matching(store, replace(where, state=state), now=now):
            if not force and armed_timeout(job, origins) is not None:
                skipped += 1
            else:
                chosen.append(job.id)
    return Selection(tuple(chosen), skipped)


def select_dead(store: JobStore, where: JobFilter, *, now: datetime) -> Selection:
    """The dead jobs ``where`` reaches (its state, if any, is read as dead)."""
    return Selection(
        tuple(job.id for job in jobs_matching(store, replace(where, state=JobState.DEAD), now=now))
    )


def cancel_selected(
    store: JobStore, selection: Selection, *, tenant_id: str | None, now: datetime
) -> int:
    """Cancel each job of ``selection``; how many are cancelled (one that finished meanwhile
    is not)."""
    return sum(store.cancel(job_id, tenant_id=tenant_id, now=now) for job_id in selection.job_ids)


def retry_selected(
    store: JobStore, selection: Selection, *, tenant_id: str | None, now: datetime
) -> int:
    """Queue each dead job of ``selection`` again; how many were still dead."""
    return sum(
        store.retry_dead(job_id, tenant_id=tenant_id, now=now) for job_id in selection.job_ids
    )


def jobs_matching(store: JobStore, where: JobFilter, *, now: datetime) -> Iterator[StoredJob]:
    """Every job ``where`` reaches at ``now``, page after page, most recently enqueued first."""
    cursor: str | None = None
    while True:
        page = store.list_page(where, now=now, limit=SELECTION_PAGE, cursor=cursor)
        yield from page.jobs
        cursor = page.cursor
        if cursor is None:
            return


def purge(
    store: JobStore,
    *,
    before: datetime,
    dead: bool = False,
    batch: int = PURGE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete the succeeded and cancelled jobs finished before ``before`` (the dead too when
    ``dead``), ``batch`` at a time, oldest first; how many. ``progress`` gets the count so far
    after each batch."""
    if batch <= 0:
        raise ValueError(f"batch must be positive, not {batch}")
    statuses = (*PURGED_BY_DEFAULT, JobStatus.DEAD) if dead else PURGED_BY_DEFAULT
    purged = 0
    while True:
        deleted = store.purge_finished(before=before, statuses=statuses, limit=batch)
        purged += deleted
        if progress is not None and deleted:
            progress(purged)
        if deleted < batch:
            return purged


def _instant(at: datetime | None) -> str | None:
    return None if at is None else iso_ms(at)
