"""The Python samples of a Markdown page, as the test of the docs runs them.

A sample is a fenced block whose info string is ``python``, indented or not (the README's
steps nest them in lists). A block right after ``<!-- not-run: <reason> -->`` (blank lines
between allowed) is skipped and counted; a marker without a reason is refused, so every block
that does not run says why. A block whose first line is ``# <path>.py`` is a file of the
sample project: written at that path, then imported under its module name. A ``bash`` block
right after ``<!-- sample-run -->`` is commands the reader types (``ddd-celery generate ...``):
run in bash, in the sample project's folder.

Each sample shows what it needs: its imports, and the files of the reader's project it imports,
shown on the page as file samples; a snippet whose first line is ``# continues the sample
above`` runs in the names of the snippet before it. The one thing a page may hide is where its
services answer: a ``<!-- sample-setup`` comment, Python up to the line ``-->``, that only sets
environment variables named ``*_URL`` (``os.environ["REDIS_URL"] = ...``); one that does more
is refused.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^\s*<!--\s*not-run\b(?P<rest>.*?)-->\s*$")
_SETUP = re.compile(r"^\s*<!--\s*sample-setup\s*$")
_CONTINUES = re.compile(r"^#\s*continues the samples? above\b")
_RUN = re.compile(r"^\s*<!--\s*sample-run\s*-->\s*$")
_FILE = re.compile(r"^#\s*(?P<path>[A-Za-z0-9_./-]+\.py)\s*$")


class SampleMarkerError(ValueError):
    """A ``not-run`` marker that says no reason: the page must say why its sample cannot run."""


class SampleSetupError(ValueError):
    """A ``sample-setup`` that hides more than the URLs of services from the reader."""


@dataclass(frozen=True)
class Sample:
    """One Python block: where it starts (the line of its first code line), its code, its file."""

    line: int
    code: str
    path: str | None = None
    """The file it stands for (``billing/application/commands.py``), or None for a snippet."""
    hidden: bool = False
    """A ``sample-setup``: the URLs of the services the page talks to, not shown."""
    shell: bool = False
    """Shell commands the page shows (a ``bash`` block after ``<!-- sample-run -->``)."""

    @property
    def continues(self) -> bool:
        """A snippet that says, on its first line, that it goes on from the one before it."""
        return self.path is None and _CONTINUES.match(self.code) is not None


@dataclass(frozen=True)
class Skipped:
    line: int
    reason: str


@dataclass
class Page:
    path: Path
    samples: list[Sample] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def extract(path: Path) -> Page:
    """The samples of the page at ``path`` in order, and those marked not to run."""
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if _SETUP.match(lines[index]):
            end = index + 1
            while end < len(lines) and lines[end].strip() != "-->":
                end += 1
            setup = _sample(index + 2, lines[index + 1 : end], hidden=True)
            _check_setup(setup, path)
            page.samples.append(setup)
            index = end + 1
            continue
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not _closes(lines[end], fence):
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        language = opening["info"].split()[0].lower() if opening["info"].strip() else ""
        if language in ("python", "py"):
            reason = _marker_before(lines, index, path)
            if reason is not None:
                page.skipped.append(Skipped(index + 2, reason))
            else:
                page.samples.append(_sample(index + 2, body))
        elif language in ("bash", "sh", "console") and _run_before(lines, index):
            page.samples.append(Sample(index + 2, "\n".join(body) + "\n", shell=True))
        index = end + 1
    return page


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def _marker_before(lines: list[str], fence_index: int, path: Path) -> str | None:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    marker = _MARKER.match(lines[before]) if before >= 0 else None
    if marker is None:
        return None
    reason = marker["rest"].strip().removeprefix(":").strip()
    if not reason:
        raise SampleMarkerError(
            f"{path.name}:{before + 1}: a not-run marker says why the sample cannot run: "
            "<!-- not-run: needs a Redis broker and a running beat -->"
        )
    return reason


def _run_before(lines: list[str], fence_index: int) -> bool:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    return before >= 0 and _RUN.match(lines[before]) is not None


def _check_setup(setup: Sample, path: Path) -> None:
    """Refuse a set-up that does anything but ``import os`` and set ``os.environ["<X>_URL"]``."""
    try:
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        statements = compile(setup.code, str(path), "exec", flags=flags, dont_inherit=True).body
    except SyntaxError as error:
        raise SampleSetupError(f"{path.name}:{setup.line}: {error}") from error
    for statement in statements:
        if not (_imports_os(statement) or _sets_a_url(statement)):
            raise SampleSetupError(
                f"{path.name}:{setup.line + statement.lineno - 1}: a sample-setup only sets the "
                'URL of a service (os.environ["REDIS_URL"] = ...); show the rest on the page: '
                f"{ast.unparse(statement)}"
            )


def _imports_os(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Import) and [a.name for a in statement.names] == ["os"]


def _sets_a_url(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        return (
            isinstance(target, ast.Subscript)
            and _is_environ(target.value)
            and _url_name(target.slice)
            and _plain(statement.value)
        )
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        return (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "setdefault"
            and _is_environ(call.func.value)
            and len(call.args) == 2
            and not call.keywords
            and _url_name(call.args[0])
            and _plain(call.args[1])
        )
    return False


def _is_environ(node: ast.expr) -> bool:
    return ast.unparse(node) == "os.environ"


def _url_name(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.endswith("_URL")
    )


def _plain(node: ast.expr) -> bool:
    """A string made of literals and of other environment variables, nothing that acts."""
    for part in ast.walk(node):
        if isinstance(part, ast.Call) and ast.unparse(part.func) not in ("os.environ.get",):
            return False
        if isinstance(part, ast.Name) and part.id != "os":
            return False
        if isinstance(part, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield)):
            return False
    return True


def _sample(line: int, body: list[str], *, hidden: bool = False) -> Sample:
    code = "\n".join(body) + "\n"
    first = _FILE.match(body[0]) if body else None
    return Sample(line, code, first["path"] if first else None, hidden)
