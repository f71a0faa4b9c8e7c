"""The sans-IO rules of an occurrence: its moves, its lock, its lateness, its jitter."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddd_celery.declarations.cron_evaluator import latest_occurrence, next_occurrence
from ddd_celery.declarations.options import JobOptions
from ddd_celery.declarations.schedule import parse_job_schedule
from ddd_celery.scheduling import occurrence
from ddd_celery.scheduling.occurrence import (
    MAX_SLEEP_MS,
    MOVES,
    Event,
    IllegalMoveError,
    Occurrence,
    Reach,
    SchedulerRules,
    StartPlan,
    Step,
    is_late,
    jitter_delay_ms,
    lock_key,
    lock_ttl_ms,
    plan_start,
    reach,
    run_ttl_ms,
    sleep_ms,
)
from ddd_celery.scheduling.outcomes import Outcome

JOB = "billing.send-payment-reminders"
SIX = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
TEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
QUARTER = timedelta(minutes=15)
RULES = SchedulerRules()
EVERY_15M = parse_job_schedule({"every": "15m"})
EVERY_15M_RUN_ONCE = parse_job_schedule({"every": "15m", "missed": "run-once"})

ILLEGAL = [(step, event) for step in Step for event in Event if (step, event) not in MOVES]


# -- the table of moves ---------------------------------------------------------------------


@pytest.mark.parametrize(("step", "event", "target"), [(*key, to) for key, to in MOVES.items()])
def test_every_legal_move_reaches_its_step(step: Step, event: Event, target: Step) -> None:
    current = Occurrence(JOB, SIX, step)

    assert current.move(event) is target
    assert current.step is target


@pytest.mark.parametrize(("step", "event"), ILLEGAL)
def test_an_illegal_move_raises_and_changes_nothing(step: Step, event: Event) -> None:
    current = Occurrence(JOB, SIX, step)

    with pytest.raises(IllegalMoveError, match=re.escape(f"{JOB} at 2026-03-02T06:00:00.000Z")):
        current.move(event)

    assert current.step is step


def test_an_occurrence_starts_scheduled_with_no_outcome() -> None:
    current = Occurrence(JOB, SIX)

    assert current.step is Step.SCHEDULED
    assert current.outcome is None


def test_the_terminal_steps_are_exactly_the_outcomes_and_nothing_leaves_them() -> None:
    terminal = {step for step in Step if step.outcome is not None}
    sources = {step for step, _ in MOVES}

    assert {step.outcome for step in terminal} == set(Outcome)
    assert not terminal & sources
    assert set(Step) - terminal <= sources


def test_every_step_can_be_reached_from_scheduled() -> None:
    reached, frontier = {Step.SCHEDULED}, [Step.SCHEDULED]
    while frontier:
        step = frontier.pop()
        for (source, _), target in MOVES.items():
            if source is step and target not in reached:
                reached.add(target)
                frontier.append(target)

    assert reached == set(Step)


def test_a_run_that_succeeds_walks_the_table_to_its_outcome() -> None:
    current = Occurrence(JOB, SIX)
    path = [
        Event.REACHED,
        Event.ON_TIME,
        Event.JITTER_ELAPSED,
        Event.LOCK_TAKEN,
        Event.STARTED,
        Event.SUCCEEDED,
    ]

    steps = [current.move(event) for event in path]

    assert steps[-1] is Step.SUCCEEDED
    assert current.outcome is Outcome.SUCCEEDED


def diagram_moves() -> set[tuple[str, str, str]]:
    """The moves the module docstring draws: ``source --event | event--> target``."""
    doc = occurrence.__doc__ or ""
    diagram = doc.split("::", 1)[1]
    arrow = re.compile(r"([\w-]+) --([\w| ]+?)--> (?=([\w-]+))")
    return {
        (source, event.strip(), target)
        for source, events, target in arrow.findall(diagram)
        for event in events.split("|")
    }


def test_the_diagram_in_the_docs_draws_exactly_the_table() -> None:
    table = {(step.value, event.value, target.value) for (step, event), target in MOVES.items()}

    assert diagram_moves() == table


# -- the lock -------------------------------------------------------------------------------


def test_the_lock_key_is_the_job_and_its_instant_in_utc_with_milliseconds() -> None:
    assert lock_key(JOB, SIX) == "job:billing.send-payment-reminders:2026-03-02T06:00:00.000Z"


def test_the_lock_key_names_the_same_instant_whatever_zone_it_was_given_in() -> None:
    paris = timezone(timedelta(hours=1))

    assert lock_key(JOB, datetime(2026, 3, 2, 7, 0, tzinfo=paris)) == lock_key(JOB, SIX)
    assert lock_key(JOB, SIX + timedelta(microseconds=1_500)) == (
        "job:billing.send-payment-reminders:2026-03-02T06:00:00.001Z"
    )


def test_the_lock_key_refuses_a_naive_instant() -> None:
    with pytest.raises(ValueError, match="aware"):
        lock_key(JOB, datetime(2026, 3, 2, 6, 0))


def test_the_lock_lives_for_the_timeout_plus_the_jitter_and_the_lateness() -> None:
    options = JobOptions(timeout_ms=60_000, jitter_ms=5_000)

    assert lock_ttl_ms(options, RULES) == 60_000 + 5_000 + 60_000
    assert lock_ttl_ms(options, SchedulerRules(late_after_ms=10_000)) == 75_000


def test_without_a_timeout_the_lock_lives_for_the_lock_ttl_plus_jitter_and_lateness() -> None:
    assert lock_ttl_ms(JobOptions(), RULES) == 15 * 60_000 + 60_000
    assert lock_ttl_ms(JobOptions(jitter_ms=2_000), SchedulerRules(lock_ttl_ms=1_000)) == (
        1_000 + 2_000 + 60_000
    )


def test_a_run_counts_as_in_progress_for_its_timeout_or_the_lock_ttl_plus_lateness() -> None:
    assert run_ttl_ms(JobOptions(timeout_ms=60_000), RULES) == 60_000 + 60_000
    assert run_ttl_ms(JobOptions(), RULES) == 15 * 60_000 + 60_000


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "60000"])
@pytest.mark.parametrize("name", ["late_after_ms", "lock_ttl_ms"])
def test_scheduler_rules_refuse_what_is_not_a_positive_int_of_ms(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        SchedulerRules(**{name: value})  # type: ignore[arg-type]


# -- jitter ---------------------------------------------------------------------------------


@given(
    jitter_ms=st.integers(min_value=1, max_value=10**9),
    drawn=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_the_jitter_delay_is_at_least_zero_and_below_jitter_ms(
    jitter_ms: int, drawn: float
) -> None:
    delay = jitter_delay_ms(JobOptions(jitter_ms=jitter_ms), lambda: drawn)

    assert isinstance(delay, int)
    assert 0 <= delay < jitter_ms


@given(jitter_ms=st.integers(min_value=1, max_value=10**15))
def test_the_largest_draw_below_one_stays_below_jitter_ms(jitter_ms: int) -> None:
    largest = math.nextafter(1.0, 0.0)

    assert jitter_delay_ms(JobOptions(jitter_ms=jitter_ms), lambda: largest) == jitter_ms - 1


def test_without_jitter_there_is_no_delay_and_nothing_is_drawn() -> None:
    def draw() -> float:
        raise AssertionError("drew a random number for a job without jitter")

    assert jitter_delay_ms(JobOptions(), draw) == 0


def test_the_jitter_delay_scales_the_draw() -> None:
    assert jitter_delay_ms(JobOptions(jitter_ms=10_000), lambda: 0.25) == 2_500


# -- lateness and gaps ----------------------------------------------------------------------


def test_an_occurrence_reached_exactly_late_after_ms_after_its_instant_is_on_time() -> None:
    assert not is_late(TEN, TEN + timedelta(milliseconds=60_000), RULES)


def test_an_occurrence_reached_past_late_after_ms_is_late() -> None:
    assert is_late(TEN, TEN + timedelta(milliseconds=60_001), RULES)
    assert is_late(TEN, TEN + timedelta(milliseconds=60_000, microseconds=1), RULES)


def test_a_timer_a_few_seconds_late_is_on_time() -> None:
    assert not is_late(TEN, TEN + timedelta(seconds=5), RULES)
    assert not is_late(TEN, TEN, RULES)


def test_lateness_follows_the_scheduler_rule() -> None:
    assert is_late(TEN, TEN + timedelta(seconds=11), SchedulerRules(late_after_ms=10_000))


def test_an_occurrence_reached_on_time_runs() -> None:
    assert reach(EVERY_15M, TEN, TEN + timedelta(seconds=30), RULES) == Reach(
        run=TEN, missed=None, resume_after=TEN
    )


def test_one_late_occurrence_is_missed_once_with_its_instant() -> None:
    assert reach(EVERY_15M, TEN, TEN + 5 * MINUTE, RULES) == Reach(
        run=None, missed=TEN, resume_after=TEN
    )


def test_a_gap_of_late_occurrences_is_missed_once_with_its_first_instant() -> None:
    now = TEN + timedelta(hours=1, seconds=30)

    decided = reach(EVERY_15M, TEN, now, RULES)

    assert decided == Reach(run=None, missed=TEN, resume_after=TEN + 3 * QUARTER)


def test_the_instant_after_a_gap_that_is_still_on_time_is_reached_and_runs() -> None:
    now = TEN + timedelta(hours=1, seconds=30)
    gap = reach(EVERY_15M, TEN, now, RULES)
    following = TEN + timedelta(hours=1)

    assert gap.resume_after < following
    assert reach(EVERY_15M, following, now, RULES) == Reach(
        run=following, missed=None, resume_after=following
    )


def test_with_run_once_the_latest_late_occurrence_runs_and_nothing_is_missed() -> None:
    now = TEN + timedelta(hours=1, seconds=30)

    decided = reach(EVERY_15M_RUN_ONCE, TEN, now, RULES)

    assert decided == Reach(run=TEN + 3 * QUARTER, missed=None, resume_after=TEN + 3 * QUARTER)


def test_with_run_once_a_single_late_occurrence_runs() -> None:
    assert reach(EVERY_15M_RUN_ONCE, TEN, TEN + 5 * MINUTE, RULES) == Reach(
        run=TEN, missed=None, resume_after=TEN
    )


def test_a_gap_ends_at_the_last_instant_that_is_late_by_the_scheduler_rule() -> None:
    now = TEN + 2 * QUARTER + timedelta(seconds=10)

    assert reach(EVERY_15M, TEN, now, SchedulerRules(late_after_ms=10_000)).resume_after == (
        TEN + QUARTER
    )
    assert reach(EVERY_15M, TEN, now, SchedulerRules(late_after_ms=9_999)).resume_after == (
        TEN + 2 * QUARTER
    )


def test_a_cron_gap_is_measured_on_the_cron_instants() -> None:
    weekdays = parse_job_schedule(
        {"cron": "0 7 * * 1-5", "time_zone": "Europe/Paris", "missed": "run-once"}
    )
    monday = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)

    decided = reach(weekdays, monday, datetime(2026, 3, 4, 12, 0, tzinfo=UTC), RULES)

    assert decided.run == datetime(2026, 3, 4, 6, 0, tzinfo=UTC)


# -- start and sleep ------------------------------------------------------------------------


def test_a_start_without_checkpoint_waits_for_the_first_instant_after_now() -> None:
    assert plan_start(EVERY_15M, TEN + 7 * MINUTE, None, RULES) == StartPlan(
        None, None, TEN + QUARTER
    )


def test_a_start_whose_checkpoint_is_recent_waits_for_the_next_instant() -> None:
    assert plan_start(EVERY_15M, TEN + 7 * MINUTE, TEN, RULES) == StartPlan(
        None, None, TEN + QUARTER
    )


def test_a_long_stop_with_skip_is_one_missed_record_and_the_next_instant_runs() -> None:
    plan = plan_start(EVERY_15M, TEN + timedelta(hours=3, minutes=7), TEN, RULES)

    assert plan == StartPlan(TEN + QUARTER, TEN + timedelta(hours=3), TEN + 13 * QUARTER)


def test_a_long_stop_with_run_once_catches_up_the_latest_instant_only() -> None:
    plan = plan_start(EVERY_15M_RUN_ONCE, TEN + timedelta(hours=3, minutes=7), TEN, RULES)

    assert plan == StartPlan(None, None, TEN + timedelta(hours=3))
    assert reach(
        EVERY_15M_RUN_ONCE, plan.first_due, TEN + timedelta(hours=3, minutes=7), RULES
    ) == (Reach(run=TEN + timedelta(hours=3), missed=None, resume_after=TEN + timedelta(hours=3)))


EVERY_1S = parse_job_schedule({"every": "1s"})
EVERY_1S_RUN_ONCE = parse_job_schedule({"every": "1s", "missed": "run-once"})
SECOND = timedelta(seconds=1)


def test_a_short_stop_with_skip_never_replays_its_gap_and_runs_the_latest_on_time() -> None:
    # stopped after 10:00:00, started at 10:00:10.4: ten instants passed, all within lateness
    plan = plan_start(EVERY_1S, TEN + timedelta(seconds=10.4), TEN, RULES)

    assert plan == StartPlan(TEN + SECOND, TEN + 9 * SECOND, TEN + 10 * SECOND)


def test_a_short_stop_with_run_once_runs_the_latest_instant_once_and_records_no_gap() -> None:
    plan = plan_start(EVERY_1S_RUN_ONCE, TEN + timedelta(seconds=10.4), TEN, RULES)

    assert plan == StartPlan(None, None, TEN + 10 * SECOND)


def test_a_stop_of_one_instant_runs_it_on_time_with_no_gap() -> None:
    assert plan_start(EVERY_1S, TEN + timedelta(seconds=1.5), TEN, RULES) == StartPlan(
        None, None, TEN + SECOND
    )


def test_a_start_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="aware"):
        plan_start(EVERY_15M, datetime(2026, 3, 2, 10, 0), None, RULES)


@given(
    checkpoint_s=st.integers(min_value=0, max_value=10_000),
    stop_s=st.integers(min_value=0, max_value=10_000),
    every_s=st.integers(min_value=1, max_value=3_600),
    run_once=st.booleans(),
)
def test_a_start_never_runs_more_than_one_instant_of_its_gap(
    checkpoint_s: int, stop_s: int, every_s: int, run_once: bool
) -> None:
    schedule = parse_job_schedule(
        {"every": every_s * 1000, "missed": "run-once" if run_once else "skip"}
    )
    checkpoint = TEN + timedelta(seconds=checkpoint_s)
    now = checkpoint + timedelta(seconds=stop_s, milliseconds=500)
    plan = plan_start(schedule, now, checkpoint, RULES)

    assert plan.first_due > checkpoint
    if plan.first_due <= now:
        # the one instant of the gap that still runs is its latest
        assert plan.first_due == latest_occurrence(schedule, after=checkpoint, not_after=now)
    else:
        assert plan.first_due == next_occurrence(schedule, now)
    if plan.missed is not None:
        assert plan.dropped_until is not None
        assert checkpoint < plan.missed <= plan.dropped_until <= now
        assert not run_once


def test_a_driver_sleeps_until_its_next_instant() -> None:
    assert sleep_ms(TEN, TEN + timedelta(milliseconds=1_234)) == 1_234


def test_a_driver_does_not_sleep_for_an_instant_that_passed() -> None:
    assert sleep_ms(TEN, TEN - MINUTE) == 0
    assert sleep_ms(TEN, TEN) == 0


def test_a_driver_with_nothing_to_wait_for_sleeps_an_hour() -> None:
    assert sleep_ms(TEN, None) == MAX_SLEEP_MS == 3_600_000


@given(offset_us=st.integers(min_value=-(10**13), max_value=10**13))
def test_a_driver_never_sleeps_more_than_an_hour_nor_less_than_zero(offset_us: int) -> None:
    offset = timedelta(microseconds=offset_us)

    slept = sleep_ms(TEN, TEN + offset)

    assert 0 <= slept <= MAX_SLEEP_MS
    if timedelta(0) <= offset <= timedelta(hours=1):
        assert abs(timedelta(milliseconds=slept) - offset) < timedelta(milliseconds=1)


def test_a_lock_may_be_released_once_no_instance_can_reach_its_occurrence_on_time() -> None:
    rules = occurrence.SchedulerRules(late_after_ms=60_000)
    options = JobOptions(jitter_ms=5_000)
    due = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)

    assert occurrence.release_after(due, options, rules) == due + timedelta(seconds=65)
