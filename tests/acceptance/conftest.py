"""Fixtures of the process tests: a deployment of real ``celery`` processes on the real Redis.

No ``__init__.py`` here, as in ``tests/integration/celery``; modules have names of their own.
Each test keeps its keys under a prefix of its own (the broker's included), and its processes
and private Redis servers are ended when it ends, whatever happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from process_support import Deployment, deployment


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Deployment]:
    with deployment(tmp_path) as running:
        yield running
