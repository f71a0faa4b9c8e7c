"""The text of each generated file, ruff-clean at the default line length of 88.

Templates are plain ``str.format`` texts with every value a name the generator checked, so no
value can break out of the Python it lands in. A job's arguments are written with ``repr``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ddd_celery.generate.names import JobNames
from ddd_celery.scheduling.settings import enabled_variable


def settings_line(job: str) -> str:
    """The line of ``job`` in ``JOBS``: its name, and the variable that switches it off."""
    return f"    {_literal(job)},  # {enabled_variable(job)}=false switches it off\n"


def imports(modules: Mapping[str, Sequence[str]]) -> str:
    """``from module import names`` lines, sorted and wrapped as ruff writes them."""
    lines = []
    for module, names in sorted(modules.items()):
        line = f"from {module} import {', '.join(names)}\n"
        if len(line) > 89:
            line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
        lines.append(line)
    return "".join(lines)


def _literal(value: object) -> str:
    """``value`` as ruff format writes it: strings in double quotes."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def job_settings_module(*, jobs: Sequence[str], run_jobs_by_default: bool) -> str:
    listed = "".join(settings_line(job) for job in jobs)
    return _JOB_SETTINGS.format(
        jobs=f"[\n{listed}]" if listed else "[]", run_jobs_by_default=run_jobs_by_default
    )


_JOB_SETTINGS = '''\
"""The platform's job settings: each job's switch, read from the environment.

``ddd-celery generate job`` adds each job to ``JOBS``; ``JOB_<CONTEXT>_<JOB>_ENABLED=false``
then switches it off in one environment, with no code change. ``ddd-celery generate
worker`` turns ``RUN_JOBS_BY_DEFAULT`` off: the API leaves the jobs to the worker, whose
entry point turns ``RUN_JOBS`` on. The app is wired with both::

    install_jobs(app, ..., settings=job_settings(os.environ), start=run_jobs(os.environ))
"""

from __future__ import annotations

from collections.abc import Mapping

from ddd_celery.scheduling.settings import (
    JobSettings,
    job_settings_from_env,
    run_jobs_from_env,
)

RUN_JOBS_BY_DEFAULT = {run_jobs_by_default}
"""Whether a process starts jobs by time when ``RUN_JOBS`` is not set."""

JOBS: list[str] = {jobs}
"""Every scheduled job of the application, by name: each one has its switch."""


def job_settings(environ: Mapping[str, str]) -> dict[str, JobSettings]:
    """The switch of each job whose ``JOB_<CONTEXT>_<JOB>_ENABLED`` is set."""
    return job_settings_from_env(environ, JOBS)


def run_jobs(environ: Mapping[str, str]) -> bool:
    """Whether this process starts jobs: ``RUN_JOBS``, else ``RUN_JOBS_BY_DEFAULT``."""
    return run_jobs_from_env(environ, default=RUN_JOBS_BY_DEFAULT)
'''


def scheduled_job_module(
    names: JobNames, *, command_module: str, schedule: Mapping[str, object]
) -> str:
    arguments = [_literal(names.name), *(f"{k}={_literal(v)}" for k, v in schedule.items())]
    decorator = f"@scheduled({', '.join(arguments)})"
    if len(decorator) > 88:
        decorator = "@scheduled(\n" + "".join(f"    {a},\n" for a in arguments) + ")"
    return _SCHEDULED_JOB.format(
        names=names,
        name=f'"{names.name}"',
        decorator=decorator,
        imports=imports({command_module: [names.command]}),
    )


_SCHEDULED_JOB = '''\
"""{names.job_class}: sends {names.command} for the instant each occurrence was due.

The job decides nothing: the rule lives in the handler of {names.command}, which must be
safe to run twice for one instant (an occurrence may run twice, or not at all).
"""

from __future__ import annotations

from ddd_celery import JobExecution, scheduled
from ddd_celery.kernel import CommandBus, system_actor

{imports}

{decorator}
class {names.job_class}:
    """Sends ``{names.command}`` as the job's system actor, as of its occurrence."""

    def __init__(self, commands: CommandBus) -> None:
        self._commands = commands

    def run(self, execution: JobExecution) -> None:
        actor = system_actor({name})
        self._commands.execute({names.command}(actor, execution.scheduled_at))
'''


def scheduled_command_module(names: JobNames) -> str:
    return _SCHEDULED_COMMAND.format(names=names)


_SCHEDULED_COMMAND = '''\
"""{names.command}: the use case {names.name} triggers; its handler holds the rule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel import Actor, require_aware


@dataclass(frozen=True, slots=True)
class {names.command}:
    """Do the work due at ``as_of`` and not done yet: safe to send twice."""

    actor: Actor
    as_of: datetime
    """The occurrence the work is for, never the instant the job really ran."""

    def __post_init__(self) -> None:
        require_aware(self.as_of, "as_of")
'''


def scheduled_job_spec(names: JobNames, *, job_module: str, command_module: str) -> str:
    return _SCHEDULED_SPEC.format(
        names=names,
        imports=imports({command_module: [names.command], job_module: [names.job_class]}),
    )


