"""The unit of work: what a use case changes is committed whole, or not at all.

Work that must follow a commit and never a rollback (publishing the wake-up of a background job)
is handed to ``after_commit``; outside a unit of work it runs at once, since nothing can roll
back.
"""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager

AfterCommit = Callable[[], None]


class UnitOfWork(ABC):
    """Opens units of work and runs what waits for their commit.

    ``begin()`` commits when its block ends and rolls back when the block raises; units of work
    do not nest (a ``begin`` inside another joins it). ``after_commit`` actions run once, in the
    order given, after the outermost commit; on rollback they are dropped. Where the adapter
    has savepoints, one rolled back drops the actions handed over inside it, and only those.
    An action that raises does not undo the commit: the error propagates from ``begin`` after
    the other actions ran.
    """

    @abstractmethod
    @contextmanager
    def begin(self) -> Iterator[None]:
        """Open a unit of work (or join the one in progress) until the block ends.

        Raises:
            Exception: what the block raised, once the unit is rolled back; or, the unit
                committed, the first error an ``after_commit`` action raised, once the others
                ran (the commit stands).
        """

    @abstractmethod
    def in_progress(self) -> bool:
        """True inside ``begin``'s block, in this thread or task."""

    @abstractmethod
    def after_commit(self, action: AfterCommit) -> None:
        """Run ``action`` after the unit of work in progress commits; now when none is.

        Raises:
            Exception: what ``action`` raised, when it ran now (no unit of work in progress).
        """


class InMemoryUnitOfWork(UnitOfWork):
    """A unit of work with nothing to commit but its ``after_commit`` actions.

    For specs and for applications whose state lives in memory; ``commits`` and ``rollbacks``
    count what happened, for assertions.
    """

    def __init__(self) -> None:
        self._pending: contextvars.ContextVar[list[AfterCommit] | None] = contextvars.ContextVar(
            f"ddd_celery_unit_of_work_{id(self)}", default=None
        )
        self.commits = 0
        self.rollbacks = 0

    @contextmanager
    def begin(self) -> Iterator[None]:
        if self._pending.get() is not None:
            yield
            return
        actions: list[AfterCommit] = []
        token = self._pending.set(actions)
        try:
            yield
        except BaseException:
            self.rollbacks += 1
            raise
        finally:
            self._pending.reset(token)
        self.commits += 1
        run_after_commit(actions)

    def in_progress(self) -> bool:
        return self._pending.get() is not None

    def after_commit(self, action: AfterCommit) -> None:
        actions = self._pending.get()
        if actions is None:
            action()
        else:
            actions.append(action)


def run_after_commit(actions: list[AfterCommit]) -> None:
    """Run every action, then raise the first error one of them raised (if any)."""
    first: BaseException | None = None
    for action in actions:
        try:
            action()
        except Exception as error:
            first = first or error
    if first is not None:
        raise first
