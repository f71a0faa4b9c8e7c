"""The Redis adapters stay optional: the core never imports them, nor redis-py."""

from __future__ import annotations

import subprocess
import sys


def test_the_core_imports_neither_the_redis_adapters_nor_redis_py() -> None:
    probe = (
        "import sys, ddd_celery, ddd_celery.kernel, ddd_celery.scheduling.checkpoints, "
        "ddd_celery.scheduling.run_state, ddd_celery.scheduling.last_runs; "
        "print(sorted(m for m in sys.modules if m == 'redis' or m.startswith(('redis.', "
        "'ddd_celery.redis'))))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout

    assert imported.strip() == "[]"
