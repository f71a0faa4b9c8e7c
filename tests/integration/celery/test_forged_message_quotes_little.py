"""Issue 19.8: a forged background job message cannot make the worker's log line long.

The refusal of a message with unexpected fields names a few of them, each cut short: the fields
are the sender's text, and ``could_not_follow`` logs the refusal as its ``operation``.
"""

from __future__ import annotations

import pytest

from ddd_celery.celery.background.message import read_job_id
from ddd_celery.celery.message import UnreadableMessageError


def refusal(kwargs: dict[str, object]) -> str:
    with pytest.raises(UnreadableMessageError) as refused:
        read_job_id((), kwargs)
    return str(refused.value)


def test_a_100_kb_field_name_is_quoted_cut_to_40_characters() -> None:
    text = refusal({"job_id": "a", "x" * 100_000: 1})

    assert text == f"unexpected fields ['{'x' * 40}…']; the only one is job_id"


def test_a_thousand_fields_are_named_three_and_counted() -> None:
    text = refusal({"job_id": "a", **{f"f{n:04}": n for n in range(1_000)}})

    assert (
        text == "unexpected fields ['f0000', 'f0001', 'f0002'] and 997 more; the only one is job_id"
    )
