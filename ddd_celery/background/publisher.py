"""The ``JobPublisher`` port: how a job's wake-up reaches the workers after a commit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

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

    def publish_many(self, dispatches: Sequence[Dispatch]) -> None:
        """Send the wake-up of each of ``dispatches`` (a batch enqueued together), in order.

        Each in turn by ``publish`` here; a driver that can send a batch in one write (the
        Celery driver: one producer, one Redis pipeline) does. Raises at the first that
        cannot be sent: the rest wait for the relay, as that one does.
        """
        for dispatch in dispatches:
            self.publish(dispatch)
