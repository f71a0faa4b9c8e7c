"""docs/operations.md runs as written: its day happens, and each command prints what it shows.

The page's app (its ``# shop_ops.py`` sample) is written in a folder of the test's own, and its
``celery worker`` and ``celery beat`` start as the page's ``bash`` block starts them, on the real
Redis, every key under a prefix of the test's own (``SHOP_KEY_PREFIX``). The page's snippet
enqueues the day's jobs; then each ``$ ...`` command of the page's ``console`` blocks runs in
order, as an operator types it, and its output (stdout and stderr, as a terminal shows them) is
compared with the lines under it once what must vary is normalised: ids, instants, durations,
the host, runs of spaces. An id or an instant a command of the page uses is the one the same
place of an earlier output showed, so ``find <id>`` finds the job ``list`` listed, and an id the
page shows twice is one job here too. ``$ echo $?`` is the exit code of the command before it;
every other command exits 0. A question is answered as the page answers it (``? [y/N]: y``).

Where the day's timing would decide an output, the test waits before the command: until no
background job is due, running or waiting for its retry; before the first command, until the
scheduled job ran three times; away from the job's ticks before ``jobs list`` and ``jobs pause``;
for the paused occurrence before the ``history`` that shows it; for an occurrence's lock to be
released before the ``--on-workers`` that the page shows sent. Each ``text`` block of log lines
is found in order in the worker's or beat's log (``...`` elides lines), but the relay's purge
line, which a week's retention cannot write within a test: it is checked against the relay's
format.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis import Redis
from services import REDIS_URL

from ddd_celery.background.store import JobFilter, JobState
from ddd_celery.celery.background.relay import PURGED
from ddd_celery.redis import RedisJobStore, connect
from ddd_celery.redis.last_runs import RedisJobLastRuns
from tests.docs.samples import extract

pytestmark = [pytest.mark.processes, pytest.mark.redis]

PAGE = Path(__file__).parents[2] / "docs" / "operations.md"
APP_FILE = "shop_ops.py"
WAIT_S = 120.0
"""The longest wait for the day to reach a step: an occurrence's lock lives a minute and more."""
STOP_S = 10.0
UNSETTLED = (JobState.READY, JobState.RUNNING, JobState.RETRYING)

