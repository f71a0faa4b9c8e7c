"""The ``ddd_celery_*`` settings of a Celery app, and the job stores they describe.

A Celery team configures in ``app.conf`` (``config_from_object``, ``conf.update``, Django's
settings), as redbeat reads ``redbeat_redis_url``. These settings are read as each process
starts (beat, a worker, a ``celery jobs`` command) and at the jobs' first use, never when
``install_jobs`` is called: ``config_from_object`` may come before it or after it. Reading
builds Redis clients but connects to nothing; the first command does (a Redis Cluster's client
asks a node for the slots as it is built).

``ddd_celery_redis_url`` may name a Redis Cluster (``redis+cluster://host:port``) or a
Sentinel's master (``redis+sentinel://host:port/<service>``), as ``ddd_celery.redis.connect``
reads them; a ``sentinel://`` broker with ``broker_transport_options["master_name"]`` gives the
stores its master. On a cluster the key prefix carries a hash tag, ``{...}``, so that each
script's keys share a slot: the default becomes ``{ddd_celery}:``, and a prefix given without
one is refused (docs/howto/redis-cluster.md).

| Setting | Default |
|---|---|
| ``ddd_celery_redis_url`` | ``broker_url`` if Redis or Sentinel (``None``: no Redis store) |
| ``ddd_celery_key_prefix`` | ``"ddd_celery:"``; ``"{ddd_celery}:"`` on a Redis Cluster |
| ``ddd_celery_late_after_ms`` | ``60000`` |
| ``ddd_celery_lock_ttl_ms`` | ``900000`` |
| ``ddd_celery_grace_ms`` | ``30000`` (a stopping worker waits that long for a run) |
| ``ddd_celery_max_payload_bytes`` | ``1048576`` (the largest JSON payload a job is enqueued with) |
| ``ddd_celery_traceback_messages`` | ``True`` (Celery's log shows a job's error message) |
| ``ddd_celery_keep_succeeded_ms`` | ``604800000``: 7 days, then the relay purges (``None``: kept) |
| ``ddd_celery_keep_cancelled_ms`` | ``604800000``: 7 days, then the relay purges (``None``: kept) |
| ``ddd_celery_keep_dead_ms`` | ``None``: a dead job is kept until retried or purged by hand |
| ``ddd_celery_purge_batch`` | ``1000`` (jobs the relay purges per store call; ``0``: no purge) |

A typo or a wrong type stops the process (``app.check_configuration``) rather than being ignored.

This module is wiring, like an application's composition root: it is the one place of the
Celery adapter that builds the Redis adapters, and imports them only when a URL asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from ddd_celery.background.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.errors import DddCeleryError
from ddd_celery.kernel.lock import Lock
from ddd_celery.scheduling.checkpoints import JobCheckpoints
from ddd_celery.scheduling.last_runs import JobLastRuns
from ddd_celery.scheduling.occurrence import (
    DEFAULT_GRACE_MS,
    DEFAULT_LATE_AFTER_MS,
    DEFAULT_LOCK_TTL_MS,
)
from ddd_celery.scheduling.run_state import JobRunState

DEFAULT_KEEP_FINISHED_MS = 7 * 24 * 3_600_000
"""A week: long enough to ``find`` a job a user asks about after a weekend, short enough that
a store of a million jobs a day holds seven million, not every job it ever ran."""
DEFAULT_PURGE_BATCH = 1_000
"""Jobs one purge call of the relay deletes: a few milliseconds of the store's time."""

DEFAULT_KEY_PREFIX = "ddd_celery:"
"""The key prefix of the stores on one Redis (``{ddd_celery}:`` on a cluster)."""
PREFIX = "ddd_celery_"
"""Every setting of ddd_celery in ``app.conf`` starts with it; another name under it is refused."""
REDIS_URL = f"{PREFIX}redis_url"
INVALID_JOBS_CONFIG = "INVALID_JOBS_CONFIG"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class JobsConfigError(DddCeleryError, ValueError):
    """The app's configuration cannot run its jobs; the message says what to set or pass."""

    code = INVALID_JOBS_CONFIG


