"""The clinic example, built as ``celery -A examples.clinic.app`` builds it, on a fixed clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from clinic_fakes import NOW, RecordingMailer

from ddd_celery.kernel import FixedClock
from examples.clinic.platform.backend import BACKEND, DATA


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture
def mailer() -> RecordingMailer:
    return RecordingMailer()


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """The embedded default on a folder of the test: no server, nothing shared with others."""
    return {BACKEND: "embedded", DATA: str(tmp_path)}


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """The clinic's own file in that folder."""
    return tmp_path / "clinic.sqlite3"