_SCHEDULED_SPEC = '''\
"""{names.name} on the manual scheduler: what it sends, and when.

The spec of the rule goes with the handler of {names.command}; this one pins the schedule
and the command. No broker, no sleep: the scheduler moves a fixed clock.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ddd_celery import next_occurrence
from ddd_celery.declarations import declaration_of
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryCommandBus,
    InMemoryLock,
    SequentialIdGenerator,
    system_actor,
)
from ddd_celery.testing import ManualJobScheduler

{imports}
START = datetime(2026, 3, 2, tzinfo=UTC)


def test_each_occurrence_sends_the_command_for_the_instant_it_was_due() -> None:
    declaration = declaration_of({names.job_class})
    first = next_occurrence(declaration.schedule, START)
    second = next_occurrence(declaration.schedule, first)
    sent: list[{names.command}] = []
    bus = InMemoryCommandBus()
    bus.register({names.command}, sent.append)
    clock = FixedClock(START)
    scheduler = ManualJobScheduler(
        clock=clock,
        lock=InMemoryLock(clock),
        scope=FixedExecutionScope(),
        ids=SequentialIdGenerator(),
    )
    scheduler.register(
        name=declaration.name,
        schedule=declaration.schedule,
        run={names.job_class}(bus).run,
    )

    async def two_occurrences() -> None:
        await scheduler.start()
        await scheduler.advance(int((second - START).total_seconds() * 1000))
        await scheduler.stop()

    asyncio.run(two_occurrences())

    assert [command.as_of for command in sent] == [first, second]
    assert {{command.actor for command in sent}} == {{system_actor(declaration.name)}}
'''


def background_job_module(names: JobNames, *, command_module: str) -> str:
    return _BACKGROUND_JOB.format(
        names=names,
        name=f'"{names.name}"',
        imports=imports({command_module: [names.command]}),
    )


_BACKGROUND_JOB = '''\
"""{names.job_class}: work a use case hands over, run later by a worker, at least once.

The job sends {names.command} with its id, a key the handler can record so that a second
attempt of the same job does nothing twice.
"""

from __future__ import annotations

from ddd_celery import BackgroundJobExecution, background
from ddd_celery.kernel import CommandBus, system_actor
from pydantic import BaseModel

{imports}

class {names.payload_class}(BaseModel):
    """What the use case hands over: validated when enqueued and at each attempt."""


@background({name})
class {names.job_class}:
    """Sends ``{names.command}`` as the job's system actor, keyed by the job's id."""

    def __init__(self, commands: CommandBus) -> None:
        self._commands = commands

    def run(
        self, payload: {names.payload_class}, execution: BackgroundJobExecution
    ) -> None:
        actor = system_actor({name})
        self._commands.execute({names.command}(actor, execution.job_id))
'''


def background_command_module(names: JobNames) -> str:
    return _BACKGROUND_COMMAND.format(names=names)


_BACKGROUND_COMMAND = '''\
"""{names.command}: the use case the background job {names.name} sends."""

from __future__ import annotations

from dataclasses import dataclass

from ddd_celery.kernel import Actor


@dataclass(frozen=True, slots=True)
class {names.command}:
    """Do the work job ``job_id`` asked for, once, however many attempts it takes."""

    actor: Actor
    job_id: str
    """The background job's id: the same at every attempt, so the handler can key on it."""
'''


def background_job_spec(names: JobNames, *, job_module: str, command_module: str) -> str:
    return _BACKGROUND_SPEC.format(
        names=names,
        imports=imports(
            {
                command_module: [names.command],
                job_module: [names.job_class, names.payload_class],
            }
        ),
    )


_BACKGROUND_SPEC = '''\
"""{names.name} on QueueWorker and ManualJobTimers: enqueued once, run once.

No broker, no sleep: the worker polls an in-memory store on a fixed clock.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ddd_celery.background import InMemoryJobStore, QueueWorker, StoredJobQueue
from ddd_celery.kernel import (
    FixedClock,
    FixedExecutionScope,
    InMemoryCommandBus,
    SequentialIdGenerator,
)
from ddd_celery.testing import ManualJobTimers

{imports}
START = datetime(2026, 3, 2, tzinfo=UTC)


def test_an_enqueued_job_sends_the_command_once_with_its_id() -> None:
    sent: list[{names.command}] = []
    bus = InMemoryCommandBus()
    bus.register({names.command}, sent.append)
    clock = FixedClock(START)
    scope = FixedExecutionScope()
    store = InMemoryJobStore()
    jobs = StoredJobQueue(
        store=store, clock=clock, ids=SequentialIdGenerator(), scope=scope
    )
    worker = QueueWorker(
        store=store, clock=clock, scope=scope, timers=ManualJobTimers(clock)
    )
    worker.register({names.job_class}, lambda: {names.job_class}(bus))
    job_id = jobs.enqueue({names.job_class}, {names.payload_class}())

    async def two_polls() -> None:
        await worker.run_due()
        await worker.run_due()

    asyncio.run(two_polls())

    assert [command.job_id for command in sent] == [job_id]
    view = jobs.find(job_id)
    assert view is not None
    assert view.status == "succeeded"
'''


def worker_module(*, package: str, app_module: str, app_attribute: str) -> str:
    return _WORKER.format(package=package, app_module=app_module, app_attribute=app_attribute)


_WORKER = '''\
"""The worker deployment's entry point: the application's Celery app, its jobs on.

    celery -A {package}.worker worker -l INFO   # runs the tasks of the jobs
    celery -A {package}.worker beat -l INFO     # sends each occurrence once: one or more

The API process imports ``{app_module}``, where ``RUN_JOBS`` is off by default
(``RUN_JOBS_BY_DEFAULT`` in ``{package}/platform/job_settings.py``): a beat started on it
by mistake sends nothing, and says so. ``RUN_JOBS=false`` on this deployment still wins.
The app collects the jobs of its contexts (``collect_scheduled_jobs("{package}.billing")``),
never of ``{package}`` itself: that walk would import this module into the API.
"""

import importlib
import os

from ddd_celery.scheduling.settings import RUN_JOBS

os.environ.setdefault(RUN_JOBS, "true")  # read when the app is built, just below

app = importlib.import_module("{app_module}").{app_attribute}

__all__ = ["app"]
'''
