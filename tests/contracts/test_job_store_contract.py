"""The JobStore contract on the in-memory store, alone and in a unit of work.

The Redis store runs the same suite in its own test module.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ddd_celery.background import InMemoryJobStore
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork
from ddd_celery.testing.contracts.job_store import JobStoreContract, JobStoreSubject

START = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


class TestInMemoryJobStore(JobStoreContract):
    @pytest.fixture(params=["alone", "in a unit of work"])
    def job_store_subject(self, request: pytest.FixtureRequest) -> JobStoreSubject:
        if request.param == "alone":
            store = InMemoryJobStore()
            return JobStoreSubject(store=store, peer=store, start=START)
        unit_of_work = InMemoryUnitOfWork()
        store = InMemoryJobStore(unit_of_work=unit_of_work)
        return JobStoreSubject(store=store, peer=store, start=START, unit_of_work=unit_of_work)
