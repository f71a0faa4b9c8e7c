"""The JobLastRuns contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.last_runs import JobLastRunsContract


class TestJobLastRuns(JobLastRunsContract):
    pass
