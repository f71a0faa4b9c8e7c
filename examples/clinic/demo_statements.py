"""What the demo shows of the statements: each compiled, retried once, then found by its id.

The month close enqueues one ``billing.compile-monthly-statement`` per tenant; the archive is
down at each statement's first try, so the worker logs a retry, then a success. The demo reads
those lines, then asks ``celery jobs background find <id>`` for one of them, as an operator
would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from examples.clinic.platform.backend import BACKEND, DATA, PREFIX, Backend

JOB = "billing.compile-monthly-statement"
_ATTEMPT = re.compile(
    r"Background job (?P<how>succeeded|failed, retrying|dead)\b.*?\bjob=" + re.escape(JOB)
    + r"\b.*?\bjob_id=(?P<job_id>\S+).*?\battempt=(?P<attempt>\d+)"
)  # fmt: skip


def attempts(texts: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
    """Each statement job's attempts, ``{job id: [(attempt, how it ended)]}``, as logged."""
    found: dict[str, list[tuple[int, str]]] = {}
    for text in texts:
        match = _ATTEMPT.search(text)
        if match:
            found.setdefault(match["job_id"], []).append((int(match["attempt"]), match["how"]))
    return found


def summarise(backend: Backend, root: Path, texts: Iterable[str]) -> None:
    """Print each statement job's attempts, then what ``find`` says of the first one."""
    jobs = attempts(texts)
    if not jobs:
        print("  statements: none compiled yet (the month closes every 15 s)")
        return
    for job_id, runs in jobs.items():
        told = ", then ".join(f"attempt {attempt} {how}" for attempt, how in runs)
        print(f"  statement job {job_id}: {told}")
    first = next(iter(jobs))
    print(f"\n$ celery -A examples.clinic.app jobs background find {first}")
    found = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "examples.clinic.app", "jobs", "background",
         "find", first],
        cwd=root, env=_environ(backend), capture_output=True, text=True, timeout=60, check=False,
        start_new_session=True,  # a Ctrl-C meanwhile is the demo's to handle, not a traceback here
    )  # fmt: skip
    print(found.stdout.rstrip() or found.stderr.rstrip())


def _environ(backend: Backend) -> dict[str, str]:
    environ = {
        **os.environ,
        BACKEND: backend.name,
        DATA: str(backend.data),
        PREFIX: backend.key_prefix,
    }
    if backend.redis_url is not None:
        environ["REDIS_URL"] = backend.redis_url
    return environ
