"""``./dev example``: run the clinic with one ``celery worker`` and one ``celery beat``.

Seeds reminders due now (and one due a little later), starts both processes on the backend
``platform/backend.py`` picks, shows what the jobs do, and stops both cleanly on Ctrl-C (or
SIGTERM) or after ``--for SECONDS``. The summary counts each reminder's mails: one each, or the
exit status is 1; stopped by a signal, the status is 128 plus its number (130 for Ctrl-C), so
``./dev example`` goes no further. A second Ctrl-C kills what has not stopped yet. Each run has
a Redis key prefix and a data folder of its own (unless ``DDD_CELERY_EXAMPLE_PREFIX`` or
``DDD_CELERY_EXAMPLE_DATA`` names one), so two runs on one machine never meet, and deletes its
keys and its folder at its end. The jobs run with the settings of ``demo.toml`` unless
``DEMO=0``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import redis

from ddd_celery.celery.cli_web import TOKEN_VARIABLE
from ddd_celery.kernel import SystemClock
from examples.clinic import demo_statements
from examples.clinic.notification.domain.reminder import Reminder
from examples.clinic.notification.infrastructure.sqlite_reminders import (
    SqliteReminderRepository,
)
from examples.clinic.platform.backend import (
    BACKEND,
    DATA,
    DEFAULT_PREFIX,
    PREFIX,
    Backend,
    choose_backend,
)

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "worker": ["worker", "--loglevel=INFO", "--concurrency=2"],
    "beat": ["beat", "--loglevel=INFO"],
}
STOP_GRACE_S = 15.0
WEB_PORT = "DDD_CELERY_EXAMPLE_WEB_PORT"
"""Where the operator's page listens: 8000 by default when it is free, else a free port; 0
asks for a free port at once (runs started together, which would both find 8000 free)."""

PATIENTS = {
    "ada@example.test": timedelta(minutes=-10),
    "grace@example.test": timedelta(minutes=-1),
    "alan@example.test": timedelta(0),
    "barbara@example.test": timedelta(seconds=12),
}
"""Each patient's reminder is due that long after the demo starts: the last, by a later run."""

_LINE = re.compile(r"^\[[\d-]+ (?P<time>[\d:]+),\d+: \w+/[^\]]+\] (?P<text>.*)$")
_SHOWN = re.compile(
    r"Reminder sent|Scheduled job|Month .* closed|Sending due task|Background job|Statement "
    r"|ERROR|CRITICAL"
)
_QUIET = re.compile(r"Scheduled job succeeded job=ddd_celery\.relay\b")
"""Beat's relay of background jobs succeeds every second: shown only when it fails."""
_SENT = re.compile(r"Reminder sent to \S+ \(reminder (?P<reminder>[\w-]+)")
_SUCCEEDED = re.compile(r"Scheduled job succeeded\b.*?\bjob=(?P<job>\S+)")
_CLOSED = re.compile(r"Month (?P<month>\S+) closed for tenant (?P<tenant>\S+)")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the output of the worker or of beat."""

    process: str
    text: str


class Signals:
    """SIGINT and SIGTERM: the first stops the demo, a later one kills what has not stopped.

    The first raises ``KeyboardInterrupt`` where the demo is, unless it is stopping already;
    then, and for every later one, the handler only sets ``hurry``: nothing raises inside the
    stop, so no traceback and no process left running.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.stopping = False
        self.hurry = threading.Event()
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)

    def __call__(self, signum: int, frame: object) -> None:
        first = self.received is None
        if first:
            self.received = signum
        if first and not self.stopping:
            raise KeyboardInterrupt
        if not first:
            self.hurry.set()

    @property
    def status(self) -> int | None:
        """128 plus the number of the signal that stopped the demo, as a shell reports it."""
        return None if self.received is None else 128 + self.received


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev example", description=__doc__)
    parser.add_argument("--for", dest="seconds", type=float, help="stop after SECONDS")
    parser.add_argument("--verbose", action="store_true", help="show every line of both")
    arguments = parser.parse_args(argv)
    signals = Signals()
    environ, own_data = run_environ(os.environ)
    backend = choose_backend(environ)
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        status = run(backend, processes, signals, arguments.seconds, verbose=arguments.verbose)
    except KeyboardInterrupt:  # before the processes started, or before run() followed them
        print("\nStopped", flush=True)
        signals.stopping = True
        stop(processes, signals.hurry)
        status = 0
    finally:
        signals.stopping = True
        try:
            backend.delete_keys()
        except (redis.RedisError, OSError) as error:  # Redis went away meanwhile: say so
            print(f"Could not delete the keys under {backend.key_prefix}: {error}", flush=True)
        if own_data:
            shutil.rmtree(backend.data, ignore_errors=True)
    return signals.status or status


