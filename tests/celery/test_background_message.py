"""What a background job's task message may carry: ``{"job_id": "<id>"}`` and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from ddd_celery.celery.background.message import MAX_JOB_ID_LENGTH, read_job_id
from ddd_celery.celery.background.publisher import send_wakeup
from ddd_celery.celery.message import UnreadableMessageError


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
