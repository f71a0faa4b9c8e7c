"""The ``ProcessStore`` port: the saved instances of process managers, versioned.

An instance is keyed by its tenant, its process and its id: two tenants may each have an
instance ``order-1`` of one process, and neither store call reaches the other's. An instance is
saved whole (its state and its armed timeouts, as JSON) at the version after the one its step
read. A save whose expected version is no longer the instance's is refused
(``StaleProcessVersionError``) and changes nothing: that is how two steps racing on one instance
end with one winner and no lost update, whatever the isolation level of the database.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddd_celery.processes.errors import CorruptProcessStateError

JsonValue = Any
"""A value ``json.dumps`` writes and ``json.loads`` gives back unchanged."""

MAX_TENANT_ID_BYTES = 256
"""The longest tenant id (UTF-8), as for background jobs."""
MAX_KEY_BYTES = 512
"""The longest process name or instance id (UTF-8): a key a database index can hold."""


@dataclass(frozen=True, slots=True)
class StoredProcess:
    """An instance as the store keeps it."""

    process: str
    """The process manager's declared name."""
    id: str
    version: int
    """1 for the first save, one more at each save."""
    state: JsonValue
    timeouts: Mapping[str, str] = field(default_factory=dict)
    """The armed timeouts: each name and the id of the background job that fires it."""
    tenant_id: str | None = None
    """The tenant the instance belongs to, None for none: part of its key."""


class ProcessStore(ABC):
    """Loads and saves process instances with optimistic concurrency, keyed by
    ``(tenant_id, process, id)``.

    ``transactional`` is True when the store writes in the caller's unit of work (SQL with a
    unit of work): then a save commits with the use case, the jobs it enqueued and nothing else,
    and a rollback undoes it. A store that is not transactional applies a save at once.
    """

    transactional: bool = False

    @abstractmethod
    def load(
        self, process: str, instance_id: str, *, tenant_id: str | None, for_update: bool = False
    ) -> StoredProcess | None:
        """The instance of ``tenant_id`` (None: of no tenant) as last saved (in the caller's unit
        of work, if any), or None; never another tenant's.

        ``for_update`` says the caller saves the instance next in the unit of work in progress: a
        ``transactional`` store then holds it until that unit ends (``SELECT ... FOR UPDATE``),
        so a racing save waits for this unit's commit and then finds its version stale, and a
        racing ``for_update`` load waits and then reads what this unit saved. A store that cannot
        hold it ignores the flag; the version check of ``save`` decides all the same.

        Raises:
            ValueError: ``check_key`` refuses the key.
            CorruptProcessStateError: what is stored no longer parses.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """

    @abstractmethod
    def save(self, instance: StoredProcess, *, expected_version: int) -> None:
        """Save ``instance`` (at version ``expected_version + 1``) if the instance of its tenant is
        still at ``expected_version`` (0: it does not exist yet).

        Raises:
            StaleProcessVersionError: the stored instance is not at ``expected_version``; nothing
                changed.
            ValueError: ``instance.version`` is not ``expected_version + 1``, ``check_key``
                refuses its key, or its state or timeouts are not JSON.
            ConnectionError: the store cannot be asked (``StoreUnavailableError``).
        """


def check_key(process: str, instance_id: str, tenant_id: str | None) -> None:
    """Refuse a key no store could keep alike; every adapter calls it first.

    A tenant id is None or a non-empty str (``""`` is refused, as for jobs); none of the three
    holds a NUL character (PostgreSQL's text cannot) or is longer than a database index takes.
    The message names the part, never its text.
    """
    if tenant_id is not None and (not isinstance(tenant_id, str) or tenant_id == ""):
        raise ValueError("a tenant id is None or a non-empty str")
    for name, value, limit in (
        ("process", process, MAX_KEY_BYTES),
        ("instance id", instance_id, MAX_KEY_BYTES),
        ("tenant id", tenant_id, MAX_TENANT_ID_BYTES),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"a {name} is a str, not a {type(value).__name__}")
        if "\x00" in value:
            raise ValueError(f"a {name} holds a NUL character")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate; the error would quote the text
            size = -1
        if size < 0:
            raise ValueError(f"a {name} is not UTF-8 text")
        if size > limit:
            raise ValueError(f"a {name} is at most {limit} bytes (UTF-8)")


def check_save(instance: StoredProcess, expected_version: int) -> None:
    """Refuse a save whose key is refused or whose versions do not follow; every adapter calls
    it first."""
    check_key(instance.process, instance.id, instance.tenant_id)
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise ValueError(f"expected_version is an int, not {expected_version!r}")
    if expected_version < 0 or instance.version != expected_version + 1:
        raise ValueError(
            f"instance {instance.id!r} of {instance.process!r} is saved at version "
            f"expected_version + 1 ({expected_version + 1}), not {instance.version}"
        )


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


def load_json(
    process: str,
    instance_id: str,
    *,
    tenant_id: str | None,
    version: int,
    state: str,
    timeouts: str,
) -> StoredProcess:
    """The instance from the JSON text ``dump_json`` wrote; ``CorruptProcessStateError`` naming
    the instance (never the text, and with nothing chained) when it no longer parses."""
    what, loaded = _parsed(state, timeouts)
    if loaded is None:
        raise CorruptProcessStateError(
            f"the stored {what} of instance {instance_id!r} no longer reads back",
            process=process,
            instance_id=instance_id,
            tenant_id=tenant_id,
        )
    return StoredProcess(process, instance_id, version, loaded[0], loaded[1], tenant_id)


def _parsed(state: str, timeouts: str) -> tuple[str, tuple[Any, dict[str, str]] | None]:
    """What failed (``state`` or ``timeouts``) and the two values, None when one failed."""
    try:
        loaded_state = json.loads(state)
    except (TypeError, ValueError, RecursionError):
        return "state", None
    try:
        loaded_timeouts = json.loads(timeouts)
    except (TypeError, ValueError, RecursionError):
        return "timeouts", None
    if not isinstance(loaded_timeouts, dict) or not all(
        isinstance(job, str) for job in loaded_timeouts.values()
    ):
        return "timeouts", None
    return "", (loaded_state, loaded_timeouts)
