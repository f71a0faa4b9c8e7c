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


_TAKEN: dict[str, tuple[str, str]] = {}
"""Every name declared in this process: ``{name: (kind, module.Class)}``."""


def reserve_job_name(name: str, kind: str, owner: type) -> None:
    """Keep ``name`` to ``owner``: a name is unique in the application, whatever declares it.

    ``kind`` (``scheduled job``, ``background job``, ``process manager``) says what holds it in
    the message. The same class declared again (its module imported twice) keeps its name.
    Raises ``DeclarationError`` naming both classes.
    """
    where = f"{owner.__module__}.{owner.__qualname__}"
    taken = _TAKEN.get(name)
    if taken is not None and taken != (kind, where):
        held_by = (
            f"it is already declared by {taken[1]}"
            if taken[0] == kind
            else f"the {taken[0]} {taken[1]} already has it"
        )
        raise DeclarationError(
            f"the name must be unique in the application; {held_by}, so {where} cannot take it",
            job=name,
        )
    _TAKEN[name] = (kind, where)


def context_of(job: str) -> str:
    """The context of ``<context>.<job-name>``: the part before the first dot."""
    return job.split(".", 1)[0]
