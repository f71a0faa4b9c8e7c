"""Who does the work: a user, or the system acting under a name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Actor:
    """The author of a unit of work, stamped on audit columns and logs."""

    kind: str
    id: str

    @property
    def is_system(self) -> bool:
        return self.kind == "system"

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


def system_actor(name: str) -> Actor:
    """The actor a scheduled job runs as, named after the job."""
    if not name:
        raise ValueError("a system actor needs a name")
    return Actor("system", name)
