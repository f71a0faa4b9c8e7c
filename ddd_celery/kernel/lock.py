"""The kernel Lock: an efficiency tool between instances, never the guard of an invariant."""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta

from ddd_celery.kernel.clock import Clock
from ddd_celery.kernel.errors import StoreUnavailableError


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of holding ``key`` until ``expires_at``; ``token`` identifies the owner on release."""

    key: str
    token: str
    expires_at: datetime


class LockUnavailableError(StoreUnavailableError):
    """The lock store could not be asked; the caller must not act as if it held the lock."""


class Lock(ABC):
    """Mutual exclusion on a key for a time to live.

    Best effort: a lease may outlive its holder's belief (pauses, store fail-over), so what must
    never happen twice is refused by a database constraint, not by this port.
    """

    @abstractmethod
    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        """Take ``key`` for ``ttl_ms`` milliseconds.

        Returns the lease, or None when another owner holds the key. Never blocks waiting for
        the key.

        Raises:
            ValueError: ``ttl_ms`` is not positive; the key is not taken.
            LockUnavailableError: the store cannot be asked (a ``ConnectionError``, the driver's
                error as its ``__cause__``).
        """

    @abstractmethod
    def release(self, lease: Lease) -> bool:
        """Free the key if ``lease`` still owns it; False when it expired or another owner took it.

        Raises:
            LockUnavailableError: the store cannot be asked (a ``ConnectionError``).
        """


class InMemoryLock(Lock):
    """Excludes inside one process only: right for one instance and for tests, nothing more."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._held: dict[str, Lease] = {}
        self._mutex = threading.Lock()
        self._sweep_at = _SWEEP_FLOOR

    def acquire(self, key: str, ttl_ms: int) -> Lease | None:
        if ttl_ms <= 0:
            raise ValueError(f"a lock's time to live is a positive number of ms, not {ttl_ms}")
        now = self._clock.now()
        with self._mutex:
            current = self._held.get(key)
            if current is not None and current.expires_at > now:
                return None
            lease = Lease(key, uuid.uuid4().hex, now + timedelta(milliseconds=ttl_ms))
            self._held[key] = lease
            if len(self._held) >= self._sweep_at:
                self._sweep(now)
            return lease

    def release(self, lease: Lease) -> bool:
        with self._mutex:
            current = self._held.get(lease.key)
            if current is None or current.token != lease.token:
                return False
            del self._held[lease.key]
            return current.expires_at > self._clock.now()

    def _sweep(self, now: datetime) -> None:
        """Forget expired leases, so one key per occurrence does not grow without bound."""
        self._held = {key: lease for key, lease in self._held.items() if lease.expires_at > now}
        self._sweep_at = max(_SWEEP_FLOOR, 2 * len(self._held))


_SWEEP_FLOOR = 1024
