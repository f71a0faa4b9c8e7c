"""The jobs of ``background_failures_app``, importable without its environment (the test
enqueues them, the worker runs them): each fails by calling ``charge_the_card``, whose frame
a failure's traceback must show, with an error whose message quotes data (``SECRET``)."""

from __future__ import annotations

from typing import Any

from ddd_celery.declarations.background import BackgroundJobExecution, background

TWICE = "procfail.twice"
ALWAYS = "procfail.always"
SECRET = "card 4242 4242 4242 4242 declined"
MAX_ATTEMPTS = 3


def charge_the_card() -> None:
    raise ValueError(SECRET)


@background(TWICE, max_attempts=MAX_ATTEMPTS, backoff_ms=200, max_backoff_ms=200)
class FailsTwiceJob:
    """Fails its first two attempts, then succeeds."""

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        if execution.attempt <= 2:
            charge_the_card()


@background(ALWAYS, max_attempts=MAX_ATTEMPTS, backoff_ms=200, max_backoff_ms=200)
class AlwaysFailsJob:
    """Fails every attempt: dead after the third."""

    def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        charge_the_card()


JOBS = [FailsTwiceJob, AlwaysFailsJob]