class JobsConfig(BaseModel):
    """The ``ddd_celery_*`` settings, without their prefix, as pydantic reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redis_url: StrictStr | None = None
    """Where the lock, run state, checkpoints and last runs live; None: no Redis store."""
    key_prefix: StrictStr | None = None
    """Put before every key of the stores: the lock's is ``<prefix>job:<name>:<instant>``;
    None: ``ddd_celery:``, or ``{ddd_celery}:`` on a Redis Cluster."""
    late_after_ms: Annotated[StrictInt, Field(gt=0)] = DEFAULT_LATE_AFTER_MS
    lock_ttl_ms: Annotated[StrictInt, Field(gt=0)] = DEFAULT_LOCK_TTL_MS
    grace_ms: Annotated[StrictInt, Field(ge=0, le=24 * 3_600_000)] = DEFAULT_GRACE_MS
    """How long a worker that stops waits for its runs before aborting them (``JOB_ABORTED``)."""
    max_payload_bytes: Annotated[StrictInt, Field(gt=0)] = DEFAULT_MAX_PAYLOAD_BYTES
    """The largest payload a background job is enqueued with: its compact JSON as the stores
    keep it (ASCII, non-ASCII escaped), in bytes."""
    traceback_messages: StrictBool = True
    """Whether the exception Celery is given for a failed background job attempt (its log
    lines, ``task_failure``/``task_retry``, Flower) is the job's own, message included; False
    gives a stand-in whose message is the error's code and type, the frames kept."""
    keep_succeeded_ms: Annotated[StrictInt, Field(gt=0)] | None = DEFAULT_KEEP_FINISHED_MS
    """How long a succeeded job is kept after it finished before the relay purges it; None:
    until purged by hand (``jobs background purge``)."""
    keep_cancelled_ms: Annotated[StrictInt, Field(gt=0)] | None = DEFAULT_KEEP_FINISHED_MS
    """The same for a cancelled job."""
    keep_dead_ms: Annotated[StrictInt, Field(gt=0)] | None = None
    """The same for a dead job; None by default: kept for ``retry-dead`` or a purge by hand."""
    purge_batch: Annotated[StrictInt, Field(ge=0, le=100_000)] = DEFAULT_PURGE_BATCH
    """Jobs the relay deletes per purge call, each pass a few calls in its time left after
    publishing; 0 turns the relay's purge off (every finished job kept)."""


@dataclass(frozen=True, slots=True)
class RedisStores:
    """The four stores on one Redis client, each keyed under the configured prefix."""

    lock: Lock
    run_state: JobRunState
    checkpoints: JobCheckpoints
    last_runs: JobLastRuns


def read_config(conf: Mapping[str, Any], namespace: str | None = None) -> JobsConfig:
    """The ``ddd_celery_*`` settings of ``conf`` (an ``app.conf``), checked.

    With the app's ``namespace`` (Django's ``config_from_object(..., namespace="CELERY")``),
    ``CELERY_DDD_CELERY_KEY_PREFIX`` is read as ``ddd_celery_key_prefix``.
    ``ddd_celery_redis_url`` defaults to ``broker_url`` when the broker is Redis (the first URL
    of a failover list). Raises ``JobsConfigError`` naming the setting for a value that cannot be
    read or a ``ddd_celery_*`` name that is not a setting (a typo would otherwise be ignored).
    """
    given = {}
    for key in list(conf):
        name = _setting_name(str(key), namespace)
        if name is not None:
            given[name[len(PREFIX) :]] = conf.get(name)
    if "redis_url" not in given:
        given["redis_url"] = redis_broker_url(
            conf.get("broker_url"), conf.get("broker_transport_options")
        )
    try:
        return JobsConfig.model_validate(given)
    except ValidationError as error:
        problems = "; ".join(_problem(problem) for problem in error.errors())
        raise JobsConfigError(f"app.conf cannot be read: {problems}") from None


def _problem(problem: Any) -> str:
    """``ddd_celery_<name>: what is wrong``, on one line, never quoting the value (a URL may
    hold a password)."""
    name = f"{PREFIX}{'.'.join(str(part) for part in problem['loc'])}"
    if not name.isprintable():
        name = repr(name)
    if problem["type"] == "extra_forbidden":
        known = ", ".join(f"{PREFIX}{field}" for field in JobsConfig.model_fields)
        return f"{name}: not a setting of ddd_celery (a typo?); the settings are {known}"
    return f"{name}: {problem['msg']}"


def app_config(app: Any) -> JobsConfig:
    """The ``ddd_celery_*`` settings of a Celery app, read from its ``app.conf`` now."""
    return read_config(app.conf, getattr(app, "namespace", None))


def _setting_name(key: str, namespace: str | None) -> str | None:
    """``ddd_celery_<name>`` for a key of ours, with or without the namespace; else None."""
    lowered = key.lower()
    if namespace and lowered.startswith(f"{namespace.lower()}_{PREFIX}"):
        lowered = lowered[len(namespace) + 1 :]
    return lowered if lowered.startswith(PREFIX) else None


def redis_broker_url(broker_url: object, transport_options: object = None) -> str | None:
    """The broker's URL when it is a Redis one; a Sentinel broker's as ``connect`` reads it
    (``redis+sentinel://`` its sentinels ``/`` the ``master_name`` of its transport options);
    else None."""
    if isinstance(broker_url, list | tuple):
        broker_url = ";".join(str(url) for url in broker_url)
    if not isinstance(broker_url, str):
        return None
    urls = [url.strip() for url in broker_url.split(";") if url.strip()]
    if not urls:
        return None
    if urls[0].startswith("sentinel://"):
        options = transport_options if isinstance(transport_options, Mapping) else {}
        return _sentinel_url(urls, options.get("master_name"))
    return urls[0] if urls[0].startswith(_REDIS_SCHEMES) else None


