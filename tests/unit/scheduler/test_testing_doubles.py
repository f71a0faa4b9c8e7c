"""``ddd_celery.testing`` holds every test double the package ships, and its pytest plugin gives
the background ones as fixtures, as a project that installs ddd_celery sees them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import ddd_celery
import ddd_celery.testing

pytest_plugins = ["pytester"]

DOUBLE = re.compile(r"^class ((?:InMemory|Fixed|Manual|Sequential|Recording)\w*)", re.MULTILINE)
"""How a test double is named: an in-memory adapter, a fixed or manual driver, predictable ids."""


def _declared_doubles() -> dict[str, str]:
    """Every test double class declared in the package's source, and its module."""
    root = Path(ddd_celery.__file__).parent
    found = {}
    for path in root.rglob("*.py"):
        module = ".".join(("ddd_celery", *path.relative_to(root).with_suffix("").parts))
        for name in DOUBLE.findall(path.read_text()):
            found[name] = module
    return found


def test_every_test_double_of_the_package_is_importable_from_ddd_celery_testing() -> None:
    declared = _declared_doubles()

    assert len(declared) >= 16  # the scan finds the doubles of all five packages
    assert sorted(set(declared) - set(ddd_celery.testing.__all__)) == []
    for name, module in declared.items():
        assert getattr(ddd_celery.testing, name) is getattr(importlib.import_module(module), name)


def test_an_unknown_name_of_ddd_celery_testing_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'InMemoryNothing'"):
        _ = ddd_celery.testing.InMemoryNothing


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


def test_the_plugin_runs_a_background_job_on_a_fixed_clock(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest

        from ddd_celery import background

        ran = []

        @background("billing.send-invoice", max_attempts=2)
        class SendInvoiceJob:
            def run(self, payload, execution):
                ran.append((payload, execution.job_id, execution.attempt))

        @pytest.mark.fixed_clock("2026-03-02T09:00:00Z")
        async def test_send(stored_job_queue, in_memory_job_store, queue_worker,
                            manual_job_timers, fixed_clock):
            queue_worker.register(SendInvoiceJob, SendInvoiceJob)
            job_id = stored_job_queue.enqueue(SendInvoiceJob, {"invoice": 7}, delay_ms=60_000)
            await queue_worker.start()

            await manual_job_timers.advance(59_000)
            assert ran == []
            await manual_job_timers.advance(2_000)
            await queue_worker.stop()

            assert job_id == "id-1"
            assert ran == [({"invoice": 7}, "id-1", 1)]
            job = in_memory_job_store.find(job_id, tenant_id=None)
            assert job.status == "succeeded"
            assert job.finished_at.isoformat() == "2026-03-02T09:01:00+00:00"
            assert fixed_clock.now().isoformat() == "2026-03-02T09:01:01+00:00"
        """
    )

    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)
