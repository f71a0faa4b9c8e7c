"""The kernel ``Metrics`` port on ``prometheus_client``: ``pip install ddd-celery[prometheus]``.

An optional extra: nothing in the core imports this module, so an application that does not
export to Prometheus never needs ``prometheus_client``.

Counters and histograms are created on first use, with the label names of that first call
(``job``, ``context``, ``status``, ``error_code`` for the scheduled job series). A counter named
``..._total`` is exposed under exactly that name: ``prometheus_client`` takes the suffix off and
writes it back. A counter named without it is exposed with ``_total`` appended, as Prometheus
requires. Histograms are in milliseconds, as the seeds name them (``scheduled_job_duration_ms``),
so their buckets run from a few milliseconds to an hour.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from ddd_celery.kernel.metrics import Labels, Metrics

DURATION_BUCKETS_MS: tuple[float, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
)
"""From a job that does nothing to one that reaches the default lock time to live and beyond."""

_HELP = {
    "scheduled_job_runs_total": "Occurrences of scheduled jobs handled, by outcome.",
    "scheduled_job_duration_ms": "Duration of the runs of scheduled jobs, in milliseconds.",
    "background_job_runs_total": "Attempts of background jobs, by outcome.",
    "background_job_duration_ms": "Duration of the attempts of background jobs, in milliseconds.",
    "process_steps_total": "Steps of process managers, by outcome.",
    "background_jobs_purged_total": "Finished background jobs the relay purged, by status.",
}

_logger = logging.getLogger("ddd_celery.prometheus")


def _help(name: str) -> str:
    return _HELP.get(name, name.replace("_", " "))


@dataclass(frozen=True, slots=True)
class _Family:
    """A collector and the label names it was created with."""

    collector: Counter | Histogram
    label_names: tuple[str, ...]

    def series(self, labels: Labels) -> Counter | Histogram:
        """The child of ``labels``: a label missing from the call is left empty.

        A label the metric was not created with is an error: dropping it silently would merge
        series the caller meant to tell apart.
        """
        extra = set(labels) - set(self.label_names)
        if extra:
            raise ValueError(f"labels {sorted(extra)} are not among {list(self.label_names)}")
        return self.collector.labels(**{name: labels.get(name, "") for name in self.label_names})


# Families per registry, shared by every PrometheusMetrics on it: a registry refuses a second
# collector of the same name, and a process may build the metrics more than once (an app and
# its beat, a test and its fixture).
_families: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Family]] = (
    weakref.WeakKeyDictionary()
)
_families_mutex = threading.Lock()


class PrometheusMetrics(Metrics):
    """Counters and histograms registered on ``registry`` (the default registry when None).

    Like every ``Metrics``, it never raises into the caller: a series it cannot record (a name
    already taken by another kind of metric, a label it was not created with, a negative
    increment) is logged once per metric and dropped, so measuring never fails a job.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        buckets: Sequence[float] = DURATION_BUCKETS_MS,
    ) -> None:
        self._registry = REGISTRY if registry is None else registry
        self._buckets = tuple(buckets)
        self._warned: set[str] = set()

    def increment(self, name: str, labels: Labels, value: float = 1.0) -> None:
        try:
            series = self._family(name, labels, Counter).series(labels)
            assert isinstance(series, Counter)
            series.inc(value)
        except Exception as error:
            self._warn(name, error)

    def observe(self, name: str, value: float, labels: Labels) -> None:
        try:
            series = self._family(name, labels, Histogram).series(labels)
            assert isinstance(series, Histogram)
            series.observe(value)
        except Exception as error:
            self._warn(name, error)

    def _family(self, name: str, labels: Labels, kind: type[Counter | Histogram]) -> _Family:
        with _families_mutex:
            known = _families.setdefault(self._registry, {})
            family = known.get(name)
            if family is None:
                label_names = tuple(labels)
                collector: Counter | Histogram
                if kind is Counter:
                    collector = Counter(name, _help(name), label_names, registry=self._registry)
                else:
                    collector = Histogram(
                        name,
                        _help(name),
                        label_names,
                        registry=self._registry,
                        buckets=self._buckets,
                    )
                family = known[name] = _Family(collector, label_names)
        if not isinstance(family.collector, kind):
            raise TypeError(f"{name} is already a {type(family.collector).__name__.lower()}")
        return family

    def _warn(self, name: str, error: Exception) -> None:
        if name in self._warned:
            return
        self._warned.add(name)
        _logger.warning(
            "Metric could not be recorded",
            exc_info=error,
            extra={"metric": name, "error_type": type(error).__name__},
        )
