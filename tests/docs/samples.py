"""The Python samples of a Markdown page, as the test of the docs runs them.

A sample is a fenced block whose info string is ``python``, indented or not (the README's
steps nest them in lists). A block right after ``<!-- not-run: <reason> -->`` (blank lines
between allowed) is skipped and counted; a marker without a reason is refused, so every block
that does not run says why. A block whose first line is ``# <path>.py`` is a file of the
sample project: written at that path, then imported under its module name.

What a page leaves to the reader's project (``app``, ``config``, a job to wire) is given by a
``<!-- sample-setup`` comment, Python up to the line ``-->``: run in its place like a sample,
invisible on the site, so the prose shows only what the reader writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^\s*<!--\s*not-run\b(?P<rest>.*?)-->\s*$")
_SETUP = re.compile(r"^\s*<!--\s*sample-setup\s*$")
_FILE = re.compile(r"^#\s*(?P<path>[A-Za-z0-9_./-]+\.py)\s*$")


class SampleMarkerError(ValueError):
    """A ``not-run`` marker that says no reason: the page must say why its sample cannot run."""


@dataclass(frozen=True)
class Sample:
    """One Python block: where it starts (the line of its first code line), its code, its file."""

    line: int
    code: str
    path: str | None = None
    """The file it stands for (``billing/application/commands.py``), or None for a snippet."""
    hidden: bool = False
    """A ``sample-setup``: what the page takes from the reader's project, not shown."""


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
            page.samples.append(_sample(index + 2, lines[index + 1 : end], hidden=True))
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


def _sample(line: int, body: list[str], *, hidden: bool = False) -> Sample:
    code = "\n".join(body) + "\n"
    first = _FILE.match(body[0]) if body else None
    return Sample(line, code, first["path"] if first else None, hidden)
