"""The ``JobPublisher`` port: how a job's wake-up reaches the workers after a commit."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ddd_celery.background.store import Dispatch


class JobPublisher(ABC):
    """Sends the wake-up of a job that is due (the Celery driver sends its task).

    The message carries the job's id, name and queue only: the store is the record. A publish
    that raises is not retried by the caller: the job was added ``dispatched`` and the relay
    publishes it again once ``redispatch_after_ms`` has passed, so nothing is lost. A queue
    without a publisher leaves its jobs to a polling worker (``QueueWorker``).
    """

    @abstractmethod
    def publish(self, dispatch: Dispatch) -> None:
        """Send the wake-up of ``dispatch``; raises when the broker cannot be reached."""
