"""What a background job's task message carries: ``{"job_id": "<id>"}``, nothing else.

A message that says anything else was not sent by the queue or the relay (``celery call`` by
hand, an old client, a forged message): it is refused, naming what is wrong, and never run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddd_celery.celery.background.publisher import JOB_ID
from ddd_celery.celery.message import UnreadableMessageError

MAX_JOB_ID_LENGTH = 200
"""Longer than any id a generator makes: a longer one is junk, not looked up."""


def read_job_id(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The job id of a task message; ``UnreadableMessageError`` naming the field otherwise."""
    if args:
        raise UnreadableMessageError(
            f"a background job's message carries keyword arguments only ({JOB_ID}), "
            f"not {len(args)} positional ones"
        )
    unknown = sorted(str(key) for key in kwargs if key != JOB_ID)
    if unknown:
        raise UnreadableMessageError(f"unexpected fields {unknown}; the only one is {JOB_ID}")
    job_id = kwargs.get(JOB_ID)
    if not isinstance(job_id, str) or not job_id:
        raise UnreadableMessageError(f"{JOB_ID} must be a non-empty string")
    if len(job_id) > MAX_JOB_ID_LENGTH or not job_id.isprintable():
        raise UnreadableMessageError(
            f"{JOB_ID} must be printable and at most {MAX_JOB_ID_LENGTH} characters"
        )
    return job_id
