"""The names a generated job gets, all derived from its context and its class.

``generate job notifications SendReminders`` names the job ``notifications.send-reminders``,
its class ``SendRemindersJob``, its module ``send_reminders_job``: one word typed, every name
consistent. The job name is checked by the declaration's own rule (``check_job_name``), so the
generator refuses what ``@scheduled`` would refuse, with the same message.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.names import check_job_name

_CAP_WORDS = re.compile(r"[A-Z][A-Za-z0-9]*")
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_PACKAGE = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class JobNames:
    """Every name of one generated job."""

    context: str
    """The context's package: ``notifications``."""
    base: str
    """The class name without ``Job``: ``SendReminders``."""
    name: str
    """The job's name: ``notifications.send-reminders``."""
    command: str
    """The command the job sends: ``SendReminders``."""

    @property
    def job_class(self) -> str:
        return f"{self.base}Job"

    @property
    def module(self) -> str:
        """The job's module: ``send_reminders_job``."""
        return f"{snake(self.base)}_job"

    @property
    def command_module(self) -> str:
        return snake(self.command)

    @property
    def payload_class(self) -> str:
        return f"{self.base}Payload"


def job_names(context: str, job_class: str, command: str | None = None) -> JobNames:
    """The names of job ``job_class`` of ``context``; ``DeclarationError`` when one cannot be.

    The job name is checked first, by the declaration's rule and with its message; then what
    the declaration leaves open and a package needs: a context that is a Python identifier.
    """
    if not _CAP_WORDS.fullmatch(job_class):
        raise DeclarationError(
            f"the job class is written in CapWords, such as SendReminders, got {job_class!r}"
        )
    base = job_class.removesuffix("Job") or job_class
    name = check_job_name(f"{context}.{kebab(base)}")
    if not _PACKAGE.fullmatch(context):
        raise DeclarationError(
            f"the context {context!r} is a Python package: lower case letters, digits and "
            "underscores, such as 'billing' or 'patient_records'",
            job=name,
        )
    command = base if command is None else command
    if not _CAP_WORDS.fullmatch(command):
        raise DeclarationError(
            f"the command is a class written in CapWords, such as SendReminders, got {command!r}",
            job=name,
        )
    return JobNames(context=context, base=base, name=name, command=command)


def kebab(words: str) -> str:
    """``SendHTTPReminders`` -> ``send-http-reminders``."""
    return _WORD_BOUNDARY.sub("-", words).lower()


def snake(words: str) -> str:
    """``SendHTTPReminders`` -> ``send_http_reminders``."""
    return kebab(words).replace("-", "_")


def check_package(package: str) -> str:
    """Return ``package`` when it is a dotted name of Python packages; ``ValueError`` otherwise."""
    if not all(_PACKAGE.fullmatch(part) for part in package.split(".")):
        raise ValueError(
            f"--package {package!r} is not a Python package name, such as 'clinic' or "
            "'acme.shop' (lower case, no hyphen)"
        )
    return package


def check_app(app: str) -> tuple[str, str]:
    """``(module, attribute)`` of ``--app module.path:attribute`` (attribute ``app`` when left
    out); ``ValueError`` otherwise: the text is written into a Python module, so anything but
    dotted identifiers would be code."""
    module, colon, attribute = app.partition(":")
    attribute = attribute if colon else "app"
    if not (_dotted_identifier(module) and _dotted_identifier(attribute)):
        raise ValueError(
            f"--app {app!r} is not module.path:attribute, such as 'shop.app:app' (Python "
            "identifiers separated by dots, one colon before the app's attribute)"
        )
    return module, attribute


def _dotted_identifier(text: str) -> bool:
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in text.split("."))
