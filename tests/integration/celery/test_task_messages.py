"""Beat's publish and the relay's wake-up: the message ``send_task`` would send, byte for byte.

``TaskMessage`` builds a task's message once and fills each one's own fields; these tests send
the same occurrence both ways to the real Redis broker and compare what lands in the queue,
field by field: only the ids (task id, delivery tag) and the TTL left may differ. Signals are
sent as ``send_task`` sends them, ``task_routes`` and ``task_queues`` are honored, and what this
path cannot reproduce is left to ``send_task``. On a Celery whose ``send_task`` writes another
message than the one copied (before 5.7), ``PREBUILT`` is false and beat, the relay and the
publish after a commit send through ``send_task``: the tests check that path there, and force it
here (``through``) to show it keeps every message as it was.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import time
import uuid
import warnings
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import celery
import pytest
from celery import Celery
from celery._state import _task_stack
from celery.signals import after_task_publish, before_task_publish
from celery_support import AppFactory
from kombu import Exchange, Queue
from kombu.exceptions import OperationalError
from packaging.version import Version
from redis import Redis

from ddd_celery.background.store import Dispatch
from ddd_celery.celery import _task_messages as task_messages
from ddd_celery.celery import beat_publishing, install_jobs
from ddd_celery.celery._task_messages import TaskMessage, new_task_id
from ddd_celery.celery.background import publisher as publisher_module
from ddd_celery.celery.background.publisher import CeleryJobPublisher, send_wakeup, send_wakeups
from ddd_celery.celery.beat import JobBeatScheduler
from ddd_celery.celery.message import OccurrenceMessage
from ddd_celery.celery.registry import jobs_of
from ddd_celery.declarations import ScheduledJobDeclaration, parse_job_schedule
from ddd_celery.kernel.clock import FixedClock
from ddd_celery.kernel.lock import InMemoryLock
from ddd_celery.scheduling.outcomes import Outcome

TASK = "reports.build"
KWARGS = {
    "scheduled_at": "2026-03-02T10:00:00.000Z",
    "correlation_id": "4f1c2a9e-0b7d-4e0a-9c55-1d2e3f405162",
    "tenant_id": None,
}
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


class ReportsJob:
    def run(self, execution: object) -> None:
        return None


def queued(redis_client: Redis, prefix: str, queue: str) -> list[dict[str, Any]]:
    """The raw messages of ``queue``, oldest first, their bodies decoded, ids set aside.

    What differs from one publish to the next by nature: the task id (``id``,
    ``correlation_id``, and ``root_id`` where it is the task's own), kombu's delivery tag and
    the TTL left (``expiration``, in ms, compared within a second: ``same``). A message with a
    priority is in the queue's list of that priority.
    """
    raws = [
        raw
        for key in sorted(redis_client.scan_iter(match=f"{prefix}{queue}*"))
        if key == f"{prefix}{queue}".encode() or key.startswith(f"{prefix}{queue}\x06\x16".encode())
        for raw in reversed(redis_client.lrange(key, 0, -1))
    ]
    messages = []
    for raw in raws:
        message = json.loads(raw)
        message["body"] = json.loads(base64.b64decode(message["body"]))
        headers, properties = message["headers"], message["properties"]
        task_id = headers.pop("id")
        assert task_id == properties.pop("correlation_id")
        if headers["root_id"] == task_id:  # a task sent from no other task is its own root
            headers.pop("root_id")
        assert uuid.UUID(properties.pop("delivery_tag"))
        if "expiration" in properties:
            message["ttl_ms"] = int(properties.pop("expiration"))
        messages.append(message)
    return messages


def same(light: dict[str, Any], celerys: dict[str, Any], apart_ms: float = 0.0) -> bool:
    """The two messages are alike, field by field, their TTLs within a second of each other
    beyond the ``apart_ms`` between their sends (a TTL counts down to a fixed expiry)."""
    light, celerys = dict(light), dict(celerys)
    light_ttl, celerys_ttl = light.pop("ttl_ms", None), celerys.pop("ttl_ms", None)
    if (light_ttl is None) != (celerys_ttl is None):
        return False
    if light_ttl is not None and abs(light_ttl - celerys_ttl) > 1_000 + apart_ms:
        return False
    return light == celerys


def register(app: Celery, **options: Any) -> None:
    """A task like a job's: bound, JSON, no result kept."""

    def build(task: Any, **kwargs: Any) -> None:
        return None

    app.task(build, name=TASK, bind=True, shared=False, ignore_result=True, **options)


def next_hour() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def beat_sends_one(
    app: Celery,
    *,
    timeout_ms: int | None = None,
    on_run: Any = None,
    jobs: int = 1,
    timeouts: list[int | None] | None = None,
    finalized: bool = False,
) -> datetime:
    """Install jobs of every hour on ``app`` and let its beat send the next hour's occurrences.

    The next hour of the real clock, so the message's expiry is ahead, as in a beat; returns it.
    The first job is ``TASK``; more are sent together, in one batch. ``timeouts``: each job's
    ``timeout_ms``, one job each (else ``jobs`` jobs of ``timeout_ms``). ``finalized``: the
    app's tasks registered before beat starts, as ``celery beat`` does (their options then go
    into each message, as ``send_task`` puts them).
    """
    at = next_hour()
    clock = FixedClock(at - timedelta(seconds=1))
    timeouts = timeouts if timeouts is not None else [timeout_ms] * jobs
    names = [TASK] + [f"{TASK}-{number}" for number in range(1, len(timeouts))]
    declarations = [
        ScheduledJobDeclaration(
            name,
            "reports",
            parse_job_schedule(
                {"every": "1h"} if timeout is None else {"every": "1h", "timeout_ms": timeout}
            ),
            ReportsJob,
        )
        for name, timeout in zip(names, timeouts, strict=True)
    ]
    install_jobs(
        app,
        jobs=declarations,
        lock=InMemoryLock(clock),
        environ={},
        start=True,
        clock=clock,
        on_run=on_run,
    )
    if finalized:
        app.finalize()
    scheduler = JobBeatScheduler(app=app)
    scheduler.tick()
    clock.advance(1_000)
    scheduler.tick()
    scheduler.close()
    return at


@pytest.fixture(params=["as detected", "switched to send_task"])
def through(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Beat, the relay and the publish after a commit: on the path this Celery gets, then with
    the switch turned to ``send_task``; yields the ids ``TaskMessage`` sent, none when off."""
    prebuilt: list[str] = []
    send = TaskMessage.send

    def recording(message: TaskMessage, producer: Any, task_id: str, *args: Any, **kw: Any) -> None:
        prebuilt.append(task_id)
        send(message, producer, task_id, *args, **kw)

    monkeypatch.setattr(TaskMessage, "send", recording)
    if request.param == "switched to send_task":
        monkeypatch.setattr(task_messages, "PREBUILT", False)
    return prebuilt


def send_both_ways(
    app: Celery,
    queue: str | None,
    expires: datetime,
    headers: dict[str, str],
    kwargs: dict[str, Any] = KWARGS,
) -> None:
    """The occurrence as beat sends it first (``TaskMessage`` where this Celery sends the
    message it copies, ``send_task`` otherwise), then through ``send_task``."""
    message = TaskMessage.of(app, TASK, queue=queue)
    assert (message is not None) is task_messages.PREBUILT
    if message is not None:
        with app.producer_or_acquire() as producer:
            message.send(producer, new_task_id(), dict(kwargs), headers=headers, expires=expires)
    for _ in range(1 if message is not None else 2):
        app.send_task(
            TASK,
            kwargs=dict(kwargs),
            queue=queue,
            expires=expires,
            serializer="json",
            headers=headers,
        )


ROUTES: dict[str, tuple[dict[str, Any], dict[str, Any], str | None, str]] = {
    "the job's queue": ({}, {}, "reports", "reports"),
    "the default queue": ({}, {}, None, "default-q"),
    "task_routes: queue, routing key and priority": (
        {"task_routes": {TASK: {"queue": "routed", "routing_key": "routed", "priority": 3}}},
        {},
        None,
        "routed",
    ),
    "task_queues: a topic exchange": (
        {
            "task_queues": [Queue("topical", Exchange("reports-x", type="topic"), "reports.#")],
            "task_routes": {TASK: {"queue": "topical", "routing_key": "reports.monthly"}},
        },
        {},
        None,
        "topical",
    ),
    "the task's time limits and options": (
        {},
        {"soft_time_limit": 30.0, "time_limit": 35.0, "serializer": "json", "priority": 7},
        "reports",
        "reports",
    ),
}


@pytest.mark.parametrize("route", list(ROUTES), ids=list(ROUTES))
def test_a_task_message_is_the_one_send_task_sends(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, route: str
) -> None:
    settings, task_options, queue, lands_in = ROUTES[route]
    app = make_app(task_default_queue="default-q", **settings)
    register(app, **task_options)
    expires = datetime.now(UTC) + timedelta(minutes=16)

    send_both_ways(app, queue, expires, TRACE)

    light, celerys = queued(redis_client, redis_prefix, lands_in)
    assert same(light, celerys)
    assert abs(light["ttl_ms"] - 960_000) < 1_000
    assert light["body"] == [
        [],
        KWARGS,
        {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
    ]
    assert light["headers"]["traceparent"] == TRACE["traceparent"]
    assert light["headers"]["expires"] == expires.isoformat()


def test_keys_come_in_the_order_send_task_writes_them(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str
) -> None:
    app = make_app()
    register(app)

    send_both_ways(app, "reports", datetime.now(UTC) + timedelta(minutes=1), TRACE)

    light, celerys = queued(redis_client, redis_prefix, "reports")
    for part in ("headers", "properties"):
        assert list(light[part]) == list(celerys[part])


@pytest.mark.parametrize(
    "value",
    [
        "it's",
        'say "hi"',
        "back\\slash",
        "café",
        "line\nbreak",
        "nul\x00",
        "x" * 1100,
        42,
        {"nested": ["a", None]},
    ],
)
def test_the_kwargs_are_shown_as_celery_shows_them(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, value: Any
) -> None:
    """``kwargsrepr`` is Celery's ``saferepr`` of them, whatever an id generator hands out."""
    app = make_app()
    register(app)

    send_both_ways(
        app, "reports", datetime.now(UTC) + timedelta(minutes=1), {}, {**KWARGS, "tenant_id": value}
    )

    light, celerys = queued(redis_client, redis_prefix, "reports")
    assert light["headers"]["kwargsrepr"] == celerys["headers"]["kwargsrepr"]
    assert same(light, celerys)


def test_beat_publishes_an_occurrence_as_send_task_did(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    """Beat on the real broker, then ``send_task`` with what beat sent it with before."""
    app = make_app()
    began = time.monotonic()
    at = beat_sends_one(app, timeout_ms=60_000)
    job = jobs_of(app).job(TASK)
    (sent,) = queued(redis_client, redis_prefix, "reports")
    assert len(through) == (1 if task_messages.PREBUILT else 0)
    expires = datetime.fromisoformat(sent["headers"]["expires"])

    app.send_task(
        job.task_name,
        kwargs=sent["body"][1],
        queue=job.queue,
        expires=expires,
        serializer="json",
        headers={},
    )

    beats, celerys = queued(redis_client, redis_prefix, "reports")
    assert same(beats, celerys, apart_ms=(time.monotonic() - began) * 1000)
    assert beats["ttl_ms"] > 0
    assert OccurrenceMessage.from_kwargs(beats["body"][1]).scheduled_at == at


def counted_pushes(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[int]:
    """How many messages each push written from templates (``on_redis``) by ``module`` sent."""
    counts: list[int] = []
    push = module.push_messages

    def counting(channel: Any, pushes: Any) -> None:
        counts.append(sum(len(messages) for _, messages in pushes))
        push(channel, pushes)

    monkeypatch.setattr(module, "push_messages", counting)
    return counts


@pytest.fixture
def beat_pushed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each push of beat's messages written from templates sent."""
    return counted_pushes(monkeypatch, beat_publishing)


def test_beat_writes_a_batch_from_templates_its_jobs_share_as_send_task_sends_each(
    make_app: AppFactory,
    redis_client: Redis,
    redis_prefix: str,
    through: list[str],
    beat_pushed: list[int],
) -> None:
    """Jobs of one queue whose tasks differ by name and time limits: each message is the one
    ``send_task`` sends for its task, field by field (key order too), all pushed at once."""
    app = make_app()
    began = time.monotonic()
    at = beat_sends_one(app, timeouts=[60_000, None, 60_000, 5_000], finalized=True)
    registry = jobs_of(app)
    sent = queued(redis_client, redis_prefix, "reports")
    for message in sent:
        job = registry.job(message["headers"]["task"])
        app.send_task(
            job.task_name,
            kwargs=message["body"][1],
            queue=job.queue,
            expires=datetime.fromisoformat(message["headers"]["expires"]),
            serializer="json",
            headers={},
        )

    assert beat_pushed == ([4] if task_messages.PREBUILT else [])
    assert through == []  # none published one by one
    both = queued(redis_client, redis_prefix, "reports")
    assert len(both) == 8
    for beats, celerys in zip(both[:4], both[4:], strict=True):
        assert same(beats, celerys, apart_ms=(time.monotonic() - began) * 1000)
        for part in ("headers", "properties"):
            assert list(beats[part]) == list(celerys[part])
        assert OccurrenceMessage.from_kwargs(beats["body"][1]).scheduled_at == at
    limits = {message["headers"]["task"]: message["headers"]["timelimit"] for message in sent}
    assert limits[f"{TASK}-1"] == [None, None]
    if Version(celery.__version__) >= Version("5.7"):  # before, send_task merges no task option
        assert limits[TASK] == limits[f"{TASK}-2"] == [65.0, 60.0]
        assert limits[f"{TASK}-3"] == [10.0, 5.0]
    raws = [json.loads(raw) for raw in redis_client.lrange(f"{redis_prefix}reports", 0, -1)]
    assert len({raw["headers"]["id"] for raw in raws}) == 8
    assert len({raw["properties"]["delivery_tag"] for raw in raws}) == 8
    correlation_ids = {message["body"][1]["correlation_id"] for message in sent}
    assert len(correlation_ids) == 4


def send_task_as_a_wakeup(app: Celery, job_id: str, **options: Any) -> None:
    """What ``send_wakeup`` sends, sent by ``send_task``: every wake-up of a job has the job as
    its root."""
    app.send_task(
        TASK,
        kwargs={"job_id": job_id},
        queue="jobs",
        serializer="json",
        argsrepr="()",
        kwargsrepr=repr({"job_id": job_id}),
        root_id=job_id,
        **options,
    )


def test_the_relays_wake_up_is_the_one_send_task_sent(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    app = make_app()
    register(app)

    send_wakeup(app, TASK, "jobs", "job-1")
    assert len(through) == (1 if task_messages.PREBUILT else 0)
    send_task_as_a_wakeup(app, "job-1")

    light, celerys = queued(redis_client, redis_prefix, "jobs")
    assert same(light, celerys)
    assert light["headers"]["root_id"] == "job-1"
    assert light["properties"]["kwargsrepr"] == "{'job_id': 'job-1'}"  # as Celery carries it


def test_a_wake_up_carries_the_attempts_made_before_as_its_retries_as_send_task_would(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    """Flower shows a message's ``retries``: the wake-up of a job's third attempt says 2."""
    app = make_app()
    register(app)

    send_wakeup(app, TASK, "jobs", "job-1")
    send_wakeup(app, TASK, "jobs", "job-1", retries=2)
    send_task_as_a_wakeup(app, "job-1", retries=2)

    first, light, celerys = queued(redis_client, redis_prefix, "jobs")
    assert first["headers"]["retries"] == 0
    assert same(light, celerys)
    assert light["headers"]["retries"] == 2


def test_the_publisher_gives_the_wake_up_the_attempts_of_its_dispatch(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    app = make_app()
    register(app)

    CeleryJobPublisher(app).publish(Dispatch("job-1", TASK, "jobs", attempts=3))

    (sent,) = queued(redis_client, redis_prefix, "jobs")
    assert sent["headers"]["retries"] == 3


@pytest.fixture
def pushed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each push of wake-ups written from a template sent."""
    return counted_pushes(monkeypatch, publisher_module)


BATCH_ROUTES: dict[str, dict[str, Any]] = {
    "the job's queue": {},
    "task_routes: a priority": {
        "task_routes": {f"{TASK}*": {"queue": "jobs", "priority": 3}}  # both tasks
    },
    "the task's time limits and options": {},
}


@pytest.mark.parametrize("route", list(BATCH_ROUTES), ids=list(BATCH_ROUTES))
def test_a_batch_of_wake_ups_is_written_from_one_template_as_send_task_sends_each(
    make_app: AppFactory,
    redis_client: Redis,
    redis_prefix: str,
    *,
    through: list[str],
    pushed: list[int],
    route: str,
) -> None:
    """The relay's batch and an ``enqueue_many``'s: on Redis each message is written from one
    template of its task and pushed with the rest, field by field (key order too) the message
    ``send_task`` sends for the same wake-up; switched to ``send_task``, each is its own."""
    app = make_app(**BATCH_ROUTES[route])
    options = {"soft_time_limit": 30.0, "time_limit": 35.0} if "limits" in route else {}
    register(app, **options)
    other = f"{TASK}-other"
    app.task(lambda task, **kwargs: None, name=other, bind=True, shared=False, ignore_result=True)
    dispatches = [
        Dispatch(f"job-{n}", other if n == 2 else TASK, "jobs", attempts=n % 3) for n in range(5)
    ]

    send_wakeups(app, dispatches)
    for dispatch in dispatches:
        app.send_task(
            dispatch.name,
            kwargs={"job_id": dispatch.job_id},
            queue="jobs",
            serializer="json",
            argsrepr="()",
            kwargsrepr=repr({"job_id": dispatch.job_id}),
            root_id=dispatch.job_id,
            retries=dispatch.attempts,
        )

    assert pushed == ([5] if task_messages.PREBUILT else [])
    sent = queued(redis_client, redis_prefix, "jobs")
    assert len(sent) == 10
    for light, celerys, dispatch in zip(sent[:5], sent[5:], dispatches, strict=True):
        assert same(light, celerys)
        for part in ("headers", "properties"):
            assert list(light[part]) == list(celerys[part])
        assert light["body"][1] == {"job_id": dispatch.job_id}
        assert light["headers"]["task"] == dispatch.name
        assert light["headers"]["retries"] == dispatch.attempts
        assert light["headers"]["root_id"] == dispatch.job_id
    raws = [json.loads(raw) for raw in redis_client.lrange(f"{redis_prefix}jobs", 0, -1)]
    raws += [json.loads(raw) for raw in redis_client.lrange(f"{redis_prefix}jobs\x06\x163", 0, -1)]
    assert len({raw["headers"]["id"] for raw in raws}) == 10
    assert len({raw["properties"]["delivery_tag"] for raw in raws}) == 10


def test_a_batch_of_wake_ups_is_sent_one_by_one_where_a_template_cannot_be_written(
    make_app: AppFactory,
    redis_client: Redis,
    redis_prefix: str,
    published: list[tuple[str, dict[str, Any]]],
    pushed: list[int],
) -> None:
    """A receiver of the publish signals is sent each message, as ``send_task`` sends it."""
    app = make_app()
    register(app)

    send_wakeups(app, [Dispatch(f"job-{n}", TASK, "jobs") for n in range(3)])

    assert pushed == []
    assert [name for name, _ in published] == ["before", "after"] * 3
    sent = queued(redis_client, redis_prefix, "jobs")
    assert [message["body"][1]["job_id"] for message in sent] == ["job-0", "job-1", "job-2"]
    assert all(message["headers"]["added-by-a-receiver"] == "yes" for message in sent)


@pytest.fixture
def published() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """What ``before_task_publish`` and ``after_task_publish`` received, in order."""
    received: list[tuple[str, dict[str, Any]]] = []

    def before(sender: Any = None, **kwargs: Any) -> None:
        kwargs["headers"]["added-by-a-receiver"] = "yes"  # as OpenTelemetry's injects its trace
        received.append(("before", {"sender": sender, **kwargs}))

    def after(sender: Any = None, **kwargs: Any) -> None:
        received.append(("after", {"sender": sender, **kwargs}))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    yield received
    before_task_publish.disconnect(before)
    after_task_publish.disconnect(after)


def _without_ids(signal: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The signal's arguments but the ids and the TTL left (``_ttl``: compared within 1 s)."""
    name, kwargs = signal
    kwargs = dict(kwargs, headers=dict(kwargs["headers"]))
    kwargs.pop("signal")
    for key in ("id", "root_id"):
        kwargs["headers"].pop(key)
    if "properties" in kwargs:
        properties = kwargs["properties"] = dict(kwargs["properties"])
        properties.pop("correlation_id")
        properties.pop("expiration")
    kwargs.pop("declare", None)  # [] once kombu has declared the queue on the connection
    return name, kwargs


def _ttl(signal: tuple[str, dict[str, Any]]) -> float:
    return float(signal[1]["properties"]["expiration"])


def test_publish_signals_are_sent_as_send_task_sends_them(
    make_app: AppFactory,
    redis_client: Redis,
    redis_prefix: str,
    published: list[tuple[str, dict[str, Any]]],
    through: list[str],
) -> None:
    app = make_app()
    register(app)

    began = time.monotonic()
    send_both_ways(app, "reports", datetime.now(UTC) + timedelta(minutes=1), TRACE)
    apart_s = time.monotonic() - began  # the TTLs count down to one expiry between the sends

    assert [name for name, _ in published] == ["before", "after", "before", "after"]
    assert [_without_ids(signal) for signal in published[:2]] == [
        _without_ids(signal) for signal in published[2:]
    ]
    assert abs(_ttl(published[0]) - _ttl(published[2])) < 1 + apart_s
    assert published[0][1]["sender"] == TASK
    assert published[0][1]["routing_key"] == "reports"
    light, celerys = queued(redis_client, redis_prefix, "reports")
    assert same(light, celerys, apart_ms=apart_s * 1000)
    assert light["headers"]["added-by-a-receiver"] == "yes"


def test_beat_sends_its_publish_signals(
    make_app: AppFactory, published: list[tuple[str, dict[str, Any]]], through: list[str]
) -> None:
    at = beat_sends_one(make_app())

    assert [name for name, _ in published] == ["before", "after"]
    kwargs = published[0][1]["body"][1]
    assert OccurrenceMessage.from_kwargs(kwargs).scheduled_at == at


@pytest.mark.parametrize("jobs", [1, 3], ids=["alone", "in a batch"])
def test_a_broker_that_cannot_be_reached_fails_as_send_task_fails(
    make_app: AppFactory, closed_port_url: str, jobs: int, through: list[str]
) -> None:
    """Each occurrence is recorded failed, with kombu's error, and its run state freed."""
    app = make_app(
        broker_url=closed_port_url,
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0},
    )
    runs: list[tuple[str, Outcome, BaseException | None]] = []

    beat_sends_one(
        app, jobs=jobs, on_run=lambda run, error, detail: runs.append((run.job, run.outcome, error))
    )

    registry = jobs_of(app)
    assert sorted(job for job, _, _ in runs) == sorted(registry.jobs)
    for job, outcome, error in runs:
        assert outcome is Outcome.FAILED
        assert isinstance(error, OperationalError)
        assert registry.run_state.running(job) is None


def test_a_push_of_templated_messages_that_fails_fails_each_of_its_occurrences(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delivery uncertain, as a kombu publish batch that fails: each occurrence recorded
    failed with the push's error, its run state freed."""
    failure = task_messages.BatchPublishError("Redis publish batch failed; delivery is uncertain")

    def failing(channel: Any, pushes: Any) -> None:
        raise failure

    monkeypatch.setattr(beat_publishing, "push_messages", failing)
    runs: list[tuple[str, Outcome, BaseException | None]] = []
    app = make_app()

    beat_sends_one(
        app, jobs=3, on_run=lambda run, error, detail: runs.append((run.job, run.outcome, error))
    )

    registry = jobs_of(app)
    if not task_messages.PREBUILT:  # every message went through send_task: none pushed
        assert len(queued(redis_client, redis_prefix, "reports")) == 3
        return
    assert queued(redis_client, redis_prefix, "reports") == []
    assert sorted(job for job, _, _ in runs) == sorted(registry.jobs)
    for job, outcome, error in runs:
        assert (outcome, error) == (Outcome.FAILED, failure)
        assert registry.run_state.running(job) is None


def test_what_cannot_be_sent_alike_is_left_to_send_task(make_app: AppFactory) -> None:
    def by_function(name: str, args: Any, kwargs: Any, options: Any, task: Any = None) -> Any:
        return {"queue": "elsewhere"}

    assert (TaskMessage.of(make_app(), TASK, queue="reports") is not None) is task_messages.PREBUILT
    assert TaskMessage.of(make_app(task_routes=[by_function]), TASK, queue="reports") is None
    assert TaskMessage.of(make_app(task_protocol=1), TASK, queue="reports") is None
    assert TaskMessage.of(make_app(task_send_sent_event=True), TASK, queue="reports") is None
    replaced = make_app()
    replaced.send_task = lambda *args, **kwargs: None  # type: ignore[method-assign]
    assert TaskMessage.of(replaced, TASK, queue="reports") is None


def test_a_wake_up_sent_within_a_running_task_carries_its_parent_and_the_job_as_root(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    app = make_app()
    register(app)
    parent = app.tasks[TASK]
    parent.push_request(id="parent-id", root_id="root-id", called_directly=False)
    _task_stack.push(parent)
    try:
        send_wakeup(app, TASK, "jobs", "job-1")
    finally:
        _task_stack.pop()
        parent.pop_request()

    (sent,) = queued(redis_client, redis_prefix, "jobs")
    assert sent["headers"]["parent_id"] == "parent-id"
    assert sent["headers"]["root_id"] == "job-1"  # the job's, as the relay's wake-ups have


def test_a_change_of_routes_is_followed_as_send_task_follows_it(
    make_app: AppFactory, redis_client: Redis, redis_prefix: str, through: list[str]
) -> None:
    app = make_app()
    register(app)
    send_wakeup(app, TASK, "jobs", "job-1")

    app.conf.update(task_routes={TASK: {"queue": "jobs", "priority": 3}})
    send_wakeup(app, TASK, "jobs", "job-2")
    send_task_as_a_wakeup(app, "job-2")

    first, light, celerys = queued(redis_client, redis_prefix, "jobs")
    assert first["properties"]["priority"] == 0
    assert same(light, celerys)
    assert light["properties"]["priority"] == 3


RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def test_on_rabbitmq_the_message_is_the_one_send_task_sends() -> None:
    """AMQP carries properties Redis does not (delivery mode, expiration): the same too."""
    app = Celery(f"test-{uuid.uuid4().hex[:12]}", broker=RABBITMQ_URL, set_as_current=False)
    queue = f"test-task-messages-{uuid.uuid4().hex}"
    register(app)
    try:
        send_both_ways(app, queue, datetime.now(UTC) + timedelta(minutes=16), TRACE)
        with app.connection_for_read() as connection:
            received = connection.SimpleQueue(queue, no_ack=True)
            light, celerys = (received.get(timeout=5) for _ in range(2))
            received.close()
    finally:
        with app.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
        app.close()

    def seen(message: Any) -> dict[str, Any]:
        headers, properties = dict(message.headers), dict(message.properties)
        assert properties.pop("application_headers") == headers  # AMQP's name for them
        assert headers.pop("id") == headers.pop("root_id") == properties.pop("correlation_id")
        expiration = int(properties.pop("expiration"))
        return {
            "headers": headers,
            "properties": properties,
            "expiration_s": round(expiration / 1000, -1),
            "body": message.decode(),
            "content": (message.content_type, message.content_encoding),
            "delivery": {
                key: message.delivery_info[key]
                for key in ("exchange", "routing_key", "redelivered")
            },
        }

    assert seen(light) == seen(celerys)
    assert seen(light)["expiration_s"] == 960
    assert light.properties["delivery_mode"] == 2


def test_what_is_kept_to_send_an_app_s_messages_goes_with_the_app() -> None:
    """Kept on the app itself: an app dropped (a test's, a reloaded one) is freed, not held."""
    app = Celery(f"test-{uuid.uuid4().hex[:12]}", broker="memory://", set_as_current=False)
    register(app)
    assert (TaskMessage.of(app, TASK, queue="reports") is not None) is task_messages.PREBUILT
    send_wakeup(app, TASK, "jobs", "job-1")
    dropped = weakref.ref(app)

    with warnings.catch_warnings():  # what earlier tests left to the collector is theirs
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    del app
    gc.collect()

    assert dropped() is None


def test_the_message_is_prebuilt_on_the_celery_whose_send_task_it_copies() -> None:
    """Told by the features that message needs, which came together in Celery 5.7: on 5.4 to
    5.6 (the floors' run) every message goes through ``send_task``."""
    assert task_messages.PREBUILT is (Version(celery.__version__) >= Version("5.7"))


def test_switched_to_send_task_nothing_is_prebuilt(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one switch: every caller asks ``of`` or ``fits_here``, and both answer send_task."""
    monkeypatch.setattr(task_messages, "PREBUILT", False)
    app = make_app()
    register(app)

    assert TaskMessage.of(app, TASK, queue="reports") is None
    assert TaskMessage.of(app, TASK, queue=None, expires_given=False, reprs_given=True) is None
    assert TaskMessage.fits_here() is False
