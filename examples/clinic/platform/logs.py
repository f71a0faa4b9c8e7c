"""Show the structured fields of ddd_celery's log entries in the worker's and beat's lines.

ddd_celery logs ``Scheduled job succeeded`` with the job, the instant and the outcome as fields
of the record, for a JSON log pipeline; Celery's text format prints the message only. This
appends the fields, so the demo's output says which job and which occurrence.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger

_FIELDS = ("job", "tenant_id", "scheduled_at", "duration_ms", "error_code", "error_type")


class ShowFields(logging.Filter):
    """Appends ``(job=... scheduled_at=...)`` to the message of a record that has such fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = [f"{name}={getattr(record, name)}" for name in _FIELDS if hasattr(record, name)]
        if fields and not getattr(record, "fields_shown", False):
            record.msg = f"{record.msg} ({' '.join(fields)})"
            record.fields_shown = True
        return True


def _show_fields(logger: logging.Logger, **_: Any) -> None:
    for handler in logger.handlers:
        handler.addFilter(ShowFields())


after_setup_logger.connect(_show_fields, weak=False)