def _sentinel_url(urls: list[str], master_name: object) -> str | None:
    """kombu's ``sentinel://[auth@]host:port[/db];sentinel://host:port...`` and its
    ``master_name`` as one ``redis+sentinel://[auth@]host:port,host:port/<master>[/db]``."""
    if not isinstance(master_name, str) or not master_name:
        return None
    auth, nodes, db = "", [], ""
    for url in urls:
        netloc, _, path = url.removeprefix("sentinel://").partition("/")
        userinfo, at, node = netloc.rpartition("@")
        if at and not auth:
            auth = f"{userinfo}@"
        nodes.append(node)
        db = db or path.strip("/")
    return f"redis+sentinel://{auth}{','.join(nodes)}/{master_name}" + (f"/{db}" if db else "")


def broker_scheme(broker_url: object) -> str:
    """``amqp``, ``memory``...: what an error may say of the broker (a URL may hold a password)."""
    if isinstance(broker_url, list | tuple):
        broker_url = broker_url[0] if broker_url else None
    if not isinstance(broker_url, str) or "://" not in broker_url:
        return "amqp (Celery's default)"
    return broker_url.split("://", 1)[0]


def redis_stores(config: JobsConfig, clock: Clock) -> RedisStores | None:
    """The Redis stores ``config`` describes, on one client; None without a Redis URL.

    The client connects on its first command and fails fast (``ddd_celery.redis.connect``).
    """
    if config.redis_url is None:
        return None
    from ddd_celery.redis import (  # noqa: PLC0415 - only an app configured for Redis needs it
        RedisJobCheckpoints,
        RedisJobLastRuns,
        RedisJobRunState,
        RedisLock,
        connect,
    )

    client = connect(config.redis_url)
    prefix = cluster_prefix(client, config.key_prefix)
    return RedisStores(
        lock=RedisLock(client, prefix=prefix, clock=clock),
        run_state=RedisJobRunState(client, prefix=f"{prefix}run:"),
        checkpoints=RedisJobCheckpoints(client, prefix=f"{prefix}checkpoint:"),
        last_runs=RedisJobLastRuns(client, prefix=f"{prefix}last-run:"),
    )


def cluster_prefix(client: object, key_prefix: str | None) -> str:
    """The key prefix of the stores on ``client``: the one given, or the default; on a cluster
    the default has a hash tag, and a prefix given without one is refused."""
    from ddd_celery.redis.connection import is_cluster  # noqa: PLC0415 - Redis is configured
    from ddd_celery.redis.slots import CLUSTER_PREFIX, hash_tag  # noqa: PLC0415

    if not is_cluster(client):
        return DEFAULT_KEY_PREFIX if key_prefix is None else key_prefix
    if key_prefix is None:
        return CLUSTER_PREFIX
    if hash_tag(key_prefix) is None:
        raise _untagged(key_prefix)
    return key_prefix


def refuse_untagged_cluster_prefix(config: JobsConfig) -> None:
    """Refuse a key prefix without a hash tag for a cluster's URL, from the URL alone.

    The stores find out on their first use, which for a worker is its first task: checked as
    each process starts (``check_configuration``), the process stops there, in one line.
    """
    if config.redis_url is None or config.key_prefix is None:
        return
    from ddd_celery.redis.connection import is_cluster_url  # noqa: PLC0415 - Redis is configured
    from ddd_celery.redis.slots import hash_tag  # noqa: PLC0415

    if is_cluster_url(config.redis_url) and hash_tag(config.key_prefix) is None:
        raise _untagged(config.key_prefix)


def _untagged(key_prefix: str) -> JobsConfigError:
    from ddd_celery.redis.slots import tagged  # noqa: PLC0415 - Redis is configured

    return JobsConfigError(
        f"{PREFIX}key_prefix {key_prefix!r} has no hash tag, and on a Redis Cluster each "
        f"script's keys must share a slot: set it to {tagged(key_prefix)!r}, for example"
    )


def missing_lock(conf: Mapping[str, Any]) -> JobsConfigError:
    """The error of an app whose beats would share no lock."""
    return JobsConfigError(
        f"the jobs need a lock every beat shares, and the broker "
        f"({broker_scheme(conf.get('broker_url'))}) is not Redis: set "
        f"app.conf.{REDIS_URL} to a Redis URL, or pass install_jobs(..., lock=...) "
        "(RedisLock; SqlLock on PostgreSQL or a SQLite file; InMemoryLock for one beat or a test)"
    )
