"""FieldsFormatter: the library's fields written after the message, the record left untouched."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

import pytest

from ddd_celery.logs import FieldsFormatter, fields_of, render_fields
from ddd_celery.scheduling.errors import UNEXPECTED_ERROR
from ddd_celery.scheduling.observability import COULD_NOT_FOLLOW, RunRecorder
from ddd_celery.scheduling.outcomes import JobRun, Outcome

JOB = "billing.send-payment-reminders"
SIX = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
SECRET = "invoice inv-42 of ada@example.test"


class JsonFormatter(logging.Formatter):
    """What a JSON log pipeline does: the message, and every field given as ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"message": record.getMessage(), **fields_of(record)})


@pytest.fixture
def text(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """``caplog`` whose text is formatted as a console would, the fields shown."""
    caplog.handler.setFormatter(FieldsFormatter(logging.Formatter("%(levelname)s %(message)s")))
    caplog.set_level(logging.DEBUG, logger="ddd_celery")
    return caplog


def failed_run() -> JobRun:
    return JobRun(
        job=JOB,
        context="billing",
        scheduled_at=SIX,
        outcome=Outcome.FAILED,
        started_at=SIX,
        duration_ms=1_250.4567,
        error_code=UNEXPECTED_ERROR,
        error_type="ValueError",
        correlation_id="id-1",
    )


def test_a_failed_run_shows_its_fields_after_the_seed_message_and_never_the_error_s_message(
    text: pytest.LogCaptureFixture,
) -> None:
    RunRecorder().record(failed_run(), ValueError(SECRET))

    assert text.text.splitlines() == [
        "ERROR Scheduled job failed job=billing.send-payment-reminders context=billing "
        "outcome=failed scheduled_at=2026-03-02T06:00:00.000Z duration_ms=1250.457 "
        "correlation_id=id-1 error_code=UNEXPECTED_ERROR error_type=ValueError"
    ]
    assert SECRET not in text.text


def test_a_json_formatter_beside_it_still_gets_the_plain_message_and_the_fields(
    text: pytest.LogCaptureFixture,
) -> None:
    json_lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            json_lines.append(self.format(record))

    collect = Collect()
    collect.setFormatter(JsonFormatter())
    logger = logging.getLogger("ddd_celery.scheduling")
    logger.addHandler(collect)
    try:
        RunRecorder().record(failed_run(), ValueError(SECRET))
    finally:
        logger.removeHandler(collect)

    [line] = json_lines
    assert json.loads(line) == {
        "message": "Scheduled job failed",
        "job": JOB,
        "context": "billing",
        "outcome": "failed",
        "scheduled_at": "2026-03-02T06:00:00.000Z",
        "duration_ms": 1250.4567,
        "correlation_id": "id-1",
        "error_code": "UNEXPECTED_ERROR",
        "error_type": "ValueError",
    }
    [record] = text.records
    assert record.getMessage() == "Scheduled job failed"


def test_the_lines_around_the_runs_show_their_fields_too(text: pytest.LogCaptureFixture) -> None:
    RunRecorder().could_not_follow(JOB, ConnectionError(SECRET), what="write the checkpoint")

    assert text.text.splitlines() == [
        f"ERROR {COULD_NOT_FOLLOW} job={JOB} context=billing "
        'operation="write the checkpoint" error_type=ConnectionError'
    ]


def test_any_logger_of_the_library_is_rendered_the_same_way(
    text: pytest.LogCaptureFixture,
) -> None:
    logging.getLogger("ddd_celery.background").warning(
        "Background job retried",
        extra={"job": "billing.export", "job_id": "j-1", "attempt": 2, "status": "retried"},
    )

    assert text.text.splitlines() == [
        "WARNING Background job retried job=billing.export job_id=j-1 attempt=2 status=retried"
    ]


def test_a_record_of_another_logger_or_without_fields_is_formatted_as_the_inner_formatter_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    formatter = FieldsFormatter(logging.Formatter("%(name)s %(message)s"))
    theirs = logging.makeLogRecord({"name": "app", "msg": "hello %s", "args": ("x",), "job": "j"})
    bare = logging.makeLogRecord({"name": "ddd_celery.scheduling", "msg": "beat: started"})

    assert formatter.format(theirs) == "app hello x"
    assert formatter.format(bare) == "ddd_celery.scheduling beat: started"


def test_the_fields_go_on_the_message_s_line_before_a_traceback_and_the_record_is_unchanged() -> (
    None
):
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.makeLogRecord(
            {"name": "ddd_celery.x", "msg": "step %s failed", "args": (3,), "job": "j"}
        )
        record.exc_info = sys.exc_info()

    lines = FieldsFormatter().format(record).splitlines()

    assert lines[0] == "step 3 failed job=j"
    assert lines[1] == "Traceback (most recent call last):"
    assert (record.msg, record.args) == ("step %s failed", (3,))


def test_values_that_would_split_the_line_are_quoted_and_none_is_left_out() -> None:
    rendered = render_fields(
        {
            "schedule": "cron 0 7 * * 1-5 (Europe/Paris)",
            "empty": "",
            "said": 'a "quote"',
            "missing": None,
            "ratio": 0.1 + 0.2,
        }
    )

    assert rendered == (
        ' schedule="cron 0 7 * * 1-5 (Europe/Paris)" empty="" said="a \\"quote\\"" ratio=0.3'
    )


def test_attributes_a_record_factory_adds_to_every_record_are_not_fields() -> None:
    previous = logging.getLogRecordFactory()

    def with_trace_ids(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.otelTraceID = "0af7651916cd43dd8448eb211c80319c"
        return record

    logging.setLogRecordFactory(with_trace_ids)
    try:
        record = logging.getLogger("ddd_celery.scheduling").makeRecord(
            "ddd_celery.scheduling",
            logging.INFO,
            "",
            0,
            "Scheduled job succeeded",
            (),
            None,
            extra={"job": JOB},
        )
        assert fields_of(record) == {"job": JOB}
    finally:
        logging.setLogRecordFactory(previous)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("checkout-\x1b[2J7f3a", '"checkout-\\u001b[2J7f3a"'),
        ("t-\x7fx", '"t-\\u007fx"'),
        ("t-\x9b31m", '"t-\\u009b31m"'),
        ("t-\u202eevil", '"t-\\u202eevil"'),
        ("two\nlines", '"two\\nlines"'),
    ],
)
def test_a_value_with_a_character_that_is_not_printable_is_written_escaped(
    value: str, shown: str
) -> None:
    rendered = render_fields({"correlation_id": value})

    assert rendered == f" correlation_id={shown}"
    assert rendered.isprintable()
    assert json.loads(shown) == value
