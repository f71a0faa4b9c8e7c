"""The pictures of the design pages are the ones the code draws today."""

from __future__ import annotations

import re

import pytest

from ddd_celery.scheduling.occurrence import MOVES
from tests.docs.pictures import DESIGN, PICTURES, SPRING, occurrence_svg


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_the_picture_in_the_docs_is_drawn_from_the_code(name: str) -> None:
    checked_in = (DESIGN / name).read_text(encoding="utf-8")

    assert checked_in == PICTURES[name](), f"run `python -m tests.docs.pictures` ({name})"


def test_the_spring_day_shows_no_pinned_run_and_every_hourly_one() -> None:
    svg = (DESIGN / "dst.svg").read_text(encoding="utf-8")
    spring = svg[: svg.index("Fall back")]

    instants = re.findall(r"<title>(\d\d:\d\d)Z</title>", spring)

    assert instants == [f"{hour:02d}:00" for hour in (23, 0, 1, 2, 3, 4)]
    assert SPRING.start.hour == 23


def test_the_fall_day_shows_the_pinned_run_once_in_the_repeated_hour() -> None:
    svg = (DESIGN / "dst.svg").read_text(encoding="utf-8")
    fall = svg[svg.index("Fall back") :]

    instants = re.findall(r"<title>(\d\d:\d\d)Z</title>", fall)

    assert instants == ["00:30", "22:00", "23:00", "00:00", "01:00", "02:00", "03:00"]


def test_the_occurrence_diagram_has_one_arrow_per_pair_of_steps_and_every_event() -> None:
    svg = occurrence_svg()
    pairs = {(source, target) for (source, _), target in MOVES.items()}

    assert svg.count("<line ") == len(pairs)
    for (_, event), _target in MOVES.items():
        assert f">{event.value}</text>" in svg
