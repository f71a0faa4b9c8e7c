"""``@process_manager`` and ``@step``: a long-running process declared next to its use cases.

Like ``@scheduled`` and ``@background``, everything is checked when the declaring module is
imported: the name, the state type (a pydantic model, or plain JSON), the timeout job (a
``@background`` class), the commands it may send (pydantic models or dataclasses: they are
stored as JSON until sent), and each step's signature ``(self, state, message)``. A step
returns a ``ProcessDecision``; ``@step(starts=True)`` may run on an instance that does not exist
yet (its ``state`` is None); ``@step(on_timeout="payment")`` runs when that timeout fires.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from ddd_celery.declarations.background import BackgroundJobDeclaration, background_declaration_of
from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.names import check_job_name, reserve_job_name
from ddd_celery.declarations.scheduled import _where

_F = TypeVar("_F", bound=Callable[..., Any])
_P = TypeVar("_P", bound=type)


@dataclass(frozen=True, slots=True)
class StepDeclaration:
    """A step of a process: its method's name, whether it starts the process, its timeout."""

    name: str
    starts: bool = False
    on_timeout: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessDeclaration:
    """A declared process manager, as the runner reads it."""

    name: str
    process_class: type
    state_type: type[BaseModel] | None
    """The pydantic model of the state; None for plain JSON."""
    timeout_job: BackgroundJobDeclaration | None
    commands: Mapping[str, type]
    """The command types it may send, by class name (the name they are stored under)."""
    steps: Mapping[str, StepDeclaration]

    @property
    def timeouts(self) -> dict[str, StepDeclaration]:
        """The step of each timeout, by the timeout's name."""
        return {s.on_timeout: s for s in self.steps.values() if s.on_timeout is not None}


_REGISTRY: dict[str, ProcessDeclaration] = {}


@overload
def step(function: _F, /) -> _F: ...


@overload
def step(*, starts: bool = False, on_timeout: str | None = None) -> Callable[[_F], _F]: ...


def step(
    function: _F | None = None, /, *, starts: bool = False, on_timeout: str | None = None
) -> _F | Callable[[_F], _F]:
    """Mark a method of a process manager as a step: ``@step``, ``@step(starts=True)``,
    ``@step(on_timeout="payment")``. ``@process_manager`` checks it when the class is declared.
    """
    if on_timeout is not None and (not isinstance(on_timeout, str) or not on_timeout):
        raise DeclarationError(f"on_timeout names a timeout, not {on_timeout!r}")

    def mark(method: _F) -> _F:
        if not callable(method):
            raise DeclarationError(f"@step decorates a method, not {type(method).__name__}")
        setattr(method, "__process_step__", (bool(starts), on_timeout))  # noqa: B010
        return method

    return mark if function is None else mark(function)


def process_manager(
    name: str,
    *,
    state: type[BaseModel] | None = None,
    timeout_job: type | None = None,
    commands: Iterable[type] = (),
) -> Callable[[_P], _P]:
    """Declare the decorated class a process manager named ``name``; the class is returned as is.

    Raises ``DeclarationError`` naming the process for a bad name, a state that is not a
    pydantic model, a timeout job not declared with ``@background``, a command type that JSON
    cannot carry or two of the same name, no step or no starting step, a step whose signature
    is not ``(self, state, message)``, two steps on one timeout, or a timeout step without a
    timeout job; and for a name another class already took.
    """
    check_job_name(name)
    if state is not None and not (inspect.isclass(state) and issubclass(state, BaseModel)):
        raise DeclarationError(
            f"state must be a pydantic model class (or None for JSON), not {state!r}", job=name
        )
    timeout_declaration = None
    if timeout_job is not None:
        try:
            timeout_declaration = background_declaration_of(timeout_job)
        except DeclarationError:
            raise DeclarationError(
                f"timeout_job {_where(timeout_job)} is not declared with @background", job=name
            ) from None
    command_types = _command_types(commands, name)

    def declare(process_class: _P) -> _P:
        if not inspect.isclass(process_class):
            raise DeclarationError(
                f"@process_manager decorates a class, not {type(process_class).__name__}",
                job=name,
            )
        steps = _steps(process_class, name)
        declaration = ProcessDeclaration(
            name, process_class, state, timeout_declaration, command_types, steps
        )
        if declaration.timeouts and timeout_declaration is None:
            raise DeclarationError(
                f"steps on timeouts {sorted(declaration.timeouts)} need a timeout_job "
                "(a @background class) to fire them",
                job=name,
            )
        reserve_job_name(name, "process manager", process_class)
        _REGISTRY[name] = declaration
        setattr(process_class, "__process_manager__", declaration)  # noqa: B010
        return process_class

    return declare


