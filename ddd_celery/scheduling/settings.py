"""Settings per job name: a job is switched off, rescheduled or tuned by configuration.

The settings of an environment are keyed by the job's name, as the seeds say; they are read
with pydantic and checked again by ``parse_job_schedule``, before anything starts. A name no job
declares is refused (``UNKNOWN_JOB``), so a renamed job cannot stay on by a stale key; settings
that cannot be read are refused too (``INVALID_JOB_SETTINGS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SkipValidation,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from ddd_celery.declarations.errors import DeclarationError
from ddd_celery.declarations.options import MissedPolicy, OverlapPolicy, Tenancy, TenantRuns
from ddd_celery.declarations.schedule import IntervalRule, ParsedJobSchedule, parse_job_schedule
from ddd_celery.declarations.scheduled import ScheduledJobDeclaration
from ddd_celery.scheduling.errors import InvalidJobSettingsError, UnknownJobError

RUN_JOBS = "RUN_JOBS"
"""The variable saying whether this process starts jobs by time (``run_now`` works either way)."""

_T = TypeVar("_T")


class ScheduleSettings(BaseModel):
    """A schedule that replaces the declared one whole: ``every``, or ``cron`` and ``time_zone``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: Annotated[int | str | None, SkipValidation] = None
    """Checked by ``parse_job_schedule``, whose message says which forms it takes."""
    cron: StrictStr | None = None
    time_zone: StrictStr | None = None


