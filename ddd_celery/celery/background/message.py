"""What a background job's task message carries: ``{"job_id": "<id>"}``, nothing else.

A message that says anything else was not sent by the queue or the relay (``celery call`` by
hand, an old client, a forged message): it is refused, naming what is wrong, and never run.
One whose very shape would crash Celery before the task runs is dropped by the task's
``Strategy`` (``guarded_strategy``), so a worker consuming these queues survives any body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery.worker.strategy import default

from ddd_celery.celery.background.publisher import JOB_ID
from ddd_celery.celery.background.registry import background_jobs_of
from ddd_celery.celery.message import UnreadableMessageError

MAX_JOB_ID_LENGTH = 200
"""Longer than any id a generator makes: a longer one is junk, not looked up."""
QUOTED_FIELDS = 3
QUOTED_LENGTH = 40
"""A refusal names at most ``QUOTED_FIELDS`` unexpected fields, each cut to ``QUOTED_LENGTH``
characters: they are the sender's text, and the worker's log line quotes the refusal."""


def read_job_id(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The job id of a task message; ``UnreadableMessageError`` naming the field otherwise."""
    if args:
        raise UnreadableMessageError(
            f"a background job's message carries keyword arguments only ({JOB_ID}), "
            f"not {len(args)} positional ones"
        )
    unknown = sorted(str(key) for key in kwargs if key != JOB_ID)
    if unknown:
        named = [
            key if len(key) <= QUOTED_LENGTH else f"{key[:QUOTED_LENGTH]}…"
            for key in unknown[:QUOTED_FIELDS]
        ]
        more = len(unknown) - QUOTED_FIELDS
        raise UnreadableMessageError(
            f"unexpected fields {named}{f' and {more} more' if more > 0 else ''}; "
            f"the only one is {JOB_ID}"
        )
    job_id = kwargs.get(JOB_ID)
    if not isinstance(job_id, str) or not job_id:
        raise UnreadableMessageError(f"{JOB_ID} must be a non-empty string")
    if len(job_id) > MAX_JOB_ID_LENGTH or not job_id.isprintable():
        raise UnreadableMessageError(
            f"{JOB_ID} must be printable and at most {MAX_JOB_ID_LENGTH} characters"
        )
    return job_id


GUARDED_STRATEGY = "ddd_celery.celery.background.message:guarded_strategy"
"""The ``Strategy`` of every background job's task (Celery's default behind a shape check)."""
DROPPED = "Background job message dropped: task %s, message %s: %s"
MAX_QUOTED = 80
"""The most of a message id a log line quotes: an id is the sender's text."""
_EMBEDDED = ("callbacks", "errbacks", "chain", "chord", "group", "group_index")


def guarded_strategy(task: Any, app: Any, consumer: Any, **options: Any) -> Any:
    """Celery's default strategy for ``task``, first dropping a message whose shape would crash
    Celery's own code before the task runs (a body of ``null``, ``{}`` or ``[[], {}]`` kills the
    worker: "Unrecoverable error", and the message, restored, kills the next one).

    A dropped message is acknowledged and recorded once, naming the task and the message id,
    never the body. What passes is Celery's: a body that does not decode, a revoked or expired
    task, a bad ETA are refused by Celery's own paths; the task then reads the job id
    (``read_job_id``).
    """
    handle = default(task, app, consumer, **options)
    logger, connection_errors = background_jobs_of(app).logger, consumer.connection_errors

    def on_message(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any) -> Any:
        problem = message_problem(message, body)
        if problem is None:
            return handle(message, body, ack, reject, callbacks)
        ack(logger, connection_errors)
        message_id = _quoted_id(message)
        logger.error(
            DROPPED,
            task.name,
            message_id,
            problem,
            extra={"job": task.name, "message_id": message_id, "reason": problem},
        )
        return None

    return on_message


def message_problem(message: Any, body: Any) -> str | None:
    """What makes a background job's task message one Celery cannot handle; None when its
    shape is that of a task message (its content is ``read_job_id``'s to judge)."""
    headers = message.headers
    if not isinstance(headers, Mapping):
        return "its headers are not a mapping"
    problem = _headers_problem(headers)
    if problem is not None:
        return problem
    if body is not None:  # protocol 1: Celery decoded the body to find the task's name
        return _parts_problem(body.get("args", ()), body.get("kwargs", {}), body)
    try:
        payload = message.payload
    except Exception:  # undecodable: Celery's own path refuses and acknowledges it
        return None
    if isinstance(payload, Mapping) and "args" in payload:  # a hybrid of protocols 1 and 2
        return _parts_problem(payload.get("args"), payload.get("kwargs", {}), payload)
    if not isinstance(payload, list | tuple) or len(payload) != 3:
        return "its body is not [args, kwargs, embed]"
    args, kwargs, embed = payload
    if embed is not None and not isinstance(embed, Mapping):
        return "its embed is not a mapping"
    return _parts_problem(args, kwargs, embed or {})


def _headers_problem(headers: Mapping[str, Any]) -> str | None:
    task_id = headers.get("id")
    if task_id is not None and not isinstance(task_id, str):
        return "its id is not a string"
    limits = headers.get("timelimit")
    if limits is not None and not (
        isinstance(limits, list | tuple)
        and len(limits) == 2
        and all(_is_seconds(limit) for limit in limits)
    ):
        return "its timelimit is not [soft, hard] seconds"
    retries = headers.get("retries")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)):
        return "its retries is not an int"
    return None


def _parts_problem(args: Any, kwargs: Any, embed: Mapping[str, Any]) -> str | None:
    if not isinstance(args, list | tuple):
        return "its args are not a list"
    if not isinstance(kwargs, Mapping):
        return "its kwargs are not a mapping"
    if any(embed.get(key) for key in _EMBEDDED):
        return "it carries callbacks, a chain, a chord or a group: a wake-up carries none"
    return None


def _is_seconds(value: Any) -> bool:
    return value is None or (not isinstance(value, bool) and isinstance(value, int | float))


def _quoted_id(message: Any) -> str:
    headers = message.headers if isinstance(message.headers, Mapping) else {}
    task_id = headers.get("id")
    if not isinstance(task_id, str):
        return "(no id)"
    return repr(task_id[:MAX_QUOTED]) + ("..." if len(task_id) > MAX_QUOTED else "")