def process_declaration_of(process: type | str) -> ProcessDeclaration:
    """The declaration of a process class, or of the process declared under a name.

    Raises ``LookupError`` for a class not declared with ``@process_manager`` or an unknown name.
    """
    if isinstance(process, str):
        found = _REGISTRY.get(process)
        if found is None:
            raise LookupError(f"no process manager is named {process!r}")
        return found
    declaration = getattr(process, "__dict__", {}).get("__process_manager__")
    if not isinstance(declaration, ProcessDeclaration):
        raise LookupError(f"{_where(process)} is not declared with @process_manager")
    return declaration


def step_name(step: str | Callable[..., Any]) -> str:
    """The name of a step given as its method or its name."""
    return step if isinstance(step, str) else str(getattr(step, "__name__", step))


def _steps(process_class: type, name: str) -> dict[str, StepDeclaration]:
    steps: dict[str, StepDeclaration] = {}
    for klass in reversed(process_class.__mro__):
        for attribute, value in vars(klass).items():
            marked = getattr(value, "__process_step__", None)
            if marked is None:
                continue
            _check_signature(process_class, attribute, value, name)
            starts, on_timeout = marked
            steps[attribute] = StepDeclaration(attribute, starts, on_timeout)
    if not steps:
        raise DeclarationError(f"{_where(process_class)} has no @step method", job=name)
    if not any(s.starts for s in steps.values()):
        raise DeclarationError(
            f"{_where(process_class)} has no step that starts it: mark one @step(starts=True)",
            job=name,
        )
    seen: dict[str, str] = {}
    for declared in steps.values():
        if declared.on_timeout is None:
            continue
        if declared.on_timeout in seen:
            raise DeclarationError(
                f"steps {seen[declared.on_timeout]!r} and {declared.name!r} both run on "
                f"timeout {declared.on_timeout!r}: one step per timeout",
                job=name,
            )
        seen[declared.on_timeout] = declared.name
    return steps


def _check_signature(process_class: type, attribute: str, method: Any, name: str) -> None:
    where = f"{_where(process_class)}.{attribute}"
    if isinstance(method, (staticmethod, classmethod)):
        raise DeclarationError(f"step {where} must be a plain method", job=name)
    try:
        inspect.signature(method).bind(None, None, None)
    except TypeError:
        raise DeclarationError(
            f"step {where} must take the state and the message: {attribute}(self, state, message)",
            job=name,
        ) from None


def _command_types(commands: Iterable[type], name: str) -> dict[str, type]:
    found: dict[str, type] = {}
    for command in commands:
        if not inspect.isclass(command) or not (
            issubclass(command, BaseModel) or dataclasses.is_dataclass(command)
        ):
            raise DeclarationError(
                f"command type {command!r} must be a pydantic model or a dataclass: commands "
                "are stored as JSON until they are sent",
                job=name,
            )
        if command.__name__ in found:
            raise DeclarationError(
                f"two command types are named {command.__name__!r}: "
                f"{_where(found[command.__name__])} and {_where(command)}",
                job=name,
            )
        found[command.__name__] = command
    return found
