"""The library's log fields, readable in a text log line as well as in a JSON one.

Every entry the library writes (``Scheduled job failed``, a background job's attempt) keeps the
seeds' fixed message and passes its fields (``job``, ``scheduled_at``, ``error_code``...) as
``extra``: attributes of the ``LogRecord``, which a JSON formatter writes as keys and a text
format such as Celery's drops. ``FieldsFormatter`` wraps a text formatter and writes those
fields after the message, ``key=value``, for the records of the library's loggers only::

    Scheduled job failed job=billing.close-month scheduled_at=2026-03-02T06:00:00.000Z ...

Nothing here changes the record itself: another handler (JSON, Sentry) still gets the plain
message and the fields as attributes. The fields are what the code gave as ``extra``, never an
error's message, which the library does not log (it quotes data).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping

LIBRARY_LOGGER = "ddd_celery"
"""The library logs under this name and its children (``ddd_celery.scheduling``...)."""

_BARE = re.compile(r"[^\s\"=\\]+")
_FORMATTER_ATTRIBUTES = frozenset({"message", "asctime"})
"""Attributes ``logging.Formatter.format`` adds to a record: never fields."""


def is_library_record(record: logging.LogRecord) -> bool:
    """Whether ``record`` was written by one of the library's loggers."""
    return record.name == LIBRARY_LOGGER or record.name.startswith(LIBRARY_LOGGER + ".")


def fields_of(record: logging.LogRecord) -> dict[str, object]:
    """The fields given as ``extra`` to ``record``, in the order they were given.

    They are the attributes a record made by the current record factory would not have (so
    attributes a factory adds to every record, such as OpenTelemetry's ``otelTraceID``, are not
    fields), minus those formatters add and private ones.
    """
    standard = _standard_attributes(logging.getLogRecordFactory())
    return {
        name: value
        for name, value in vars(record).items()
        if name not in standard and not name.startswith("_")
    }


def render_fields(fields: Mapping[str, object]) -> str:
    """``fields`` as `` key=value`` pairs, each with a leading space; None values left out.

    A value with a space, a quote, an equals sign, a character that is not printable or nothing
    in it is written as a JSON string, so a line can be split back into its pairs and a value
    cannot forge a line or move a terminal's cursor.
    """
    return "".join(
        f" {name}={_rendered(value)}" for name, value in fields.items() if value is not None
    )


class FieldsFormatter(logging.Formatter):
    """Formats a record as ``inner`` does, the library's fields written after its message.

    A record of another logger, or without fields, is formatted by ``inner`` untouched. The
    record is copied, never changed, so the handlers after this one see it as it was logged.
    """

    def __init__(self, inner: logging.Formatter | None = None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if not is_library_record(record):
            return self.inner.format(record)
        suffix = render_fields(fields_of(record))
        if not suffix:
            return self.inner.format(record)
        shown = copy.copy(record)
        shown.msg, shown.args = record.getMessage() + suffix, None
        return self.inner.format(shown)


@functools.lru_cache(maxsize=8)
def _standard_attributes(factory: Callable[..., logging.LogRecord]) -> frozenset[str]:
    blank = factory("", logging.INFO, "", 0, "", None, None)
    return frozenset(vars(blank)) | _FORMATTER_ATTRIBUTES


def _rendered(value: object) -> str:
    """Bare when it is printable and cannot split the pair; else a JSON string in which every
    character that is not printable is escaped: a field holds what a caller sent (a correlation
    id, a tenant id), and a terminal escape or a line break in it must not reach the log raw."""
    if isinstance(value, float):
        value = round(value, 3)
    text = str(value)
    if text.isprintable() and _BARE.fullmatch(text):
        return text
    quoted = json.dumps(text, ensure_ascii=False)  # escapes the C0 controls only
    if quoted.isprintable():
        return quoted
    return "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in quoted)
