"""The Prometheus adapter of the kernel Metrics port."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ddd_celery.prometheus import DURATION_BUCKETS_MS, PrometheusMetrics

RUN = {"job": "billing.send-payment-reminders", "context": "billing"}


def exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_a_counter_named_total_is_exposed_under_exactly_that_name() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    metrics.increment("scheduled_job_runs_total", {**RUN, "status": "succeeded", "error_code": ""})

    text = exposition(registry)
    samples = [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    ]
    assert samples == [
        ("scheduled_job_runs_total", {**RUN, "status": "succeeded", "error_code": ""}, 1.0)
    ]
    assert "# TYPE scheduled_job_runs_total counter" in text
    assert re.search(r'^scheduled_job_runs_total\{[^}]*status="succeeded"[^}]*\} 1\.0$', text, re.M)
    assert "scheduled_job_runs_total_total" not in text


def test_each_label_set_is_its_own_series() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    failed = {**RUN, "status": "failed", "error_code": "JOB_TIMEOUT"}

    metrics.increment("scheduled_job_runs_total", {**RUN, "status": "succeeded", "error_code": ""})
    metrics.increment("scheduled_job_runs_total", failed)
    metrics.increment("scheduled_job_runs_total", failed)

    assert registry.get_sample_value("scheduled_job_runs_total", failed) == 2.0
    assert (
        registry.get_sample_value(
            "scheduled_job_runs_total", {**RUN, "status": "succeeded", "error_code": ""}
        )
        == 1.0
    )


def test_a_counter_named_without_total_gets_the_suffix_prometheus_requires() -> None:
    registry = CollectorRegistry()

    PrometheusMetrics(registry).increment("jobs_seen", {"job": "a.b"}, 3)

    assert registry.get_sample_value("jobs_seen_total", {"job": "a.b"}) == 3.0


def test_a_histogram_counts_milliseconds_in_buckets_up_to_an_hour() -> None:
    registry = CollectorRegistry()
    labels = {**RUN, "status": "succeeded", "error_code": ""}

    PrometheusMetrics(registry).observe("scheduled_job_duration_ms", 1_200.0, labels)

    text = exposition(registry)
    assert "# TYPE scheduled_job_duration_ms histogram" in text
    assert registry.get_sample_value("scheduled_job_duration_ms_count", labels) == 1.0
    assert registry.get_sample_value("scheduled_job_duration_ms_sum", labels) == 1_200.0
    assert (
        registry.get_sample_value("scheduled_job_duration_ms_bucket", {**labels, "le": "1000.0"})
        == 0.0
    )
    assert (
        registry.get_sample_value("scheduled_job_duration_ms_bucket", {**labels, "le": "2500.0"})
        == 1.0
    )
    assert DURATION_BUCKETS_MS[-1] == 3_600_000


def test_a_label_missing_from_a_later_call_is_recorded_empty() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.increment("scheduled_job_runs_total", {"job": "a.b", "error_code": "X"})

    metrics.increment("scheduled_job_runs_total", {"job": "a.b"})

    assert (
        registry.get_sample_value("scheduled_job_runs_total", {"job": "a.b", "error_code": ""})
        == 1.0
    )


def test_two_adapters_on_one_registry_share_their_series() -> None:
    registry = CollectorRegistry()
    labels = {"job": "a.b", "status": "succeeded"}

    PrometheusMetrics(registry).increment("scheduled_job_runs_total", labels)
    PrometheusMetrics(registry).increment("scheduled_job_runs_total", labels)

    assert registry.get_sample_value("scheduled_job_runs_total", labels) == 2.0


def test_what_cannot_be_recorded_is_logged_once_and_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.increment("scheduled_job_runs_total", {"job": "a.b"})

    with caplog.at_level(logging.WARNING, logger="ddd_celery.prometheus"):
        metrics.increment("scheduled_job_runs_total", {"job": "a.b", "tenant": "acme"})
        metrics.increment("scheduled_job_runs_total", {"job": "a.b"}, -1)
        metrics.observe("scheduled_job_runs_total", 1.0, {"job": "a.b"})

    assert registry.get_sample_value("scheduled_job_runs_total", {"job": "a.b"}) == 1.0
    assert [record.getMessage() for record in caplog.records] == ["Metric could not be recorded"]
    assert caplog.records[0].__dict__["metric"] == "scheduled_job_runs_total"


def test_a_name_taken_by_another_collector_is_dropped_not_raised() -> None:
    registry = CollectorRegistry()
    Gauge("scheduled_job_duration_ms", "taken", registry=registry)

    PrometheusMetrics(registry).observe("scheduled_job_duration_ms", 5.0, {"job": "a.b"})

    assert registry.get_sample_value("scheduled_job_duration_ms_count", {"job": "a.b"}) is None


def test_the_core_never_imports_prometheus_client() -> None:
    code = (
        "import sys, ddd_celery.kernel, ddd_celery.scheduling.observability,"
        " ddd_celery.scheduling.execution, ddd_celery.scheduling.occurrence,"
        " ddd_celery.scheduling.settings;"
        " sys.exit('prometheus_client' in sys.modules)"
    )

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)

    assert result.returncode == 0, result.stderr.decode()