_FENCE = re.compile(r"^(?P<fence>`{3,})\s*(?P<info>\S*)\s*$")
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_INSTANT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
_TOKEN = re.compile(rf"(?P<id>{_UUID})|(?P<instant>{_INSTANT})")
_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}: [A-Z]+/")
_VARYING = (
    (re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}:"), "[<time>:"),
    (re.compile(r"\b\d+(?:\.\d+)? ms\b"), "<n> ms"),
    (re.compile(r"\bduration_ms=[\d.]+"), "duration_ms=<n>"),
    (re.compile(r"\bsucceeded in [\d.e-]+s\b"), "succeeded in <n>s"),
    (re.compile(r"ForkPoolWorker-\d+"), "ForkPoolWorker-<n>"),
    (re.compile(r"(?<=\w)@[\w.-]+"), "@<host>"),
    (re.compile(r'File "[^"]*/([^/"]+)", line \d+'), r'File ".../\1", line <n>'),
)
_PROMPT = re.compile(r"\? \[y/N\]: ")
_ANSWERED = re.compile(r"\? \[y/N\]: (?P<answer>\w+)$")
_SCHEDULED = re.compile(r'@scheduled\("(?P<name>[^"]+)", every="(?P<every>\d+)s"\)')
_PURGED = re.compile(
    re.escape(PURGED).replace("%d", r"\d+").replace("%s", rf"\w+ \d+.* finished before {_INSTANT}")
)


@dataclass(frozen=True)
class Block:
    """A fenced block of the page: its info string, the page's line of its first line, its lines."""

    info: str
    line: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    """A ``$ ...`` line of a console block and the lines the page shows under it."""

    line: int
    text: str
    expected: tuple[str, ...]

    @property
    def answers(self) -> str:
        """What the operator types at the command's questions, as the page shows them."""
        return "".join(
            f"{m['answer']}\n" for line in self.expected if (m := _ANSWERED.search(line))
        )


def blocks(text: str) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening["fence"]:
            end += 1
        found.append(Block(opening["info"], index + 2, tuple(lines[index + 1 : end])))
        index = end + 1
    return found


def commands(page: list[Block]) -> list[Command]:
    found: list[Command] = []
    for block in (b for b in page if b.info == "console"):
        current: tuple[int, str, list[str]] | None = None
        for offset, line in enumerate(block.lines):
            if line.startswith("$ "):
                if current is not None:
                    found.append(_command(*current))
                current = (block.line + offset, line[2:], [])
            elif current is not None:
                current[2].append(line)
            else:
                raise AssertionError(f"operations.md:{block.line + offset}: output before a $")
        if current is not None:
            found.append(_command(*current))
    return found


def _command(line: int, text: str, expected: list[str]) -> Command:
    return Command(line, text, tuple(_trimmed(expected)))


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def skeleton(line: str) -> str:
    """``line`` with what varies from run to run replaced by what it is, spaces collapsed."""
    text = _TOKEN.sub(lambda m: "<id>" if m["id"] else "<instant>", line)
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def tokens(line: str) -> list[tuple[str, str]]:
    return [(str(m.lastgroup), m.group()) for m in _TOKEN.finditer(line)]


def log_lines(text: str) -> list[str]:
    """A log's or an excerpt's lines as compared: normalised, without blank lines, elisions and
    the carets under a traceback's line."""
    kept = (skeleton(line) for line in text.splitlines())
    return [line for line in kept if line and line != "..." and set(line) - set("^~ ")]


def first_not_found(excerpt: list[str], log: list[str]) -> str | None:
    """The first line of ``excerpt`` that ``log`` does not have after the ones before it."""
    at = 0
    for line in excerpt:
        try:
            at = log.index(line, at) + 1
        except ValueError:
            return line
    return None


@dataclass
class Day:
    """The deployment of the page's app, the operator's shell, and what the outputs showed."""

    folder: Path
    prefix: str
    job: str
    every_s: int
    redis: Redis
    processes: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    instants: dict[str, str] = field(default_factory=dict)
    paused: bool = False

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": REDIS_URL,
            "SHOP_KEY_PREFIX": self.prefix,
            "PYTHONUNBUFFERED": "1",  # stdout and stderr interleaved as a terminal shows them
        }

    def start(self, line: str) -> None:
        """A ``celery -A shop_ops ...`` line of the page, started in the app's folder."""
        args = shlex.split(line, comments=True)
        assert args[0] == "celery", line
        log = self.folder / f"{args[3]}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                env=self.env,
            )
        self.processes.append((process, log))

    def python(self, path: str) -> None:
        subprocess.run(
            [sys.executable, path], cwd=self.folder, env=self.env, check=True, timeout=60
        )

    def run(self, text: str, answers: str = "") -> tuple[int, str]:
        """The command line ``text`` as a shell runs it (``NAME=value`` before it included)."""
        words = shlex.split(text)
        env = self.env
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        assert words[0] == "celery", text
        done = subprocess.run(
            [sys.executable, "-m", *words],
            input=answers,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.folder,
            env=env,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout

    def bound(self, text: str, line: int) -> str:
        """``text`` with each id and instant replaced by what the earlier outputs bound it to."""

        def real(match: re.Match[str]) -> str:
            known = self.ids if match["id"] else self.instants
            if match.group() not in known:
                raise AssertionError(
                    f"operations.md:{line}: {match.group()} is shown by no earlier output"
                )
            return known[match.group()]

        return _TOKEN.sub(real, text)

    def bind(self, expected: tuple[str, ...], shown: list[str], line: int) -> None:
        for page_line, real_line in zip(expected, shown, strict=True):
            for (kind, page), (_, real) in zip(tokens(page_line), tokens(real_line), strict=True):
                if kind == "instant":
                    self.instants.setdefault(page, real)
                    continue
                if self.ids.setdefault(page, real) != real:
                    raise AssertionError(
                        f"operations.md:{line}: {page} is {self.ids[page]} above, {real} here"
                    )

    # --- the day's timing ------------------------------------------------------------------

    def before(self, args: list[str], first: bool, sent: bool) -> None:
        """Wait for what the command's output depends on (``args`` after ``celery -A app``)."""
        self.wait(self.settled, "no background job due, running or waiting for its retry")
        if first:
            self.wait(lambda: len(self.history(3)) == 3, f"three runs of {self.job}")
        if args[:2] == ["jobs", "list"]:
            self.wait(lambda: self.clear_of_ticks(2.0), "a listing away from the job's ticks")
        if args[:2] == ["jobs", "pause"]:
            self.wait(lambda: self.clear_of_ticks(6.0), "a pause well before the next tick")
        if args[:2] == ["jobs", "history"] and self.paused:
            self.wait(self.skipped_paused, "the paused occurrence")
        if "--on-workers" in args and sent:
            at = args[args.index("--at") + 1]
            lock = f"{self.prefix}job:{args[2]}:{at}"
            self.wait(lambda: not self.redis.exists(lock), f"the release of {lock}")

    def after(self, args: list[str]) -> None:
        if args[:2] == ["jobs", "pause"]:
            self.paused = True
        if args[:2] == ["jobs", "resume"]:
            self.paused = False

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {WAIT_S}s for {what}\n{self.logs()}")
            time.sleep(0.1)

    def settled(self) -> bool:
        store = RedisJobStore(self.redis, prefix=f"{self.prefix}bg:")
        now = datetime.now(UTC)
        return not any(
            store.list_page(JobFilter(state=s), now=now, limit=1).jobs for s in UNSETTLED
        )

    def history(self, limit: int) -> list[str]:
        runs = RedisJobLastRuns(self.redis, prefix=f"{self.prefix}last-run:")
        return [run.outcome.value for run in runs.history(self.job, limit)]

    def skipped_paused(self) -> bool:
        return self.history(1) == ["skipped-paused"]

    def clear_of_ticks(self, ahead_s: float) -> bool:
        """Half a second past the job's last tick, and ``ahead_s`` before its next."""
        phase = time.time() % self.every_s
        return 0.5 <= phase <= self.every_s - ahead_s

    def logs(self) -> str:
        return "\n".join(
            f"----- {log.name}\n{log.read_text()[-3000:]}" for _, log in self.processes
        )

    def stop(self) -> None:
        for process, _ in self.processes:
            process.terminate()
        for process, _ in self.processes:
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_S)


