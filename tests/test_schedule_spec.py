"""Schedule specs: Think's schedule language, cron, one-shot, and occurrences across DST transitions in real zones.

The DST dates are the European Union's 2026 changes (last Sunday of March and of October, 01:00 UTC) and the
United States' (second Sunday of March, first Sunday of November, 02:00 local), as the IANA tz database that
``zoneinfo`` reads has them.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

import think_actors as ta
from think_actors.schedule import Schedule, parse_schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int, fold: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).timestamp()


def utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")


def local(t: float, zone: ZoneInfo) -> str:
    return dt.datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M %Z")


def run(schedule: Schedule, start: float, count: int, anchor: float | None = None) -> list[float]:
    out, t = [], start
    for _ in range(count):
        nxt = schedule.next_after(t, start if anchor is None else anchor)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


@pytest.mark.parametrize(
    ("spec", "kind", "text", "cron"),
    [
        ("every 5 minutes", "interval", "every 5 minutes", None),
        ("every minute", "interval", "every 1 minute", None),
        ("Every 2 Hours", "interval", "every 2 hours", None),
        ("every 1 hour in Europe/Berlin", "interval", "every 1 hour", None),
        ("every day at 9:05", "daily", "every day at 09:05 in UTC", "5 9 * * *"),
        (
            "every weekday at 18:30 in Europe/Berlin",
            "weekday",
            "every weekday at 18:30 in Europe/Berlin",
            "30 18 * * mon-fri",
        ),
        ("every week on wed, mon at 07:00", "weekly", "every week on mon,wed at 07:00 in UTC", "0 7 * * mon,wed"),
        ("0 9 * * mon-fri", "cron", "0 9 * * mon-fri in UTC", "0 9 * * mon-fri"),
        ("*/15 8-17 * * * in America/New_York", "cron", "*/15 8-17 * * * in America/New_York", "*/15 8-17 * * *"),
    ],
)
def test_each_spec_form_parses_to_its_kind_and_canonical_text(
    spec: str, kind: str, text: str, cron: str | None
) -> None:
    schedule = parse_schedule(spec)
    assert (schedule.kind, schedule.text, schedule.cron) == (kind, text, cron)


def test_a_spec_without_a_zone_takes_the_default_zone() -> None:
    assert parse_schedule("every day at 09:00", "Europe/Berlin").timezone == "Europe/Berlin"
    assert parse_schedule("every day at 09:00 in Asia/Tokyo", "Europe/Berlin").timezone == "Asia/Tokyo"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("every fortnight", "every N minutes"),
        ("every day at 25:00", "not a time of day"),
        ("every week on mon,xyz at 09:00", "unknown day 'xyz'"),
        ("every day at 09:00 in Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("0 9 * *", "has 5 fields, this has 4"),
        ("61 * * * *", "bad cron expression"),
        ("every 0 minutes", "at least 1"),
        ("", "bad schedule"),
    ],
)
def test_a_bad_spec_says_what_is_accepted(spec: str, message: str) -> None:
    with pytest.raises(ta.ConfigurationError, match=message):
        parse_schedule(spec)


def test_interval_occurrences_count_real_seconds_from_the_anchor() -> None:
    schedule = parse_schedule("every 90 minutes")
    anchor = at(BERLIN, 2026, 3, 29, 0, 0)  # the spring-forward night: an interval does not care
    assert [utc(t) for t in run(schedule, anchor, 3)] == ["2026-03-29 00:30", "2026-03-29 02:00", "2026-03-29 03:30"]
    assert schedule.latest_at_or_before(anchor + 5 * 3600, anchor) == anchor + 3 * 5400
    assert schedule.latest_at_or_before(anchor + 60, anchor) is None


def test_weekday_and_weekly_schedules_skip_the_other_days() -> None:
    friday = at(BERLIN, 2026, 12, 4, 12, 0)
    weekday = parse_schedule("every weekday at 09:00 in Europe/Berlin")
    assert [local(t, BERLIN) for t in run(weekday, friday, 2)] == ["2026-12-07 09:00 CET", "2026-12-08 09:00 CET"]
    weekly = parse_schedule("every week on mon,wed at 07:30 in Europe/Berlin")
    assert [local(t, BERLIN) for t in run(weekly, friday, 3)] == [
        "2026-12-07 07:30 CET",
        "2026-12-09 07:30 CET",
        "2026-12-14 07:30 CET",
    ]


def test_a_wall_clock_time_keeps_its_local_hour_across_a_transition() -> None:
    daily = parse_schedule("every day at 09:00 in Europe/Berlin")
    times = run(daily, at(BERLIN, 2026, 3, 28, 12, 0), 2)
    assert [local(t, BERLIN) for t in times] == ["2026-03-29 09:00 CEST", "2026-03-30 09:00 CEST"]
    assert [utc(t) for t in times] == ["2026-03-29 07:00", "2026-03-30 07:00"]


def test_a_time_skipped_by_spring_forward_runs_once_after_the_gap() -> None:
    # Berlin, 2026-03-29: clocks go from 02:00 CET to 03:00 CEST; 02:30 does not exist that night.
    daily = parse_schedule("every day at 02:30 in Europe/Berlin")
    times = run(daily, at(BERLIN, 2026, 3, 28, 12, 0), 3)
    assert [local(t, BERLIN) for t in times] == [
        "2026-03-29 03:30 CEST",  # 02:30 + the hour the clocks skipped
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]
    # From inside the night, after the gap but before 03:30, the day's run is still ahead, and only once.
    assert daily.next_after(at(BERLIN, 2026, 3, 29, 3, 10), 0) == times[0]
    assert daily.latest_at_or_before(at(BERLIN, 2026, 3, 29, 3, 10), 0) == at(BERLIN, 2026, 3, 28, 2, 30)


def test_a_skipped_time_and_the_time_it_maps_to_are_one_occurrence() -> None:
    # Half-hourly: 02:00 and 02:30 do not exist; 02:30 maps onto 03:30, which the schedule names anyway.
    half_hourly = parse_schedule("*/30 * * * * in Europe/Berlin")
    times = run(half_hourly, at(BERLIN, 2026, 3, 29, 1, 0), 4)
    assert [local(t, BERLIN) for t in times] == [
        "2026-03-29 01:30 CET",
        "2026-03-29 03:00 CEST",  # 02:00 mapped past the gap
        "2026-03-29 03:30 CEST",  # 02:30 and 03:30: one run
        "2026-03-29 04:00 CEST",
    ]
    assert len(set(times)) == len(times)


def test_a_time_repeated_by_fall_back_runs_once_at_its_first_passing() -> None:
    # New York, 2026-11-01: clocks go from 02:00 EDT back to 01:00 EST; 01:30 happens twice.
    daily = parse_schedule("every day at 01:30 in America/New_York")
    times = run(daily, at(NEW_YORK, 2026, 10, 31, 12, 0), 2)
    assert [local(t, NEW_YORK) for t in times] == ["2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]
    first, second = at(NEW_YORK, 2026, 11, 1, 1, 30, fold=0), at(NEW_YORK, 2026, 11, 1, 1, 30, fold=1)
    assert second - first == 3600 and times[0] == first
    # Between the two passings (01:10 EST, the repeat): the run is behind us, the next is tomorrow.
    during_repeat = at(NEW_YORK, 2026, 11, 1, 1, 10, fold=1)
    assert daily.next_after(during_repeat, 0) == times[1]
    assert daily.latest_at_or_before(during_repeat, 0) == first


def test_an_hourly_cron_skips_the_repeated_hour_of_fall_back() -> None:
    hourly = parse_schedule("15 * * * * in America/New_York")
    times = run(hourly, at(NEW_YORK, 2026, 11, 1, 0, 0), 3)
    assert [local(t, NEW_YORK) for t in times] == [
        "2026-11-01 00:15 EDT",
        "2026-11-01 01:15 EDT",
        "2026-11-01 02:15 EST",
    ]


def test_a_one_shot_schedule_has_one_occurrence() -> None:
    moment = dt.datetime(2026, 12, 24, 18, 0, tzinfo=BERLIN)
    once = Schedule.once(moment)
    assert once.next_after(moment.timestamp() - 1, 0) == moment.timestamp()
    assert once.next_after(moment.timestamp(), 0) is None
    assert once.first_after(moment.timestamp() + 100, 0) == moment.timestamp()  # a past one still runs, once
    naive = Schedule.once(dt.datetime(2026, 12, 24, 18, 0), "Europe/Berlin")
    assert naive.at == moment.timestamp() and once.text == "at 2026-12-24T17:00:00.000Z"
    with pytest.raises(ta.ConfigurationError, match="unix time or a datetime"):
        Schedule.once("tomorrow")  # type: ignore[arg-type]


def test_class_declarations_check_their_spec_and_action_where_the_class_is_defined() -> None:
    task = ta.every("1 hour", "check the inbox")
    assert task.schedule == "every 1 hour" and task.task_id() == ta.every("every 1 hour", "check the inbox").task_id()
    assert ta.cron("0 9 * * mon-fri", handler="report").task_id() != ta.cron("0 9 * * mon-fri", "report").task_id()
    with pytest.raises(ta.ConfigurationError, match="exactly one of a prompt"):
        ta.every("1 hour")
    with pytest.raises(ta.ConfigurationError, match=r"use ta\.every"):
        ta.cron("every day at 09:00", "x")
    with pytest.raises(ta.ConfigurationError, match="must be JSON"):
        ta.every("1 hour", "x", metadata={"when": dt.date(2026, 1, 1)})
    with pytest.raises(ta.ConfigurationError, match=r"RetryPolicy\.max_attempts"):
        ta.RetryPolicy(max_attempts=0)
