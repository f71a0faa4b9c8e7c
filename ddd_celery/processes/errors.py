"""The errors of process managers, each with the stable ``code`` a log line keeps."""

from __future__ import annotations

from ddd_celery.kernel.errors import DddCeleryError

NO_TIMEOUT_JOB = "NO_TIMEOUT_JOB"
STALE_PROCESS_VERSION = "STALE_PROCESS_VERSION"
PROCESS_CONFLICT = "PROCESS_CONFLICT"
PROCESS_NOT_STARTED = "PROCESS_NOT_STARTED"
UNKNOWN_PROCESS = "UNKNOWN_PROCESS"
INVALID_DECISION = "INVALID_DECISION"
CORRUPT_PROCESS_STATE = "CORRUPT_PROCESS_STATE"


class ProcessError(DddCeleryError):
    """The root of the errors of process managers; ``process`` names the process."""

    code = "PROCESS_ERROR"

    def __init__(self, message: str, *, process: str | None = None) -> None:
        super().__init__(f"process {process!r}: {message}" if process else message)
        self.process = process


class NoTimeoutJobError(ProcessError, LookupError):
    """A step armed a timeout, and its process was declared without a ``timeout_job``."""

    code = NO_TIMEOUT_JOB


class StaleProcessVersionError(ProcessError):
    """A save at a version that is no longer the instance's: another step saved first.

    The store refuses it and changes nothing; the runner runs the step again on what won.
    """

    code = STALE_PROCESS_VERSION

    def __init__(self, message: str, *, process: str, instance_id: str, version: int) -> None:
        super().__init__(message, process=process)
        self.instance_id = instance_id
        self.version = version


class ProcessConflictError(ProcessError):
    """A step lost the race for its instance every time it ran; ``__cause__`` is the last loss.

    Nothing of it was saved, armed or sent: run it again later, or with more attempts.
    """

    code = PROCESS_CONFLICT


class ProcessNotStartedError(ProcessError, LookupError):
    """A step that does not start its process, on an instance that does not exist."""

    code = PROCESS_NOT_STARTED


class UnknownProcessError(ProcessError, LookupError):
    """A class not declared with ``@process_manager``, a name none has, or an unknown step."""

    code = UNKNOWN_PROCESS


class InvalidDecisionError(ProcessError, ValueError):
    """A decision the process cannot carry out: not a ``ProcessDecision``, a state its type
    refuses or JSON cannot carry, a command of a type it did not declare, a timeout no step
    handles. The message names what is wrong, never a value."""

    code = INVALID_DECISION


class CorruptProcessStateError(ProcessError, ValueError):
    """A stored instance that no longer reads back: its state or timeouts are not JSON, its
    timeouts not names mapped to job ids, or its state no longer fits the process's state model.

    The message names the process and the instance, never the stored value, and nothing is
    chained to it (a parser's error quotes what it read). Nothing ran: fix or delete the stored
    instance, or its model.
    """

    code = CORRUPT_PROCESS_STATE

    def __init__(
        self, message: str, *, process: str, instance_id: str, tenant_id: str | None
    ) -> None:
        super().__init__(message, process=process)
        self.instance_id = instance_id
        self.tenant_id = tenant_id
