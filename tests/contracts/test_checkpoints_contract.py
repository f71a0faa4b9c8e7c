"""The JobCheckpoints contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.checkpoints import JobCheckpointsContract


class TestJobCheckpoints(JobCheckpointsContract):
    pass
