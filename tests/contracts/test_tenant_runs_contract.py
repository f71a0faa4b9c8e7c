"""The JobTenantRuns contract, run over every run state that keeps the joins of spread jobs.

Each adapter is the one its run state hands out (``JobRunState.tenant_runs``), as the workers
get it; the fixture lives here rather than in conftest's matrix, beside its only user.
"""

from __future__ import annotations

from typing import Any

import pytest

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.redis import RedisJobRunState
from ddd_celery.scheduling.run_state import InMemoryJobRunState
from ddd_celery.testing.contracts.tenant_runs import JobTenantRunsContract, JobTenantRunsSubject
from tests.contracts.conftest import RedisNamespace, adapter, service_of


@pytest.fixture(params=[adapter("memory"), adapter("redis")])
def tenant_runs_subject(request: pytest.FixtureRequest, clock: FixedClock) -> JobTenantRunsSubject:
    match service_of(request):
        case RedisNamespace() as redis:
            prefix = f"{redis.prefix}run:"
            runs: Any = RedisJobRunState(redis.client, prefix=prefix).tenant_runs()
            peer: Any = RedisJobRunState(redis.peer, prefix=prefix).tenant_runs()
            return JobTenantRunsSubject(runs=runs, peer=peer, elapse=redis.elapse)
        case _:
            runs = InMemoryJobRunState(clock).tenant_runs()
            return JobTenantRunsSubject(runs=runs, peer=runs, elapse=clock.advance)


class TestJobTenantRuns(JobTenantRunsContract):
    pass
