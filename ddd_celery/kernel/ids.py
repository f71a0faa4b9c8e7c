"""Identifiers of correlations and runs."""

from __future__ import annotations

import itertools
import threading
import uuid
from abc import ABC, abstractmethod


class IdGenerator(ABC):
    """Hands out identifiers that are unique across processes."""

    @abstractmethod
    def next_id(self) -> str:
        """A new identifier, never returned before."""


class UuidGenerator(IdGenerator):
    """Random UUIDs (version 4), as text."""

    def next_id(self) -> str:
        return str(uuid.uuid4())


class SequentialIdGenerator(IdGenerator):
    """``id-1``, ``id-2``, ...: predictable identifiers for specs."""

    def __init__(self, prefix: str = "id-") -> None:
        self._prefix = prefix
        self._counter = itertools.count(1)
        self._mutex = threading.Lock()

    def next_id(self) -> str:
        with self._mutex:
            return f"{self._prefix}{next(self._counter)}"
