"""The Celery app of the spread tests: ``celery -A tenants_app beat|worker``.

One per-tenant job spread over the workers (``tenant_runs='spread'``), on the real Redis, for
the tenants ``t-00`` to ``t-<N-1>``. What a test varies comes from the environment:

``DDD_TEST_BROKER_URL``  the broker and the stores (from ``app.conf``), where the records go too
``DDD_TEST_PREFIX``      the test's key prefix, for every key of every process
``DDD_TEST_QUEUE``       the queue the job is routed to
``DDD_TEST_TENANTS``     how many tenants (30 by default)
``DDD_TEST_FAIL``        tenants that raise, comma-separated; ``slow:<tenant>`` waits 1 s first
``DDD_TEST_HANG``        a tenant whose run notes its pid in ``<prefix>hanging`` and hangs
``DDD_TEST_SETTINGS``    job settings as JSON

Records are JSON lines in Redis lists: ``<prefix>ran`` by each tenant run, ``<prefix>outcomes``
by ``on_run``.
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery

from ddd_celery.celery import install_jobs
from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import iso_ms
from ddd_celery.kernel.tenants import InMemoryTenantDirectory
from ddd_celery.redis import connect
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.outcomes import JobRun

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]
QUEUE = os.environ["DDD_TEST_QUEUE"]
TENANTS = [f"t-{number:02d}" for number in range(int(os.environ.get("DDD_TEST_TENANTS", "30")))]
FAIL = {name for name in os.environ.get("DDD_TEST_FAIL", "").split(",") if name}
HANG = os.environ.get("DDD_TEST_HANG")
JOB = "tenants.close-month"

records = connect(BROKER_URL)


@scheduled(JOB, every="3s", tenancy="per-tenant", tenant_runs="spread", enabled=False)
class CloseMonthJob:
    def run(self, execution: JobExecution) -> None:
        tenant = execution.tenant_id
        line = {"tenant": tenant, "scheduled_at": iso_ms(execution.scheduled_at)}
        records.rpush(f"{PREFIX}ran", json.dumps({**line, "pid": os.getpid()}))
        if tenant == HANG:
            records.rpush(f"{PREFIX}hanging", os.getpid())
            time.sleep(120)
        if f"slow:{tenant}" in FAIL:
            time.sleep(1)
            raise ValueError(f"{tenant} cannot close its month")
        if tenant in FAIL:
            raise ValueError(f"{tenant} cannot close its month")


def keep_outcome(run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
    line = {
        "job": run.job,
        "outcome": run.outcome.value,
        "scheduled_at": iso_ms(run.scheduled_at),
        "error_code": run.error_code,
        "error_type": run.error_type,
        "tenant_id": run.tenant_id,
        "duration_ms": run.duration_ms,
        "pid": os.getpid(),
    }
    records.rpush(f"{PREFIX}outcomes", json.dumps(line))


app = Celery("tenants_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    ddd_celery_key_prefix=PREFIX,
)
install_jobs(
    app,
    jobs=[CloseMonthJob],
    tenants=InMemoryTenantDirectory(TENANTS),
    settings=json.loads(os.environ.get("DDD_TEST_SETTINGS", "{}")),
    on_run=keep_outcome,
    routes={JOB: QUEUE},
)
