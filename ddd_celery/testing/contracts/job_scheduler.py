"""The contract of the ``JobScheduler`` port: what every implementation of it must do.

Subclass ``JobSchedulerContract`` in a test module, named ``Test...``, and give it a
``make_scheduler`` fixture returning a function that builds a ``SchedulerHarness`` on the
``SchedulerPorts`` it is handed (their clock, lock, scope, ids, tenants and ``on_run``)::

    class TestInProcessJobScheduler(JobSchedulerContract):
        @pytest.fixture
        def make_scheduler(self) -> MakeScheduler:
            return build_my_harness

Every instant comes from ``ports.clock``, a ``FixedClock`` moved only by ``harness.advance``.
The suite observes a scheduler from outside: what the jobs receive, the execution scope they
run in, and the records passed to ``on_run``. It needs pytest-asyncio.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from ddd_celery.declarations.execution import JobExecution
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.kernel.actor import system_actor
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.errors import DomainError
from ddd_celery.kernel.ids import IdGenerator, SequentialIdGenerator
from ddd_celery.kernel.lock import InMemoryLock, Lock
from ddd_celery.kernel.scope import ExecutionContext, FixedExecutionScope
from ddd_celery.kernel.tenants import InMemoryTenantDirectory, TenantDirectory
from ddd_celery.scheduling.errors import InvalidJobScheduleError, UnknownJobError
from ddd_celery.scheduling.observability import RunDetail
from ddd_celery.scheduling.occurrence import lock_key
from ddd_celery.scheduling.outcomes import JobRun, Outcome
from ddd_celery.scheduling.scheduler import JobScheduler

START = datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)
"""The instant every contract test starts at, 90 s before 10:00 UTC on a Monday."""
JOB = "billing.send-payment-reminders"
MINUTE = 60_000


@dataclass
class SchedulerPorts:
    """What a scheduler under contract is built on; ``runs`` keeps what ``on_run`` saw."""

    clock: FixedClock
    lock: Lock
    scope: FixedExecutionScope
    ids: IdGenerator
    tenants: TenantDirectory | None
    runs: list[JobRun] = field(default_factory=list)
    errors: list[BaseException | None] = field(default_factory=list)

    def on_run(self, run: JobRun, error: BaseException | None, detail: RunDetail) -> None:
        self.runs.append(run)
        self.errors.append(error)


class SchedulerHarness(ABC):
    """A scheduler under contract and the means to move its time."""

    @property
    @abstractmethod
    def scheduler(self) -> JobScheduler:
        """The scheduler, built on the ports it was handed and not started."""

    @abstractmethod
    async def advance(self, ms: int) -> None:
        """Move ``ports.clock`` by ``ms`` and return once what was due has been handled."""

    async def stop(self) -> None:
        """Stop the scheduler, letting its grace period pass if it needs to."""
        await self.scheduler.stop()


MakeScheduler = Callable[[SchedulerPorts], SchedulerHarness]


def at(hour: int, minute: int, second: int = 0) -> datetime:
    """An instant of the contract's day, 2026-03-02, in UTC."""
    return START.replace(hour=hour, minute=minute, second=second)


