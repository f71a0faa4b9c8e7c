"""The pictures of the design pages, drawn from the code so they cannot drift from it.

``python -m tests.docs.pictures`` writes them into ``docs/design/``; ``test_pictures.py``
draws them again and compares. The DST picture places each occurrence where
``next_occurrence`` puts it; the occurrence diagram draws every move of ``MOVES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from zoneinfo import ZoneInfo

from ddd_celery import next_occurrence, parse_job_schedule
from ddd_celery.scheduling.occurrence import MOVES, Step

DESIGN = Path(__file__).parents[2] / "docs" / "design"
PARIS = ZoneInfo("Europe/Paris")
FONT = 'font-family="sans-serif" font-size="12"'


@dataclass(frozen=True)
class Day:
    title: str
    start: datetime
    hours: int
    changed: tuple[datetime, datetime]
    """The UTC span whose wall clock the change skips or repeats."""
    note: str


SPRING = Day(
    "Spring forward: Sunday 29 March 2026, Europe/Paris (02:00 CET becomes 03:00 CEST)",
    datetime(2026, 3, 28, 23, tzinfo=UTC),
    5,
    (datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 3, 29, 1, tzinfo=UTC)),
    "02:00 to 02:59 never happens: the pinned job has no run that day",
)
FALL = Day(
    "Fall back: Sunday 25 October 2026, Europe/Paris (03:00 CEST becomes 02:00 CET)",
    datetime(2026, 10, 24, 22, tzinfo=UTC),
    5,
    (datetime(2026, 10, 25, 0, tzinfo=UTC), datetime(2026, 10, 25, 2, tzinfo=UTC)),
    "02:00 to 02:59 happens twice: the pinned job runs the first time only",
)
JOBS = (("30 2 * * *", "pinned: 30 2 * * *"), ("0 * * * *", "hourly: 0 * * * *"))


def dst_svg() -> str:
    """Two days of Europe/Paris, UTC hour by hour, with each occurrence of two crons."""
    width, left, right, panel = 800, 180, 50, 170
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{2 * panel + 20}" '
        f'viewBox="0 0 {width} {2 * panel + 20}" {FONT}>',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for index, day in enumerate((SPRING, FALL)):
        top = 10 + index * panel
        span = timedelta(hours=day.hours)

        def x(instant: datetime, day: Day = day, span: timedelta = span) -> float:
            return left + (width - left - right) * ((instant - day.start) / span)

        parts.append(f'<text x="10" y="{top + 14}" font-weight="bold">{escape(day.title)}</text>')
        low, high = (x(moment) for moment in day.changed)
        if high > low:
            parts.append(
                f'<rect x="{low:.1f}" y="{top + 24}" width="{high - low:.1f}" height="116" '
                'fill="#fde8c8"/>'
            )
        else:
            parts.append(
                f'<line x1="{low:.1f}" y1="{top + 24}" x2="{low:.1f}" y2="{top + 140}" '
                'stroke="#e07b00" stroke-width="3"/>'
            )
        axis = top + 40
        parts.append(f'<text x="10" y="{axis + 4}">UTC</text>')
        parts.append(f'<text x="10" y="{axis + 24}">wall clock in Paris</text>')
        parts.append(
            f'<line x1="{left}" y1="{axis}" x2="{width - right}" y2="{axis}" stroke="black"/>'
        )
        for hour in range(day.hours + 1):
            instant = day.start + timedelta(hours=hour)
            wall = instant.astimezone(PARIS)
            parts += [
                f'<line x1="{x(instant):.1f}" y1="{axis - 4}" x2="{x(instant):.1f}" '
                f'y2="{axis + 4}" stroke="black"/>',
                f'<text x="{x(instant):.1f}" y="{axis - 8}" text-anchor="middle">'
                f"{instant:%H:%M}Z</text>",
                f'<text x="{x(instant):.1f}" y="{axis + 24}" text-anchor="middle">'
                f"{wall:%H:%M} {wall.tzname()}</text>",
            ]
        for row, (cron, label) in enumerate(JOBS):
            y = axis + 50 + row * 24
            parts.append(f'<text x="10" y="{y + 4}">{escape(label)}</text>')
            schedule = parse_job_schedule({"cron": cron, "time_zone": "Europe/Paris"})
            instant = next_occurrence(schedule, day.start - timedelta(seconds=1))
            while instant <= day.start + span:
                parts.append(
                    f'<circle cx="{x(instant):.1f}" cy="{y}" r="6" fill="#2b6cb0">'
                    f"<title>{instant:%H:%M}Z</title></circle>"
                )
                instant = next_occurrence(schedule, instant)
        parts.append(
            f'<text x="{left}" y="{top + 150}" font-style="italic">{escape(day.note)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# Where each step of an occurrence sits: the path of a run on the top row, what it may become
# on the rows below. Every step of ``Step`` must have a place, and every move of ``MOVES`` is
# drawn; ``occurrence_svg`` refuses a step without one.
PLACES = {
    Step.SCHEDULED: (0, 1),
    Step.DUE: (1, 1),
    Step.WAITING: (2, 1),
    Step.LOCKING: (3, 1),
    Step.CLAIMING: (4, 1),
    Step.RUNNING: (5, 1),
    Step.SUCCEEDED: (6, 1),
    Step.QUEUED: (4.5, 0),
    Step.MISSED: (1.5, 0),
    Step.SKIPPED_LOCKED: (2.6, 2),
    Step.FAILED: (4, 2),
    Step.SKIPPED_OVERLAP: (5.4, 2),
    Step.SKIPPED_PAUSED: (4.6, 2),
}
ALONG = {(Step.RUNNING, Step.FAILED): 0.3}
"""Where on its line a move's name sits, for the lines whose names would otherwise meet."""


