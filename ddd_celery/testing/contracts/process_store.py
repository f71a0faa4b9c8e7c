"""The contract of the ``ProcessStore`` port: every adapter passes the same tests.

Subclass ``ProcessStoreContract`` in a test module and provide the fixture
``process_store_subject``, returning a ``ProcessStoreSubject``::

    class TestMyProcessStore(ProcessStoreContract):
        @pytest.fixture
        def process_store_subject(self) -> ProcessStoreSubject: ...

Each test starts on an empty store.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest

from ddd_celery.kernel.unit_of_work import UnitOfWork
from ddd_celery.processes.errors import StaleProcessVersionError
from ddd_celery.processes.store import ProcessStore, StoredProcess

PROCESS = "booking.appointment-booking"


@dataclass(frozen=True, slots=True)
class ProcessStoreSubject:
    """An adapter under test, another instance on the same data, and its unit of work."""

    store: ProcessStore
    """The store under test, empty."""
    peer: ProcessStore
    """Another instance on the same data, as another process holds it (``store`` itself for a
    store that lives in one process)."""
    unit_of_work: UnitOfWork | None = None
    """The unit of work a ``transactional`` store writes in; None for the others."""


def instance(
    version: int, state: Any = None, *, instance_id: str = "b-1", **timeouts: str
) -> StoredProcess:
    return StoredProcess(
        PROCESS,
        instance_id,
        version,
        {"status": "awaiting-payment", "n": version} if state is None else state,
        timeouts,
    )


class ProcessStoreContract:
    """What every ``ProcessStore`` guarantees."""

    def test_an_instance_never_saved_loads_as_none(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        assert process_store_subject.store.load(PROCESS, "b-1") is None

    def test_an_instance_saved_at_version_1_loads_back_equal_from_another_instance(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        saved = instance(
            1, {"slot": "2026-10-01T09:00", "amounts": [1, 2.5], "paid": None}, payment="job-7"
        )
        subject.store.save(saved, expected_version=0)
        assert subject.store.load(PROCESS, "b-1") == saved
        assert subject.peer.load(PROCESS, "b-1") == saved

    def test_each_save_moves_the_instance_to_the_next_version(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        store.save(instance(1, payment="job-1"), expected_version=0)
        store.save(instance(2), expected_version=1)
        store.save(instance(3, reminder="job-9"), expected_version=2)
        assert store.load(PROCESS, "b-1") == instance(3, reminder="job-9")

    def test_a_save_at_a_stale_version_is_refused_and_changes_nothing(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        subject.store.save(instance(1), expected_version=0)
        subject.peer.save(instance(2, {"by": "peer"}), expected_version=1)
        with pytest.raises(StaleProcessVersionError) as refused:
            subject.store.save(instance(2, {"by": "store"}), expected_version=1)
        assert refused.value.code == "STALE_PROCESS_VERSION"
        assert refused.value.instance_id == "b-1"
        assert subject.store.load(PROCESS, "b-1") == instance(2, {"by": "peer"})

    def test_a_second_first_save_of_one_instance_is_refused(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        subject.peer.save(instance(1, {"by": "peer"}), expected_version=0)
        with pytest.raises(StaleProcessVersionError):
            subject.store.save(instance(1, {"by": "store"}), expected_version=0)
        assert subject.store.load(PROCESS, "b-1") == instance(1, {"by": "peer"})

    def test_a_save_ahead_of_the_instance_is_refused_as_stale(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        store.save(instance(1), expected_version=0)
        with pytest.raises(StaleProcessVersionError):
            store.save(instance(4), expected_version=3)
        assert store.load(PROCESS, "b-1") == instance(1)

    def test_a_save_whose_versions_do_not_follow_is_a_value_error(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        with pytest.raises(ValueError, match="expected_version"):
            store.save(instance(3), expected_version=0)
        assert store.load(PROCESS, "b-1") is None

    def test_a_state_json_cannot_carry_is_refused(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        with pytest.raises(ValueError, match="JSON"):
            store.save(instance(1, {"at": object()}), expected_version=0)
        with pytest.raises(ValueError, match="JSON"):
            store.save(instance(1, {"slots": (1, 2)}), expected_version=0)
        assert store.load(PROCESS, "b-1") is None

    def test_instances_of_two_processes_with_one_id_are_apart(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        other = StoredProcess("billing.dunning", "b-1", 1, {"level": 2})
        store.save(instance(1), expected_version=0)
        store.save(other, expected_version=0)
        store.save(instance(1, instance_id="b-2"), expected_version=0)
        assert store.load(PROCESS, "b-1") == instance(1)
        assert store.load("billing.dunning", "b-1") == other
        assert store.load(PROCESS, "b-2") == instance(1, instance_id="b-2")

    def test_of_many_saves_racing_at_one_version_exactly_one_wins(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        subject.store.save(instance(1), expected_version=0)
        stores = [subject.store, subject.peer] * 3
        start = threading.Barrier(len(stores))
        won: list[int] = []
        lost: list[int] = []

        def save(index: int, store: ProcessStore) -> None:
            start.wait(5)
            try:
                store.save(instance(2, {"by": index}), expected_version=1)
                won.append(index)
            except StaleProcessVersionError:
                lost.append(index)

        threads = [
            threading.Thread(target=save, args=(index, store)) for index, store in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(won) == 1
        assert sorted(won + lost) == list(range(len(stores)))
        assert subject.store.load(PROCESS, "b-1") == instance(2, {"by": won[0]})

    def test_a_transactional_store_saves_only_when_its_unit_of_work_commits(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        unit_of_work = subject.unit_of_work
        if not subject.store.transactional or unit_of_work is None:
            # a store outside the transaction keeps what it is given at once
            subject.store.save(instance(1), expected_version=0)
            assert subject.peer.load(PROCESS, "b-1") == instance(1)
            return

        def failing_use_case() -> None:
            with unit_of_work.begin():
                subject.store.save(instance(1), expected_version=0)
                assert subject.store.load(PROCESS, "b-1") == instance(1)
                raise RuntimeError("the use case fails")

        with pytest.raises(RuntimeError, match="the use case fails"):
            failing_use_case()
        assert subject.peer.load(PROCESS, "b-1") is None
        with unit_of_work.begin():
            subject.store.save(instance(1, payment="job-1"), expected_version=0)
        assert subject.peer.load(PROCESS, "b-1") == instance(1, payment="job-1")
