"""The floors scripts/test-floors.sh tests are the floors pyproject.toml declares.

A floor nobody runs drifts from the versions that work (redis>=5 was declared while the code
needed what 5.0 lacks): each floor of the package and of the extras a user installs is pinned,
at that very version, in scripts/floors.txt, which the floors' run installs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[1]
USER_EXTRAS = ("celery", "redis", "prometheus", "sql", "otel", "web")
"""The extras of the library itself; dev and docs are the tools of this repository."""


def declared_floors() -> dict[str, set[Version]]:
    """Each package the library needs, with the ``>=`` floors pyproject.toml gives it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in USER_EXTRAS:
        lines += project["optional-dependencies"][extra]
    floors: dict[str, set[Version]] = {}
    for line in lines:
        requirement = Requirement(line)
        names = [requirement.name]
        if "binary" in requirement.extras:  # psycopg[binary] pulls psycopg-binary at one version
            names.append(f"{requirement.name}-binary")
        for name in names:
            floors.setdefault(canonicalize_name(name), set()).update(
                Version(spec.version) for spec in requirement.specifier if spec.operator == ">="
            )
    return floors


def pinned() -> dict[str, Version]:
    text = (ROOT / "scripts" / "floors.txt").read_text(encoding="utf-8")
    pins = (line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    return {canonicalize_name(name): Version(version) for name, version in pins}


def test_each_floor_of_the_library_is_pinned_at_that_version_for_the_floors_run() -> None:
    floors, pins = declared_floors(), pinned()

    assert floors == {name: {pins[name]} if name in pins else set() for name in floors}
