"""The seeds' rule that a job only triggers a use case, as an assertion a project runs.

"A job depends on no repository, no part of the model and no adapter" (seed 000, "A job only
triggers a use case"): its constructor takes ports, and only those the project allows a job,
such as the ``CommandBus``. Run it over the jobs of each context in a test of the project.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterable

from ddd_celery.declarations.scheduled import ScheduledJobDeclaration, declaration_of
from ddd_celery.kernel.commands import CommandBus


def assert_jobs_take_ports(
    jobs: Iterable[type | ScheduledJobDeclaration],
    *,
    ports: Iterable[type] = (CommandBus,),
) -> None:
    """Fail (``AssertionError``) naming each job whose constructor takes anything but ``ports``.

    ``jobs`` are the ``@scheduled`` classes or their declarations (``collect_scheduled_jobs``).
    A parameter passes when it is annotated with one of ``ports`` exactly: a repository, a
    domain object, an adapter (``InMemoryCommandBus`` rather than ``CommandBus``) or a
    parameter without annotation fails, all of them listed in one message.
    """
    allowed = tuple(ports)
    problems: list[str] = []
    for job in jobs:
        declaration = declaration_of(job) if isinstance(job, type) else job
        problems.extend(
            f"{declaration.name}: {problem}" for problem in _refused(declaration, allowed)
        )
    if problems:
        names = ", ".join(port.__name__ for port in allowed) or "none"
        raise AssertionError(
            "a job only triggers a use case: its constructor takes ports "
            f"({names}), never a repository, a domain object or an adapter; move the work "
            "into the handler of the command it sends:\n  " + "\n  ".join(problems)
        )


def _refused(declaration: ScheduledJobDeclaration, allowed: tuple[type, ...]) -> list[str]:
    init = declaration.job_class.__init__
    if init is object.__init__:
        return []
    hints = typing.get_type_hints(init)
    problems = []
    for name, parameter in inspect.signature(declaration.job_class).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            problems.append(f"constructor parameter {name!r} takes anything (*args, **kwargs)")
            continue
        port = hints.get(name)
        if port is None:
            problems.append(f"constructor parameter {name!r} says no type")
        elif port not in allowed:
            shown = getattr(port, "__name__", repr(port))
            problems.append(f"constructor parameter {name!r} takes {shown}, not a port")
    return problems
