"""The stores on a Redis Cluster and behind a Sentinel, on servers the tests start themselves.

The contract suites run on a cluster too (tests/contracts, ``redis-cluster``); here: what
``connect`` builds from each URL, the prefixes a cluster refuses, the Celery settings on a
cluster, and the stores carrying on through a failover (the cluster's and the sentinel's).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from redis.cluster import RedisCluster
from redis_servers import Cluster, Sentinelled, redis_cluster, redis_sentinel, wait_for

from ddd_celery.celery.config import JobsConfigError, read_config, redis_stores
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.redis import (
    RedisJobCheckpoints,
    RedisJobLastRuns,
    RedisJobRunState,
    RedisJobStore,
    RedisLock,
    connect,
)
from ddd_celery.redis.occurrence_store import RedisOccurrenceStore
from ddd_celery.scheduling.occurrence_store import ComposedOccurrenceStore, occurrence_store

pytestmark = pytest.mark.cluster

AT = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Three masters, each with a replica: a failover has somewhere to go."""
    with redis_cluster(masters=3, replicas=1) as started:
        yield started


@pytest.fixture
def client(cluster: Cluster) -> Iterator[RedisCluster]:
    made = connect(cluster.url)
    assert isinstance(made, RedisCluster)
    yield made
    made.close()


@pytest.fixture
def tag() -> str:
    return f"{{test:{uuid.uuid4().hex}}}:"


def test_a_cluster_url_gives_a_cluster_client_that_fails_fast(cluster: Cluster) -> None:
    made = connect(f"redis+cluster://127.0.0.1:1,{cluster.masters[1].address}", timeout=0.3)
    assert isinstance(made, RedisCluster)
    node = made.get_default_node()
    assert node is not None
    assert node.redis_connection is not None
    kwargs = node.redis_connection.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.3, 0.3)
    assert {n.port for n in made.get_nodes()} >= {m.port for m in cluster.masters}
    made.close()


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (RedisJobCheckpoints, "prefix 'ddd_celery:checkpoint:'"),
        (RedisJobRunState, "prefix 'ddd_celery:run:'"),
        (RedisJobLastRuns, "prefix 'ddd_celery:last-run:'"),
        (RedisJobStore, "prefix 'ddd_celery:bg:'"),
        (
            lambda c: RedisJobLastRuns(c, prefix="{a}:last-run:", history_prefix="{b}:history:"),
            "one hash tag",
        ),
    ],
)
def test_a_cluster_refuses_a_prefix_that_would_spread_a_script_over_slots(
    client: RedisCluster, build: object, named: str
) -> None:
    with pytest.raises(ValueError, match="on a Redis Cluster needs") as refused:
        build(client)  # type: ignore[operator]
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_prefix_without_a_hash_tag_is_still_every_key_name_on_one_redis() -> None:
    """A deployment on one Redis keeps its keys: the defaults are what they always were."""
    one = Redis()  # never asked: only the names are read
    assert RedisJobCheckpoints(one).prefix == "ddd_celery:checkpoint:"
    assert RedisJobLastRuns(one).history_prefix == "ddd_celery:last-run:history:"
    assert RedisLock(one).prefix == ""


def test_the_stores_tagged_alike_begin_in_one_script_and_apart_are_composed(
    client: RedisCluster, tag: str
) -> None:
    clock = FixedClock(AT)
    run_state = RedisJobRunState(client, prefix=f"{tag}run:")
    checkpoints = RedisJobCheckpoints(client, prefix=f"{tag}checkpoint:")
    joined = occurrence_store(
        RedisLock(client, prefix=tag, clock=clock), run_state, checkpoints, None
    )
    assert isinstance(joined, RedisOccurrenceStore)
    apart = occurrence_store(RedisLock(client, clock=clock), run_state, checkpoints, None)
    assert isinstance(apart, ComposedOccurrenceStore)
    with pytest.raises(ValueError, match="needs one hash tag"):
        RedisOccurrenceStore(
            client,
            clock=clock,
            lock_prefix="{other}:",
            run_prefix=f"{tag}run:",
            checkpoint_prefix=None,
            last_run_prefix=None,
        )