def run_environ(environ: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """``environ`` with this run's key prefix and data folder; True when the folder is its own.

    A prefix or a folder the caller names is used as it is (started clean, as any run does).
    """
    run = dict(environ)
    if not run.get(PREFIX):
        run[PREFIX] = f"{DEFAULT_PREFIX}{secrets.token_hex(4)}:"
    own_data = not run.get(DATA)
    if own_data:
        run[DATA] = tempfile.mkdtemp(prefix="ddd-celery-example-")
    return run, own_data


def run(
    backend: Backend,
    processes: dict[str, subprocess.Popen[str]],
    signals: Signals,
    seconds: float | None,
    *,
    verbose: bool,
) -> int:
    """Seed, start both processes into ``processes``, follow them, stop them, summarise."""
    print(f"Backend: {backend.describe()}", flush=True)
    seeded = seed(backend)
    print(f"Seeded {len(seeded)} reminders, for {', '.join(seeded.values())}", flush=True)

    lines: queue.Queue[Line | None] = queue.Queue()
    port = web_port()
    commands = {**COMMANDS, "web": ["jobs", "web", "--port", str(port)]}
    for name, arguments in commands.items():
        processes[name] = start(name, arguments, backend, lines)
    pids = ", ".join(f"celery {name} (pid {process.pid})" for name, process in processes.items())
    until = f"for {seconds:g} s" if seconds else "until Ctrl-C"
    print(f"Started {pids}; running {until}", flush=True)
    acting = "signed in with" if os.environ.get(TOKEN_VARIABLE) else "read-only; set"
    print(
        f"The operator's page: http://127.0.0.1:{port}/ ({acting} {TOKEN_VARIABLE} to act)",
        flush=True,
    )

    seen: list[Line] = []
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        follow(processes, lines, seen, deadline, verbose=verbose)
    except KeyboardInterrupt:
        print("\nStopping", flush=True)
    signals.stopping = True
    stop(processes, signals.hurry)
    drain(lines, seen, len(processes), verbose=verbose)
    status = summarise(seeded, seen)
    if signals.received is None:  # an operator's look-up, not worth a wait once told to stop
        demo_statements.summarise(backend, ROOT, (line.text for line in seen))
    return status


def seed(backend: Backend) -> dict[str, str]:
    """Start from nothing, then plan the patients' reminders; returns {reminder id: address}."""
    backend.start_clean()
    reminders = SqliteReminderRepository(backend.clinic_database)
    now = SystemClock().now()
    seeded = {}
    for number, (address, due_in) in enumerate(PATIENTS.items(), start=1):
        reminder = Reminder.plan(
            f"reminder-{number}",
            appointment_id=f"appointment-{number}",
            recipient=address,
            due_at=now + due_in,
        )
        reminders.save(reminder)
        seeded[reminder.id] = address
    return seeded


def web_port() -> int:
    """The port ``DDD_CELERY_EXAMPLE_WEB_PORT`` names (8000) when it is free, else a free one."""
    wanted = int(os.environ.get(WEB_PORT, "8000"))
    for port in (wanted, 0) if wanted else (0,):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = probe.getsockname()[1]
            return found
    raise OSError("no free port for the operator's page")


def start(
    name: str, arguments: Sequence[str], backend: Backend, lines: queue.Queue[Line | None]
) -> subprocess.Popen[str]:
    """Start ``celery -A examples.clinic.app <arguments>`` in its own session, its lines to
    ``lines`` under ``name``.

    Its own session: Ctrl-C reaches this script only, which then stops each process cleanly.
    """
    environ = {
        **os.environ,
        BACKEND: backend.name,
        DATA: str(backend.data),
        PREFIX: backend.key_prefix,
        "DEMO": os.environ.get("DEMO", "1"),
        "PYTHONUNBUFFERED": "1",
    }
    if backend.redis_url is not None:
        environ["REDIS_URL"] = backend.redis_url
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "examples.clinic.app", *arguments],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    threading.Thread(target=pump, args=(name, process, lines), daemon=True).start()
    return process


