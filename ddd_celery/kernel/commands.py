"""The command bus a job sends its use case through."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class CommandBus(ABC):
    """Routes a command to its one handler and returns what the handler returns."""

    @abstractmethod
    def execute(self, command: object) -> Any:
        """Run the handler of ``command``'s type; raises ``LookupError`` when there is none."""


class InMemoryCommandBus(CommandBus):
    """Handlers registered by command type, called in this process; keeps what it executed."""

    def __init__(self) -> None:
        self._handlers: dict[type, Callable[[Any], Any]] = {}
        self.executed: list[object] = []
        self._mutex = threading.Lock()

    def register(self, command_type: type, handler: Callable[[Any], Any]) -> None:
        if command_type in self._handlers:
            raise ValueError(f"{command_type.__name__} already has a handler")
        self._handlers[command_type] = handler

    def execute(self, command: object) -> Any:
        handler = self._handlers.get(type(command))
        if handler is None:
            raise LookupError(f"no handler for {type(command).__name__}")
        with self._mutex:
            self.executed.append(command)
        return handler(command)
