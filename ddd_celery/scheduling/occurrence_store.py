"""The I/O of an occurrence done in one step: what beat does before a publish, a worker after a run.

The core decides (``occurrence.py``): the lock key and its time to live, whether to claim the
run state and to queue, the run's time to live, which leases no beat can still want. Beat then
asks the stores: take the lock, write the checkpoint, claim the run state, release the old
leases. Asked one by one that is four round trips per occurrence; ``OccurrenceStore.begin`` does
it in one call for every occurrence due at the same instant. A worker that ends a run writes the
last run and ends the run state: ``OccurrenceStore.end`` does both in one call.

``ComposedOccurrenceStore`` does each step on the separate ports, in the order beat always did,
for stores that cannot combine them; a store that can (``RedisJobRunState`` with the other Redis
stores: one Lua script) offers its own through ``JobRunState.occurrence_store``. The contract
suite (``testing/contracts/occurrence_store.py``) proves both agree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ddd_celery.kernel.lock import Lease, Lock
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.outcomes import JobRun
from ddd_celery.scheduling.run_state import Claim, JobRunState

IN_THE_LOCK = "the lock"
IN_THE_RUN_STATE = "the run state"


@dataclass(slots=True)
class Beginning:
    """One occurrence about to be published: what the core decided, then what the store did.

    The caller fills the decision; ``OccurrenceStore.begin`` fills the answer as it goes, so a
    caller interrupted in the middle (a beat stopped) still knows how far it went.
    """

    job: str
    scheduled_at: datetime
    lock_key: str | None
    """``job:<name>:<instant>`` for a ``single_instance`` job; None when no lock is taken."""
    lock_ttl_ms: int
    claim: bool
    """Claim the run state (a declared job); False for a task that never reports its end."""
    queue: bool
    run_ttl_ms: int
    lease: Lease | None = None
    """The lease taken, when ``lock_key`` was."""
    token: str | None = None
    """The owner token asked for, where the store draws it before asking (so a stop before the
    answer still knows which lease would be this beat's). Set by the caller, it is kept: a
    begin repeated with the tokens of the first answers as the first did, where the store
    ``keeps_tokens``."""
    lock_held: bool = False
    """Another owner holds the lock: nothing else was done for this occurrence."""
    claimed: Claim | None = None
    """The run state's answer, when it was asked and answered."""
    checkpointed: bool = False
    """The checkpoint was written with the rest (else the caller writes it afterwards)."""
    may_have_claimed: bool = False
    """The run state was asked: a claim may be stored even without an answer."""
    error: Exception | None = None
    """Why the store could not be asked; nothing after it was done for this occurrence."""
    failed_in: str | None = None
    """``IN_THE_LOCK`` or ``IN_THE_RUN_STATE``: which store ``error`` is from."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """What ending a run did: the occurrence promoted behind it, and the stores that failed."""

    promoted: datetime | None
    last_run_error: Exception | None = None
    finish_error: Exception | None = None


class OccurrenceStore(ABC):
    """The stores an occurrence touches, asked in one call where the stores allow it.

    Every implementation does exactly what the separate ports would do, in the same order, for
    each occurrence: the lock (``Lock.acquire``; a lock held by another owner stops there), the
    checkpoint when this store keeps it (``JobCheckpoints.write``), the claim
    (``JobRunState.claim``). Occurrences are handled in the order given, each keeping its own
    lock key and answer.
    """

    keeps_tokens: bool = False
    """Whether ``begin`` keeps a token the caller set (``Beginning.token``), so that a begin sent
    again, by the caller or by its transport after a reply was lost, finds the locks that token
    took and the claims it made as its own instead of another owner's."""

    @abstractmethod
    def begin(
        self, beginnings: Sequence[Beginning], *, releasing: Sequence[Lease] = ()
    ) -> list[Exception | None]:
        """Lock, checkpoint and claim each of ``beginnings``; release the leases ``releasing``.

        Fills each ``Beginning`` as it goes. Never raises for a store that cannot be asked: the
        occurrences it could not handle get ``error`` and ``failed_in``, and the answer holds,
        for each lease of ``releasing``, None once released (or already gone) or the error of a
        release that could not be asked. What is not an ``Exception`` (a stop) goes through.
        """

    @abstractmethod
    def free(self, beginning: Beginning) -> datetime | None:
        """End the claim of an occurrence that will not run; return the one dropped behind it.

        As ``drop_queued`` then ``finish``. Where the occurrence asks a lock, only once its
        lease is known to be this caller's (a store that draws the token before asking also
        checks the lock still holds it), so a claim that may be another beat's is never ended.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def end(
        self, job: str, scheduled_at: datetime, *, ttl_ms: int, last_run: JobRun | None
    ) -> RunEnd:
        """Keep ``last_run`` (``JobLastRuns.write``), then end the run (``JobRunState.finish``).

        Never raises for a store that cannot be asked: ``RunEnd`` says which failed.
        """


class ComposedOccurrenceStore(OccurrenceStore):
    """Each step on its own port, one call after the other: any adapters, one round trip each.

    The checkpoint is left to the caller (``checkpointed`` stays False): beat writes it after
    its publishes, as it always did. The ports draw their own tokens (``Lock.acquire``), so a
    begin repeated is a new one: the lock its first took reads held by another owner.
    """

    def __init__(
        self, lock: Lock, run_state: JobRunState, last_runs: JobLastRuns | None = None
    ) -> None:
        self._lock = lock
        self._run_state = run_state
        self._last_runs = last_runs

    def begin(
        self, beginnings: Sequence[Beginning], *, releasing: Sequence[Lease] = ()
    ) -> list[Exception | None]:
        for beginning in beginnings:
            self._begin(beginning)
        released: list[Exception | None] = []
        for lease in releasing:
            try:
                self._lock.release(lease)
            except Exception as error:
                released.append(error)
            else:
                released.append(None)
        return released

    def _begin(self, beginning: Beginning) -> None:
        if beginning.lock_key is not None:
            try:
                lease = self._lock.acquire(beginning.lock_key, beginning.lock_ttl_ms)
            except Exception as error:
                beginning.error, beginning.failed_in = error, IN_THE_LOCK
                return
            if lease is None:
                beginning.lock_held = True
                return
            beginning.lease = lease
        if not beginning.claim:
            return
        beginning.may_have_claimed = True
        try:
            beginning.claimed = self._run_state.claim(
                beginning.job,
                beginning.scheduled_at,
                queue=beginning.queue,
                ttl_ms=beginning.run_ttl_ms,
            )
        except Exception as error:
            beginning.error, beginning.failed_in = error, IN_THE_RUN_STATE

    def free(self, beginning: Beginning) -> datetime | None:
        if beginning.lock_key is not None and beginning.lease is None:
            return None  # the lock was never this caller's: a claim, if any, is another's
        dropped = self._run_state.drop_queued(beginning.job)
        self._run_state.finish(beginning.job, beginning.scheduled_at, ttl_ms=beginning.run_ttl_ms)
        return dropped

    def end(
        self, job: str, scheduled_at: datetime, *, ttl_ms: int, last_run: JobRun | None
    ) -> RunEnd:
        last_run_error: Exception | None = None
        if last_run is not None and self._last_runs is not None:
            try:
                self._last_runs.write(last_run)
            except Exception as error:
                last_run_error = error
        try:
            promoted = self._run_state.finish(job, scheduled_at, ttl_ms=ttl_ms)
        except Exception as error:
            return RunEnd(None, last_run_error, error)
        return RunEnd(promoted, last_run_error)


def occurrence_store(
    lock: Lock,
    run_state: JobRunState,
    checkpoints: JobCheckpoints | None,
    last_runs: JobLastRuns | None,
) -> OccurrenceStore:
    """The store that does an occurrence's I/O in the fewest round trips these ports allow.

    The run state's own combined store when it offers one for these ports, else the composed one.
    """
    combined = run_state.occurrence_store(lock, checkpoints, last_runs)
    return combined if combined is not None else ComposedOccurrenceStore(lock, run_state, last_runs)
