"""The join of a spread occurrence: which tenants still have to run, and the first that failed.

With ``tenant_runs: 'spread'`` the tenant runs of one occurrence are tasks of their own, on any
worker. The occurrence keeps the seeds' rules all the same: every tenant has its run, a tenant
that fails does not stop the others, and the occurrence has one outcome, recorded once every
tenant had its run, failed with the first error (first in the directory's order, as when the
runs go one after the other). ``JobTenantRuns`` is that join, kept in a store every worker
reaches: the task that spreads the occurrence opens it with the tenants, each tenant run
completes its tenant, and the one completion that empties it gets the tally and records the
occurrence. It lives as long as the run in progress (the run state's time to live): a worker
that dies with a tenant in hand leaves the occurrence to expire as any run of a dead worker.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.instants import to_utc
from ddd_celery.scheduling.outcomes import JobRun, Outcome, context_of

_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class TenantFailure:
    """What a failed tenant run leaves in the join: whose it was and what it raised, no message."""

    tenant_id: str
    error_code: str
    error_type: str


@dataclass(frozen=True, slots=True)
class TenantTally:
    """The join once every tenant had its run: how many ran, and the first failure, if any."""

    tenants: int
    failure: TenantFailure | None


class JobTenantRuns(ABC):
    """The tenants of each spread occurrence that have not had their run yet.

    An occurrence is ``(job, scheduled_at)``. Every method is atomic for one occurrence, so
    tenant runs ending at once on several workers each complete their tenant, and exactly one
    of them gets the tally.
    """

    @abstractmethod
    def start(
        self, job: str, scheduled_at: datetime, tenants: Sequence[str], *, ttl_ms: int
    ) -> bool:
        """Open the join of an occurrence with its tenants, in the directory's order.

        It expires after ``ttl_ms`` (the run's time to live). False, and nothing changed, when
        the occurrence already has one (a start sent again).

        Raises:
            ValueError: ``scheduled_at`` is naive, ``ttl_ms`` not positive, ``tenants`` empty or
                holding a tenant twice; nothing is opened.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def complete(
        self, job: str, scheduled_at: datetime, tenant: str, *, failure: TenantFailure | None
    ) -> TenantTally | None:
        """The run of ``tenant`` ended (``failure`` when it failed): strike it off the join.

        Returns the tally to the one call that struck off the last tenant, and to that call sent
        again (the same tenant: its reply may have been lost); None to every other call, and to
        one for a tenant already struck off, not in the join, or whose join expired (nothing
        changes). The failure kept is that of the tenant that comes first in the order given
        to ``start``. A join ended stays until it expires, so a start sent again opens nothing.

        Raises:
            ValueError: ``scheduled_at`` is naive; nothing changes.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def pending(self, job: str, scheduled_at: datetime) -> int | None:
        """How many tenants of the occurrence have not had their run; None without a join.

        Raises:
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """


@dataclass(slots=True)
class _Join:
    order: dict[str, int]
    total: int
    expires_at: datetime
    failure: tuple[int, TenantFailure] | None = field(default=None)
    last: str | None = None
    """The tenant whose run ended the join, once every tenant had its run."""

    def tally(self) -> TenantTally:
        return TenantTally(self.total, None if self.failure is None else self.failure[1])


class InMemoryJobTenantRuns(JobTenantRuns):
    """The joins of one process (a solo worker, a test); expiry is read on the given clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._joins: dict[tuple[str, datetime], _Join] = {}
        self._mutex = threading.Lock()

    def start(
        self, job: str, scheduled_at: datetime, tenants: Sequence[str], *, ttl_ms: int
    ) -> bool:
        key = (job, to_utc(scheduled_at, "scheduled_at"))
        order = check_tenants(tenants, ttl_ms)
        with self._mutex:
            if self._live(key) is not None:
                return False
            expires_at = self._clock.now() + timedelta(milliseconds=ttl_ms)
            self._joins[key] = _Join(order, len(order), expires_at)
            return True

    def complete(
        self, job: str, scheduled_at: datetime, tenant: str, *, failure: TenantFailure | None
    ) -> TenantTally | None:
        key = (job, to_utc(scheduled_at, "scheduled_at"))
        with self._mutex:
            join = self._live(key)
            if join is None:
                return None
            if join.last is not None:
                return join.tally() if tenant == join.last else None
            if tenant not in join.order:
                return None
            position = join.order.pop(tenant)
            if failure is not None and (join.failure is None or position < join.failure[0]):
                join.failure = (position, failure)
            if join.order:
                return None
            join.last = tenant
            return join.tally()

    def pending(self, job: str, scheduled_at: datetime) -> int | None:
        with self._mutex:
            join = self._live((job, to_utc(scheduled_at, "scheduled_at")))
            return None if join is None else len(join.order)

    def _live(self, key: tuple[str, datetime]) -> _Join | None:
        join = self._joins.get(key)
        if join is not None and join.expires_at <= self._clock.now():
            del self._joins[key]
            return None
        return join


def check_tenants(tenants: Sequence[str], ttl_ms: int) -> dict[str, int]:
    """Each tenant's place in the order, once ``start``'s arguments are checked."""
    if ttl_ms <= 0:
        raise ValueError(f"a join's time to live is a positive number of ms, not {ttl_ms}")
    order = {tenant: position for position, tenant in enumerate(tenants)}
    if not order:
        raise ValueError("a spread occurrence needs at least one tenant")
    if len(order) != len(tenants):
        raise ValueError("a tenant is listed twice: each tenant has one run per occurrence")
    return order


def joined_run(
    job: str,
    scheduled_at: datetime,
    *,
    started_at: datetime,
    ended_at: datetime,
    correlation_id: str,
    tally: TenantTally,
) -> JobRun:
    """The one record of a spread occurrence, from its tally: failed with its first failure.

    From the start of the spread to the end of its last tenant run, as one run in turn is.
    """
    failure = tally.failure
    return JobRun(
        job=job,
        context=context_of(job),
        scheduled_at=scheduled_at,
        outcome=Outcome.SUCCEEDED if failure is None else Outcome.FAILED,
        started_at=started_at,
        duration_ms=(ended_at - started_at) / _MS,
        error_code=None if failure is None else failure.error_code,
        error_type=None if failure is None else failure.error_type,
        correlation_id=correlation_id,
        tenant_id=None if failure is None else failure.tenant_id,
    )
