"""Every benchmark script a person runs still starts: its imports follow the library's modules.

The scripts are no test, so nothing else imports them; a module moved without them broke
``bench/bench_background.py`` once. ``--help`` imports the script whole and runs nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.redis
@pytest.mark.parametrize("script", sorted(BENCH.glob("bench_*.py")), ids=lambda path: path.name)
def test_the_benchmark_script_starts(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCH,
    )

    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
