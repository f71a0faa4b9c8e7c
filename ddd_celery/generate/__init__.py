"""The generator behind the ``ddd-celery`` console script: jobs, their specs, the worker.

``ddd-celery generate job <context> <JobClass> --cron ... | --every ...`` writes a
``@scheduled`` job, its command when missing, its spec on the manual scheduler and its line in
the platform's job settings; ``generate background-job`` does the same for a ``@background``
job; ``generate worker`` writes the worker's entry point and turns ``RUN_JOBS`` off by default
for the API. Files are written all or none, never overwritten, and a second run changes
nothing. Imports no Celery.
"""

from ddd_celery.generate.errors import GenerationRefusedError
from ddd_celery.generate.files import Change, Written
from ddd_celery.generate.generator import generate_background_job, generate_job, generate_worker
from ddd_celery.generate.layout import Layout, find_layout

__all__ = [
    "Change",
    "GenerationRefusedError",
    "Layout",
    "Written",
    "find_layout",
    "generate_background_job",
    "generate_job",
    "generate_worker",
]
