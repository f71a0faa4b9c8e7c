"""Pauses under Celery: the store they live in, what beat knows of them, what ``jobs list`` shows.

The pauses live beside the lock, the one store every beat of a deployment must share: on its
Redis for a ``RedisLock``, in its database for a ``SqlLock``. ``install_jobs(pauses=...)`` picks
another store. With any other lock they live in one process's memory, which a ``celery jobs
pause`` never reaches, so the command refuses to pause there.

Beat reads them once per tick that has an occurrence to send (one round trip, never one per
job). A store that cannot be asked does not stop the scheduled jobs: beat says so once
(``StoreOutages``) and keeps the pauses it last read, so a paused job stays paused through a
short outage and a job resumed meanwhile runs once the store answers again; a beat that has not
read them yet (started during the outage) knows of no pause.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddd_celery.celery.beat_outages import PAUSES, StoreOutages
from ddd_celery.celery.registry import CeleryJobs
from ddd_celery.kernel.lock import Lock
from ddd_celery.scheduling.pauses import InMemoryJobPauses, JobPauses, Pause


def shared_pauses(lock: Lock) -> JobPauses:
    """The pauses beside ``lock``: ``<prefix>pauses`` on a ``RedisLock``'s Redis, the
    ``job_pauses`` table of a ``SqlLock``'s database and prefix; else in this process's memory.

    Each family is imported only when installed (the ``redis`` and ``sql`` extras).
    """
    try:
        from ddd_celery.redis.lock import RedisLock  # noqa: PLC0415
        from ddd_celery.redis.pauses import RedisJobPauses  # noqa: PLC0415
    except ImportError:
        pass
    else:
        if isinstance(lock, RedisLock):
            return RedisJobPauses(lock.client, prefix=lock.prefix)
    try:
        from ddd_celery.sql.lock import SqlLock  # noqa: PLC0415
        from ddd_celery.sql.pauses import SqlJobPauses  # noqa: PLC0415
    except ImportError:
        pass
    else:
        if isinstance(lock, SqlLock):
            return SqlJobPauses(lock.engine, prefix=lock.prefix)
    return InMemoryJobPauses()


def paused_jobs(registry: CeleryJobs) -> Mapping[str, Pause]:
    """The pauses of the app's jobs, by name, in one round trip: what ``jobs list`` shows as
    PAUSED (who paused the job, when, why).

    A pause of a name no job of the app has now is left out. With pauses in process memory
    (``InMemoryJobPauses``) a command's own process has none: beat's are out of its reach.

    Raises:
        ConnectionError: the pauses' store cannot be asked (``StoreUnavailableError``).
    """
    return {job: pause for job, pause in registry.pauses.paused().items() if job in registry.jobs}


class BeatPauses:
    """What one beat knows of the pauses: read when asked, the last answer when the store
    cannot be asked (said once per outage)."""

    def __init__(self) -> None:
        self._known: Mapping[str, Pause] = {}

    def read(self, jobs: CeleryJobs, outages: StoreOutages) -> Mapping[str, Pause]:
        """The pauses now, or those last read if the store cannot be asked; never raises."""
        try:
            self._known = jobs.pauses.paused()
        except Exception as error:
            outages.down(jobs, PAUSES, jobs.pauses, error)
        else:
            outages.up(jobs, PAUSES, jobs.pauses)
        return self._known
