"""@background: names, options and run checked when the module is imported."""

from __future__ import annotations

import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ddd_celery import BackgroundJobExecution, DeclarationError, background, scheduled
from ddd_celery.declarations import (
    BackgroundOptions,
    background_declaration_of,
    collect_background_jobs,
)
from ddd_celery.kernel import AbortSignal
from tests.unit.background.jobs import (
    CompileStatementsJob,
    ReindexJob,
    SendReceiptJob,
    StatementPayload,
)

NOW = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


def test_a_declaration_keeps_its_name_context_queue_options_and_payload_type() -> None:
    declaration = background_declaration_of(CompileStatementsJob)

    assert declaration.name == "ledger.compile-statements"
    assert declaration.context == "ledger"
    assert declaration.queue == "ledger"
    assert declaration.options == BackgroundOptions(
        max_attempts=3, backoff_ms=1_000, max_backoff_ms=60_000
    )
    assert declaration.payload_type is StatementPayload
    assert declaration.job_class is CompileStatementsJob


def test_the_queue_is_the_context_unless_one_is_given() -> None:
    assert background_declaration_of(ReindexJob).queue == "slow"
    assert background_declaration_of(SendReceiptJob).queue == "ledger"


def test_the_defaults_are_three_attempts_a_second_of_backoff_an_hour_at_most() -> None:
    @background("specs.defaults")
    class DefaultsJob:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    options = background_declaration_of(DefaultsJob).options

    assert (options.max_attempts, options.backoff_ms, options.max_backoff_ms) == (
        3,
        1_000,
        3_600_000,
    )
    assert (options.timeout_ms, options.queue) == (None, None)


def test_a_payload_that_is_not_a_model_is_plain_json() -> None:
    assert background_declaration_of(SendReceiptJob).payload_type is None
    assert background_declaration_of(ReindexJob).payload_type is None


def test_a_payload_without_annotation_is_plain_json() -> None:
    @background("specs.unannotated")
    class UnannotatedJob:
        def run(self, payload, execution):  # type: ignore[no-untyped-def]
            return None

    assert background_declaration_of(UnannotatedJob).payload_type is None


def test_the_decorator_returns_the_class_unchanged() -> None:
    class Plain:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    assert background("specs.unchanged")(Plain) is Plain


@pytest.mark.parametrize(
    "name", ["compile", "Billing.compile", "billing.", ".compile", "billing.compile.x", "1a.b", 3]
)
def test_a_name_that_is_not_context_dot_job_is_refused(name: Any) -> None:
    with pytest.raises(DeclarationError, match=r"'<context>\.<job-name>' in lower case") as raised:
        background(name)

    assert raised.value.job == str(name)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "'max_attempts' must be positive, got 0"),
        ({"max_attempts": True}, "'max_attempts' must be an int"),
        ({"backoff_ms": 0}, "'backoff_ms' must be positive, got 0"),
        ({"backoff_ms": 1.5}, "'backoff_ms' must be an int"),
        ({"max_backoff_ms": 500}, r"'max_backoff_ms' \(500\) must be at least 'backoff_ms'"),
        ({"timeout_ms": 0}, "'timeout_ms' must be positive, got 0"),
        ({"timeout_ms": -5}, "'timeout_ms' must be positive"),
        ({"max_attempts": 1_001}, "'max_attempts' must be at most 1000, got 1001"),
        ({"backoff_ms": 10**30}, "'backoff_ms' must be at most 31622400000"),
        ({"max_backoff_ms": 10**30}, "'max_backoff_ms' must be at most 31622400000"),
        ({"timeout_ms": 7 * 86_400_000 + 1}, "'timeout_ms' must be at most 604800000"),
        ({"queue": "Slow Queue"}, "'queue' must be a lower-case name"),
        ({"queue": ""}, "'queue' must be a lower-case name"),
    ],
)
def test_options_out_of_their_values_are_refused_naming_the_job(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeclarationError, match=message) as raised:
        background("specs.bad-options", **options)

    assert raised.value.job == "specs.bad-options"
    assert str(raised.value).startswith("job 'specs.bad-options': ")


