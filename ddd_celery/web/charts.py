"""Charts drawn on the server as inline SVG: no script, nothing loaded, readable without colour.

Each chart is a function of counts that returns SVG markup; every text in it is escaped here
(job names, as any stored text, can hold anything). Each bar has a ``<title>`` (a tooltip and
what a screen reader says) with its counts, and each series a legend entry with its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from markupsafe import Markup

from ddd_celery.background.operations import printable
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.scheduling.outcomes import JobRun, Outcome

OUTCOME_SERIES = ("succeeded", "failed", "missed", "skipped")
"""The series of the outcome charts: the skips (overlap, locked, paused) are one."""
SERIES_COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "missed": "#ef6c00",
    "skipped": "#78909c",
    "dead": "#6a1b9a",
    "retrying": "#f9a825",
    "running": "#1565c0",
    "queued": "#90a4ae",
    "cancelled": "#bdbdbd",
}
BUCKETS = 24
WIDE, NARROW = 1000, 620
"""The widths of a chart across the page and of one in half of it (what it is drawn at, at
most: a narrower window shrinks it)."""
_HEIGHT, _LEFT, _BOTTOM, _TOP = 170, 40, 34, 22


def series_of(outcome: Outcome) -> str:
    """The series an outcome is counted in."""
    if outcome is Outcome.SUCCEEDED:
        return "succeeded"
    if outcome is Outcome.FAILED:
        return "failed"
    if outcome is Outcome.MISSED:
        return "missed"
    return "skipped"


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bar: the instants it spans and its count per series."""

    start: datetime
    end: datetime
    counts: Mapping[str, int]


def bucketed(instants: Iterable[tuple[datetime, str]], count: int = BUCKETS) -> list[Bucket]:
    """``(instant, series)`` pairs counted in ``count`` equal spans from the first instant to
    the last (fewer bars when there are fewer instants)."""
    pairs = sorted(instants)
    if not pairs:
        return []
    first, last = pairs[0][0], pairs[-1][0]
    bars = max(1, min(count, len(pairs)))
    span = max((last - first) / bars, timedelta(milliseconds=1))
    counts: list[dict[str, int]] = [{} for _ in range(bars)]
    for at, series in pairs:
        index = min(bars - 1, int((at - first) / span))
        counts[index][series] = counts[index].get(series, 0) + 1
    return [Bucket(first + span * i, first + span * (i + 1), counts[i]) for i in range(bars)]


def outcomes_chart(runs: Iterable[JobRun], title: str, *, width: int = WIDE) -> Markup:
    """The outcomes of ``runs`` over time, a stacked bar per span of their instants."""
    buckets = bucketed((run.scheduled_at, series_of(run.outcome)) for run in runs)
    return stacked_bars(buckets, OUTCOME_SERIES, title, width=width)


def stacked_bars(
    buckets: Sequence[Bucket], series: Sequence[str], title: str, *, width: int = WIDE
) -> Markup:
    """A bar per bucket, its series stacked, the first and last instants under the axis."""
    label = escape(printable(title))
    if not buckets:
        return Markup(
            f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {width} 40" '
            f'width="{width}"><text x="0" y="24" class="empty">{label}: '
            "nothing recorded yet</text></svg>"
        )
    highest = max(sum(bucket.counts.values()) for bucket in buckets) or 1
    plot_w, plot_h = width - _LEFT - 8, _HEIGHT - _BOTTOM - _TOP
    step = plot_w / len(buckets)
    bar_w = max(1.0, min(step * 0.8, 48.0))
    parts = [
        f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {width} {_HEIGHT}" '
        f'width="{width}">',
        f'<text x="0" y="14" class="title">{label}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{width - 8}" y2="{_TOP + plot_h}" '
        'class="axis"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 8}" class="tick" text-anchor="end">{highest}</text>',
        f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" class="tick" text-anchor="end">0</text>',
    ]
    for index, bucket in enumerate(buckets):
        x = _LEFT + index * step + (step - bar_w) / 2
        y = float(_TOP + plot_h)
        told = ", ".join(
            f"{name} {bucket.counts[name]}" for name in series if bucket.counts.get(name)
        )
        parts.append(
            f"<g><title>{escape(iso_ms(bucket.start))} to {escape(iso_ms(bucket.end))}: "
            f"{escape(told)}</title>"
        )
        for name in series:
            count = bucket.counts.get(name, 0)
            if not count:
                continue
            height = plot_h * count / highest
            y -= height
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{height:.1f}" '
                f'fill="{SERIES_COLOURS[name]}" class="s-{name}"/>'
            )
        parts.append("</g>")
    parts.append(
        f'<text x="{_LEFT}" y="{_HEIGHT - 18}" class="tick">{escape(iso_ms(buckets[0].start))}'
        f'</text><text x="{width - 8}" y="{_HEIGHT - 18}" class="tick" text-anchor="end">'
        f"{escape(iso_ms(buckets[-1].end))}</text>"
    )
    parts.append(_legend(series, _HEIGHT - 4))
    parts.append("</svg>")
    return Markup("".join(parts))


def name_bars(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    series: Sequence[str],
    title: str,
    *,
    width: int = NARROW,
) -> Markup:
    """A horizontal bar per name (a job's), its series stacked: counts side by side."""
    label = escape(printable(title))
    if not rows:
        return Markup(
            f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {width} 40" '
            f'width="{width}"><text x="0" y="24" class="empty">{label}: '
            "no job yet</text></svg>"
        )
    row_h, names_w, top = 18, min(220, width // 3), 22
    height = top + row_h * len(rows) + 24
    highest = max(sum(counts.get(name, 0) for name in series) for _, counts in rows) or 1
    plot_w = width - names_w - 60
    parts = [
        f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {width} {height}" '
        f'width="{width}">',
        f'<text x="0" y="14" class="title">{label}</text>',
    ]
    for index, (name, counts) in enumerate(rows):
        y = top + index * row_h
        shown = printable(name)
        short = shown if len(shown) <= 32 else shown[:31] + "…"
        told = ", ".join(f"{s} {counts[s]}" for s in series if counts.get(s))
        parts.append(
            f"<g><title>{escape(shown)}: {escape(told or 'none')}</title>"
            f'<text x="{names_w - 6}" y="{y + 12}" class="tick" text-anchor="end">'
            f"{escape(short)}</text>"
        )
        x = float(names_w)
        for s in series:
            count = counts.get(s, 0)
            if not count:
                continue
            bar = plot_w * count / highest
            parts.append(
                f'<rect x="{x:.1f}" y="{y + 2}" width="{max(bar, 1.0):.1f}" '
                f'height="{row_h - 5}" fill="{SERIES_COLOURS[s]}" class="s-{s}"/>'
            )
            x += bar
        total = sum(counts.get(s, 0) for s in series)
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 12}" class="tick">{total}</text></g>')
    parts.append(_legend(series, height - 4))
    parts.append("</svg>")
    return Markup("".join(parts))


def _legend(series: Sequence[str], y: int) -> str:
    parts = []
    x = _LEFT
    for name in series:
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{SERIES_COLOURS[name]}"/>'
            f'<text x="{x + 14}" y="{y}" class="tick">{escape(name)}</text>'
        )
        x += 22 + 7 * len(name)
    return "".join(parts)
