"""SqlAlchemyUnitOfWork on the real PostgreSQL: after-commit actions follow the transaction."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import Engine, Table
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ddd_celery.sql import SqlAlchemyUnitOfWork

from .conftest import add_note, visible

pytestmark = pytest.mark.postgres


class Boom(Exception):
    pass


def test_actions_run_after_the_commit_when_another_connection_sees_the_data(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    seen: list[list[str]] = []

    with unit_of_work.begin():
        add_note(unit_of_work, notes, "statement compiled")
        unit_of_work.after_commit(lambda: seen.append(visible(engine, notes)))
        unit_of_work.after_commit(lambda: seen.append(["second action"]))
        assert visible(engine, notes) == []
        assert seen == []

    assert seen == [["statement compiled"], ["second action"]]


def test_an_exception_in_the_block_rolls_back_and_drops_the_actions(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def use_case() -> None:
        with unit_of_work.begin():
            add_note(unit_of_work, notes, "never kept")
            unit_of_work.after_commit(lambda: ran.append("published"))
            raise Boom

    with pytest.raises(Boom):
        use_case()

    assert ran == []
    assert visible(engine, notes) == []
    assert not unit_of_work.in_progress()


def test_a_rollback_of_the_session_drops_the_actions_handed_over_before_it(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    with unit_of_work.begin():
        add_note(unit_of_work, notes, "rolled back")
        unit_of_work.after_commit(lambda: ran.append("before the rollback"))
        unit_of_work.session().rollback()
        add_note(unit_of_work, notes, "kept")
        unit_of_work.after_commit(lambda: ran.append("after the rollback"))

    assert ran == ["after the rollback"]
    assert visible(engine, notes) == ["kept"]


def test_a_commit_the_database_refuses_drops_the_actions_and_raises(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []
    with unit_of_work.begin():
        add_note(unit_of_work, notes, "taken")

    def use_case() -> None:
        with unit_of_work.begin():
            add_note(unit_of_work, notes, "other")
            add_note(unit_of_work, notes, "taken")  # the deferred constraint refuses the COMMIT
            unit_of_work.after_commit(lambda: ran.append("published"))

    with pytest.raises(IntegrityError):
        use_case()

    assert ran == []
    assert visible(engine, notes) == ["taken"]


def test_a_begin_inside_another_joins_it_and_commits_with_it(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    with unit_of_work.begin():
        outer = unit_of_work.session()
        with unit_of_work.begin():
            assert unit_of_work.session() is outer
            add_note(unit_of_work, notes, "inner")
            unit_of_work.after_commit(lambda: ran.append("inner"))
        assert visible(engine, notes) == []
        assert ran == []
        unit_of_work.after_commit(lambda: ran.append("outer"))

    assert ran == ["inner", "outer"]
    assert visible(engine, notes) == ["inner"]


def test_an_inner_block_that_raises_rolls_back_the_whole_unit_when_it_propagates(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def use_case() -> None:
        with unit_of_work.begin():
            add_note(unit_of_work, notes, "outer")
            unit_of_work.after_commit(lambda: ran.append("outer"))
            with unit_of_work.begin():
                raise Boom

    with pytest.raises(Boom):
        use_case()

    assert ran == []
    assert visible(engine, notes) == []


def test_an_action_that_raises_keeps_the_commit_and_the_other_actions(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def fails() -> None:
        raise Boom

    def use_case() -> None:
        with unit_of_work.begin():
            add_note(unit_of_work, notes, "committed")
            unit_of_work.after_commit(fails)
            unit_of_work.after_commit(lambda: ran.append("still published"))

    with pytest.raises(Boom):
        use_case()

    assert ran == ["still published"]
    assert visible(engine, notes) == ["committed"]


def test_actions_of_a_transaction_the_block_committed_itself_run_though_the_block_raises(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def use_case() -> None:
        with unit_of_work.begin():
            add_note(unit_of_work, notes, "committed by the block")
            unit_of_work.after_commit(lambda: ran.append("committed"))
            unit_of_work.session().commit()
            add_note(unit_of_work, notes, "rolled back")
            unit_of_work.after_commit(lambda: ran.append("rolled back"))
            raise Boom

    with pytest.raises(Boom):
        use_case()

    assert ran == ["committed"]
    assert visible(engine, notes) == ["committed by the block"]


def test_a_savepoint_rolled_back_drops_only_the_actions_handed_over_inside_it(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    with unit_of_work.begin():
        session = unit_of_work.session()
        add_note(unit_of_work, notes, "before")
        unit_of_work.after_commit(lambda: ran.append("before the savepoint"))
        savepoint = session.begin_nested()
        add_note(unit_of_work, notes, "inside")
        unit_of_work.after_commit(lambda: ran.append("inside the savepoint"))
        savepoint.rollback()
        add_note(unit_of_work, notes, "after")
        unit_of_work.after_commit(lambda: ran.append("after the savepoint"))

    assert ran == ["before the savepoint", "after the savepoint"]
    assert visible(engine, notes) == ["before", "after"]


def test_a_savepoint_that_raises_out_of_its_block_drops_its_actions_and_keeps_the_others(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def savepoint_that_fails() -> None:
        with unit_of_work.session().begin_nested():
            add_note(unit_of_work, notes, "undone")
            unit_of_work.after_commit(lambda: ran.append("undone"))
            raise Boom

    with unit_of_work.begin():
        unit_of_work.after_commit(lambda: ran.append("outer"))
        with pytest.raises(Boom):
            savepoint_that_fails()
        add_note(unit_of_work, notes, "kept")

    assert ran == ["outer"]
    assert visible(engine, notes) == ["kept"]


def test_a_released_savepoint_keeps_its_actions_waiting_for_the_outermost_commit(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    with unit_of_work.begin():
        with unit_of_work.session().begin_nested():
            add_note(unit_of_work, notes, "released")
            unit_of_work.after_commit(lambda: ran.append("released"))
        assert ran == []
        unit_of_work.after_commit(lambda: ran.append("outer"))

    assert ran == ["released", "outer"]
    assert visible(engine, notes) == ["released"]


def test_a_released_savepoint_runs_nothing_when_the_outermost_transaction_rolls_back(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    def use_case() -> None:
        with unit_of_work.begin():
            with unit_of_work.session().begin_nested():
                add_note(unit_of_work, notes, "released, then rolled back")
                unit_of_work.after_commit(lambda: ran.append("released"))
            raise Boom

    with pytest.raises(Boom):
        use_case()

    assert ran == []
    assert visible(engine, notes) == []


def test_a_savepoint_rolled_back_drops_the_actions_of_the_savepoints_released_within_it(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    ran: list[str] = []

    with unit_of_work.begin():
        session = unit_of_work.session()
        outer = session.begin_nested()
        unit_of_work.after_commit(lambda: ran.append("outer savepoint"))
        with session.begin_nested():
            add_note(unit_of_work, notes, "inner")
            unit_of_work.after_commit(lambda: ran.append("inner savepoint, released"))
        outer.rollback()
        with session.begin_nested():
            add_note(unit_of_work, notes, "second")
            unit_of_work.after_commit(lambda: ran.append("second savepoint"))

    assert ran == ["second savepoint"]
    assert visible(engine, notes) == ["second"]


def test_outside_a_unit_of_work_an_action_runs_at_once_and_there_is_no_session(
    unit_of_work: SqlAlchemyUnitOfWork,
) -> None:
    ran: list[str] = []

    unit_of_work.after_commit(lambda: ran.append("now"))

    assert ran == ["now"]
    assert not unit_of_work.in_progress()
    with pytest.raises(LookupError, match="no unit of work is in progress"):
        unit_of_work.session()


def test_the_session_is_closed_when_the_unit_ends(unit_of_work: SqlAlchemyUnitOfWork) -> None:
    with unit_of_work.begin():
        session = unit_of_work.session()
        assert session.in_transaction()

    assert not session.in_transaction()
    with pytest.raises(LookupError):
        unit_of_work.session()


def test_each_thread_has_its_own_unit_of_work(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    both_inside = threading.Barrier(2, timeout=10)
    sessions: dict[str, Session] = {}
    outside: list[bool] = []

    def use_case(name: str) -> None:
        with unit_of_work.begin():
            sessions[name] = unit_of_work.session()
            add_note(unit_of_work, notes, name)
            both_inside.wait()

    def bystander() -> None:
        outside.append(unit_of_work.in_progress())

    with unit_of_work.begin():
        threads = [threading.Thread(target=use_case, args=(name,)) for name in ("a", "b")]
        threads.append(threading.Thread(target=bystander))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert unit_of_work.session() not in sessions.values()

    assert sessions["a"] is not sessions["b"]
    assert outside == [False]
    assert set(visible(engine, notes)) == {"a", "b"}


async def test_each_asyncio_task_has_its_own_unit_of_work(
    unit_of_work: SqlAlchemyUnitOfWork, engine: Engine, notes: Table
) -> None:
    both_inside = asyncio.Barrier(2)
    sessions: dict[str, Session] = {}
    ran: list[str] = []

    async def use_case(name: str, fail: bool) -> None:
        with unit_of_work.begin():
            sessions[name] = unit_of_work.session()
            add_note(unit_of_work, notes, name)
            unit_of_work.after_commit(lambda: ran.append(name))
            await both_inside.wait()
            if fail:
                raise Boom

    results = await asyncio.gather(
        use_case("kept", fail=False), use_case("rolled back", fail=True), return_exceptions=True
    )

    assert results[0] is None
    assert isinstance(results[1], Boom)
    assert sessions["kept"] is not sessions["rolled back"]
    assert ran == ["kept"]
    assert visible(engine, notes) == ["kept"]