class JobSettings(BaseModel):
    """The settings of one job; a field left out (None) keeps what the job declares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: StrictBool | None = None
    """True or False only: ``"no"``, ``"off"`` or ``0`` are refused, never guessed."""
    schedule: ScheduleSettings | None = None
    overlap: OverlapPolicy | None = None
    missed: MissedPolicy | None = None
    timeout_ms: Annotated[StrictInt, Field(gt=0)] | None = None
    jitter_ms: Annotated[StrictInt, Field(ge=0)] | None = None
    single_instance: StrictBool | None = None
    tenancy: Tenancy | None = None
    tenant_runs: TenantRuns | None = None

    def options(self) -> dict[str, Any]:
        """The options these settings give, keyed as ``parse_job_schedule`` reads them."""
        return {key: value for key, value in self if value is not None and key != "schedule"}


SettingsMapping = Mapping[str, JobSettings | Mapping[str, Any]]
"""``{job name: settings}``, each a ``JobSettings`` or the mapping it is read from."""

DeclaredJobs = Mapping[str, ParsedJobSchedule] | Iterable[ScheduledJobDeclaration]


def apply_job_settings(
    declared: DeclaredJobs, *settings: SettingsMapping
) -> dict[str, ParsedJobSchedule]:
    """The schedule each declared job runs with once ``settings`` are applied.

    Several mappings apply in order, a later one over an earlier one field by field (the
    configuration file, then the environment switches). A schedule given replaces the declared
    one; options given are merged over the declared ones; the result goes through
    ``parse_job_schedule`` again. Raises ``UnknownJobError`` for a name no job declares and
    ``InvalidJobSettingsError`` (the original error as ``__cause__``) for settings that cannot
    be read.
    """
    schedules = _schedules_of(declared)
    merged: dict[str, JobSettings] = {}
    for layer in settings:
        if not isinstance(layer, Mapping):
            raise TypeError(
                "job settings are a mapping {job name: settings}, such as "
                f"{{'billing.send-payment-reminders': {{'enabled': False}}}}, not a "
                f"{type(layer).__name__}"
            )
        unknown = sorted(set(layer) - set(schedules))
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            raise UnknownJobError(
                f"settings are given for {names}, but no job is declared by that name: "
                "rename the key with the job (a renamed job cannot stay on by a stale key)",
                job=unknown[0],
            )
        for name, given in layer.items():
            read = _read(name, given)
            earlier = merged.get(name)
            merged[name] = read if earlier is None else _over(earlier, read)
    return {
        name: _effective(name, schedule, merged[name]) if name in merged else schedule
        for name, schedule in schedules.items()
    }


def enabled_variable(job: str) -> str:
    """The variable that switches ``job`` on or off, upper-cased, dots and hyphens as ``_``.

    'notifications.send-reminders' -> ``JOB_NOTIFICATIONS_SEND_REMINDERS_ENABLED``.
    """
    return "JOB_" + job.upper().replace(".", "_").replace("-", "_") + "_ENABLED"


def job_settings_from_env(
    environ: Mapping[str, str], jobs: Iterable[str]
) -> dict[str, JobSettings]:
    """The ``enabled`` switch of each job whose ``JOB_<CONTEXT>_<JOB>_ENABLED`` is set.

    Reads ``true``, ``false``, ``1`` and ``0`` (any case); anything else is refused with
    ``InvalidJobSettingsError`` rather than guessed, as is one variable two job names share.
    """
    owners: dict[str, str] = {}
    for job in jobs:
        variable = enabled_variable(job)
        other = owners.setdefault(variable, job)
        if other != job:
            raise InvalidJobSettingsError(
                f"{variable} would switch both {other!r} and {job!r}: rename one", job=job
            )
    return {
        job: JobSettings(enabled=_switch(environ[variable], variable, job=job))
        for variable, job in owners.items()
        if variable in environ
    }


def run_jobs_from_env(environ: Mapping[str, str], default: bool = True) -> bool:
    """Whether this process starts jobs by time: ``RUN_JOBS``, or ``default`` when unset.

    An API process that leaves jobs to a worker deployment sets ``RUN_JOBS=false`` (or is
    built with ``default=False``); its jobs are still registered, described and runnable now.
    """
    if RUN_JOBS not in environ:
        return default
    return _switch(environ[RUN_JOBS], RUN_JOBS, job=None)


_SWITCHES = {"true": True, "1": True, "false": False, "0": False}


def _switch(value: str, variable: str, *, job: str | None) -> bool:
    try:
        return _SWITCHES[value.strip().lower()]
    except KeyError:
        raise InvalidJobSettingsError(
            f"{variable}={value!r} is not one of true, false, 1, 0", job=job
        ) from None


def _schedules_of(declared: DeclaredJobs) -> dict[str, ParsedJobSchedule]:
    if isinstance(declared, Mapping):
        return dict(declared)
    return {declaration.name: declaration.schedule for declaration in declared}


def _read(job: str, given: JobSettings | Mapping[str, Any]) -> JobSettings:
    if isinstance(given, JobSettings):
        return given
    try:
        return JobSettings.model_validate(dict(given) if isinstance(given, Mapping) else given)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'settings'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise InvalidJobSettingsError(f"settings cannot be read: {problems}", job=job) from error


def _over(earlier: JobSettings, later: JobSettings) -> JobSettings:
    return earlier.model_copy(update={key: value for key, value in later if value is not None})


def _effective(job: str, declared: ParsedJobSchedule, settings: JobSettings) -> ParsedJobSchedule:
    if settings.schedule is None:
        schedule = _schedule_mapping(declared)
    else:
        schedule = {key: value for key, value in settings.schedule if value is not None}
        _checked(job, "schedule", lambda: parse_job_schedule(schedule, job=job))
    options = {**asdict(declared.options), **settings.options()}
    fields = ", ".join(settings.options()) or "schedule"
    return _checked(job, fields, lambda: parse_job_schedule({**schedule, **options}, job=job))


def _checked(job: str, fields: str, parse: Callable[[], _T]) -> _T:
    try:
        return parse()
    except DeclarationError as error:
        raise InvalidJobSettingsError(
            f"settings field {fields} cannot be used: {error.problem}", job=job
        ) from error


def _schedule_mapping(parsed: ParsedJobSchedule) -> dict[str, Any]:
    """The declared rule written back as the mapping it was read from."""
    rule = parsed.rule
    if isinstance(rule, IntervalRule):
        return {"every": rule.every_ms}
    return {"cron": rule.expression, "time_zone": rule.time_zone}
