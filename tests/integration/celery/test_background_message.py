"""What a background job's task message may carry: ``{"job_id": "<id>"}`` and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from ddd_celery.background import InMemoryJobStore, StoredJobQueue
from ddd_celery.celery import _task_messages as task_messages
from ddd_celery.celery._task_messages import TaskMessage
from ddd_celery.celery.background.message import MAX_JOB_ID_LENGTH, message_problem, read_job_id
from ddd_celery.celery.background.publisher import CeleryJobPublisher, send_wakeup
from ddd_celery.celery.message import UnreadableMessageError
from ddd_celery.declarations.background import background
from ddd_celery.kernel import SystemClock, UuidGenerator
from ddd_celery.kernel.scope import ContextVarExecutionScope
from ddd_celery.kernel.unit_of_work import InMemoryUnitOfWork


def test_the_job_id_is_read_from_the_only_keyword_argument() -> None:
    assert read_job_id((), {"job_id": "7f3c-job"}) == "7f3c-job"


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        (("7f3c",), {}, "keyword arguments only"),
        ((), {}, "job_id must be a non-empty string"),
        ((), {"job_id": ""}, "job_id must be a non-empty string"),
        ((), {"job_id": 42}, "job_id must be a non-empty string"),
        ((), {"job_id": None}, "job_id must be a non-empty string"),
        ((), {"job_id": "a", "payload": {}}, "unexpected fields ['payload']"),
        ((), {"job_id": "x" * (MAX_JOB_ID_LENGTH + 1)}, "at most 200 characters"),
        ((), {"job_id": "a\nb"}, "printable"),
    ],
)
def test_a_message_that_is_not_a_job_id_is_refused_naming_what_is_wrong(
    args: tuple[Any, ...], kwargs: dict[str, Any], why: str
) -> None:
    with pytest.raises(UnreadableMessageError) as refused:
        read_job_id(args, kwargs)

    assert why in str(refused.value)


def test_a_refusal_never_quotes_the_values_it_was_given() -> None:
    with pytest.raises(UnreadableMessageError) as refused:
        read_job_id(("secret-value",), {"secret-key": "secret-value"})

    assert "secret-value" not in str(refused.value)


def test_a_queue_is_declared_by_its_first_wake_up_only_and_every_wake_up_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = Celery("wakeups", broker="memory://", set_as_current=False)
    declares: list[tuple[str, Any]] = []
    send_task_message = app.amqp.send_task_message

    def recording(producer: Any, name: str, message: Any, **options: Any) -> Any:
        declares.append((options["queue"].name, options.get("declare")))
        return send_task_message(producer, name, message, **options)

    monkeypatch.setattr(app.amqp, "send_task_message", recording)
    for job_id, queue in (("a", "billing"), ("b", "billing"), ("c", "clinic"), ("d", "billing")):
        send_wakeup(app, "billing.compile", queue, job_id)

    assert declares == [("billing", None), ("billing", []), ("clinic", None), ("billing", [])]
    with app.connection_for_read() as connection:
        billing = connection.SimpleQueue("billing")
        bodies = [billing.get(timeout=1).payload[1] for _ in range(3)]
    assert bodies == [{"job_id": "a"}, {"job_id": "b"}, {"job_id": "d"}]


@background("wakeups.compile", queue="billing")
class CompileJob:
    def run(self, payload: Any, execution: Any) -> None:
        """Never run here: the test reads the wake-up it publishes."""


@pytest.mark.parametrize("switched_to_send_task", [False, True], ids=["as detected", "send_task"])
def test_the_wake_up_after_a_commit_is_sent_as_a_prebuilt_message_where_celery_allows(
    monkeypatch: pytest.MonkeyPatch, switched_to_send_task: bool
) -> None:
    """The publish that follows a commit fills the task's prebuilt message (``TaskMessage``):
    ``send_task``'s per-message work is what made an enqueue dearer than a plain task. On a
    Celery whose ``send_task`` writes another message (before 5.7), or with the switch turned,
    ``send_task`` sends it: the same wake-ups arrive."""
    if switched_to_send_task:
        monkeypatch.setattr(task_messages, "PREBUILT", False)
    app = Celery("wakeups", broker="memory://", set_as_current=False)
    prebuilt: list[str] = []
    send = TaskMessage.send

    def recording(message: TaskMessage, producer: Any, task_id: str, *args: Any, **kw: Any) -> None:
        prebuilt.append(task_id)
        send(message, producer, task_id, *args, **kw)

    monkeypatch.setattr(TaskMessage, "send", recording)
    unit_of_work = InMemoryUnitOfWork()
    jobs = StoredJobQueue(
        store=InMemoryJobStore(),
        clock=SystemClock(),
        ids=UuidGenerator(),
        scope=ContextVarExecutionScope(),
        unit_of_work=unit_of_work,
        publisher=CeleryJobPublisher(app),
        declarations=[CompileJob],
    )

    with unit_of_work.begin():
        first = jobs.enqueue(CompileJob, {"month": "2026-10"})
    with unit_of_work.begin():
        second = jobs.enqueue(CompileJob, {"month": "2026-11"})

    assert len(prebuilt) == (2 if task_messages.PREBUILT else 0)
    with app.connection_for_read() as connection:
        billing = connection.SimpleQueue("billing")
        messages = [billing.get(timeout=1) for _ in range(2)]
    assert [message.payload[1] for message in messages] == [{"job_id": first}, {"job_id": second}]
    assert [message.headers["task"] for message in messages] == ["wakeups.compile"] * 2
    if task_messages.PREBUILT:
        assert [message.headers["id"] for message in messages] == prebuilt


class Message:
    """What ``message_problem`` reads of a kombu message: its headers and decoded payload."""

    def __init__(self, payload: Any, **headers: Any) -> None:
        self.payload = payload
        self.headers = {"task": "ledger.compile", "id": "m-1", **headers}


WAKE_UP = [
    [],
    {"job_id": "j-1"},
    {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
]


@pytest.mark.parametrize(
    ("payload", "headers", "problem"),
    [
        (None, {}, "its body is not [args, kwargs, embed]"),
        ({}, {}, "its body is not [args, kwargs, embed]"),
        ([[], {}], {}, "its body is not [args, kwargs, embed]"),
        ("text", {}, "its body is not [args, kwargs, embed]"),
        ([1, {}, {}], {}, "its args are not a list"),
        ([[], 1, {}], {}, "its kwargs are not a mapping"),
        ([[], {}, "x"], {}, "its embed is not a mapping"),
        ({"args": 5}, {}, "its args are not a list"),
        ([[], {}, {"callbacks": [{"task": "x"}]}], {}, "carries callbacks"),
        (WAKE_UP, {"timelimit": "x"}, "its timelimit is not [soft, hard] seconds"),
        (WAKE_UP, {"timelimit": [1, "x"]}, "its timelimit is not [soft, hard] seconds"),
        (WAKE_UP, {"id": 5}, "its id is not a string"),
        (WAKE_UP, {"retries": "x"}, "its retries is not an int"),
    ],
)
def test_a_message_shape_celery_would_crash_on_is_named_without_quoting_it(
    payload: Any, headers: dict[str, Any], problem: str
) -> None:
    found = message_problem(Message(payload, **headers), None)

    assert found is not None
    assert problem in found


@pytest.mark.parametrize(
    "payload",
    [
        WAKE_UP,
        [[], {"job_id": "j-1"}, None],
        [["j-1"], {"junk": 1}, {}],
        {"args": [], "kwargs": {}},
    ],
)
def test_a_message_of_a_task_messages_shape_is_left_to_celery_and_read_job_id(
    payload: Any,
) -> None:
    assert message_problem(Message(payload, timelimit=[None, 30.0], retries=0), None) is None
