"""A kombu publish batch where the transport has one: many messages, one write to the broker."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any


def publish_batch(producer: Any, size: int) -> AbstractContextManager[object]:
    """The producer's publish batch (Redis: one pipeline), else nothing: each publish goes alone.

    Published when the block ends; a block that raises publishes nothing more. kombu before 5.7
    has no batch, nor do some transports: then each publish leaves as it is made.
    """
    batch = getattr(producer, "batch", None)
    if batch is None or size <= 1:
        return nullcontext()
    context: AbstractContextManager[object] = batch(max_size=size)
    return context
