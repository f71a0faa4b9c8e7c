"""Show the structured fields of ddd_celery's log entries in the worker's and beat's lines.

ddd_celery logs ``Scheduled job succeeded`` with the job, the instant and the outcome as fields
of the record, for a JSON log pipeline; Celery's text format prints the message only. This
appends the fields to the line, so the demo's output says which job and which occurrence.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import beat_init, celeryd_after_setup

_FIELDS = ("job", "tenant_id", "scheduled_at", "duration_ms", "error_code", "error_type")


class FieldsFormatter(logging.Formatter):
    """Formats as ``inner`` does, then appends ``(job=... scheduled_at=...)`` to the first line."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        text = self._inner.format(record)
        fields = [f"{name}={getattr(record, name)}" for name in _FIELDS if hasattr(record, name)]
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} ({' '.join(fields)}){newline}{rest}"


def show_log_fields(app: Any) -> None:
    """Once ``app``'s worker or beat has set up its logging, append the fields to its lines."""

    def on_worker(instance: Any, **_: Any) -> None:
        if instance.app is app:
            _wrap_root_handlers()

    def on_beat(sender: Any, **_: Any) -> None:
        if sender.app is app:
            _wrap_root_handlers()

    celeryd_after_setup.connect(on_worker, weak=False)
    beat_init.connect(on_beat, weak=False)


def _wrap_root_handlers() -> None:
    for handler in logging.getLogger().handlers:
        handler.setFormatter(FieldsFormatter(handler.formatter or logging.Formatter()))
