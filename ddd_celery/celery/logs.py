"""The library's log fields in ``celery worker`` and ``celery beat`` lines, with no configuration.

Once Celery has set up a worker's or beat's logging, each handler it made (Celery's
``ColorFormatter``: the console, ``--logfile``) gets its formatter wrapped in
``FieldsFormatter``, so ``-l INFO`` shows
``Scheduled job failed job=billing.close-month scheduled_at=... error_code=... error_type=...``.
A handler of your own (a JSON formatter, a ``setup_logging`` receiver that configures
everything) is left as you made it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger
from celery.utils.log import ColorFormatter

from ddd_celery.logs import FieldsFormatter


def render_fields_in_celery_logs() -> None:
    """Wrap the formatters of the handlers Celery sets up from now on; idempotent."""
    after_setup_logger.connect(
        show_fields, weak=False, dispatch_uid="ddd_celery.show_fields.logger"
    )
    after_setup_task_logger.connect(
        show_fields, weak=False, dispatch_uid="ddd_celery.show_fields.task_logger"
    )


def show_fields(logger: logging.Logger | None = None, **_: Any) -> None:
    """Wrap in ``FieldsFormatter`` each of ``logger``'s handlers that formats as Celery does."""
    for handler in logger.handlers if logger is not None else ():
        if isinstance(handler.formatter, ColorFormatter):
            handler.setFormatter(FieldsFormatter(handler.formatter))
