"""The background jobs of process managers: a timeout that fires, commands that must leave.

``ProcessTimeoutJob`` is the base of a process's timeout job: declare a subclass with
``@background`` (its name, queue and attempts are yours) and give it as ``timeout_job=``. Its
payload is ``{"process", "id", "timeout"}`` (``ProcessTimeoutPayload``: a payload that is not, a
forged or damaged one, is refused at enqueue and, stored, is dead at once with
``INVALID_ENQUEUE``); its job id is what the instance keeps armed. It runs in the execution scope
of the step that armed it, so it steps the instance of that step's tenant.

``ProcessCommandsJob`` (``ddd_celery.process-commands``) is the outbox of the commands a step
sends: enqueued in the step's unit of work, due ``resend_after_ms`` later, and cancelled once the
runner has sent them after the commit. If the process dies in between, it sends them (at least
once; a retry resumes after the commands already sent).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ddd_celery.declarations.background import BackgroundJobExecution, background
from ddd_celery.declarations.process import process_declaration_of
from ddd_celery.kernel.commands import CommandBus
from ddd_celery.kernel.process_runner import ProcessRunner
from ddd_celery.processes.commands import decode_command

PROCESS_COMMANDS_JOB = "ddd_celery.process-commands"
"""The outbox job's name; its queue is ``ddd_celery``: a worker must consume it."""


class ProcessTimeoutPayload(BaseModel):
    """What a timeout job carries: which timeout of which instance it fires."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    process: str
    id: str
    timeout: str


class ProcessTimeoutJob:
    """Hands a fired timeout to the runner, which runs its step only if it is still armed."""

    def __init__(self, processes: ProcessRunner) -> None:
        self._processes = processes

    def run(self, payload: ProcessTimeoutPayload, execution: BackgroundJobExecution) -> None:
        self._processes.timeout(
            payload.process,
            {"id": payload.id, "timeout": payload.timeout, "job_id": execution.job_id},
        )


class ProcessCommandsPayload(BaseModel):
    """What an outbox job carries: the commands one step of one instance sends, as stored."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    process: str
    id: str
    version: int
    commands: list[dict[str, Any]]


@background(PROCESS_COMMANDS_JOB, max_attempts=10, backoff_ms=1_000, max_backoff_ms=300_000)
class ProcessCommandsJob:
    """Sends the commands of a step whose process did not live to send them itself.

    Payload ``{"process", "id", "version", "commands": [{"type", "body"}, ...]}``
    (``ProcessCommandsPayload``: one that is not is dead at once with ``INVALID_ENQUEUE``). Each
    command sent is checkpointed, so a retry starts after it.
    """

    def __init__(self, commands: CommandBus) -> None:
        self._commands = commands

    def run(self, payload: ProcessCommandsPayload, execution: BackgroundJobExecution) -> None:
        declaration = process_declaration_of(payload.process)
        stored = payload.commands
        start = execution.checkpoint if isinstance(execution.checkpoint, int) else 0
        for index in range(start, len(stored)):
            self._commands.execute(decode_command(declaration, stored[index]))
            execution.save_checkpoint(index + 1)
