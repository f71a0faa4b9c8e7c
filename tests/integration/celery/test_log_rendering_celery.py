"""Celery's own log setup shows the library's fields, and leaves a formatter of yours alone."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

from celery.utils.log import ColorFormatter

from ddd_celery.celery.logs import show_fields
from ddd_celery.logs import FieldsFormatter


def handler_with(formatter: logging.Formatter) -> logging.Handler:
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    return handler


def test_only_the_handlers_formatting_as_celery_does_are_wrapped_and_only_once() -> None:
    logger = logging.Logger("root-of-the-test")
    celery_s = handler_with(ColorFormatter("%(message)s", use_color=False))
    yours = handler_with(logging.Formatter("%(message)s"))
    logger.addHandler(celery_s)
    logger.addHandler(yours)

    show_fields(logger=logger)
    wrapped = celery_s.formatter
    show_fields(logger=logger)

    assert isinstance(wrapped, FieldsFormatter)
    assert celery_s.formatter is wrapped
    assert isinstance(wrapped.inner, ColorFormatter)
    assert type(yours.formatter) is logging.Formatter


APP = textwrap.dedent(
    """
    import logging
    from datetime import UTC, datetime

    from celery import Celery

    from ddd_celery.celery import install_jobs
    from ddd_celery.declarations import scheduled
    from ddd_celery.kernel import InMemoryLock, SystemClock
    from ddd_celery.scheduling.outcomes import JobRun, Outcome

    @scheduled("billing.close-day", every="1d")
    class CloseDay:
        def run(self, execution): ...

    app = Celery("logs", broker="memory://", set_as_current=False)
    registry = install_jobs(app, jobs=[CloseDay], lock=InMemoryLock(SystemClock()), environ={})
    app.log.setup(loglevel="INFO", colorize=False)
    registry.recorder.record(
        JobRun(
            job="billing.close-day",
            context="billing",
            scheduled_at=datetime(2026, 3, 2, 6, tzinfo=UTC),
            outcome=Outcome.FAILED,
            started_at=datetime(2026, 3, 2, 6, tzinfo=UTC),
            duration_ms=12.0,
            error_code="UNEXPECTED_ERROR",
            error_type="ValueError",
            correlation_id="c-1",
        ),
        ValueError("the card 4242 was declined"),
    )
    """
)


def test_an_app_with_jobs_logs_the_fields_under_celery_s_formatter_with_no_configuration() -> None:
    done = subprocess.run(
        [sys.executable, "-c", APP], capture_output=True, text=True, timeout=60, check=True
    )

    [line] = [line for line in done.stderr.splitlines() if "Scheduled job failed" in line]
    assert line.endswith(
        "Scheduled job failed job=billing.close-day context=billing outcome=failed "
        "scheduled_at=2026-03-02T06:00:00.000Z duration_ms=12.0 correlation_id=c-1 "
        "error_code=UNEXPECTED_ERROR error_type=ValueError"
    ), line
    assert line.startswith("[")  # Celery's format: [date: LEVEL/process] message
    assert "4242" not in done.stderr
