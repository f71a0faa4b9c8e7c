"""The batches of a burst: each begun in the stores while beat publishes the one before it.

At 100,000 occurrences due together, beat waited on Redis a quarter of its tick: each batch's
``begin`` (its locks, checkpoints and claims, a script per 250) answered before the batch was
published, and nothing was published while it ran. With more than one batch in a tick, the
next batch is begun on a thread of its own while beat concludes and publishes the current one:
the stores work while beat's Python does. The stores are still asked in the order of the walk,
one batch at a time (the next is asked only once the one before it answered), so every beat
still meets the locks in the order it would have alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ddd_celery.celery.registry import CeleryJob
from ddd_celery.kernel.lock import Lease
from ddd_celery.scheduling.occurrence import Occurrence
from ddd_celery.scheduling.occurrence_store import Beginning

Begin = Callable[["Batch"], "list[Exception | None] | None"]
"""Asks the stores to begin a batch: what each lease released answered, None if it failed."""


@dataclass(eq=False, slots=True)
class Batch:
    """The occurrences beat begins and publishes together, and what became of them."""

    items: Sequence[tuple[CeleryJob, Occurrence]]
    beginnings: list[Beginning]
    releasing: list[tuple[str, Lease]]
    """The leases released with this batch, by job: a share of those the tick frees."""
    sent: set[int] = field(default_factory=set)
    """The ids of its occurrences handed over or published."""
    released: list[Exception | None] | None = None
    """What ``begin`` answered for each lease of ``releasing``; None until it answered, or if
    it could not be asked at all."""
    answer: Future[list[Exception | None] | None] | None = None
    """The begin running ahead on the thread, until it answered."""

    @property
    def held(self) -> int:
        """How many of its occurrences another beat holds the lock of."""
        return sum(1 for beginning in self.beginnings if beginning.lock_held)


class BeginsAhead:
    """The one thread that begins the next batch of a burst; made at the first burst."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    def start(self, batch: Batch, begin: Begin) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ddd-beat-begin")
        batch.answer = self._executor.submit(begin, batch)

    @staticmethod
    def wait(batch: Batch) -> None:
        """Wait for the batch's begin, if it runs ahead; what it raised is raised here."""
        answer, batch.answer = batch.answer, None
        if answer is not None:
            batch.released = answer.result()

    def close(self) -> None:
        """End the thread once the begin it runs, if any, answered."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
