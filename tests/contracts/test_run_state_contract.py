"""The JobRunState contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.run_state import JobRunStateContract


class TestJobRunState(JobRunStateContract):
    pass
