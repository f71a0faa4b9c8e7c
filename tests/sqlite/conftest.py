"""Every SQLite adapter of a test shares one file, as a beat and workers of one machine do."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ddd_celery.kernel import FixedClock

START = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ddd_celery.sqlite3"
