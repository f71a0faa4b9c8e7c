"""``JobsCommand``: every ``celery -A app jobs`` command fails the same way, in one line.

An operator's command that cannot do its work (a store down, a configuration refused, an
argument the stores refuse) prints ``ddd_celery: <what failed>: <why>`` on stderr and exits 1,
never a traceback: the traceback of a connection refused says nothing the line does not, and a
hundred lines of it hide the one that matters. ``--traceback`` (on the ``jobs`` group) shows it
for a bug report.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click
from celery.bin.base import CeleryCommand

from ddd_celery.background.operations import printable
from ddd_celery.kernel.errors import DddCeleryError

JOBS_GROUP = "jobs"
"""The name of the group every operator's command is under, where the error line's path starts."""
STORE_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, DddCeleryError)
"""What a store or the wiring raises for a fault an operator can act on; anything else is a
bug and keeps Celery's own report."""


def why(error: BaseException) -> str:
    """The error and what caused it, type and message, control characters escaped: a store's
    connection error quotes no job data, and the operator needs to know which host refused."""
    causes = [error]
    while causes[-1].__cause__ is not None and len(causes) < 5:
        cause = causes[-1].__cause__
        if _quoted(cause, causes[-1]):
            break
        causes.append(cause)
    return printable("; caused by ".join(f"{type(cause).__name__}: {cause}" for cause in causes))


def _quoted(cause: BaseException, error: BaseException) -> bool:
    """Whether ``cause`` is an OS error whose words ``error`` already says: redis-py 8 chains
    the ``ConnectionRefusedError`` its own ``ConnectionError`` quotes ("... Connection
    refused.")."""
    return (
        isinstance(cause, OSError)
        and cause.errno is not None
        and bool(cause.strerror)
        and str(cause.strerror) in str(error)
    )


def fail(ctx: click.Context, what: str, error: BaseException) -> None:
    """``ddd_celery: <what>: <why>`` on stderr, exit 1 (the traceback too under ``--traceback``)."""
    if _show_traceback(ctx):
        traceback.print_exception(error, file=sys.stderr)
    click.echo(f"ddd_celery: {what}: {why(error)}", err=True)
    ctx.exit(1)


class JobsCommand(CeleryCommand):  # type: ignore[misc]  # celery ships no types
    """A ``celery`` command whose store and configuration errors are one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except STORE_ERRORS as error:
            fail(ctx, f"{command_path(ctx)} failed", error)
            return None


def command_path(ctx: click.Context) -> str:
    """The command as typed from ``jobs`` on (``jobs background stats``), whatever runs the
    group: ``celery``, ``python -m celery`` or a test's runner."""
    names: list[str] = []
    context: click.Context | None = ctx
    while context is not None and JOBS_GROUP not in names:
        names.append(context.command.name or "")
        context = context.parent
    return " ".join(reversed(names))


def _show_traceback(ctx: click.Context) -> bool:
    return bool(ctx.meta.get("ddd_celery.traceback", False))
