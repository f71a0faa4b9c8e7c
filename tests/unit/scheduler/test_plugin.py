"""The pytest plugin: its fixtures, as a project that installs ddd_celery sees them."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings =
    error
    # the outer run imported ddd_celery already (its pytest11 entry point), so the inner run
    # cannot rewrite its asserts: harmless here, as the plugin has none to rewrite
    ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning
"""


def test_the_fixed_clock_starts_at_midnight_utc_on_a_monday(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        def test_clock(fixed_clock):
            assert fixed_clock.now().isoformat() == "2026-03-02T00:00:00+00:00"
        """
    )

    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_a_marker_starts_the_fixed_clock_at_an_instant(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        from datetime import UTC, datetime

        import pytest

        @pytest.mark.fixed_clock("2026-03-02T09:58:30Z")
        def test_text(fixed_clock):
            assert fixed_clock.now() == datetime(2026, 3, 2, 9, 58, 30, tzinfo=UTC)

        @pytest.mark.fixed_clock(datetime(2026, 1, 1, tzinfo=UTC))
        def test_datetime(fixed_clock):
            assert fixed_clock.now() == datetime(2026, 1, 1, tzinfo=UTC)
        """
    )

    pytester.runpytest("--strict-markers").assert_outcomes(passed=2)


def test_the_manual_scheduler_fixture_runs_the_seeds_spec(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.fixed_clock("2026-03-02T09:58:30Z")
        async def test_three_runs(manual_scheduler, fixed_execution_scope):
            async def run(execution):
                return None

            manual_scheduler.register(
                name="billing.send-payment-reminders", schedule={"every": "15m"}, run=run
            )
            await manual_scheduler.start()
            await manual_scheduler.advance(32 * 60_000)
            await manual_scheduler.stop()

            assert [r.scheduled_at.strftime("%H:%M") for r in manual_scheduler.runs] == [
                "10:00", "10:15", "10:30"
            ]
            assert [c.correlation_id for c in fixed_execution_scope.opened] == [
                "id-1", "id-2", "id-3"
            ]
        """
    )

    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_two_instances_share_the_in_memory_lock_fixture(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest
        from ddd_celery.kernel import SequentialIdGenerator
        from ddd_celery.testing import ManualJobScheduler

        @pytest.mark.fixed_clock("2026-03-02T05:58:00Z")
        async def test_once(fixed_clock, in_memory_lock, manual_scheduler, fixed_execution_scope):
            second = ManualJobScheduler(
                clock=fixed_clock,
                lock=in_memory_lock,
                scope=fixed_execution_scope,
                ids=SequentialIdGenerator(),
            )
            for scheduler in (manual_scheduler, second):
                scheduler.register(
                    name="notifications.send-reminders",
                    schedule={"cron": "0 7 * * *", "time_zone": "Europe/Paris"},
                    run=lambda execution: None,
                )
                await scheduler.start()
            await manual_scheduler.advance(2 * 60_000)
            await second.advance(0)

            assert [r.outcome for r in manual_scheduler.runs] == ["succeeded"]
            assert [r.outcome for r in second.runs] == ["skipped-locked"]
        """
    )

    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)
