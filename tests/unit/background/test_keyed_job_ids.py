"""The job id a queue derives from an idempotency key is scoped by tenant without collisions
(issue 19, item 1): a separator inside a tenant id or a key cannot make two tenants' keys name
one job."""

from __future__ import annotations

import pytest

from ddd_celery.background import InMemoryJobStore, StoredJobQueue
from ddd_celery.background.rules import keyed_job_id
from ddd_celery.kernel import FixedExecutionScope
from tests.unit.background.conftest import work
from tests.unit.background.jobs import SendReceiptJob


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a\x1fb", "c"), ("a", "b\x1fc")), (("org", "42:inv-1"), ("org:42", "inv-1"))],
)
def test_two_tenants_keys_that_a_separator_would_join_enqueue_two_jobs(
    jobs: StoredJobQueue,
    store: InMemoryJobStore,
    scope: FixedExecutionScope,
    first: tuple[str, str],
    second: tuple[str, str],
) -> None:
    ids = []
    for number, (tenant, key) in enumerate((first, second)):
        with scope.open(work(tenant=tenant)):
            ids.append(jobs.enqueue(SendReceiptJob, {"n": number}, idempotency_key=key))

    assert ids == [keyed_job_id(*first), keyed_job_id(*second)]
    assert len(set(ids)) == 2
    assert [(job.tenant_id, job.payload) for job in store.list()] == [
        (first[0], {"n": 0}),
        (second[0], {"n": 1}),
    ]
