"""``assert_jobs_take_ports``: the seeds' "a job only triggers a use case", run over the jobs."""

from __future__ import annotations

from typing import Any

import pytest

from ddd_celery.declarations import JobExecution, scheduled
from ddd_celery.kernel import Clock, CommandBus, InMemoryCommandBus
from ddd_celery.testing import assert_jobs_take_ports

pytest_plugins = ["pytester"]


class AppointmentRepository:
    """A repository: what a job must not hold."""


class Appointment:
    """A domain object: what a job must not hold either."""


@scheduled("ports.send-reminders", every="15m")
class SendRemindersJob:
    def __init__(self, commands: CommandBus) -> None:
        self.commands = commands

    def run(self, execution: JobExecution) -> None:
        return None


@scheduled("ports.no-dependency", every="1h")
class NoDependencyJob:
    def run(self, execution: JobExecution) -> None:
        return None


@scheduled("ports.hidden-use-case", every="15m")
class HiddenUseCaseJob:
    def __init__(
        self, appointments: AppointmentRepository, first: Appointment, commands: CommandBus
    ) -> None:
        self.appointments = appointments

    def run(self, execution: JobExecution) -> None:
        return None


@scheduled("ports.adapter", every="15m")
class AdapterJob:
    def __init__(self, commands: InMemoryCommandBus, clock, **extra: Any) -> None:  # type: ignore[no-untyped-def]
        self.commands = commands

    def run(self, execution: JobExecution) -> None:
        return None


def test_jobs_that_take_only_the_command_bus_pass() -> None:
    assert_jobs_take_ports([SendRemindersJob, NoDependencyJob])


def test_a_job_holding_a_repository_or_a_domain_object_fails_naming_each() -> None:
    with pytest.raises(AssertionError) as failed:
        assert_jobs_take_ports([SendRemindersJob, HiddenUseCaseJob])

    message = str(failed.value)
    assert message.startswith("a job only triggers a use case")
    assert message.splitlines()[1:] == [
        "  ports.hidden-use-case: constructor parameter 'appointments' takes "
        "AppointmentRepository, not a port",
        "  ports.hidden-use-case: constructor parameter 'first' takes Appointment, not a port",
    ]


def test_an_adapter_a_parameter_without_type_and_extra_arguments_fail_too() -> None:
    with pytest.raises(AssertionError) as failed:
        assert_jobs_take_ports([AdapterJob])

    assert str(failed.value).splitlines()[1:] == [
        "  ports.adapter: constructor parameter 'commands' takes InMemoryCommandBus, not a port",
        "  ports.adapter: constructor parameter 'clock' says no type",
        "  ports.adapter: constructor parameter 'extra' takes anything (*args, **kwargs)",
    ]


def test_the_ports_a_project_allows_are_its_choice() -> None:
    assert_jobs_take_ports([SendRemindersJob], ports=[CommandBus, Clock])
    with pytest.raises(AssertionError, match="'commands' takes CommandBus"):
        assert_jobs_take_ports([SendRemindersJob], ports=[Clock])


def test_a_project_runs_it_over_a_collected_context_in_its_own_tests(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        shop_jobs="""
        from ddd_celery.declarations import scheduled
        from ddd_celery.kernel import CommandBus

        class OrderRepository: ...

        @scheduled("shop.remind", every="1h")
        class RemindJob:
            def __init__(self, commands: CommandBus) -> None: ...
            def run(self, execution) -> None: ...

        @scheduled("shop.cancel-stale", every="1h")
        class CancelStaleJob:
            def __init__(self, orders: OrderRepository) -> None: ...
            def run(self, execution) -> None: ...
        """,
        test_shop="""
        from ddd_celery import collect_scheduled_jobs
        from ddd_celery.testing import assert_jobs_take_ports

        def test_jobs_only_trigger_use_cases():
            assert_jobs_take_ports(collect_scheduled_jobs("shop_jobs"))
        """,
    )

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*shop.cancel-stale: constructor parameter 'orders' takes OrderRepository, not a port*"]
    )