class JobSchedulerContract:
    """The behaviours of the seed every JobScheduler keeps, whatever drives its time."""

    @pytest.fixture
    def ports(self) -> SchedulerPorts:
        clock = FixedClock(START)
        return SchedulerPorts(
            clock=clock,
            lock=InMemoryLock(clock),
            scope=FixedExecutionScope(),
            ids=SequentialIdGenerator(),
            tenants=InMemoryTenantDirectory(["acme", "globex"]),
        )

    @pytest.fixture
    def harness(self, make_scheduler: MakeScheduler, ports: SchedulerPorts) -> SchedulerHarness:
        return make_scheduler(ports)

    async def test_runs_each_occurrence_on_its_epoch_aligned_instant(
        self, harness: SchedulerHarness
    ) -> None:
        due: list[datetime] = []

        async def run(execution: JobExecution) -> None:
            due.append(execution.scheduled_at)

        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
        await harness.scheduler.start()
        await harness.advance(32 * MINUTE)
        await harness.stop()

        assert due == [at(10, 0), at(10, 15), at(10, 30)]

    async def test_a_sync_job_runs_as_well_as_an_async_one(self, harness: SchedulerHarness) -> None:
        due: list[datetime] = []
        harness.scheduler.register(
            name=JOB, schedule={"every": "15m"}, run=lambda e: due.append(e.scheduled_at)
        )
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)
        await harness.stop()

        assert due == [at(10, 0)]

    async def test_each_run_opens_a_schedule_scope_as_the_system_actor_of_the_job(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        seen: list[ExecutionContext | None] = []

        async def run(execution: JobExecution) -> None:
            seen.append(ports.scope.current())

        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
        await harness.scheduler.start()
        await harness.advance(17 * MINUTE)
        await harness.stop()

        assert [context and context.scheduled_at for context in seen] == [at(10, 0), at(10, 15)]
        for context in seen:
            assert context is not None
            assert context.origin == "schedule"
            assert context.actor == system_actor(JOB)
            assert context.tenant_id is None
        correlation_ids = [context.correlation_id for context in seen if context]
        assert len(set(correlation_ids)) == 2, "a fresh correlation id for each run"

    async def test_every_occurrence_handled_reaches_on_run_with_its_outcome(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        async def run(execution: JobExecution) -> None:
            return None

        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)
        await harness.stop()

        [record] = ports.runs
        assert (record.job, record.scheduled_at, record.outcome) == (
            JOB,
            at(10, 0),
            Outcome.SUCCEEDED,
        )
        assert record.correlation_id == ports.scope.opened[0].correlation_id

    async def test_a_failing_job_stops_neither_the_scheduler_nor_the_other_jobs(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        other: list[datetime] = []

        async def fail(execution: JobExecution) -> None:
            raise RuntimeError("the ledger is gone")

        async def succeed(execution: JobExecution) -> None:
            other.append(execution.scheduled_at)

        harness.scheduler.register(
            name="billing.export-ledger", schedule={"every": "15m"}, run=fail
        )
        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=succeed)
        await harness.scheduler.start()
        await harness.advance(17 * MINUTE)
        await harness.stop()

        assert other == [at(10, 0), at(10, 15)]
        failed = [r for r in ports.runs if r.job == "billing.export-ledger"]
        assert [(r.outcome, r.error_code) for r in failed] == [
            (Outcome.FAILED, "UNEXPECTED_ERROR"),
            (Outcome.FAILED, "UNEXPECTED_ERROR"),
        ]

    async def test_a_disabled_job_never_starts_by_time_but_run_now_runs_it(
        self, harness: SchedulerHarness
    ) -> None:
        due: list[datetime] = []

        async def run(execution: JobExecution) -> None:
            due.append(execution.scheduled_at)

        harness.scheduler.register(name=JOB, schedule={"every": "1m", "enabled": False}, run=run)
        await harness.scheduler.start()
        await harness.advance(10 * MINUTE)
        assert due == []

        await harness.scheduler.run_now(JOB)
        await harness.stop()

        assert due == [START + timedelta(minutes=10)]

    async def test_run_now_takes_no_lock_and_raises_what_the_job_raised(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        refused = DomainError("NOTHING_DUE", "nothing is due")

        async def run(execution: JobExecution) -> None:
            raise refused

        ports.lock.acquire(lock_key(JOB, START), 60 * MINUTE)
        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)

        with pytest.raises(DomainError) as raised:
            await harness.scheduler.run_now(JOB)

        assert raised.value is refused
        [context] = ports.scope.opened
        assert (context.origin, context.actor, context.scheduled_at) == (
            "schedule",
            system_actor(JOB),
            START,
        )

    async def test_run_now_gives_each_run_a_fresh_correlation_id(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=lambda e: None)

        await harness.scheduler.run_now(JOB)
        await harness.scheduler.run_now(JOB)

        first, second = ports.scope.opened
        assert first.correlation_id != second.correlation_id

    async def test_run_now_of_a_name_no_job_has_raises_unknown_job_error(
        self, harness: SchedulerHarness
    ) -> None:
        with pytest.raises(UnknownJobError) as raised:
            await harness.scheduler.run_now("billing.nothing-here")

        assert raised.value.code == "UNKNOWN_JOB"

    async def test_registering_the_same_name_twice_is_refused(
        self, harness: SchedulerHarness
    ) -> None:
        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=lambda e: None)

        with pytest.raises(InvalidJobScheduleError, match=JOB):
            harness.scheduler.register(name=JOB, schedule={"every": "1h"}, run=lambda e: None)

    async def test_a_schedule_that_cannot_be_read_is_refused_naming_the_job(
        self, harness: SchedulerHarness
    ) -> None:
        with pytest.raises(ValueError, match=JOB):
            harness.scheduler.register(name=JOB, schedule={"every": "0m"}, run=lambda e: None)

    async def test_a_per_tenant_job_without_tenants_is_refused(
        self, make_scheduler: MakeScheduler, ports: SchedulerPorts
    ) -> None:
        harness = make_scheduler(replace(ports, tenants=None))

        with pytest.raises(InvalidJobScheduleError, match=JOB):
            harness.scheduler.register(
                name=JOB, schedule={"every": "15m", "tenancy": "per-tenant"}, run=lambda e: None
            )

    async def test_a_per_tenant_job_runs_once_per_tenant_sharing_the_correlation_id(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        tenants: list[str | None] = []

        async def run(execution: JobExecution) -> None:
            tenants.append(execution.tenant_id)

        harness.scheduler.register(
            name="billing.close-month", schedule={"every": "15m"}, run=run, tenancy="per-tenant"
        )
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)
        await harness.stop()

        assert tenants == ["acme", "globex"]
        assert [context.tenant_id for context in ports.scope.opened] == ["acme", "globex"]
        assert len({context.correlation_id for context in ports.scope.opened}) == 1
        assert [r.outcome for r in ports.runs] == [Outcome.SUCCEEDED]

    async def test_a_failing_tenant_does_not_stop_the_others_and_fails_the_occurrence(
        self, harness: SchedulerHarness, ports: SchedulerPorts
    ) -> None:
        tenants: list[str | None] = []

        async def run(execution: JobExecution) -> None:
            tenants.append(execution.tenant_id)
            if execution.tenant_id == "acme":
                raise DomainError("MONTH_OPEN", "the month is still open")

        harness.scheduler.register(
            name="billing.close-month",
            schedule={"every": "15m", "tenancy": "per-tenant"},
            run=run,
        )
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)
        await harness.stop()

        assert tenants == ["acme", "globex"]
        [record] = ports.runs
        assert (record.outcome, record.error_code, record.tenant_id) == (
            Outcome.FAILED,
            "MONTH_OPEN",
            "acme",
        )

    async def test_two_instances_sharing_a_clock_and_a_lock_run_an_occurrence_once(
        self, make_scheduler: MakeScheduler, ports: SchedulerPorts
    ) -> None:
        ports.clock.set(datetime(2026, 3, 2, 5, 58, tzinfo=UTC))
        second_ports = replace(ports, scope=FixedExecutionScope(), runs=[], errors=[])
        first, second = make_scheduler(ports), make_scheduler(second_ports)
        ran: list[datetime] = []

        async def run(execution: JobExecution) -> None:
            ran.append(execution.scheduled_at)

        for instance in (first, second):
            instance.scheduler.register(
                name="notifications.send-reminders",
                schedule={"cron": "0 7 * * *", "time_zone": "Europe/Paris"},
                run=run,
            )
            await instance.scheduler.start()
        await first.advance(2 * MINUTE)
        await second.advance(0)
        await first.stop()
        await second.stop()

        assert ran == [datetime(2026, 3, 2, 6, tzinfo=UTC)]
        assert [r.outcome for r in second_ports.runs] == ["skipped-locked"]

    async def test_describe_gives_each_job_as_data(self, harness: SchedulerHarness) -> None:
        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=lambda e: None)
        harness.scheduler.register(
            name="billing.export-ledger",
            schedule={"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris", "enabled": False},
            run=lambda e: None,
        )
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)

        reminders, ledger = harness.scheduler.describe()
        await harness.stop()

        assert (reminders.name, reminders.schedule, reminders.enabled, reminders.running) == (
            JOB,
            "every 15m",
            True,
            False,
        )
        assert reminders.next_run_at == at(10, 15)
        assert reminders.last_run is not None
        assert (reminders.last_run.scheduled_at, reminders.last_run.outcome) == (
            at(10, 0),
            Outcome.SUCCEEDED,
        )
        assert (ledger.schedule, ledger.enabled, ledger.next_run_at, ledger.last_run) == (
            "cron 0 7 * * 1-5 (Europe/Paris)",
            False,
            None,
            None,
        )

    async def test_a_stopped_scheduler_starts_nothing_new(self, harness: SchedulerHarness) -> None:
        due: list[datetime] = []

        async def run(execution: JobExecution) -> None:
            due.append(execution.scheduled_at)

        harness.scheduler.register(name=JOB, schedule={"every": "15m"}, run=run)
        await harness.scheduler.start()
        await harness.advance(2 * MINUTE)
        await harness.stop()
        await harness.advance(60 * MINUTE)

        assert due == [at(10, 0)]

    async def test_a_parsed_schedule_registers_as_the_mapping_does(
        self, harness: SchedulerHarness
    ) -> None:
        due: list[datetime] = []

        async def run(execution: JobExecution) -> None:
            due.append(execution.scheduled_at)

        harness.scheduler.register(name=JOB, schedule=parse_job_schedule({"every": "30m"}), run=run)
        await harness.scheduler.start()
        await harness.advance(32 * MINUTE)
        await harness.stop()

        assert due == [at(10, 0), at(10, 30)]
