"""Beat's publishing half: the task messages of the occurrences a tick began, sent together.

The scheduler (``beat.py``) decides which occurrences are sent and begins them in the stores;
this sends them, through one producer held for the batch and a kombu publish batch where the
broker has one (Redis: one pipeline). A declared job's message is the one ``send_task`` would
send, built from its ``TaskMessage`` where the app allows; a ``beat_schedule`` entry goes as
Celery's beat sends it. Each occurrence whose publish fails is recorded ``failed`` and its claim
in the run state is ended. The lines are beat's, on the ``ddd_celery.celery.beat`` logger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery.beat import BeatLazyFunc

from ddd_celery.celery._task_messages import TASK_IDS, TaskMessage, new_task_id, push_messages
from ddd_celery.celery.beat_templates import SharedTemplates, write
from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.publish_batch import publish_batch
from ddd_celery.celery.registry import CeleryJob, CeleryJobs
from ddd_celery.celery.tracing import send_span, sends_untraced
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.execution import not_run
from ddd_celery.scheduling.occurrence import Event, Occurrence
from ddd_celery.scheduling.occurrence_store import Beginning
from ddd_celery.scheduling.outcomes import Outcome

logger = logging.getLogger("ddd_celery.celery.beat")

_UNBUILT = TaskMessage.__new__(TaskMessage)
"""A job whose task message is not built yet."""


@dataclass(slots=True)
class Sending:
    """An occurrence begun and about to be published, with what its message needs."""

    job: CeleryJob
    occurrence: Occurrence
    beginning: Beginning
    expires: datetime
    correlation_id: str | None = None


@dataclass(slots=True)
class _Batch:
    """What the occurrences published together share, computed once for the batch."""

    fits_here: bool
    """No task runs in this thread: the messages may be built from ``TaskMessage``."""
    logs_sends: bool
    """Beat logs each send (INFO)."""
    declared: set[str | None] | None = None
    """The queues a message of this batch declared through ``send_task`` (see ``_send``)."""
    kwargs: dict[datetime, dict[str, str | None]] = field(default_factory=dict)
    """Each instant's task kwargs, but for the correlation id (one per occurrence)."""


