"""The ProcessStore contract, run over every adapter (see conftest)."""

from ddd_celery.testing.contracts.process_store import ProcessStoreContract


class TestProcessStore(ProcessStoreContract):
    pass