def occurrence_svg() -> str:
    """Every move of ``MOVES``: an arrow from a step to the next, named by its event."""
    missing = set(Step) - set(PLACES)
    if missing:
        raise ValueError(f"give each step a place in PLACES: {sorted(missing)}")
    column, row, box_w, box_h = 200, 100, 110, 30

    def centre(step: Step) -> tuple[float, float]:
        c, r = PLACES[step]
        return 20 + box_w / 2 + c * column, 30 + r * row

    width = int(20 + box_w + 6 * column + 20)
    height = int(30 + 2 * row + 40)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>',
        '<rect width="100%" height="100%" fill="white"/>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/>'
        "</marker></defs>",
    ]
    grouped: dict[tuple[Step, Step], list[str]] = {}
    for (source, event), target in MOVES.items():
        grouped.setdefault((source, target), []).append(event.value)
    for (source, target), events in grouped.items():
        x1, y1 = _edge(centre(source), centre(target), (box_w, box_h))
        x2, y2 = _edge(centre(target), centre(source), (box_w, box_h))
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#444" '
            'marker-end="url(#arrow)"/>'
        )
        vertical, horizontal = abs(x2 - x1) < 1, abs(y2 - y1) < 1
        along = ALONG.get((source, target), 0.5 if horizontal else 0.35 if vertical else 0.6)
        at_x, at_y = x1 + (x2 - x1) * along, y1 + (y2 - y1) * along
        anchor = "start" if vertical else "middle"
        for line, event in enumerate(reversed(events)):
            parts.append(
                f'<text x="{at_x + (5 if vertical else 0):.1f}" y="{at_y - 4 - 12 * line:.1f}" '
                f'text-anchor="{anchor}" font-size="10" fill="#555">{escape(event)}</text>'
            )
    ends = set(MOVES.values()) - {source for source, _ in MOVES}
    for step in Step:
        x, y = centre(step)
        fill = "#e6f0fa" if step not in ends else "#f2f2f2"
        parts.append(
            f'<rect x="{x - box_w / 2:.1f}" y="{y - box_h / 2:.1f}" width="{box_w}" '
            f'height="{box_h}" rx="6" fill="{fill}" stroke="#2b6cb0"/>'
        )
        parts.append(f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{step.value}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _edge(
    at: tuple[float, float], towards: tuple[float, float], box: tuple[float, float]
) -> tuple[float, float]:
    """Where the line from the centre ``at`` towards another point leaves a box of ``box``."""
    (x, y), (dx, dy) = at, (towards[0] - at[0], towards[1] - at[1])
    if dx == 0 and dy == 0:
        return x, y
    inf = float("inf")
    scale = min(box[0] / 2 / abs(dx) if dx else inf, box[1] / 2 / abs(dy) if dy else inf)
    return x + dx * scale, y + dy * scale


PICTURES = {"dst.svg": dst_svg, "occurrence.svg": occurrence_svg}


if __name__ == "__main__":
    for name, draw in PICTURES.items():
        (DESIGN / name).write_text(draw(), encoding="utf-8")
        print(f"wrote docs/design/{name}")
