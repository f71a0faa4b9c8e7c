"""The embedded default adapters: one SQLite file shared by the processes of one machine.

For a beat and workers that run side by side without a server (development, a single host):
``SqliteLock``, ``SqliteJobCheckpoints``, ``SqliteJobRunState`` and ``SqliteJobLastRuns`` may
share one file, each in its own table. Only the standard library's ``sqlite3`` is used. Between
machines, use Redis.
"""

from ddd_celery.sqlite._database import StoreUnavailableError
from ddd_celery.sqlite.checkpoints import SqliteJobCheckpoints
from ddd_celery.sqlite.last_runs import SqliteJobLastRuns
from ddd_celery.sqlite.lock import SqliteLock
from ddd_celery.sqlite.run_state import SqliteJobRunState

__all__ = [
    "SqliteJobCheckpoints",
    "SqliteJobLastRuns",
    "SqliteJobRunState",
    "SqliteLock",
    "StoreUnavailableError",
]
