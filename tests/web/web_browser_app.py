"""The Celery app of the browser tests: ``celery -A web_browser_app worker | beat | jobs web``.

The scheduled jobs' stores on the shared Redis (the broker's, under the test's prefix), the
background jobs on PostgreSQL (``SqlJobStore``). From the environment:

``DDD_TEST_BROKER_URL``    the broker and the scheduled jobs' stores (the shared Redis)
``DDD_TEST_PREFIX``        the test's key prefix, for every Redis key of every process
``DDD_TEST_DATABASE_URL``  the PostgreSQL of the background jobs
``DDD_TEST_TABLES``        the tables' prefix (created by the test)
"""

from __future__ import annotations

import os

from celery import Celery
from sqlalchemy import create_engine
from web_browser_jobs import ChargeJob, HeartbeatJob, Switches

from ddd_celery.celery import install_jobs
from ddd_celery.celery.background import install_background_jobs
from ddd_celery.redis import connect
from ddd_celery.sql import SqlJobStore

BROKER_URL = os.environ["DDD_TEST_BROKER_URL"]
PREFIX = os.environ["DDD_TEST_PREFIX"]

app = Celery("web_browser_app", broker=BROKER_URL)
app.conf.update(
    broker_transport_options={"global_keyprefix": PREFIX},
    broker_connection_retry_on_startup=True,
    task_default_queue=f"{PREFIX}default",
    worker_prefetch_multiplier=1,
    ddd_celery_redis_url=BROKER_URL,
    ddd_celery_key_prefix=PREFIX,
)
install_jobs(app, jobs=[HeartbeatJob])
engine = create_engine(os.environ["DDD_TEST_DATABASE_URL"], connect_args={"connect_timeout": 2})
switches = Switches(connect(BROKER_URL), PREFIX)
install_background_jobs(
    app,
    jobs=[ChargeJob],
    store=SqlJobStore(engine, prefix=os.environ["DDD_TEST_TABLES"]),
    providers={Switches: lambda: switches},
    lease_ms=3_000,
    heartbeat_ms=500,
)
