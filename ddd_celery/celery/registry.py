"""What ``install_jobs`` wired on a Celery app, read by beat, workers and the CLI.

It lives on the app as ``app.ddd_jobs``: beat builds its scheduler from it, the worker's tasks
build and run jobs from it, so both sides of a deployment share one description of the jobs.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.schedule import ParsedJobSchedule
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.ids import IdGenerator
from ddd_celery.kernel.lock import Lock
from ddd_celery.kernel.scope import ExecutionScope
from ddd_celery.kernel.tenants import TenantDirectory
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.errors import InvalidJobScheduleError, UnknownJobError
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.observability import RunRecorder
from ddd_celery.scheduling.occurrence import DEFAULT_GRACE_MS, SchedulerRules
from ddd_celery.scheduling.occurrence_store import OccurrenceStore, occurrence_store
from ddd_celery.scheduling.pauses import InMemoryJobPauses, JobPauses
from ddd_celery.scheduling.run_state import JobRunState

ATTRIBUTE = "ddd_jobs"

NOTHING: Mapping[str, Any] = MappingProxyType({})
"""The empty ``kwargs`` and ``options`` every declared job shares (two dicts each, else)."""

Provider = Callable[[], object]
"""Builds one dependency of a job's constructor, asked each time a job is built."""


@dataclass(frozen=True, slots=True)
class CeleryJob:
    """One job beat schedules: a declared class, or an entry of ``beat_schedule`` kept as is."""

    name: str
    schedule: ParsedJobSchedule
    task_name: str
    queue: str | None
    job_class: type | None = None
    """None for a ``beat_schedule`` entry: its task is the app's own, run as written."""
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=lambda: NOTHING)
    options: Mapping[str, Any] = field(default_factory=lambda: NOTHING)
    """``apply_async`` options of a ``beat_schedule`` entry."""
    inline: Callable[[datetime], object] | None = None
    """A system job beat runs in its own process at the instant, instead of sending a task
    (the relay of background jobs): recorded like any occurrence, under the same lock. It
    returns False when it logs what it did itself: its success is then logged at DEBUG."""
    declared_schedule: ParsedJobSchedule | None = None
    """The schedule the job was declared with, when settings changed it (``schedule`` is the
    one it runs on): beat logs both at start."""

    @property
    def declared(self) -> bool:
        return self.job_class is not None


