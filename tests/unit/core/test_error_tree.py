"""One error tree: a caller catches by what went wrong, from wherever each class is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ddd_celery.redis.errors as redis_errors
import ddd_celery.sql.errors as sql_errors
from ddd_celery.background.errors import (
    AttemptsExhaustedError,
    InvalidEnqueueError,
    JobInterruptedError,
    JobNotAddedAfterCommitError,
    UnknownBackgroundJobError,
)
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.generate.errors import GenerationRefusedError
from ddd_celery.kernel import (
    DddCeleryError,
    DomainError,
    JobAbortedError,
    JobError,
    JobStoppedError,
    JobTimeoutError,
    LockUnavailableError,
    StoreUnavailableError,
)
from ddd_celery.processes.errors import ProcessError
from ddd_celery.scheduling import errors as scheduling_errors
from ddd_celery.scheduling.errors import (
    InvalidJobSettingsError,
    JobLockUnavailableError,
    SchedulingError,
    UnknownJobError,
)
from ddd_celery.scheduling.outcomes import error_code_of

PACKAGE = Path(__file__).resolve().parents[3] / "ddd_celery"


def test_every_store_raises_the_one_store_unavailable_error_a_connection_error_catches() -> None:
    assert redis_errors.StoreUnavailableError is StoreUnavailableError
    assert sql_errors.StoreUnavailableError is StoreUnavailableError
    assert issubclass(StoreUnavailableError, ConnectionError)
    assert issubclass(LockUnavailableError, StoreUnavailableError)
    with pytest.raises(ConnectionError):
        raise sql_errors.StoreUnavailableError("the database could not be asked")


@pytest.mark.parametrize("stopped", [JobTimeoutError, JobAbortedError, JobInterruptedError])
def test_a_run_stopped_before_it_returned_is_a_job_stopped_error(stopped: type) -> None:
    assert issubclass(stopped, JobStoppedError)
    assert issubclass(JobTimeoutError, TimeoutError)


def test_the_timeout_and_the_abort_are_the_kernels_wherever_imported() -> None:
    assert scheduling_errors.JobTimeoutError is JobTimeoutError
    assert scheduling_errors.JobAbortedError is JobAbortedError
    assert SchedulingError is JobError


@pytest.mark.parametrize(
    "error",
    [
        InvalidEnqueueError("m", job="a.b"),
        UnknownBackgroundJobError("m", job="a.b"),
        AttemptsExhaustedError("m", job="a.b"),
        JobInterruptedError("m", job="a.b"),
        JobNotAddedAfterCommitError("m", job="a.b", job_id="j", attempts=1),
        JobLockUnavailableError("m", job="a.b"),
        UnknownJobError("m", job="a.b"),
    ],
)
def test_the_errors_about_a_job_carry_their_code_from_one_root(error: JobError) -> None:
    assert isinstance(error, JobError)
    assert error.job == "a.b"
    assert error_code_of(error) == type(error).code != "UNEXPECTED_ERROR"


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailableError,
        JobError,
        DeclarationError,
        InvalidJobSettingsError,
        ProcessError,
        GenerationRefusedError,
        sql_errors.UnstorableValueError,
        sql_errors.MissingTablesError,
    ],
)
def test_every_error_of_the_library_grows_from_its_root(error: type) -> None:
    assert issubclass(error, DddCeleryError)


def test_settings_and_declarations_stay_value_errors_and_the_domain_stays_apart() -> None:
    assert issubclass(DeclarationError, ValueError)
    assert issubclass(InvalidJobSettingsError, ValueError)
    assert not issubclass(DomainError, DddCeleryError)


def test_background_jobs_import_nothing_of_scheduling() -> None:
    imported = set()
    for module in (PACKAGE / "background").glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if name.startswith("ddd_celery.scheduling")}
