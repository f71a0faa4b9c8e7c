"""Identifiers, actors and tenants: the small kernel values jobs are stamped with."""

from __future__ import annotations

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
