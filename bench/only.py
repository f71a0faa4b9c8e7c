"""``--only a,b``: the sections and the stores a benchmark of several of each runs.

Shared by ``bench_operations.py`` and ``bench_web.py``, whose runs take minutes per section and
store: one name picks that one, none picks them all.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add_only(
    parser: argparse.ArgumentParser, sections: Sequence[str], stores: Sequence[str]
) -> None:
    """The ``--only`` option, its help naming every choice."""
    parser.add_argument(
        "--only",
        default="",
        help=f"a comma list among {', '.join([*sections, *stores])}: those sections, those stores",
    )


def chosen(
    parser: argparse.ArgumentParser,
    only: str,
    sections: Sequence[str],
    stores: Sequence[str],
) -> tuple[list[str], list[str]]:
    """The sections and the stores ``only`` names, in their order; all of a kind it names none
    of. An unknown name is the parser's usage error."""
    named = {name for name in only.split(",") if name}
    unknown = named - {*sections, *stores}
    if unknown:
        parser.error(f"--only: not a section or a store: {', '.join(sorted(unknown))}")
    return (
        [name for name in sections if name in named] or list(sections),
        [name for name in stores if name in named] or list(stores),
    )
