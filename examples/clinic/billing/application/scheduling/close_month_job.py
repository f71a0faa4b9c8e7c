"""On the first of each month at 02:00 in Paris, close the month that ended, tenant by tenant."""

from __future__ import annotations

from ddd_celery import JobExecution, scheduled
from ddd_celery.kernel import CommandBus, system_actor
from examples.clinic.billing.application.commands.close_month import CloseMonth


@scheduled("billing.close-month", cron="0 2 1 * *", time_zone="Europe/Paris", tenancy="per-tenant")
class CloseMonthJob:
    """Runs once per tenant of each occurrence and sends ``CloseMonth`` for that tenant."""

    def __init__(self, commands: CommandBus) -> None:
        self._commands = commands

    def run(self, execution: JobExecution) -> None:
        if execution.tenant_id is None:
            raise ValueError("billing.close-month is per-tenant: each run has a tenant")
        self._commands.execute(
            CloseMonth(
                system_actor("billing.close-month"), execution.tenant_id, execution.scheduled_at
            )
        )
