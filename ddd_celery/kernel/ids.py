"""Identifiers of correlations and runs."""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from abc import ABC, abstractmethod


class IdGenerator(ABC):
    """Hands out identifiers that are unique across processes."""

    @abstractmethod
    def next_id(self) -> str:
        """A new identifier, never returned before."""

    def next_ids(self, count: int) -> list[str]:
        """``count`` new identifiers (a batch of jobs): ``next_id`` each, unless a generator
        makes many at once for less."""
        return [self.next_id() for _ in range(count)]


class UuidGenerator(IdGenerator):
    """Random UUIDs (version 4), as text."""

    def next_id(self) -> str:
        return str(uuid.uuid4())

    def next_ids(self, count: int) -> list[str]:
        """``count`` version 4 UUIDs from one read of ``os.urandom``, as ``uuid4`` makes each
        (the same random bits, version and variant), written without a ``UUID`` object each."""
        raw = os.urandom(16 * count)
        ids = []
        for start in range(0, 16 * count, 16):
            value = int.from_bytes(raw[start : start + 16]) & _V4_KEPT | _V4_SET
            text = f"{value:032x}"
            ids.append(f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
        return ids


_V4_KEPT = ~((0xF000 << 64) | (0xC000 << 48))
"""The random bits a version 4 UUID keeps: all but its version's 4 and its variant's 2."""
_V4_SET = (0x4000 << 64) | (0x8000 << 48)
"""Version 4, variant RFC 4122 (``uuid.UUID(..., version=4)`` sets the same)."""


class SequentialIdGenerator(IdGenerator):
    """``id-1``, ``id-2``, ...: predictable identifiers for specs."""

    def __init__(self, prefix: str = "id-") -> None:
        self._prefix = prefix
        self._counter = itertools.count(1)
        self._mutex = threading.Lock()

    def next_id(self) -> str:
        with self._mutex:
            return f"{self._prefix}{next(self._counter)}"
