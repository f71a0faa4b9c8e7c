"""The jobs of the page's HTTP tests: declared once per process, installed on each test's app."""

from __future__ import annotations

from typing import Any

from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.declarations.background import BackgroundJobExecution, background

CLOSE_DAY = "webpage.close-day"
EVERY_MINUTE = "webpage.every-minute"
SEND_INVOICE = "webpage.send-invoice"


@scheduled(CLOSE_DAY, cron="30 2 * * *", time_zone="Europe/Paris")
class CloseDayJob:
    def run(self, execution: JobExecution) -> None:
        return None


@scheduled(EVERY_MINUTE, every="1m")
class EveryMinuteJob:
    def run(self, execution: JobExecution) -> None:
        return None


@background(SEND_INVOICE, max_attempts=2)
class SendInvoiceJob:
    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        return None
