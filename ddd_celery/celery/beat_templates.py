"""Beat's task messages on kombu's Redis transport, written from templates its jobs share.

At 100,000 occurrences due together, kombu's publish was half of beat's tick, and a
``TaskMessage`` kept per job its third of a kilobyte (29 µs to build at its first send). Jobs
whose messages differ only by the task's name share one: same queue, same route (the job's own,
which ``install_jobs`` writes first in ``task_routes``), same task options (time limits
included). For each batch of sends, one template per such shape is written through kombu's
own code (``TaskMessage.on_redis``), then each message is that template with its task name, ids,
kwargs and expiry filled in: the same JSON ``send_task`` would push, field by field. A job
routed some other way, another transport, a publish signal with receivers, a span to start per
send: its message goes through the producer's publish (``beat_publishing``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from celery.app.routes import MapRoute

from ddd_celery.celery._task_messages import RedisMessages, TaskMessage, expiry
from ddd_celery.celery.registry import CeleryJob

KWARGS = ("scheduled_at", "correlation_id", "tenant_id")
"""The kwargs of an occurrence's task (``OccurrenceMessage``)."""
FIELDS = ("task",)
"""The header each message has of its own beside its id and expiry: the job's task."""

_UNKNOWN: Any = object()


class SharedTemplates:
    """The message shapes of an app's jobs, the ``TaskMessage`` of each shape built once."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._router: object = None
        self._shapes: dict[str, Hashable | None] = {}
        """Each job task's shape, None for a task whose message is its own."""
        self._messages: dict[Hashable, TaskMessage | None] = {}
        """The message of each shape, built from the first job of that shape sent."""
        self._kept: dict[Hashable, Hashable] = {}
        """Each shape, as the first equal one seen: 100,000 jobs of one shape hold one tuple."""
        self._options: dict[int, tuple[dict[str, Any], tuple[tuple[str, Any], ...]]] = {}
        """Each dict of task options seen, by identity, kept with its sorted items."""

    def templates(self) -> Templates:
        """The templates of one batch of sends: written for its producer, at their first use.

        Forgets every shape once the app's routes changed (they are read again).
        """
        router = self._app.amqp.router
        if router is not self._router:
            self._router, self._shapes, self._messages, self._kept = router, {}, {}, {}
            self._options = {}
        return Templates(self)

    def message(self, job: CeleryJob) -> tuple[Hashable, TaskMessage] | None:
        """The job's shape and its shared message; None where the job's message is its own."""
        shape = self._shapes.get(job.task_name, _UNKNOWN)
        if shape is _UNKNOWN:
            shape = self._shapes[job.task_name] = self._shape(job)
        if shape is None:
            return None
        message = self._messages.get(shape, _UNKNOWN)
        if message is _UNKNOWN:
            try:
                message = TaskMessage.of(self._app, job.task_name, queue=job.queue)
            except Exception:  # a queue missing from task_queues: send_task raises it per send
                message = None
            self._messages[shape] = message
        return None if message is None else (shape, message)

    def _shape(self, job: CeleryJob) -> Hashable | None:
        """The job's queue and its task's options, when its route is the one ``install_jobs``
        wrote (``{"queue": job.queue}``, first of ``task_routes``): that route then gives every
        such job the same message but for its name."""
        routes = self._app.amqp.router.routes
        if job.queue is None or not routes or not isinstance(routes[0], MapRoute):
            return None
        if routes[0].map.get(job.task_name) != {"queue": job.queue}:
            return None
        # As TaskMessage.of: the registered task's own options (none before it is registered).
        task = self._app._tasks.get(job.task_name)
        get_exec_options = getattr(task, "_get_exec_options", None)
        own: dict[str, Any] = {}
        if get_exec_options is not None and hasattr(get_exec_options, "__self__"):
            own = get_exec_options()
        # The jobs' tasks of one kind and options share one dict of them (RunTask): sorted once.
        seen = self._options.get(id(own))
        if seen is not None and seen[0] is own:
            options = seen[1]
        else:
            options = tuple(sorted((key, value) for key, value in own.items() if value is not None))
            self._options[id(own)] = (own, options)
        shape: Hashable = (job.queue, options)
        try:
            return self._kept.setdefault(shape, shape)
        except TypeError:  # an option that cannot be hashed: this job's message is its own
            return None


class Templates:
    """The templates of one batch of sends, each written for its producer at first use."""

    def __init__(self, shared: SharedTemplates) -> None:
        self._shared = shared
        self._written: dict[Hashable, RedisMessages | None] = {}

    def of(self, job: CeleryJob, producer: Any) -> RedisMessages | None:
        """The job's template for ``producer``; None where its message must be published."""
        found = self._shared.message(job)
        if found is None:
            return None
        shape, message = found
        if shape not in self._written:
            self._written[shape] = message.on_redis(producer, KWARGS, FIELDS, expires=True)
        return self._written[shape]


def write(
    template: RedisMessages,
    job: CeleryJob,
    ids: tuple[str, str],
    kwargs: dict[str, str | None],
    expires: Any,
) -> str:
    """One occurrence's message: its task id and delivery tag (``ids``), kwargs and expiry."""
    task_id, tag = ids
    expires_text, ttl = expiry(task_id, expires)
    fields = {"task": job.task_name, "expires": expires_text, "expiration": str(int(ttl * 1000))}
    return template.write(task_id, tag, kwargs, fields)