def test_a_class_without_run_is_refused() -> None:
    class NoRun:
        pass

    with pytest.raises(DeclarationError, match=r"has no method run\(self, payload, execution\)"):
        background("specs.no-run")(NoRun)


def test_a_run_that_does_not_take_the_payload_and_the_execution_is_refused() -> None:
    class OnlyExecution:
        def run(self, execution: BackgroundJobExecution) -> None: ...

    with pytest.raises(DeclarationError, match="must take the payload and the execution"):
        background("specs.bad-run")(OnlyExecution)


def test_only_a_class_is_declared() -> None:
    def run(payload: Any, execution: BackgroundJobExecution) -> None: ...

    with pytest.raises(DeclarationError, match="decorates a class, not function"):
        background("specs.a-function")(run)  # type: ignore[type-var]


def test_a_payload_annotation_that_cannot_be_resolved_is_refused_at_import() -> None:
    class Unresolvable:
        def run(self, payload: NoSuchModel, execution: BackgroundJobExecution) -> None:  # type: ignore[name-defined]  # noqa: F821
            ...

    with pytest.raises(DeclarationError, match="'NoSuchModel' of run cannot be resolved"):
        background("specs.unresolvable")(Unresolvable)


def test_a_name_is_unique_among_background_jobs() -> None:
    @background("specs.taken")
    class First:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    class Second:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    with pytest.raises(DeclarationError, match=r"already declared by .*First") as raised:
        background("specs.taken")(Second)

    assert "Second cannot take it" in str(raised.value)


def test_a_name_a_scheduled_job_has_is_refused() -> None:
    @scheduled("specs.both-kinds", every="1h")
    class Scheduled:
        def run(self, execution: Any) -> None: ...

    class Background:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    with pytest.raises(DeclarationError, match=r"the scheduled job .*Scheduled already has it"):
        background("specs.both-kinds")(Background)


def test_a_class_not_declared_has_no_declaration() -> None:
    class Plain:
        pass

    with pytest.raises(DeclarationError, match="is not declared with @background"):
        background_declaration_of(Plain)


def test_collect_background_jobs_finds_the_jobs_of_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "statements_context"
    (package / "jobs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs" / "__init__.py").write_text("")
    (package / "jobs" / "compile.py").write_text(
        textwrap.dedent(
            """
            from ddd_celery import background

            @background("statements.compile")
            class CompileJob:
                def run(self, payload, execution):
                    return None

            @background("statements.archive", max_attempts=1)
            class ArchiveJob:
                def run(self, payload, execution):
                    return None
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = collect_background_jobs("statements_context")
    finally:
        for module in [m for m in sys.modules if m.startswith("statements_context")]:
            del sys.modules[module]

    assert [d.name for d in found] == ["statements.archive", "statements.compile"]
    assert found[0].options.max_attempts == 1


class _Payload(BaseModel):
    month: str


def test_an_execution_refuses_naive_instants_and_an_attempt_below_one() -> None:
    signal = AbortSignal()
    with pytest.raises(ValueError, match="aware"):
        BackgroundJobExecution(
            job_id="j",
            attempt=1,
            signal=signal,
            scheduled_at=NOW.replace(tzinfo=None),
            enqueued_at=NOW,
            started_at=NOW,
        )
    with pytest.raises(ValueError, match="attempt counts from 1"):
        BackgroundJobExecution(
            job_id="j", attempt=0, signal=signal, scheduled_at=NOW, enqueued_at=NOW, started_at=NOW
        )


def test_an_execution_is_frozen() -> None:
    execution = BackgroundJobExecution(
        job_id="j",
        attempt=1,
        signal=AbortSignal(),
        scheduled_at=NOW,
        enqueued_at=NOW,
        started_at=NOW,
    )

    with pytest.raises(AttributeError):
        execution.attempt = 2  # type: ignore[misc]


def test_a_scheduled_job_cannot_take_the_name_of_a_background_job() -> None:
    @background("specs.background-first")
    class Background:
        def run(self, payload: Any, execution: BackgroundJobExecution) -> None: ...

    class Scheduled:
        def run(self, execution: Any) -> None: ...

    with pytest.raises(DeclarationError, match=r"the background job .*Background already has it"):
        scheduled("specs.background-first", every="1h")(Scheduled)