class Publisher:
    """Publishes the tasks of occurrences begun, keeping each declared job's task message."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._messages: dict[str, TaskMessage | None] = {}
        """Each declared job's task message, its fixed part built at its first send."""
        self._messages_router: object = None
        """The app's router the messages were built with: built again once it changes."""
        self._templates = SharedTemplates(app)

    def publish(self, jobs: CeleryJobs, tasks: list[Sending], sent: set[int]) -> None:
        """Publish the occurrences begun, through one producer held for them all.

        On kombu's Redis transport the messages are written from templates the jobs share and
        pushed in one pipeline (``_push``); the others go in one kombu publish batch where the
        broker has one (Redis: one pipeline). Either way a write that fails fails the rest of
        its batch with it: each such occurrence is recorded ``failed`` and freed. ``sent``
        receives each occurrence once its message has left.
        """
        if not tasks:
            return
        self._forget_stale_messages()
        batch = _Batch(TaskMessage.fits_here(), logger.isEnabledFor(logging.INFO))
        if len(tasks) == 1:
            if self._send(jobs, tasks[0], None, batch):
                sent.add(id(tasks[0].occurrence))
            return
        published: list[Sending] = []
        try:
            with self.app.producer_or_acquire() as producer:
                rest = self._push(jobs, tasks, producer, batch, sent)
                with publish_batch(producer, len(rest)):
                    batch.declared = set()
                    published = [item for item in rest if self._send(jobs, item, producer, batch)]
        except Exception as error:
            for item in tasks:
                if item.occurrence.outcome is None and id(item.occurrence) not in sent:
                    self._send_failed(jobs, item, error, item.correlation_id)
            return
        sent.update(id(item.occurrence) for item in published)

    def _push(
        self, jobs: CeleryJobs, tasks: list[Sending], producer: Any, batch: _Batch, sent: set[int]
    ) -> list[Sending]:
        """Write each task a shared template can carry (``beat_templates``) and push them all
        in one pipeline; return the others, to publish.

        Only where nothing runs in this thread and no span is started per send. A push that
        fails fails each of its occurrences, its delivery uncertain, as a publish batch's.
        """
        if not batch.fits_here or not sends_untraced():
            return tasks
        templates = self._templates.templates()
        rest: list[Sending] = []
        written = []
        for item in tasks:
            template = templates.of(item.job, producer) if item.job.declared else None
            if template is None:
                rest.append(item)
            else:
                written.append((item, template))
        if not written:
            return rest
        correlation_ids = jobs.ids.next_ids(len(written))
        ids = TASK_IDS.next_ids(2 * len(written))
        pushes: dict[str, list[str]] = {}
        for index, (item, template) in enumerate(written):
            job, at = item.job, item.occurrence.scheduled_at
            item.correlation_id = correlation_id = correlation_ids[index]
            if batch.logs_sends:
                logger.info(
                    "Scheduler: Sending due task %s (%s) of %s", job.name, job.task_name, iso_ms(at)
                )
            message = write(
                template,
                job,
                (ids[2 * index], ids[2 * index + 1]),
                _kwargs(batch, at, correlation_id),
                item.expires,
            )
            pushes.setdefault(template.key, []).append(message)
        try:
            push_messages(producer.channel, list(pushes.items()))
        except Exception as error:
            for item, _ in written:
                self._send_failed(jobs, item, error, item.correlation_id)
        else:
            sent.update(id(item.occurrence) for item, _ in written)
        return rest

    def _send(self, jobs: CeleryJobs, item: Sending, producer: Any, batch: _Batch) -> bool:
        """Publish the task; a publish that fails is recorded ``failed`` and frees the run state.

        The message expires with the lock: run later than that, another beat could have sent
        the same occurrence again. True once published (or put in the producer's batch).

        A declared job's message is the one ``send_task`` would send, built from its
        ``TaskMessage`` (the route, options and fixed headers computed at its first send), where
        the app allows; otherwise through ``send_task``. ``batch.declared``: the queues a
        message of this batch already declared through ``send_task``, so the others skip
        kombu's cached declaration check.
        """
        job, at = item.job, item.occurrence.scheduled_at
        item.correlation_id = correlation_id = jobs.ids.next_id()
        if batch.logs_sends:
            logger.info(
                "Scheduler: Sending due task %s (%s) of %s", job.name, job.task_name, iso_ms(at)
            )
        try:
            with send_span(job.name, at, correlation_id) as headers:
                if not job.declared:
                    self._send_entry(job, headers, producer)
                    return True
                kwargs = _kwargs(batch, at, correlation_id)
                message = self._message(job)
                if message is None or not batch.fits_here:
                    self._send_task(item, kwargs, headers, producer, batch.declared)
                elif producer is None:
                    with self.app.producer_or_acquire() as held:
                        message.send(
                            held, new_task_id(), kwargs, headers=headers, expires=item.expires
                        )
                else:
                    message.send(
                        producer, new_task_id(), kwargs, headers=headers, expires=item.expires
                    )
        except Exception as error:
            self._send_failed(jobs, item, error, correlation_id)
            return False
        return True

    def _forget_stale_messages(self) -> None:
        """Drop the messages built before the app's routes changed: built again at their next
        send. Once per batch, as the routes cannot change while it is published."""
        router = self.app.amqp.router
        if router is not self._messages_router:
            self._messages_router = router
            self._messages = {
                name: None for name, message in self._messages.items() if message is None
            }

    def _message(self, job: CeleryJob) -> TaskMessage | None:
        """The job's task message, built at its first send (again when the app's routes change:
        ``_forget_stale_messages``); None where ``send_task`` is used.

        A route that cannot be built (a queue missing from ``task_queues``) leaves the job to
        ``send_task``, which raises the same error for each occurrence.
        """
        message = self._messages.get(job.name, _UNBUILT)
        if message is not _UNBUILT:
            return message
        try:
            message = TaskMessage.of(self.app, job.task_name, queue=job.queue)
        except Exception:
            message = None
        self._messages[job.name] = message
        return message

    def _send_task(
        self,
        item: Sending,
        kwargs: dict[str, str | None],
        headers: dict[str, str],
        producer: Any,
        declared: set[str | None] | None,
    ) -> None:
        """The occurrence through Celery's ``send_task``: an app whose own is replaced, say."""
        job = item.job
        options: dict[str, Any] = {} if producer is None else {"producer": producer}
        if declared is not None:
            if job.queue in declared:
                options["declare"] = []
            declared.add(job.queue)
        self.app.send_task(
            job.task_name,
            kwargs=kwargs,
            queue=job.queue,
            expires=item.expires,
            serializer="json",
            headers=headers,
            **options,
        )

    def _send_entry(self, job: CeleryJob, headers: dict[str, str], producer: Any) -> None:
        """Send a ``beat_schedule`` entry as Celery's beat does: same task, arguments, options.

        ``send_task`` routes it by ``task_routes`` and the task's own options, as
        ``apply_async`` would; ``headers`` (the trace) are added to the entry's own.
        """
        options = dict(job.options)
        options["headers"] = {
            **(options.get("headers") or {}),
            **headers,
            "celery_beat_task": True,
        }
        if producer is not None:
            options["producer"] = producer
        args = [_evaluated(arg) for arg in job.args]
        kwargs = {name: _evaluated(value) for name, value in job.kwargs.items()}
        self.app.send_task(job.task_name, args, kwargs, **options)

    def _send_failed(
        self, jobs: CeleryJobs, item: Sending, error: Exception, correlation_id: str | None
    ) -> None:
        job, at = item.job, item.occurrence.scheduled_at
        item.occurrence.move(Event.FAILED)
        jobs.recorder.record(
            not_run(job.name, at, Outcome.FAILED, error=error, correlation_id=correlation_id),
            error,
        )
        if job.declared:
            free_run_state(jobs, job, item.beginning)


def free_run_state(jobs: CeleryJobs, job: CeleryJob, beginning: Beginning) -> None:
    """End the claim of an occurrence that was never sent, so the job is not held busy.

    What waited behind it is dropped and recorded ``missed``: its run would have followed
    one that never happened.
    """
    try:
        dropped = jobs.occurrences().free(beginning)
    except Exception as error:
        jobs.recorder.could_not_follow(job.name, error, what="free the run state")
        return
    if dropped is not None:
        jobs.recorder.record(not_run(job.name, dropped, Outcome.MISSED))


def _kwargs(batch: _Batch, at: datetime, correlation_id: str) -> dict[str, str | None]:
    """The occurrence's task kwargs, its instant written once for the batch."""
    kwargs = batch.kwargs.get(at)
    if kwargs is None:
        kwargs = batch.kwargs[at] = OccurrenceMessage(at, correlation_id).to_kwargs()
    kwargs = kwargs.copy()
    kwargs["correlation_id"] = correlation_id
    return kwargs


def _evaluated(value: Any) -> Any:
    """A ``BeatLazyFunc`` argument is called at each send, as Celery's beat does."""
    return value() if isinstance(value, BeatLazyFunc) else value
