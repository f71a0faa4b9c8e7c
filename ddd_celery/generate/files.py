"""Writing a generation all or nothing: every file is checked before the first is written.

A file the generator owns (a job, a spec, the worker's entry point) is created, or left alone
when it already holds exactly what would be written, or refused when it holds anything else:
the generator never overwrites work. A package's ``__init__.py`` is created when missing and
never touched when present. An edit (the job settings) is computed from the current text. So a
second run with the same arguments changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddd_celery.generate.errors import FILE_EXISTS, GenerationRefusedError


class Change(enum.StrEnum):
    """What became of one file."""

    CREATED = "created"
    EDITED = "edited"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class Planned:
    """One file of a generation: its path and how its new text is made from the current one.

    ``make`` gets the current text (None when the file is missing) and returns the text to
    write; it raises ``GenerationRefusedError`` when it cannot.
    """

    path: Path
    make: Callable[[str | None], str]


@dataclass(frozen=True, slots=True)
class Written:
    """One file of a finished generation, relative to the project's root."""

    path: Path
    change: Change


def owned(path: Path, text: str) -> Planned:
    """A file the generator writes whole: refused if present with other content."""

    def make(current: str | None) -> str:
        if current is not None and current != text:
            raise GenerationRefusedError(
                f"{path.name} exists and differs from what would be written: the generator "
                "never overwrites a file; move it away or keep it",
                code=FILE_EXISTS,
            )
        return text

    return Planned(path, make)


def kept(path: Path, text: str) -> Planned:
    """A file written when missing and never touched when present (``__init__.py``, a command)."""
    return Planned(path, lambda current: text if current is None else current)


def apply(root: Path, planned: Sequence[Planned]) -> list[Written]:
    """Compute every file's text first, then write those that change; nothing on a refusal."""
    texts: dict[Path, tuple[str | None, str]] = {}
    for plan in planned:
        current = texts[plan.path][1] if plan.path in texts else _read(plan.path)
        original = texts[plan.path][0] if plan.path in texts else current
        try:
            texts[plan.path] = (original, plan.make(current))
        except GenerationRefusedError as error:
            raise GenerationRefusedError(
                f"{_shown(root, plan.path)}: {error}", code=error.code
            ) from None
    written = []
    for path, (original, text) in texts.items():
        if original == text:
            change = Change.UNCHANGED
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            change = Change.CREATED if original is None else Change.EDITED
        written.append(Written(path.relative_to(root), change))
    return written


def packages(paths: Iterable[Path]) -> list[Planned]:
    """An empty ``__init__.py`` for each package that has none."""
    return [kept(path, "") for path in dict.fromkeys(paths)]


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _shown(root: Path, path: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name
