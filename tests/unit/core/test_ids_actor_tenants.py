"""Identifiers, actors and tenants: the small kernel values jobs are stamped with."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from ddd_celery.kernel import (
    Actor,
    InMemoryTenantDirectory,
    SequentialIdGenerator,
    UuidGenerator,
    system_actor,
)


def test_sequential_ids_count_from_one_with_their_prefix() -> None:
    ids = SequentialIdGenerator()

    assert [ids.next_id() for _ in range(3)] == ["id-1", "id-2", "id-3"]
    assert SequentialIdGenerator("run-").next_id() == "run-1"


def test_sequential_ids_are_unique_across_threads() -> None:
    ids = SequentialIdGenerator()
    seen: list[str] = []
    mutex = threading.Lock()

    def take() -> None:
        for _ in range(500):
            value = ids.next_id()
            with mutex:
                seen.append(value)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(seen)) == 4_000
    assert ids.next_id() == "id-4001"


def test_uuid_ids_are_fresh_version_4_uuids() -> None:
    ids = UuidGenerator()
    first, second = ids.next_id(), ids.next_id()

    assert first != second
    assert uuid.UUID(first).version == 4


def test_uuid_ids_made_many_at_once_are_fresh_version_4_uuids_as_uuid4_writes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's ids come from one read of ``os.urandom``: the bits ``uuid4`` would make of
    each 16 bytes, written as ``str(UUID)`` writes them."""
    reads: list[int] = []
    urandom = os.urandom

    def reading(size: int) -> bytes:
        reads.append(size)
        return urandom(size)

    monkeypatch.setattr(os, "urandom", reading)
    ids = UuidGenerator().next_ids(1_000)
    monkeypatch.undo()

    assert reads == [16_000]
    assert len(set(ids)) == 1_000
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text
    assert UuidGenerator().next_ids(0) == []
    edges = iter([b"\xff" * 16, b"\x00" * 16])
    monkeypatch.setattr(os, "urandom", lambda size: b"".join(next(edges) for _ in range(size >> 4)))
    assert UuidGenerator().next_ids(2) == [
        str(uuid.UUID(bytes=b"\xff" * 16, version=4)),
        str(uuid.UUID(bytes=b"\x00" * 16, version=4)),
    ]


def test_sequential_ids_made_many_at_once_go_on_counting() -> None:
    ids = SequentialIdGenerator()

    assert ids.next_ids(3) == ["id-1", "id-2", "id-3"]
    assert ids.next_id() == "id-4"


def test_a_system_actor_is_the_system_acting_under_the_jobs_name() -> None:
    actor = system_actor("billing.send-payment-reminders")

    assert actor == Actor("system", "billing.send-payment-reminders")
    assert actor.is_system
    assert str(actor) == "system:billing.send-payment-reminders"


def test_a_user_is_not_a_system_actor() -> None:
    assert not Actor("user", "ada").is_system


def test_a_system_actor_needs_a_name() -> None:
    with pytest.raises(ValueError, match="name"):
        system_actor("")


def test_a_tenant_directory_lists_its_tenants_in_order_and_copies_them() -> None:
    directory = InMemoryTenantDirectory(["acme", "globex"])
    listed = directory.tenants()
    listed.append("intruder")

    directory.add("initech")

    assert directory.tenants() == ["acme", "globex", "initech"]
