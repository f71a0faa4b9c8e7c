"""The contract of the kernel ``Lock``: every adapter passes the same tests.

Subclass ``LockContract`` in a test module and provide the fixture ``lock_subject``, returning
a ``LockSubject`` (parametrise it to run the suite over several adapters)::

    class TestMyLock(LockContract):
        @pytest.fixture
        def lock_subject(self) -> LockSubject: ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import Lease, Lock

KEY = "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"
TTL_MS = 10_000
MARGIN_MS = 4_000
"""Time to live left when a test checks a key is still held: real time passes between two steps
on a store with its own clock (Redis), a second or more on a loaded machine."""


@dataclass(frozen=True, slots=True)
class LockSubject:
    """An adapter under test, and the means to act as another instance and to let time pass."""

    lock: Lock
    """The lock under test, dating its leases on ``clock``."""
    peer: Lock
    """Another instance on the same store, as another process holds it (``lock`` itself for a
    store that lives in one process)."""
    clock: FixedClock
    """The clock ``lock`` dates ``Lease.expires_at`` with."""
    elapse: Callable[[int], object]
    """Let that many milliseconds pass, for the store's expiry and for ``clock`` alike.

    The contract keeps a second of margin around every expiry, so a store that expires on its
    own clock may let real time run a little."""


class LockContract:
    """Mutual exclusion on a key for a time to live, never blocking, released by owner token."""

    def test_a_free_key_is_acquired_for_its_time_to_live(self, lock_subject: LockSubject) -> None:
        lease = lock_subject.lock.acquire(KEY, TTL_MS)

        assert lease is not None
        assert lease.key == KEY
        assert lease.token
        assert lease.expires_at == lock_subject.clock.now() + timedelta(milliseconds=TTL_MS)

    def test_a_held_key_is_refused_to_another_owner(self, lock_subject: LockSubject) -> None:
        assert lock_subject.lock.acquire(KEY, TTL_MS) is not None

        assert lock_subject.peer.acquire(KEY, TTL_MS) is None

    def test_a_held_key_is_refused_to_its_own_holder_too(self, lock_subject: LockSubject) -> None:
        assert lock_subject.lock.acquire(KEY, TTL_MS) is not None

        assert lock_subject.lock.acquire(KEY, TTL_MS) is None

    def test_keys_are_held_independently(self, lock_subject: LockSubject) -> None:
        assert lock_subject.lock.acquire(KEY, TTL_MS) is not None

        assert lock_subject.peer.acquire(KEY.replace("06:00", "06:15"), TTL_MS) is not None

    def test_every_lease_has_its_own_token(self, lock_subject: LockSubject) -> None:
        first = _held(lock_subject.lock.acquire(KEY, TTL_MS))
        assert lock_subject.lock.release(first)
        second = _held(lock_subject.lock.acquire(KEY, TTL_MS))
        other = _held(lock_subject.lock.acquire("job:other:2026-03-02T06:00:00.000Z", TTL_MS))

        assert len({first.token, second.token, other.token}) == 3

    def test_a_key_is_held_until_its_time_to_live_has_passed(
        self, lock_subject: LockSubject
    ) -> None:
        assert lock_subject.lock.acquire(KEY, TTL_MS) is not None

        lock_subject.elapse(TTL_MS - MARGIN_MS)
        assert lock_subject.peer.acquire(KEY, TTL_MS) is None
        lock_subject.elapse(MARGIN_MS)
        assert lock_subject.peer.acquire(KEY, TTL_MS) is not None

    def test_a_released_key_can_be_taken_by_another_owner(self, lock_subject: LockSubject) -> None:
        lease = _held(lock_subject.lock.acquire(KEY, TTL_MS))

        assert lock_subject.lock.release(lease) is True
        assert lock_subject.peer.acquire(KEY, TTL_MS) is not None

    def test_a_lease_is_released_once(self, lock_subject: LockSubject) -> None:
        lease = _held(lock_subject.lock.acquire(KEY, TTL_MS))

        assert lock_subject.lock.release(lease) is True
        assert lock_subject.lock.release(lease) is False

    def test_an_expired_lease_is_not_released(self, lock_subject: LockSubject) -> None:
        lease = _held(lock_subject.lock.acquire(KEY, TTL_MS))
        lock_subject.elapse(TTL_MS)

        assert lock_subject.lock.release(lease) is False

    def test_a_stale_lease_never_frees_the_key_of_its_next_owner(
        self, lock_subject: LockSubject
    ) -> None:
        stale = _held(lock_subject.lock.acquire(KEY, TTL_MS))
        lock_subject.elapse(TTL_MS)
        assert lock_subject.peer.acquire(KEY, TTL_MS) is not None

        assert lock_subject.lock.release(stale) is False
        assert lock_subject.lock.acquire(KEY, TTL_MS) is None

    @pytest.mark.parametrize("ttl_ms", [0, -1])
    def test_a_time_to_live_that_is_not_positive_is_refused(
        self, lock_subject: LockSubject, ttl_ms: int
    ) -> None:
        with pytest.raises(ValueError, match="time to live"):
            lock_subject.lock.acquire(KEY, ttl_ms)

        assert lock_subject.peer.acquire(KEY, TTL_MS) is not None

    def test_owners_racing_for_a_key_get_one_lease(self, lock_subject: LockSubject) -> None:
        owners = [lock_subject.lock, lock_subject.peer] * 8
        start = threading.Barrier(len(owners))
        leases: list[Lease | None] = []

        def race(owner: Lock) -> None:
            start.wait()
            leases.append(owner.acquire(KEY, TTL_MS))

        threads = [threading.Thread(target=race, args=(owner,)) for owner in owners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert len([lease for lease in leases if lease is not None]) == 1


def _held(lease: Lease | None) -> Lease:
    assert lease is not None, "the key should have been free"
    return lease