def test_the_untagged_lock_takes_one_key_per_occurrence_anywhere_in_the_cluster(
    client: RedisCluster,
) -> None:
    lock = RedisLock(client, prefix=f"test:{uuid.uuid4().hex}:", clock=FixedClock(AT))
    leases = [lock.acquire(f"job:j{i}:2026-03-02T06:00:00Z", 60_000) for i in range(30)]
    assert all(leases)
    assert len({client.keyslot(lock.prefix + lease.key) for lease in leases if lease}) > 1
    assert all(lock.release(lease) for lease in leases if lease)


def test_the_celery_settings_on_a_cluster_tag_the_default_prefix_and_refuse_an_untagged_one(
    cluster: Cluster,
) -> None:
    clock = FixedClock(AT)
    stores = redis_stores(read_config({"ddd_celery_redis_url": cluster.url}), clock)
    assert stores is not None
    assert isinstance(stores.lock, RedisLock)
    assert stores.lock.prefix == "{ddd_celery}:"
    joined = occurrence_store(stores.lock, stores.run_state, stores.checkpoints, stores.last_runs)
    assert isinstance(joined, RedisOccurrenceStore)
    given = read_config({"ddd_celery_redis_url": cluster.url, "ddd_celery_key_prefix": "shop:"})
    with pytest.raises(JobsConfigError, match=r"key_prefix 'shop:' has no hash tag.*'\{shop\}:'"):
        redis_stores(given, clock)


def test_a_kombu_sentinel_broker_gives_the_stores_its_master() -> None:
    config = read_config(
        {
            "broker_url": "sentinel://:pw@10.0.0.1:26379/2;sentinel://10.0.0.2:26380",
            "broker_transport_options": {"master_name": "shop"},
        }
    )
    assert config.redis_url == "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/shop/2"


def test_the_stores_carry_on_when_a_replica_takes_over_its_master(
    cluster: Cluster, client: RedisCluster, tag: str
) -> None:
    """``CLUSTER FAILOVER`` on the replica of the master holding the keys: the next calls
    follow the slot (MOVED) to the new master, the data replicated kept."""
    checkpoints = RedisJobCheckpoints(client, prefix=f"{tag}checkpoint:")
    checkpoints.write("report", AT)
    master = cluster.master_of(tag)
    replica = cluster.replicas[master.port][0]
    assert master.client.wait(1, 500) == 1  # the replica has the checkpoint
    replica.client.execute_command("CLUSTER FAILOVER")
    wait_for(lambda: cluster.master_of(tag).port == replica.port, "the replica to take over")
    assert checkpoints.read("report") == AT
    checkpoints.write("report", AT.replace(minute=1))
    assert checkpoints.read_many(["report"]) == {"report": AT.replace(minute=1)}
    cluster.replicas[replica.port] = [master]  # the old master follows the new one


@pytest.fixture(scope="module")
def sentinelled() -> Iterator[Sentinelled]:
    with redis_sentinel() as started:
        yield started


def test_a_sentinel_url_gives_its_master_and_follows_a_failover(sentinelled: Sentinelled) -> None:
    made = connect(sentinelled.url, timeout=0.5)
    assert isinstance(made, Redis)
    prefix = f"test:{uuid.uuid4().hex}:"
    checkpoints = RedisJobCheckpoints(made, prefix=prefix)
    checkpoints.write("report", AT)
    assert sentinelled.master.client.get(f"{prefix}report") is not None
    # the write is on the replica before the failover (a loaded machine may take more than
    # one WAIT's half second to link the replica)
    wait_for(lambda: sentinelled.master.client.wait(1, 500) == 1, "the replica to take the write")
    sentinelled.sentinel.client.execute_command("SENTINEL FAILOVER", "ddd-celery-test")
    wait_for(
        lambda: sentinelled.replica.client.info("replication")["role"] == "master",
        "the sentinel to promote the replica",
    )
    wait_for(lambda: checkpoints.write("report", AT.replace(minute=1)) is None, "a write")
    assert sentinelled.replica.client.get(f"{prefix}report") is not None
    assert checkpoints.read("report") == AT.replace(minute=1)
    made.close()


def test_a_sentinel_url_names_its_service() -> None:
    with pytest.raises(ValueError, match="names its service"):
        connect("redis+sentinel://127.0.0.1:26379")
