"""What the generator refuses beyond the declaration's own rules."""

from __future__ import annotations

from ddd_celery.kernel.errors import DddCeleryError

FILE_EXISTS = "FILE_EXISTS"
NO_PACKAGE = "NO_PACKAGE"
NO_PROJECT = "NO_PROJECT"
UNREADABLE_FILE = "UNREADABLE_FILE"


class GenerationRefusedError(DddCeleryError, ValueError):
    """The generator wrote nothing: the message says which file or argument and why.

    ``code`` is ``FILE_EXISTS`` (a file it would write is there with other content),
    ``NO_PACKAGE`` (the project's top package cannot be told), ``UNREADABLE_FILE`` (a file it
    edits is not in the shape it writes) or ``NO_PROJECT`` (the project root is not a folder).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code
