"""Background jobs the specs declare, each run by a script the test hands its factory."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from ddd_celery import BackgroundJobExecution, background


class StatementPayload(BaseModel):
    month: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}$")


Script = Callable[[Any, BackgroundJobExecution], Any]
AsyncScript = Callable[[Any, BackgroundJobExecution], Awaitable[Any]]


@background("ledger.compile-statements", max_attempts=3, backoff_ms=1_000, max_backoff_ms=60_000)
class CompileStatementsJob:
    """A sync job whose payload is a pydantic model."""

    def __init__(self, script: Script) -> None:
        self._script = script

    def run(self, payload: StatementPayload, execution: BackgroundJobExecution) -> None:
        self._script(payload, execution)


@background("ledger.send-receipt", max_attempts=1)
class SendReceiptJob:
    """A sync job of plain JSON, given one attempt."""

    def __init__(self, script: Script) -> None:
        self._script = script

    def run(self, payload: dict[str, Any], execution: BackgroundJobExecution) -> None:
        self._script(payload, execution)


@background("ledger.reindex", max_attempts=2, timeout_ms=5_000, queue="slow")
class ReindexJob:
    """An async job with a timeout, on a queue of its own."""

    def __init__(self, script: AsyncScript) -> None:
        self._script = script

    async def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        await self._script(payload, execution)


def succeed(payload: Any, execution: BackgroundJobExecution) -> None:
    return None


@background("ledger.import-patients", max_attempts=3, backoff_ms=1_000)
class ImportPatientsJob:
    """An async job without a timeout."""

    def __init__(self, script: AsyncScript) -> None:
        self._script = script

    async def run(self, payload: Any, execution: BackgroundJobExecution) -> None:
        await self._script(payload, execution)


class Gate:
    """An async script the test holds: each attempt waits until the test opens the gate."""

    def __init__(self) -> None:
        self.started: list[BackgroundJobExecution] = []
        self.ended: list[BackgroundJobExecution] = []
        self._open = asyncio.Event()

    async def __call__(self, payload: Any, execution: BackgroundJobExecution) -> None:
        self.started.append(execution)
        await self._open.wait()
        self.ended.append(execution)

    def open(self) -> None:
        self._open.set()
