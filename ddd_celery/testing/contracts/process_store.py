"""The contract of the ``ProcessStore`` port: every adapter passes the same tests.

Subclass ``ProcessStoreContract`` in a test module and provide the fixture
``process_store_subject``, returning a ``ProcessStoreSubject``::

    class TestMyProcessStore(ProcessStoreContract):
        @pytest.fixture
        def process_store_subject(self) -> ProcessStoreSubject: ...

Each test starts on an empty store. Instances are keyed by tenant, process and id: no call of
one tenant reaches another's instance, whatever the texts of the keys.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddd_celery.kernel.unit_of_work import UnitOfWork
from ddd_celery.processes.errors import CorruptProcessStateError, StaleProcessVersionError
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
    overwrite: Callable[[StoredProcess, str, str], None] | None = None
    """Writes the given state and timeouts text as what is stored for the key of an instance
    already saved, past every check of the store (as a bad migration or a hand edit would): how
    the suite corrupts a stored instance. None skips the tests that need it."""


SECRET = "vanished-secret"
"""A stored value no error may quote."""
_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)
_joined = st.text(st.sampled_from(["a", "b", ":", "\x1f", "|", " "]), max_size=6)
"""Texts made of separators, the likeliest to collide once joined into one key."""
_tenants = st.none() | (_text | _joined).filter(bool)
_ids = _text | _joined


def instance(
    version: int,
    state: Any = None,
    *,
    instance_id: str = "b-1",
    tenant_id: str | None = None,
    **timeouts: str,
) -> StoredProcess:
    return StoredProcess(
        PROCESS,
        instance_id,
        version,
        {"status": "awaiting-payment", "n": version} if state is None else state,
        timeouts,
        tenant_id,
    )


def _quotes_nothing_stored(error: BaseException) -> None:
    """Neither ``error`` nor anything chained to it (cause or context) quotes a stored value."""
    seen: BaseException | None = error
    while seen is not None:
        assert SECRET not in str(seen)
        assert SECRET not in repr(seen)
        assert SECRET not in repr(seen.args)
        seen = seen.__cause__ or seen.__context__


class ProcessStoreContract:
    """What every ``ProcessStore`` guarantees."""

    def test_an_instance_never_saved_loads_as_none(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        assert process_store_subject.store.load(PROCESS, "b-1", tenant_id=None) is None

    def test_an_instance_saved_at_version_1_loads_back_equal_from_another_instance(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        saved = instance(
            1, {"slot": "2026-10-01T09:00", "amounts": [1, 2.5], "paid": None}, payment="job-7"
        )
        subject.store.save(saved, expected_version=0)
        assert subject.store.load(PROCESS, "b-1", tenant_id=None) == saved
        assert subject.peer.load(PROCESS, "b-1", tenant_id=None) == saved

    def test_each_save_moves_the_instance_to_the_next_version(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        store.save(instance(1, payment="job-1"), expected_version=0)
        store.save(instance(2), expected_version=1)
        store.save(instance(3, reminder="job-9"), expected_version=2)
        assert store.load(PROCESS, "b-1", tenant_id=None) == instance(3, reminder="job-9")

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
        assert subject.store.load(PROCESS, "b-1", tenant_id=None) == instance(2, {"by": "peer"})

    def test_a_second_first_save_of_one_instance_is_refused(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        subject.peer.save(instance(1, {"by": "peer"}), expected_version=0)
        with pytest.raises(StaleProcessVersionError):
            subject.store.save(instance(1, {"by": "store"}), expected_version=0)
        assert subject.store.load(PROCESS, "b-1", tenant_id=None) == instance(1, {"by": "peer"})

    def test_a_save_ahead_of_the_instance_is_refused_as_stale(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        store.save(instance(1), expected_version=0)
        with pytest.raises(StaleProcessVersionError):
            store.save(instance(4), expected_version=3)
        assert store.load(PROCESS, "b-1", tenant_id=None) == instance(1)

    def test_a_save_whose_versions_do_not_follow_is_a_value_error(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        with pytest.raises(ValueError, match="expected_version"):
            store.save(instance(3), expected_version=0)
        assert store.load(PROCESS, "b-1", tenant_id=None) is None

    def test_a_state_json_cannot_carry_is_refused(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        with pytest.raises(ValueError, match="JSON"):
            store.save(instance(1, {"at": object()}), expected_version=0)
        with pytest.raises(ValueError, match="JSON"):
            store.save(instance(1, {"slots": (1, 2)}), expected_version=0)
        assert store.load(PROCESS, "b-1", tenant_id=None) is None

    def test_instances_of_two_processes_with_one_id_are_apart(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        other = StoredProcess("billing.dunning", "b-1", 1, {"level": 2})
        store.save(instance(1), expected_version=0)
        store.save(other, expected_version=0)
        store.save(instance(1, instance_id="b-2"), expected_version=0)
        assert store.load(PROCESS, "b-1", tenant_id=None) == instance(1)
        assert store.load("billing.dunning", "b-1", tenant_id=None) == other
        assert store.load(PROCESS, "b-2", tenant_id=None) == instance(1, instance_id="b-2")

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
        assert subject.store.load(PROCESS, "b-1", tenant_id=None) == instance(2, {"by": won[0]})

    def test_a_transactional_store_saves_only_when_its_unit_of_work_commits(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        unit_of_work = subject.unit_of_work
        if not subject.store.transactional or unit_of_work is None:
            # a store outside the transaction keeps what it is given at once
            subject.store.save(instance(1), expected_version=0)
            assert subject.peer.load(PROCESS, "b-1", tenant_id=None) == instance(1)
            return

        def failing_use_case() -> None:
            with unit_of_work.begin():
                subject.store.save(instance(1), expected_version=0)
                assert subject.store.load(PROCESS, "b-1", tenant_id=None) == instance(1)
                raise RuntimeError("the use case fails")

        with pytest.raises(RuntimeError, match="the use case fails"):
            failing_use_case()
        assert subject.peer.load(PROCESS, "b-1", tenant_id=None) is None
        with unit_of_work.begin():
            subject.store.save(instance(1, payment="job-1"), expected_version=0)
        assert subject.peer.load(PROCESS, "b-1", tenant_id=None) == instance(1, payment="job-1")

    def test_a_load_for_update_in_a_unit_of_work_holds_the_instance_until_it_ends(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        subject.store.save(instance(1, tenant_id="acme"), expected_version=0)
        unit_of_work = subject.unit_of_work
        if not subject.store.transactional or unit_of_work is None:
            # nothing to hold: the flag changes nothing, the version check decides
            loaded = subject.store.load(PROCESS, "b-1", tenant_id="acme", for_update=True)
            assert loaded == instance(1, tenant_id="acme")
            return
        racing: list[BaseException | None] = []

        def peer_saves() -> None:
            try:
                subject.peer.save(instance(2, {"by": "peer"}, tenant_id="acme"), expected_version=1)
                racing.append(None)
            except StaleProcessVersionError as error:
                racing.append(error)

        with unit_of_work.begin():
            held = subject.store.load(PROCESS, "b-1", tenant_id="acme", for_update=True)
            assert held is not None
            peer = threading.Thread(target=peer_saves)
            peer.start()
            peer.join(0.5)  # time for a save that does not wait to land first
            subject.store.save(instance(2, {"by": "holder"}, tenant_id="acme"), expected_version=1)
        peer.join(30)

        assert [type(error) for error in racing] == [StaleProcessVersionError]
        assert subject.peer.load(PROCESS, "b-1", tenant_id="acme") == instance(
            2, {"by": "holder"}, tenant_id="acme"
        )

    # -- tenants -----------------------------------------------------------------------

    def test_one_id_in_two_tenants_is_two_instances(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        subject = process_store_subject
        acme = instance(1, {"of": "acme"}, tenant_id="acme", payment="job-a")
        globex = instance(1, {"of": "globex"}, tenant_id="globex", payment="job-g")
        untenanted = instance(1, {"of": None})
        for saved in (acme, globex, untenanted):
            subject.store.save(saved, expected_version=0)

        assert subject.peer.load(PROCESS, "b-1", tenant_id="acme") == acme
        assert subject.peer.load(PROCESS, "b-1", tenant_id="globex") == globex
        assert subject.peer.load(PROCESS, "b-1", tenant_id=None) == untenanted
        assert subject.peer.load(PROCESS, "b-1", tenant_id="initech") is None

    def test_a_save_in_one_tenant_never_moves_another_tenants_instance(
        self, process_store_subject: ProcessStoreSubject
    ) -> None:
        store = process_store_subject.store
        acme = instance(1, tenant_id="acme")
        store.save(acme, expected_version=0)

        with pytest.raises(StaleProcessVersionError):
            store.save(instance(2, {"by": "globex"}, tenant_id="globex"), expected_version=1)
        store.save(instance(1, {"by": "globex"}, tenant_id="globex"), expected_version=0)
        store.save(instance(2, {"by": "globex"}, tenant_id="globex"), expected_version=1)

        assert store.load(PROCESS, "b-1", tenant_id="acme") == acme
        assert store.load(PROCESS, "b-1", tenant_id=None) is None

    @settings(
        max_examples=50,
        deadline=None,
        # each example saves under a process name of its own, so the shared fixture is harmless
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(first=st.tuples(_tenants, _ids), second=st.tuples(_tenants, _ids))
    def test_no_two_keys_collide_whatever_their_text(
        self,
        process_store_subject: ProcessStoreSubject,
        first: tuple[str | None, str],
        second: tuple[str | None, str],
    ) -> None:
        subject = process_store_subject
        process = f"{PROCESS}-{uuid.uuid4().hex}"
        keys = list(dict.fromkeys([first, second]))
        saved = [
            StoredProcess(process, instance_id, 1, {"key": index}, {}, tenant_id)
            for index, (tenant_id, instance_id) in enumerate(keys)
        ]
        for each in saved:
            subject.store.save(each, expected_version=0)

        for each in saved:
            assert subject.peer.load(process, each.id, tenant_id=each.tenant_id) == each

    @pytest.mark.parametrize(
        ("tenant_id", "instance_id", "match"),
        [
            ("", "b-1", "tenant id"),
            ("ac\x00me", "b-1", "tenant id holds a NUL"),
            (None, "b\x00-1", "instance id holds a NUL"),
            ("t" * 257, "b-1", "tenant id is at most 256 bytes"),
            (None, "é" * 257, "instance id is at most 512 bytes"),
            ("acme", "b-\ud800", "instance id is not UTF-8"),
        ],
    )
    def test_a_key_no_store_could_keep_is_refused_alike_and_changes_nothing(
        self,
        process_store_subject: ProcessStoreSubject,
        tenant_id: str | None,
        instance_id: str,
        match: str,
    ) -> None:
        store = process_store_subject.store
        refused = instance(1, instance_id=instance_id, tenant_id=tenant_id)

        with pytest.raises(ValueError, match=match) as saving:
            store.save(refused, expected_version=0)
        with pytest.raises(ValueError, match=match) as loading:
            store.load(PROCESS, refused.id, tenant_id=refused.tenant_id)

        for error in (saving.value, loading.value):
            assert "ac\x00me" not in str(error)
            assert "b\x00-1" not in str(error)
            assert "tttt" not in str(error)
        assert store.load(PROCESS, "b-1", tenant_id=None) is None

    # -- what no longer reads back -------------------------------------------------------

    @pytest.mark.parametrize(
        ("state", "timeouts", "what"),
        [
            ('{"status": "vanished-secret', "{}", "state"),
            ("vanished-secret", "{}", "state"),
            ('{"n": 1}', '{"payment": "vanished-secret"', "timeouts"),
            ('{"n": 1}', '["vanished-secret"]', "timeouts"),
            ('{"n": 1}', '{"payment": ["vanished-secret"]}', "timeouts"),
        ],
    )
    def test_a_stored_instance_that_no_longer_parses_is_named_never_quoted(
        self, process_store_subject: ProcessStoreSubject, state: str, timeouts: str, what: str
    ) -> None:
        subject = process_store_subject
        if subject.overwrite is None:
            pytest.skip("the subject gives no way to corrupt a stored instance")
        saved = instance(1, tenant_id="acme")
        subject.store.save(saved, expected_version=0)
        subject.overwrite(saved, state, timeouts)

        with pytest.raises(CorruptProcessStateError) as unreadable:
            subject.store.load(PROCESS, "b-1", tenant_id="acme")

        error = unreadable.value
        assert (error.code, error.process, error.instance_id, error.tenant_id) == (
            "CORRUPT_PROCESS_STATE",
            PROCESS,
            "b-1",
            "acme",
        )
        assert str(error) == (
            f"process {PROCESS!r}: the stored {what} of instance 'b-1' no longer reads back"
        )
        assert error.__cause__ is None
        assert error.__context__ is None
        _quotes_nothing_stored(error)
