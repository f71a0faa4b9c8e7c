"""The name of a job: ``<context>.<job-name>``, one rule for every way a job comes to exist.

It is the system actor the job runs as, the key of its lock, its label in the metrics and the
key of its settings, so a name a scheduler accepts must be one a declaration accepts too.
"""

from __future__ import annotations

import re

from ddd_celery.declarations.errors import DeclarationError

JOB_NAME = re.compile(r"[a-z][a-z0-9_-]*\.[a-z][a-z0-9_-]*")

NAME_RULE = (
    "a job is named '<context>.<job-name>' in lower case, such as 'billing.send-payment-reminders'"
)


def check_job_name(name: object) -> str:
    """Return ``name`` when it is a job name; raise ``DeclarationError`` naming it otherwise."""
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise DeclarationError(NAME_RULE, job=name if isinstance(name, str) else repr(name))
    return name
