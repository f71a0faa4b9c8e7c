"""The kernel ``UnitOfWork`` on SQLAlchemy 2 sessions: one Session and transaction per unit."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from ddd_celery.kernel.unit_of_work import AfterCommit, UnitOfWork, run_after_commit


@dataclass(slots=True)
class _Work:
    """The Session of a unit of work and its actions, as the Session's events sort them."""

    session: Session
    pending: list[tuple[AfterCommit, SessionTransaction | None]] = field(default_factory=list)
    """Handed to ``after_commit`` since the transaction began, each with the innermost
    transaction (a savepoint's, or the outermost) it was handed over in."""
    committed: list[AfterCommit] = field(default_factory=list)
    """Whose transaction committed: they run once ``begin`` has closed the Session."""

    def hand_over(self, action: AfterCommit) -> None:
        session = self.session
        self.pending.append((action, session.get_nested_transaction() or session.get_transaction()))

    def on_commit(self, session: Session) -> None:
        if session.in_nested_transaction():  # a savepoint released: its outcome is not yet known
            return
        self.committed += [action for action, _ in self.pending]
        self.pending = []

    def on_rollback(self, session: Session, rolled_back: SessionTransaction) -> None:
        """Drop the actions handed over in ``rolled_back`` or in a savepoint within it."""
        if not rolled_back.nested:
            self.pending = []
            return
        self.pending = [
            (action, within) for action, within in self.pending if not _inside(within, rolled_back)
        ]


def _inside(transaction: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is outer:
            return True
        transaction = transaction.parent
    return False


class SqlAlchemyUnitOfWork(UnitOfWork):
    """Each unit of work is a Session of ``session_factory``; repositories reach it by ``session``.

    ``begin`` opens the Session and its transaction, commits when the block ends and rolls back
    when it raises; a ``begin`` inside another (in the same thread or asyncio task: the current
    unit is a ContextVar) joins it. ``after_commit`` actions are moved aside by the Session's
    ``after_commit`` event of the outermost transaction and dropped by its rollback, so they
    follow the database's transaction exactly, and run after ``commit`` has returned and the
    Session is closed: the data they announce is visible to every other connection by then.

    A savepoint (``session.begin_nested()``) is followed as the database does: one rolled back
    drops the actions handed over inside it (and in the savepoints within it), since the work
    that asked for them is undone (a ``SqlJobStore`` job's row with it), and keeps the others;
    one released keeps its actions waiting for the outermost transaction, whose outcome alone
    decides.
    """

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._factory = session_factory
        self._current: contextvars.ContextVar[_Work | None] = contextvars.ContextVar(
            f"ddd_celery_sql_unit_of_work_{id(self)}", default=None
        )

    @contextmanager
    def begin(self) -> Iterator[None]:
        if self._current.get() is not None:
            yield
            return
        session = self._factory()
        work = _Work(session)
        event.listen(session, "after_commit", work.on_commit)
        event.listen(session, "after_soft_rollback", work.on_rollback)
        token = self._current.set(work)
        try:
            session.begin()
            yield
            session.commit()
        except BaseException as error:
            session.rollback()
            _run_committed_after(error, work.committed)
            raise
        finally:
            self._current.reset(token)
            session.close()
        run_after_commit(work.committed)

    def in_progress(self) -> bool:
        return self._current.get() is not None

    def after_commit(self, action: AfterCommit) -> None:
        work = self._current.get()
        if work is None:
            action()
        else:
            work.hand_over(action)

    def session(self) -> Session:
        """The Session of the unit of work in progress, for repositories.

        Raises ``LookupError`` outside ``begin``'s block: a repository writing outside a unit of
        work would commit nothing, silently.
        """
        work = self._current.get()
        if work is None:
            raise LookupError("no unit of work is in progress: call session() inside begin()")
        return work.session


def _run_committed_after(error: BaseException, committed: list[AfterCommit]) -> None:
    """Run the actions of a transaction the block committed itself before it raised.

    Their commit stands, so they run; the block's error still propagates, noting theirs.
    """
    try:
        run_after_commit(committed)
    except Exception as action_error:
        error.add_note(f"an after_commit action also raised {type(action_error).__name__}")
