"""Redis adapters: the kernel Lock, the job checkpoints, run state, last runs and job store.

Install the ``redis`` extra; the core never imports this package. Build the client with
``connect(url)``, which fails fast when Redis is down, and share it between the stores.

Key layout (each prefix is a constructor argument; a key is its prefix and a name, verbatim,
so ``redis-cli`` reads it):

On a Redis Cluster (``connect("redis+cluster://...")``) each store refuses a prefix without a
hash tag, ``{...}``, so that one script's keys share a slot (``slots.py``); on one Redis the
names below are unchanged.

``job:<name>:<instant>``
    ``RedisLock``: a string holding the owner token, expiring (PX) with the lease.
``ddd_celery:checkpoint:<job>``
    ``RedisJobCheckpoints``: a string, the last occurrence handled in epoch ms; no expiry.
``ddd_celery:run:<job>``
    ``RedisJobRunState``: a hash with ``running`` and optionally ``queued``, in epoch ms,
    expiring (PEXPIRE) with the run in progress.
``ddd_celery:last-run:<job>``
    ``RedisJobLastRuns``: a hash with ``at``, the latest occurrence recorded in epoch ms, and
    ``run``, its record as JSON; no expiry.
``ddd_celery:bg:...``
    ``RedisJobStore``, the background jobs, none expiring (``purge_finished`` deletes them):
    ``job:<id>`` a hash per job (instants in epoch ms, payload, progress, checkpoint,
    enqueued_by and its attempts' ``history`` in JSON); sorted sets ``pending`` (to publish, by
    run_at), ``dispatched`` (published, not claimed, by dispatch instant), ``leases``
    (running, by lease expiry), ``queue:<queue>`` (claimable, by run_at),
    ``finished:<status>`` (by finished_at, what a purge reads), and the listing's
    ``list:all``, ``list:status:<status>``, ``list:name:<name>``, ``list:tenant:<tenant>``
    (members ``<enqueued_at>:<id>`` in lexical order, so a page is read from its cursor);
    ``key:<tenant>:<key>`` the job of an idempotency key; ``stats`` and ``stats:name`` hashes
    of counts by ``<queue>|<status>`` and ``<name>|<status>``; ``claimed:``, ``taken:`` and
    ``purged:<token>`` a call's reply for a minute or a lease. ``lua/job_lib.lua`` details each
    field. A store an earlier version wrote (``enqueued``, ``status:<status>``, ``finished``)
    is brought to this layout by ``RedisJobStore.reindex()`` (``job_store``'s docstring).

Round trips: one per call (SET NX PX, GET, HGET, HGETALL or EVALSHA), plus two once per script
when Redis has not seen it yet (``purge_finished``: one per thousand jobs; ``list_page`` one
per thousand index entries it reads, one for a filter its index answers). A batch read
(``read_many``, ``running_many``) is one EVALSHA per thousand jobs (``lua/json_many.lua``, the
values answered as one JSON array). With the lock, run state, checkpoints and last runs on one
Redis, ``RedisJobRunState.occurrence_store`` combines them (``RedisOccurrenceStore``): beat
begins every occurrence due at one instant (lock, checkpoint, claim, leases released) in one
EVALSHA, and a worker ends a run and keeps its last run in another, on the same keys. The Lua
scripts in ``lua/`` document the same layout in their headers.
"""

from ddd_celery.redis.checkpoints import RedisJobCheckpoints
from ddd_celery.redis.connection import connect
from ddd_celery.redis.errors import StoreUnavailableError
from ddd_celery.redis.job_store import RedisJobStore
from ddd_celery.redis.last_runs import RedisJobLastRuns
from ddd_celery.redis.lock import RedisLock
from ddd_celery.redis.occurrence_store import RedisOccurrenceStore
from ddd_celery.redis.run_state import RedisJobRunState

__all__ = [
    "RedisJobCheckpoints",
    "RedisJobLastRuns",
    "RedisJobRunState",
    "RedisJobStore",
    "RedisLock",
    "RedisOccurrenceStore",
    "StoreUnavailableError",
    "connect",
]
