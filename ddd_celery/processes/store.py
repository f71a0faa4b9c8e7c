"""The ``ProcessStore`` port: the saved instances of process managers, versioned.

An instance is saved whole (its state and its armed timeouts, as JSON) at the version after the
one its step read. A save whose expected version is no longer the instance's is refused
(``StaleProcessVersionError``) and changes nothing: that is how two steps racing on one instance
end with one winner and no lost update, whatever the isolation level of the database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JsonValue = Any
"""A value ``json.dumps`` writes and ``json.loads`` gives back unchanged."""


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


class ProcessStore(ABC):
    """Loads and saves process instances with optimistic concurrency.

    ``transactional`` is True when the store writes in the caller's unit of work (SQL with a
    unit of work): then a save commits with the use case, the jobs it enqueued and nothing else,
    and a rollback undoes it. A store that is not transactional applies a save at once.
    """

    transactional: bool = False

    @abstractmethod
    def load(self, process: str, instance_id: str) -> StoredProcess | None:
        """The instance as last saved (in the caller's unit of work, if any), or None."""

    @abstractmethod
    def save(self, instance: StoredProcess, *, expected_version: int) -> None:
        """Save ``instance`` (at version ``expected_version + 1``) if the instance is still at
        ``expected_version`` (0: it does not exist yet).

        Raises ``StaleProcessVersionError`` when it is not, changing nothing; ``ValueError`` when
        ``instance.version`` is not ``expected_version + 1``, or the state or timeouts are not
        JSON; ``ConnectionError`` when the store cannot be reached.
        """


def check_save(instance: StoredProcess, expected_version: int) -> None:
    """Refuse a save whose versions do not follow; every adapter calls it first."""
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise ValueError(f"expected_version is an int, not {expected_version!r}")
    if expected_version < 0 or instance.version != expected_version + 1:
        raise ValueError(
            f"instance {instance.id!r} of {instance.process!r} is saved at version "
            f"expected_version + 1 ({expected_version + 1}), not {instance.version}"
        )
