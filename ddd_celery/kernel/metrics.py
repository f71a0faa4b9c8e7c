"""Counters and histograms, labelled; the Prometheus adapter lives in ddd_celery.prometheus."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping

Labels = Mapping[str, str]


class Metrics(ABC):
    """Measures what the library does; an implementation never raises into the caller."""

    @abstractmethod
    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        """Add ``value`` to the counter ``name`` for these labels."""

    @abstractmethod
    def observe(self, name: str, value: float, labels: Labels) -> None:
        """Record ``value`` in the histogram ``name`` for these labels."""


class NoMetrics(Metrics):
    """Measures nothing: the default when none is given."""

    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        return None

    def observe(self, name: str, value: float, labels: Labels) -> None:
        return None


def _key(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


class InMemoryMetrics(Metrics):
    """Keeps every counter and observation, for assertions and small deployments."""

    def __init__(self) -> None:
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._observations: dict[str, dict[tuple[tuple[str, str], ...], list[float]]] = {}
        self._mutex = threading.Lock()

    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        with self._mutex:
            series = self._counters.setdefault(name, {})
            series[_key(labels)] = series.get(_key(labels), 0.0) + value

    def observe(self, name: str, value: float, labels: Labels) -> None:
        with self._mutex:
            self._observations.setdefault(name, {}).setdefault(_key(labels), []).append(value)

    def counter(self, name: str, **labels: str) -> float:
        """The sum of the counter over every series whose labels include ``labels``."""
        with self._mutex:
            series = self._counters.get(name, {})
            return sum(v for k, v in series.items() if set(labels.items()) <= set(k))

    def observations(self, name: str, **labels: str) -> list[float]:
        """Every value observed in the histogram for series whose labels include ``labels``."""
        with self._mutex:
            series = self._observations.get(name, {})
            return [v for k, vs in series.items() if set(labels.items()) <= set(k) for v in vs]

    def series(self, name: str) -> list[dict[str, str]]:
        """The label sets of a counter, for assertions on labels."""
        with self._mutex:
            return [dict(k) for k in self._counters.get(name, {})]