def pump(name: str, process: subprocess.Popen[str], lines: queue.Queue[Line | None]) -> None:
    """Move the lines of ``process`` to ``lines``, then None at its end."""
    assert process.stdout is not None
    for text in process.stdout:
        lines.put(Line(name, text.rstrip()))
    lines.put(None)


def follow(
    processes: dict[str, subprocess.Popen[str]],
    lines: queue.Queue[Line | None],
    seen: list[Line],
    deadline: float | None,
    *,
    verbose: bool,
) -> None:
    """Show the lines until the deadline, or until a process ends on its own."""
    while deadline is None or time.monotonic() < deadline:
        wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            continue
        if line is None:
            ended = [name for name, process in processes.items() if process.poll() is not None]
            print(f"celery {', '.join(ended) or 'process'} ended on its own", flush=True)
            return
        show(line, seen, verbose=verbose)


def stop(processes: dict[str, subprocess.Popen[str]], hurry: threading.Event) -> None:
    """SIGTERM (a warm shutdown), then SIGKILL to the process group of one that hangs.

    ``hurry`` (a second Ctrl-C) kills at once what has not stopped yet.
    """
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for name, process in processes.items():
        while process.poll() is None and time.monotonic() < deadline and not hurry.is_set():
            hurry.wait(0.1)
        if process.poll() is None:
            why = "told to hurry" if hurry.is_set() else f"did not stop within {STOP_GRACE_S:g} s"
            print(f"celery {name} {why}: killed", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def drain(lines: queue.Queue[Line | None], seen: list[Line], ends: int, *, verbose: bool) -> None:
    """Show what the processes wrote while stopping, up to the end of each."""
    while ends:
        line = lines.get()
        if line is None:
            ends -= 1
        else:
            show(line, seen, verbose=verbose)


def show(line: Line, seen: list[Line], *, verbose: bool) -> None:
    seen.append(line)
    parsed = _LINE.match(line.text)
    text = parsed["text"] if parsed else line.text
    if verbose or (parsed and _SHOWN.search(text) and not _QUIET.search(text)):
        when = parsed["time"] if parsed else " " * 8
        print(f"{when} {line.process:<6} {text}", flush=True)


def summarise(seeded: dict[str, str], seen: list[Line]) -> int:
    """Print what the jobs did; 1 when a reminder was mailed more than once."""
    sent = Counter(match["reminder"] for line in seen if (match := _SENT.search(line.text)))
    succeeded = Counter(
        job["job"]
        for line in seen
        if (job := _SUCCEEDED.search(line.text)) and not _QUIET.search(line.text)
    )
    closed = sorted(
        f"{match['tenant']} {match['month']}"
        for line in seen
        if (match := _CLOSED.search(line.text))
    )
    print("\nSummary")
    for reminder, address in seeded.items():
        print(f"  {reminder} for {address}: mailed {sent[reminder]} time(s)")
    runs = ", ".join(f"{job} {count}x" for job, count in sorted(succeeded.items()))
    print(f"  scheduled jobs succeeded: {runs or 'none'}")
    print(f"  months closed: {', '.join(closed) or 'none'}")
    twice = sorted(reminder for reminder, count in sent.items() if count > 1)
    if twice:
        print(f"  mailed more than once: {', '.join(twice)}")
        return 1
    print("  no reminder was mailed twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