@contextmanager
def the_day(folder: Path, page: list[Block]) -> Iterator[Day]:
    """The page's app written in ``folder``, its processes started, ended with the test."""
    samples = extract(PAGE).samples
    [app] = [sample for sample in samples if sample.path == APP_FILE]
    assert 'os.environ.get("SHOP_KEY_PREFIX"' in app.code, "the test needs keys of its own"
    scheduled = _SCHEDULED.search(app.code)
    assert scheduled is not None, "the page's app schedules a job every N seconds"
    [enqueue] = [sample for sample in samples if sample.path is None and not sample.hidden]
    (folder / APP_FILE).write_text(app.code)
    (folder / "enqueue.py").write_text(enqueue.code)
    redis = connect(REDIS_URL)
    day = Day(
        folder,
        f"test:docs-operations:{uuid.uuid4().hex}:",
        scheduled["name"],
        int(scheduled["every"]),
        redis,
    )
    try:
        [starts] = [
            b for b in page if b.info == "bash" and "celery -A shop_ops" in "".join(b.lines)
        ]
        for line in starts.lines:
            day.start(line)
        day.python("enqueue.py")
        yield day
    finally:
        day.stop()
        for key in redis.scan_iter(match=f"{day.prefix}*"):
            redis.delete(key)
        redis.close()


def test_each_command_of_the_operations_page_prints_what_the_page_shows(tmp_path: Path) -> None:
    page = blocks(PAGE.read_text(encoding="utf-8"))
    typed = commands(page)
    assert len(typed) >= 15, "the page's day is made of commands"

    with the_day(tmp_path, page) as day:
        code: int | None = None
        for index, command in enumerate(typed):
            if command.text == "echo $?":
                assert code is not None, f"operations.md:{command.line}: echo $? of no command"
                assert command.expected == (str(code),), f"operations.md:{command.line}"
                code = None
                continue
            assert code in (None, 0), f"operations.md:{typed[index - 1].line} exited {code}"
            text = day.bound(command.text, command.line)
            args = shlex.split(text)
            args = args[args.index("celery") + 3 :]
            sent = bool(command.expected) and ": sent the occurrence of" in command.expected[0]
            day.before(args, first=index == 0, sent=sent)
            code, output = day.run(text, command.answers)
            day.after(args)
            shown = _trimmed(_PROMPT.sub(lambda m: f"{m.group()}y\n", output).splitlines())
            expected = [skeleton(line) for line in command.expected]
            if [skeleton(line) for line in shown] != expected:
                diff = difflib.unified_diff(
                    expected, [skeleton(line) for line in shown], "the page", "the run", lineterm=""
                )
                raise AssertionError(
                    f"operations.md:{command.line}: $ {text}\n" + "\n".join(diff) + f"\n{output}"
                )
            day.bind(command.expected, shown, command.line)
        assert code in (None, 0), f"operations.md:{typed[-1].line} exited {code}"
        day.stop()
        logs = {log.name: log_lines(log.read_text()) for _, log in day.processes}

    excerpts = [b for b in page if b.info == "text" and b.lines and _LOG_LINE.match(b.lines[0])]
    assert excerpts, "the page quotes the processes' logs"
    for excerpt in excerpts:
        if any("Relay: purged" in line for line in excerpt.lines):
            assert all(_PURGED.search(line) for line in excerpt.lines), excerpt
            continue
        quoted = log_lines("\n".join(excerpt.lines))
        missing = {name: first_not_found(quoted, log) for name, log in logs.items()}
        assert None in missing.values(), f"operations.md:{excerpt.line}: not in a log: {missing}"
