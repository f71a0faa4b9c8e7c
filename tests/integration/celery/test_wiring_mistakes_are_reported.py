"""A wiring mistake is reported, with the fix in the message, where it would be silent.

Another library's beat scheduler is not replaced silently; a beat running another scheduler
says at start that none of the jobs will run; a folder without ``__init__.py`` is not skipped
silently by ``collect_scheduled_jobs``. (``jobs list`` with no job: ``test_cli_jobs.py``.)
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import PersistentScheduler, Service
from celery.signals import beat_init

from ddd_celery.celery import install_jobs
from ddd_celery.celery.guards import BEAT_SCHEDULER
from ddd_celery.declarations import (
    DeclarationError,
    JobExecution,
    collect_scheduled_jobs,
    scheduled,
)
from ddd_celery.kernel import InMemoryLock, SystemClock

DJANGO_CELERY_BEAT = "django_celery_beat.schedulers:DatabaseScheduler"


@scheduled("wiring.tick", every="15m")
class TickJob:
    def run(self, execution: JobExecution) -> None:
        return None


def an_app(**settings: object) -> Celery:
    app = Celery(f"wiring-{uuid.uuid4().hex[:12]}", broker="memory://", set_as_current=False)
    app.conf.update(settings)
    return app


def install(app: Celery, **options: Any) -> None:
    install_jobs(app, jobs=[TickJob], lock=InMemoryLock(SystemClock()), environ={}, **options)


def test_a_beat_scheduler_of_another_library_is_not_replaced_without_a_word() -> None:
    app = an_app(beat_scheduler=DJANGO_CELERY_BEAT)

    with pytest.raises(ValueError, match="install_jobs would replace it") as refused:
        install(app)

    assert DJANGO_CELERY_BEAT in str(refused.value)
    assert "keep_beat_scheduler=True" in str(refused.value)
    assert "beat -S ddd" in str(refused.value)
    assert app.conf.beat_scheduler == DJANGO_CELERY_BEAT


def test_keep_beat_scheduler_leaves_the_other_scheduler_in_place() -> None:
    app = an_app(beat_scheduler=DJANGO_CELERY_BEAT)

    install(app, keep_beat_scheduler=True)

    assert app.conf.beat_scheduler == DJANGO_CELERY_BEAT


def test_celery_s_default_scheduler_is_replaced_by_the_job_scheduler() -> None:
    app = an_app(beat_scheduler="celery.beat:PersistentScheduler")

    install(app)

    assert app.conf.beat_scheduler == BEAT_SCHEDULER


def start_beat(app: Celery, scheduler: str, tmp_path: Path) -> None:
    """What ``celery beat -S <scheduler>`` does up to its first tick: build it, send beat_init."""
    service = Service(
        app=app, scheduler_cls=scheduler, schedule_filename=str(tmp_path / "celerybeat-schedule")
    )
    try:
        assert service.scheduler.max_interval
        beat_init.send(sender=service)
    finally:
        service.scheduler.close()


def test_a_beat_started_with_another_scheduler_says_loudly_that_no_job_will_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = an_app()
    install(app)

    with caplog.at_level(logging.WARNING, logger="ddd_celery"):
        start_beat(app, "celery.beat:PersistentScheduler", tmp_path)

    [record] = [r for r in caplog.records if r.name.startswith("ddd_celery")]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert "PersistentScheduler" in message
    assert "none of the 1 jobs" in message
    assert "beat -S ddd" in message


def test_a_beat_on_the_job_scheduler_says_nothing_of_the_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = an_app()
    install(app)

    with caplog.at_level(logging.WARNING, logger="ddd_celery"):
        start_beat(app, "ddd", tmp_path)

    assert not [r for r in caplog.records if "none of the" in r.getMessage()]


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


JOB = """
from ddd_celery.declarations import scheduled

@scheduled("hidden.purge", every="1d")
class PurgeJob:
    def run(self, execution):
        pass
"""


def test_a_folder_without_init_is_refused_naming_it_rather_than_skipped(on_path: Path) -> None:
    (on_path / "hidden_ctx" / "application" / "scheduling").mkdir(parents=True)
    (on_path / "hidden_ctx" / "__init__.py").write_text("")
    (on_path / "hidden_ctx" / "application" / "__init__.py").write_text("")
    (on_path / "hidden_ctx" / "application" / "scheduling" / "purge.py").write_text(JOB)

    with pytest.raises(DeclarationError) as refused:
        collect_scheduled_jobs("hidden_ctx")

    assert "folder hidden_ctx.application.scheduling holds @scheduled jobs" in str(refused.value)
    assert "add an empty scheduling/__init__.py" in str(refused.value)


def test_a_folder_that_declares_no_job_needs_no_init(on_path: Path) -> None:
    (on_path / "plain_ctx" / "templates").mkdir(parents=True)
    (on_path / "plain_ctx" / "templates" / "reminder.txt").write_text("Dear {name}")
    (on_path / "plain_ctx" / "scripts").mkdir()
    (on_path / "plain_ctx" / "scripts" / "backfill.py").write_text("print('backfill')\n")
    (on_path / "plain_ctx" / "__init__.py").write_text("")
    (on_path / "plain_ctx" / "purge.py").write_text(JOB.replace("hidden", "plain"))

    assert [job.name for job in collect_scheduled_jobs("plain_ctx")] == ["plain.purge"]


class OtherLibraryScheduler(PersistentScheduler):  # type: ignore[misc]
    """Stands for django-celery-beat's or redbeat's scheduler."""


def test_a_beat_on_the_scheduler_the_app_kept_on_purpose_only_informs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = f"{__name__}:OtherLibraryScheduler"
    app = an_app(beat_scheduler=kept)
    install(app, keep_beat_scheduler=True)

    with caplog.at_level(logging.INFO, logger="ddd_celery"):
        start_beat(app, kept, tmp_path)

    [record] = [r for r in caplog.records if "jobs run in a beat started with -S ddd" in r.message]
    assert record.levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
