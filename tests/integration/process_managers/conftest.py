"""The process managers' in-memory deployment of `tests/unit/process_managers`, shared here.

Tests here take it where an adapter (the SQL store, the Celery driver, OpenTelemetry) joins it.
"""

from __future__ import annotations

from tests.unit.process_managers.conftest import deployment, running

__all__ = ["deployment", "running"]
