"""The options of a scheduled job, as documented enums equal to the seeds' strings."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OverlapPolicy(StrEnum):
    """What happens to an occurrence that comes while the previous run is in progress."""

    SKIP = "skip"
    """Not started: recorded ``skipped-overlap``."""
    QUEUE = "queue"
    """Started when the run ends; one occurrence waits at most, the next ones are skipped."""


class MissedPolicy(StrEnum):
    """What happens to occurrences the scheduler did not reach in time."""

    SKIP = "skip"
    """Dropped, recorded once per gap as ``missed``."""
    RUN_ONCE = "run-once"
    """The latest of them runs, once, however many passed."""


class Tenancy(StrEnum):
    """Whether a job runs once per occurrence or once per tenant of each occurrence."""

    GLOBAL = "global"
    PER_TENANT = "per-tenant"


class TenantRuns(StrEnum):
    """How the tenant runs of one occurrence of a per-tenant job are carried out."""

    IN_TURN = "in-turn"
    """One after the other, in the process that runs the occurrence (the seeds' way)."""
    SPREAD = "spread"
    """One task per tenant, over the workers; the last tenant to end records the occurrence.
    A driver that runs in one process (the in-process scheduler, ``run_now``) runs them in turn."""


@dataclass(frozen=True, slots=True)
class JobOptions:
    """The options written next to a schedule, checked by ``parse_job_schedule``."""

    overlap: OverlapPolicy = OverlapPolicy.SKIP
    missed: MissedPolicy = MissedPolicy.SKIP
    timeout_ms: int | None = None
    jitter_ms: int = 0
    enabled: bool = True
    single_instance: bool = True
    tenancy: Tenancy = Tenancy.GLOBAL
    tenant_runs: TenantRuns = TenantRuns.IN_TURN
