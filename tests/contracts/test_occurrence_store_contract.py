"""The OccurrenceStore contract, run over every adapter (see conftest); then that stores of
different Redis servers are composed, not combined into one script."""

from __future__ import annotations

import pytest

from ddd_celery.redis import RedisJobRunState, RedisLock, connect
from ddd_celery.scheduling.occurrence_store import ComposedOccurrenceStore, occurrence_store
from ddd_celery.scheduling.run_state import JobRunState
from ddd_celery.testing.contracts.occurrence_store import OccurrenceStoreContract
from tests.contracts.conftest import UNREACHABLE_REDIS, RedisNamespace


class TestOccurrenceStore(OccurrenceStoreContract):
    pass


@pytest.mark.redis
def test_stores_on_different_redis_servers_are_composed_not_combined(
    redis_namespace: RedisNamespace,
) -> None:
    down = connect(UNREACHABLE_REDIS, timeout=0.2, retries=0)
    run_state: JobRunState = RedisJobRunState(redis_namespace.client, prefix=redis_namespace.prefix)

    store = occurrence_store(RedisLock(down), run_state, None, None)

    assert isinstance(store, ComposedOccurrenceStore)