@dataclass(slots=True)
class CeleryJobs:
    """The jobs of an app and the ports their drivers share."""

    jobs: Mapping[str, CeleryJob]
    clock: Clock
    lock: Lock
    checkpoints: JobCheckpoints | None
    run_state: JobRunState
    last_runs: JobLastRuns | None
    """Where ``recorder`` keeps each job's latest record, read by ``celery jobs list``."""
    ids: IdGenerator
    scope: ExecutionScope
    recorder: RunRecorder
    rules: SchedulerRules
    tenants: TenantDirectory | None
    start: bool
    """False in a process that registers and describes jobs but runs nothing by time (RUN_JOBS)."""
    providers: Mapping[type, Provider]
    grace_ms: int = DEFAULT_GRACE_MS
    """How long a worker that stops waits for its runs before aborting them (``JOB_ABORTED``)."""
    settle: Callable[[CeleryJobs], None] | None = None
    environ_refused: str | None = None
    """Why ``JOB_<CONTEXT>_<JOB>_ENABLED`` or ``RUN_JOBS`` could not be read, if they could
    not: ``check_configuration`` refuses the app with it."""
    """Reads what the app's configuration decides (``ddd_celery_*``), once, at first use."""
    pauses: JobPauses = field(default_factory=InMemoryJobPauses)
    """The jobs an operator paused (``celery jobs pause``), read by beat at each tick that has
    an occurrence to send; beside the lock once settled (``celery/pauses.py``)."""
    _occurrences: tuple[tuple[int, ...], OccurrenceStore] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _ports: dict[type, dict[str, type]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def occurrences(self) -> OccurrenceStore:
        """The stores an occurrence touches, combined where they allow (``occurrence_store``).

        Built at first use and again whenever a store is replaced (``settle``).
        """
        stores = (self.lock, self.run_state, self.checkpoints, self.last_runs)
        key = tuple(id(store) for store in stores)
        if self._occurrences is None or self._occurrences[0] != key:
            built = occurrence_store(self.lock, self.run_state, self.checkpoints, self.last_runs)
            self._occurrences = (key, built)
        return self._occurrences[1]

    def add_system_job(self, job: CeleryJob) -> None:
        """Add a job the library itself runs (the relay); a name already taken is refused."""
        if job.name in self.jobs:
            raise InvalidJobScheduleError(
                "declared twice: a job name is unique in the application", job=job.name
            )
        self.jobs = {**self.jobs, job.name: job}

    def job(self, name: str) -> CeleryJob:
        try:
            return self.jobs[name]
        except KeyError:
            raise UnknownJobError(f"no job is named {name!r}", job=name) from None

    def build(self, job: CeleryJob) -> Any:
        """A new instance of the job's class, each constructor parameter from its provider.

        The constructor's ports are read once per class (``dependencies`` reads annotations),
        not at every message.
        """
        if job.job_class is None:
            raise TypeError(f"{job.name} is a beat_schedule entry, not a declared job")
        ports = self._ports.get(job.job_class)
        if ports is None:
            ports = self._ports[job.job_class] = dependencies(job)
        arguments = {name: self.providers[port]() for name, port in ports.items()}
        return job.job_class(**arguments)


class BuiltJob(Protocol):
    """What building a job needs to know: its name (for errors) and its class, if declared."""

    @property
    def name(self) -> str: ...

    @property
    def job_class(self) -> type | None: ...


def dependencies(job: BuiltJob) -> dict[str, type]:
    """The ports a job's constructor takes, by parameter name, read from its annotations."""
    if job.job_class is None:
        return {}
    init = next(
        vars(klass)["__init__"] for klass in job.job_class.__mro__ if "__init__" in vars(klass)
    )
    if init is object.__init__:
        return {}
    hints = typing.get_type_hints(init)
    ports: dict[str, type] = {}
    for name, parameter in inspect.signature(job.job_class).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        port = hints.get(name)
        if not isinstance(port, type):
            raise DeclarationError(
                f"constructor parameter {name!r} must be annotated with the port it takes",
                job=job.name,
            )
        ports[name] = port
    return ports


def check_providers(jobs: Sequence[BuiltJob], providers: Mapping[type, Provider]) -> None:
    """Refuse at wiring time a job whose constructor needs a port nobody provides.

    A class is read once, however many jobs it runs.
    """
    checked: set[type | None] = set()
    for job in jobs:
        if job.job_class in checked:
            continue
        checked.add(job.job_class)
        for name, port in dependencies(job).items():
            if port not in providers:
                raise DeclarationError(
                    f"constructor parameter {name!r} needs a {port.__name__}, which no provider "
                    "gives: pass it in providers={...}",
                    job=job.name,
                )


def jobs_of(app: Any) -> CeleryJobs:
    """The jobs wired on ``app``, settled; a clear error when ``install_jobs`` was never called.

    The first call reads the app's configuration into the stores (``settle``), which raises
    ``JobsConfigError`` when it cannot run the jobs.
    """
    jobs = getattr(app, ATTRIBUTE, None)
    if not isinstance(jobs, CeleryJobs):
        raise LookupError(
            f"no jobs are installed on Celery app {getattr(app, 'main', app)!r}: "
            "call ddd_celery.celery.install_jobs(app, ...) where the app is built"
        )
    settle = jobs.settle  # read once: another thread may settle and clear it meanwhile
    if settle is not None:
        settle(jobs)
    return jobs
