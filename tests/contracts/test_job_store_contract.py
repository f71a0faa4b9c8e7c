"""The JobStore contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.job_store import JobStoreContract


class TestJobStore(JobStoreContract):
    pass
