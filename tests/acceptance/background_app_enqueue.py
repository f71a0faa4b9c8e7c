"""Enqueue through ``background_app`` in a process of its own, on that process's clock.

``python background_app_enqueue.py JOB DELAY_MS COUNT`` (with ``background_app``'s environment)
enqueues ``COUNT`` jobs ``JOB`` (a name of ``background_app_jobs``) ``DELAY_MS`` from now through
the app's ``JobQueue``, and prints one JSON line per job: its id and the instant (``time.time()``,
the machine's real clock) just before its enqueue.
"""

from __future__ import annotations

import json
import sys
import time

from background_app import app
from background_app_jobs import JOBS

from ddd_celery.celery.background import background_jobs_of
from ddd_celery.declarations.background import background_declaration_of


def main(name: str, delay_ms: int, count: int) -> None:
    [job] = [job for job in JOBS if background_declaration_of(job).name == name]
    queue = background_jobs_of(app).queue()
    for n in range(count):
        before = time.time()
        job_id = queue.enqueue(job, {"n": n}, delay_ms=delay_ms or None)
        print(json.dumps({"job_id": job_id, "before": before}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
