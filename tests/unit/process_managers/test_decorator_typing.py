"""@process_manager and @step are typed: the class and its steps keep their types under mypy
--strict, as a user's checker sees them, and a bad option is a type error."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

PROCESSES = """
from pydantic import BaseModel

from ddd_celery import ProcessDecision, TimeoutFired, process_manager, step


class State(BaseModel):
    status: str


@process_manager("booking.typed", state=State)
class Typed:
    def __init__(self) -> None:
        self.label = "typed"

    @step(starts=True)
    def begin(self, state: State | None, message: int) -> ProcessDecision[State]:
        return ProcessDecision(State(status="begun"), arm={"late": message})

    @step
    def go_on(self, state: State, message: str) -> ProcessDecision[State]:
        return ProcessDecision(state, disarm=["late"])


reveal_type(Typed)
reveal_type(Typed.begin)
reveal_type(Typed.go_on)
reveal_type(Typed().begin(None, 1).state)


@process_manager("booking.bad", state="State")
class Bad:
    @step(starts=True)
    def begin(self, state: State | None, message: int) -> ProcessDecision[State]:
        return ProcessDecision(State(status="bad"))
"""


def test_mypy_strict_keeps_the_process_class_and_its_steps(tmp_path: Path) -> None:
    module = tmp_path / "processes.py"
    module.write_text(textwrap.dedent(PROCESSES))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nplugins = pydantic.mypy\n")

    report, errors, _ = api.run(
        [str(module), "--strict", "--config-file", str(config), "--cache-dir", str(tmp_path / "c")]
    )

    lines = [line.split(": ", 1)[1] for line in report.splitlines() if line.startswith(str(module))]
    assert errors == ""
    assert lines[:4] == [
        'note: Revealed type is "def () -> processes.Typed"',
        'note: Revealed type is "def (self: processes.Typed, state: processes.State | None, '
        "message: int) -> ddd_celery.kernel.process_runner.ProcessDecision"
        '[processes.State]"',
        'note: Revealed type is "def (self: processes.Typed, state: processes.State, '
        "message: str) -> ddd_celery.kernel.process_runner.ProcessDecision"
        '[processes.State]"',
        'note: Revealed type is "processes.State"',
    ]
    assert len(lines) == 5
    assert lines[4].startswith('error: Argument "state" to "process_manager"')
