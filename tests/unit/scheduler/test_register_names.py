"""``register`` takes the names a declaration takes: a name nothing else can match is refused."""

from __future__ import annotations

import pytest

from ddd_celery import DeclarationError
from ddd_celery.testing import ManualJobScheduler

from .conftest import JOB, Recorder, at


@pytest.mark.parametrize("name", [123, "", "billing", "Billing.Send", "billing.send\nreminders"])
async def test_a_name_that_is_not_context_dot_job_is_refused_at_register(
    scheduler: ManualJobScheduler, name: object
) -> None:
    with pytest.raises(DeclarationError, match=r"'<context>\.<job-name>'"):
        scheduler.register(name=name, schedule={"every": "15m"}, run=Recorder())  # type: ignore[arg-type]

    assert scheduler.describe() == []


async def test_a_declared_name_registers_and_runs(scheduler: ManualJobScheduler) -> None:
    job = Recorder()
    scheduler.register(name=JOB, schedule={"every": "15m"}, run=job)
    await scheduler.start()

    await scheduler.advance(2 * 60_000)

    assert job.due == [at(10, 0)]
    await scheduler.stop()
