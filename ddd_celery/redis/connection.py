"""A Redis client for the scheduler: one that fails fast when Redis is down.

redis-py's defaults wait 5 s per socket operation and retry 10 times with backoff, so a Redis
that is down or unreachable holds a call for many seconds and with it every job of beat. The
client built here gives up within about ``timeout * (retries + 1)`` seconds, and the stores turn
that failure into their error (``LockUnavailableError``, ``StoreUnavailableError``): the
occurrence is recorded ``failed``, ``JOB_LOCK_UNAVAILABLE``, and beat keeps ticking.

Three kinds of URL (docs/howto/redis-cluster.md):

- ``redis://``, ``rediss://``, ``unix://``: one Redis (``Redis``).
- ``redis+cluster://host:port[,host:port...][?...]`` (``rediss+cluster://`` with TLS): a Redis
  Cluster (``RedisCluster``), the nodes given being where it starts to learn the slots. It asks
  a node for them as it is built, not at its first command as the others do.
- ``redis+sentinel://host:port[,host:port...]/<service>[/<db>]`` (``sentinel://`` alike): the
  master the sentinels name for ``<service>``, found again after a failover. A password in the
  URL is the master's.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from urllib.parse import unquote, urlsplit

from redis import Redis, exceptions
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

RedisClient: TypeAlias = Redis | RedisCluster
"""What the stores are given: one Redis (plain or a sentinel's master) or a Redis Cluster."""

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL_SCHEMES = ("redis+sentinel", "sentinel")


def connect(url: str, *, timeout: float = 1.0, retries: int = 1) -> RedisClient:
    """A client for ``url`` (one Redis, a cluster or a sentinel's master) that fails fast.

    ``timeout`` bounds connecting and each reply, in seconds. ``retries`` retries a command at
    once, on a new connection, when one breaks or times out: a pooled connection that the
    network dropped without a word then costs one timeout instead of an error.
    """
    fail_fast: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), retries),
    }
    scheme = url.partition("://")[0].lower()
    if scheme in _CLUSTER_SCHEMES:
        return _cluster(url, _CLUSTER_SCHEMES[scheme], fail_fast)
    if scheme in _SENTINEL_SCHEMES:
        return _sentinel_master(url, fail_fast)
    return Redis.from_url(
        url,
        **fail_fast,
        # what Retry retries anyway: redis-py 5 retries a client's command only on these
        retry_on_error=[exceptions.ConnectionError, exceptions.TimeoutError],
    )


def is_cluster_url(url: str) -> bool:
    """Whether ``connect(url)`` gives a Redis Cluster's client: known before it connects."""
    return urlsplit(url).scheme in _CLUSTER_SCHEMES


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster's, whose scripts must keep their keys in one slot."""
    return isinstance(client, RedisCluster)


def _cluster(url: str, plain_scheme: str, fail_fast: dict[str, Any]) -> RedisCluster:
    parts = urlsplit(url)
    first, *others = _nodes(parts.netloc.rpartition("@")[2], default_port=6379)
    userinfo = parts.netloc.rpartition("@")[0]
    auth = f"{userinfo}@" if userinfo else ""
    plain = f"{plain_scheme}://{auth}{first[0]}:{first[1]}{parts.path}"
    if parts.query:
        plain += f"?{parts.query}"
    startup = [
        ClusterNode(host, port)  # type: ignore[no-untyped-call,unused-ignore]
        for host, port in [first, *others]
    ]
    return RedisCluster.from_url(plain, startup_nodes=startup, **fail_fast)


def _sentinel_master(url: str, fail_fast: dict[str, Any]) -> Redis:
    parts = urlsplit(url)
    path = [part for part in parts.path.split("/") if part]
    if not path or len(path) > 2:
        raise ValueError(
            f"a Sentinel URL names its service: redis+sentinel://host:port/<service>[/<db>], "
            f"not {url.rsplit('@', maxsplit=1)[-1]!r}"
        )
    sentinels = _nodes(parts.netloc.rpartition("@")[2], default_port=26379)
    master: dict[str, Any] = dict(fail_fast)
    if len(path) == 2:
        master["db"] = int(path[1])
    if parts.username:
        master["username"] = unquote(parts.username)
    if parts.password:
        master["password"] = unquote(parts.password)
    sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        sentinels,
        sentinel_kwargs={
            "socket_connect_timeout": fail_fast["socket_connect_timeout"],
            "socket_timeout": fail_fast["socket_timeout"],
        },
    )
    client: Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
        unquote(path[0]),
        retry_on_error=[exceptions.ConnectionError, exceptions.TimeoutError],
        **master,
    )
    return client


def _nodes(netloc: str, *, default_port: int) -> list[tuple[str, int]]:
    """``host:port,host:port`` as pairs; a node without a port on ``default_port``."""
    nodes = []
    for node in netloc.split(","):
        host, _, port = node.strip().rpartition(":") if ":" in node else (node, "", "")
        nodes.append((host.strip("[]") or "localhost", int(port) if port else default_port))
    return nodes
