"""Three real beats and a worker with their stores on a Redis Cluster the test starts: every
occurrence runs once, found locked by the two other beats.

The broker stays on the real Redis (kombu has no cluster transport); the lock, run state,
checkpoints and last runs are on the cluster, under a prefix with a hash tag.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from process_support import Deployment, parse, seconds_between, wait_until
from redis_servers import redis_cluster

from ddd_celery.redis import connect

pytestmark = [pytest.mark.processes, pytest.mark.cluster]

EVERY_SECOND = "proc.every-second"
WATCH_S = 8


def test_three_beats_on_a_cluster_run_each_occurrence_once(deploy: Deployment) -> None:
    deploy.prefix = f"test:processes:{{{uuid.uuid4().hex}}}:"
    with redis_cluster() as cluster:
        env = deploy.environment({EVERY_SECOND: {"enabled": True}}, store_url=cluster.url)
        beats = [deploy.beat(env) for _ in range(3)]
        deploy.worker(env, pool="solo")

        def every_beat_is_up() -> bool:
            outcomes = deploy.outcomes(EVERY_SECOND, "skipped-locked")
            return 2 in Counter(o["scheduled_at"] for o in outcomes).values()

        wait_until(every_beat_is_up, 45, "an instant seen by the three beats")
        watched_from = datetime.now(UTC)
        time.sleep(WATCH_S)
        watched_to = datetime.now(UTC) - timedelta(seconds=2)
        assert all(beat.alive for beat in beats), deploy.logs()
        ran = deploy.instants_ran(EVERY_SECOND)
        locked = [parse(o["scheduled_at"]) for o in deploy.outcomes(EVERY_SECOND, "skipped-locked")]
        instants = seconds_between(watched_from, watched_to)
        assert len(instants) >= WATCH_S - 3
        for instant in instants:
            assert (ran.count(instant), locked.count(instant)) == (1, 2), (instant, deploy.logs())
        assert len(ran) == len(set(ran))
        stores = connect(cluster.url)
        assert list(stores.scan_iter(match=f"{deploy.prefix}last-run:*"))  # kept on the cluster
        stores.close()
