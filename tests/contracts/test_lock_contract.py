"""The kernel Lock's contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.lock import LockContract


class TestLock(LockContract):
    pass
