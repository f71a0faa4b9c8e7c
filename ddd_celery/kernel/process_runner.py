"""The ``ProcessRunner`` port: how a message or a timeout moves a long-running process along.

A process manager is a state machine kept between messages: each step reads its state and a
message, and decides (``ProcessDecision``) its next state, the commands to send and the
timeouts to arm or disarm. The runner makes each step atomic and safe to race; the step itself
stays a pure decision, testable without any of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Generic, TypeVar

S = TypeVar("S")

StepRef = str | Callable[..., Any]
"""A step: its method (``AppointmentBooking.payment_received``) or its name."""


@dataclass(frozen=True, slots=True)
class ProcessDecision(Generic[S]):
    """What a step decides: the next state, what to send, which timeouts to arm and disarm.

    ``arm`` maps a timeout's name to when it fires: a delay in whole milliseconds, or an aware
    instant. Arming a timeout that is armed re-arms it (the earlier one can no longer fire).
    ``disarm`` names timeouts that must not fire any more; one that is not armed is ignored.
    ``send`` is the commands, sent in order once the new state is saved.
    """

    state: S
    send: Sequence[object] = ()
    arm: Mapping[str, int | datetime] = field(default_factory=dict)
    disarm: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "send", tuple(self.send))
        object.__setattr__(self, "disarm", tuple(self.disarm))
        object.__setattr__(self, "arm", MappingProxyType(dict(self.arm)))
        for name, when in self.arm.items():
            if isinstance(when, datetime):
                if when.tzinfo is None or when.utcoffset() is None:
                    raise ValueError(f"timeout {name!r} is armed at a naive datetime")
            elif isinstance(when, bool) or not isinstance(when, int) or when < 0:
                raise ValueError(
                    f"timeout {name!r} is armed with a delay in whole ms >= 0 or an aware "
                    f"datetime, not {when!r}"
                )
        both = sorted(set(self.arm) & set(self.disarm))
        if both:
            raise ValueError(f"timeouts {both} are both armed and disarmed")


@dataclass(frozen=True, slots=True)
class TimeoutFired:
    """The message a timeout step gets: which timeout fired, through which job."""

    timeout: str
    job_id: str


@dataclass(frozen=True, slots=True)
class ProcessInstance(Generic[S]):
    """One instance of a process as it is saved: its state at ``version``, its armed timeouts.

    ``timeouts`` maps each armed timeout's name to the id of the background job that fires it.
    """

    process: str
    id: str
    version: int
    state: S
    timeouts: Mapping[str, str]


class ProcessRunner(ABC):
    """Runs the steps of process managers, one unit of work each.

    A step runs on the instance's latest saved version; two steps on one instance never both
    build on the same version (the loser runs again on the winner's state, a bounded number of
    times). The timeouts a step arms are delayed background jobs; a timeout fires its step only
    while it is still the armed one. Commands are sent after the state is saved, at least once.
    """

    @abstractmethod
    def handle(
        self, process: type[Any] | str, instance_id: str, step: StepRef, message: Any
    ) -> ProcessInstance[Any]:
        """Run ``step`` of ``process`` on ``instance_id``, the instance of the current tenant
        (that of the execution scope in progress; none outside a scope), with ``message``.

        Returns the instance as saved. A step that does not start the process, on an instance
        that does not exist, raises ``LookupError``; a decision the process cannot carry out
        raises ``ValueError`` (an undeclared timeout or command, a state its type refuses), or
        ``LookupError`` (``NoTimeoutJobError``) when it arms a timeout and the process has no
        timeout job. Nothing is saved, armed or sent when it raises.
        """

    @abstractmethod
    def timeout(
        self,
        process: type[Any] | str,
        fired: Mapping[str, str],
        step: StepRef | None = None,
    ) -> ProcessInstance[Any] | None:
        """Run the timeout step when ``fired`` (``{"id", "timeout", "job_id"}``) is still armed
        on the instance ``id`` of the current tenant (a timeout job runs in the scope, and so
        the tenant, of the step that armed it).

        ``step`` defaults to the step declared for that timeout. A timeout that was disarmed,
        re-armed or has already fired does nothing and returns None.
        """

    @abstractmethod
    def find(self, process: type[Any] | str, instance_id: str) -> ProcessInstance[Any] | None:
        """The instance ``instance_id`` of the current tenant as last saved, or None (also when
        only another tenant has an instance of that id)."""
