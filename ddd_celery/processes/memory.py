"""``InMemoryProcessStore``: the ``ProcessStore`` of specs and of a process without a database."""

from __future__ import annotations

import builtins
import threading

from ddd_celery.processes.errors import StaleProcessVersionError
from ddd_celery.processes.store import (
    ProcessStore,
    StoredProcess,
    check_key,
    check_save,
    dump_json,
    load_json,
)

_Key = tuple[str, str, str]
"""(tenant id, "" for none; process; instance id): "" is never a tenant id, so none collide."""


class InMemoryProcessStore(ProcessStore):
    """Instances in a dict keyed by tenant, process and id, each save a compare-and-set under
    one lock.

    It has no transaction to join: a save applies at once, so the runner saves last in its unit
    of work, after which nothing can fail. Values are kept as JSON text, so what ``load`` gives
    back is a copy, as from a database.
    """

    def __init__(self) -> None:
        self._instances: dict[_Key, tuple[int, str, str]] = {}
        self._mutex = threading.Lock()

    def load(
        self, process: str, instance_id: str, *, tenant_id: str | None, for_update: bool = False
    ) -> StoredProcess | None:
        """``for_update`` is ignored: a save applies at once, under the version check."""
        check_key(process, instance_id, tenant_id)
        with self._mutex:
            kept = self._instances.get((tenant_id or "", process, instance_id))
        if kept is None:
            return None
        version, state, timeouts = kept
        return load_json(
            process,
            instance_id,
            tenant_id=tenant_id,
            version=version,
            state=state,
            timeouts=timeouts,
        )

    def save(self, instance: StoredProcess, *, expected_version: int) -> None:
        check_save(instance, expected_version)
        state, timeouts = dump_json(instance)
        key = (instance.tenant_id or "", instance.process, instance.id)
        with self._mutex:
            kept = self._instances.get(key)
            if (0 if kept is None else kept[0]) != expected_version:
                raise StaleProcessVersionError(
                    f"instance {instance.id!r} is no longer at version {expected_version}",
                    process=instance.process,
                    instance_id=instance.id,
                    version=expected_version,
                )
            self._instances[key] = (instance.version, state, timeouts)

    def list(self) -> builtins.list[StoredProcess]:
        """Every instance kept, of every tenant, for assertions."""
        with self._mutex:
            keys = sorted(self._instances)
        found = (
            self.load(process, instance_id, tenant_id=tenant or None)
            for tenant, process, instance_id in keys
        )
        return [instance for instance in found if instance is not None]
