"""Publishing a background job's wake-up: its task, on its queue, the job id only.

The message carries nothing of value: the payload, the tenant, the actor and the correlation id
are in the store, read back by the worker that claims the job. It is never given an ``eta`` or
a ``countdown``: a job that is not due yet waits in the store, and the relay publishes it when
it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from weakref import WeakKeyDictionary

from ddd_celery.background.publisher import JobPublisher
from ddd_celery.background.store import Dispatch
from ddd_celery.celery._task_messages import (
    TASK_IDS,
    RedisMessages,
    TaskMessage,
    new_task_id,
    push_messages,
)
from ddd_celery.celery.publish_batch import publish_batch

JOB_ID = "job_id"
"""The one keyword argument of a background job's task."""


_declared: WeakKeyDictionary[Any, set[str]] = WeakKeyDictionary()
"""The queues each app has declared in this process through ``send_task``: declared once, not
checked per message."""

_MESSAGES = "_ddd_celery_wakeup_messages"
"""Where an app keeps its wake-up message per task and queue, built at its first wake-up
(``TaskMessage``): on the app, as each refers to it."""
_UNBUILT = TaskMessage.__new__(TaskMessage)


def send_wakeup(
    app: Any, name: str, queue: str, job_id: str, producer: Any = None, *, retries: int = 0
) -> None:
    """Send the task ``name`` to ``queue`` with ``{"job_id": job_id}``, JSON, its ``root_id``
    the job id: Celery's tools link the wake-ups of every attempt of the job. ``retries`` (the
    attempts made before, ``Dispatch.attempts``) is the message's ``retries``, so Flower shows
    the attempt the wake-up is for, as the worker's ``request.retries`` does.

    ``producer`` is one the caller holds for a batch (the relay); otherwise Celery takes one from
    its pool for this message. The message is the one ``send_task`` would send, its fixed part
    built once per task and queue (``TaskMessage``), where the app allows it; otherwise
    ``send_task`` sends it. The first wake-up of a queue declares it, as Celery does; the next
    ones skip kombu's cached declaration check (a tenth of a publish): a queue is the broker's,
    declared once, and every worker that consumes it declares it too.
    """
    kwargs = {JOB_ID: job_id}
    message = _message(app, name, queue)
    if message is not None and message.fits_here():
        headers = {"root_id": job_id, "retries": retries}
        if producer is None:
            with app.producer_or_acquire() as held:
                message.send(held, new_task_id(), kwargs, kwargsrepr=repr(kwargs), headers=headers)
        else:
            message.send(producer, new_task_id(), kwargs, kwargsrepr=repr(kwargs), headers=headers)
        return
    declared = _declared.setdefault(app, set())
    app.send_task(
        name,
        kwargs=kwargs,
        queue=queue,
        serializer="json",
        producer=producer,
        # what events and logs show of the arguments, given: Celery's safe repr costs more
        argsrepr="()",
        kwargsrepr=repr(kwargs),
        root_id=job_id,
        retries=retries,
        **({"declare": []} if queue in declared else {}),
    )
    declared.add(queue)


def _message(app: Any, name: str, queue: str) -> TaskMessage | None:
    """The wake-up's ``TaskMessage``; None where ``send_task`` sends it (it raises the same)."""
    messages: dict[tuple[str, str], TaskMessage | None] | None = getattr(app, _MESSAGES, None)
    if messages is None:
        messages = {}
        setattr(app, _MESSAGES, messages)
    message = messages.get((name, queue), _UNBUILT)
    if message is None or (message is not _UNBUILT and message.is_current()):
        return message
    try:
        message = TaskMessage.of(app, name, queue=queue, expires_given=False, reprs_given=True)
    except Exception:
        message = None
    messages[name, queue] = message
    return message


class CeleryJobPublisher(JobPublisher):
    """The ``JobPublisher`` of a Celery app: the job's task, sent at once, never with an ETA."""

    def __init__(self, app: Any) -> None:
        self._app = app

    def publish(self, dispatch: Dispatch) -> None:
        send_wakeup(
            self._app, dispatch.name, dispatch.queue, dispatch.job_id, retries=dispatch.attempts
        )

    def publish_many(self, dispatches: Sequence[Dispatch]) -> None:
        """Every wake-up through one producer, in one publish batch (one Redis pipeline)."""
        send_wakeups(self._app, dispatches)


def send_wakeups(app: Any, dispatches: Sequence[Dispatch], producer: Any = None) -> None:
    """``send_wakeup`` of each of ``dispatches`` through one producer (``producer``, or one
    taken from the app's pool for them all), as one write: the relay's batch and an
    ``enqueue_many``'s.

    On kombu's Redis transport, where every message can be written from its ``TaskMessage``
    (``on_redis``: no publish signal receivers, no exchange routing...), each is written from
    one template per task and queue, the same JSON ``send_task`` would push field by field,
    and all are pushed in one pipeline, one ``LPUSH`` per run of messages to the same queue.
    Otherwise each goes through ``send_wakeup`` in one publish batch where the transport has
    one (``publish_batch``).
    """
    if producer is None:
        with app.producer_or_acquire() as held:
            send_wakeups(app, dispatches, held)
        return
    if len(dispatches) > 1 and TaskMessage.fits_here() and _pushed(app, dispatches, producer):
        return
    with publish_batch(producer, len(dispatches)):
        for dispatch in dispatches:
            send_wakeup(
                app,
                dispatch.name,
                dispatch.queue,
                dispatch.job_id,
                producer,
                retries=dispatch.attempts,
            )


_WAKEUP_HEADERS = ("root_id", "retries")
"""The headers ``send_wakeup`` gives each message: the job as its root, the attempts before."""


def _pushed(app: Any, dispatches: Sequence[Dispatch], producer: Any) -> bool:
    """Whether every wake-up was written from its task's ``RedisMessages`` and pushed; False,
    nothing sent, where one of them cannot be."""
    templates: dict[tuple[str, str], RedisMessages | None] = {}
    pushes: list[tuple[str, list[str]]] = []
    ids = TASK_IDS.next_ids(2 * len(dispatches))
    for index, dispatch in enumerate(dispatches):
        destination = (dispatch.name, dispatch.queue)
        if destination in templates:
            template = templates[destination]
        else:
            message = _message(app, dispatch.name, dispatch.queue)
            template = templates[destination] = (
                None if message is None else message.on_redis(producer, (JOB_ID,), _WAKEUP_HEADERS)
            )
        if template is None:
            return False
        kwargs = {JOB_ID: dispatch.job_id}
        written = template.write(
            ids[2 * index],
            ids[2 * index + 1],
            kwargs,
            {"root_id": dispatch.job_id, "retries": dispatch.attempts},
            repr(kwargs),
        )
        if pushes and pushes[-1][0] == template.key:
            pushes[-1][1].append(written)
        else:
            pushes.append((template.key, [written]))
    push_messages(producer.channel, pushes)
    return True
