"""The error line of a failing command (``why``): the error and each cause that adds to it."""

from __future__ import annotations

import errno
import itertools

from redis.exceptions import ConnectionError as RedisConnectionError

from ddd_celery.celery.cli_errors import why
from ddd_celery.kernel.errors import StoreUnavailableError


def chained(*errors: BaseException) -> BaseException:
    for error, cause in itertools.pairwise(errors):
        error.__cause__ = cause
    return errors[0]


REFUSED = "Error 111 connecting to 127.0.0.1:1. Connection refused."


def test_an_os_error_whose_words_its_error_already_quotes_is_left_out() -> None:
    """redis-py 8 chains the OS error under its own, which quotes it."""
    error = chained(
        StoreUnavailableError(f"Redis could not be asked to count the jobs: {REFUSED}"),
        RedisConnectionError(REFUSED),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    )

    assert why(error) == (
        f"StoreUnavailableError: Redis could not be asked to count the jobs: {REFUSED}; "
        f"caused by ConnectionError: {REFUSED}"
    )


def test_an_os_error_that_says_more_is_kept() -> None:
    error = chained(
        StoreUnavailableError("Redis could not be asked to count the jobs"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    )

    assert why(error).endswith("; caused by ConnectionRefusedError: [Errno 111] Connection refused")
