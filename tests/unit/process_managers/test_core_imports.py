"""The process managers' core and a process declared with it import no Celery, Redis or SQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_declaring_and_running_a_process_imports_no_celery_redis_nor_sqlalchemy() -> None:
    code = (
        "import sys\n"
        "import ddd_celery.processes, ddd_celery.kernel.process_runner\n"
        "import examples.clinic.booking.process\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(roots & {'celery', 'kombu', 'redis', 'sqlalchemy'}))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == "[]"
