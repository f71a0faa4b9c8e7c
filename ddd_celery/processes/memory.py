"""``InMemoryProcessStore``: the ``ProcessStore`` of specs and of a process without a database."""

from __future__ import annotations

import builtins
import json
import threading

from ddd_celery.processes.errors import StaleProcessVersionError
from ddd_celery.processes.store import ProcessStore, StoredProcess, check_save


class InMemoryProcessStore(ProcessStore):
    """Instances in a dict, each save a compare-and-set under one lock.

    It has no transaction to join: a save applies at once, so the runner saves last in its unit
    of work, after which nothing can fail. Values are kept as JSON text, so what ``load`` gives
    back is a copy, as from a database.
    """

    def __init__(self) -> None:
        self._instances: dict[tuple[str, str], tuple[int, str, str]] = {}
        self._mutex = threading.Lock()

    def load(self, process: str, instance_id: str) -> StoredProcess | None:
        with self._mutex:
            kept = self._instances.get((process, instance_id))
        if kept is None:
            return None
        version, state, timeouts = kept
        return StoredProcess(process, instance_id, version, json.loads(state), json.loads(timeouts))

    def save(self, instance: StoredProcess, *, expected_version: int) -> None:
        check_save(instance, expected_version)
        state, timeouts = dump_json(instance)
        key = (instance.process, instance.id)
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
        """Every instance kept, for assertions."""
        with self._mutex:
            keys = sorted(self._instances)
        found = (self.load(process, instance_id) for process, instance_id in keys)
        return [instance for instance in found if instance is not None]


def dump_json(instance: StoredProcess) -> tuple[str, str]:
    """The state and the timeouts as JSON text; ``ValueError`` naming what JSON cannot carry."""
    timeouts = dict(instance.timeouts)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in timeouts.items()):
        raise ValueError("timeouts map each timeout's name to a job id, both str")
    try:
        state = json.dumps(instance.state, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        raise ValueError(
            f"the state of instance {instance.id!r} of {instance.process!r} is not JSON"
        ) from None
    if json.loads(state) != instance.state:
        raise ValueError(
            f"the state of instance {instance.id!r} of {instance.process!r} would not come back "
            "from JSON unchanged (a tuple, or a key that is not a str)"
        )
    return state, json.dumps(timeouts, separators=(",", ":"), sort_keys=True)
