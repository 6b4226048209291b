"""Schedule specs (Think's schedule language, cron, one-shot) and their occurrences in real time.

Accepted (reference §1.10, Think's ``getScheduledTasks()``), each with an optional `` in <IANA zone>`` suffix:
``every N minutes`` / ``every N hours`` (also ``every minute``, ``every hour``, and ``every N seconds``, which
Think lacks), ``every day at HH:mm``, ``every weekday at HH:mm``, ``every week on mon,wed at HH:mm``, and a
five-field cron expression (``0 9 * * mon-fri``). A one-shot schedule is a unix time (``Schedule.once``).

Occurrences are unix times, computed by these rules, in this order:

1. An interval (``every N minutes``) counts real seconds from the task's anchor (when it was created): the
   occurrences are ``anchor + k * N`` for ``k >= 1``. Zones and daylight saving do not move it.
2. A wall-clock schedule (every day / weekday / week, cron) names times on the zone's clock. croniter iterates
   those clock times with no zone at all (so it never sees a transition), and each is mapped to real time with
   ``zoneinfo`` as PEP 495's ``fold=0`` does:
   - a clock time skipped by a spring-forward gap runs once, that many minutes after the gap (02:30 on a night
     whose clocks jump from 02:00 to 03:00 runs at 03:30); when the schedule also names that later time, the two
     are one occurrence and run once;
   - a clock time repeated by a fall-back runs once, at its first passing (the earlier offset); the repeat is
     not an occurrence. So an hourly cron skips the repeated hour: use ``every 1 hour`` for real-time hours.
3. Without a zone, a wall-clock schedule uses the agent's ``default_timezone``, else UTC.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from ..errors import ConfigurationError

__all__ = ["Schedule", "ScheduleKind", "parse_schedule", "zone_of"]

ScheduleKind = Literal["interval", "daily", "weekday", "weekly", "cron", "once"]

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_UNITS = {"second": 1, "minute": 60, "hour": 3600}
_EVERY_N = re.compile(r"every(?:\s+(\d+))?\s+(second|minute|hour)s?")
_AT = r"at\s+(\d{1,2}):(\d{2})"
_DAILY = re.compile(rf"every\s+(day|weekday)\s+{_AT}")
_WEEKLY = re.compile(rf"every\s+week\s+on\s+([a-z]{{3}}(?:\s*,\s*[a-z]{{3}})*)\s+{_AT}")
_ZONE_SUFFIX = re.compile(r"^(.*?)\s+in\s+(\S+)$", re.IGNORECASE)
# A clock-time lookup near a DST transition starts this far away: no zone's gap or fold is longer.
_TRANSITION_REACH = dt.timedelta(hours=3)
_HELP = (
    "use 'every N minutes|hours', 'every day at HH:mm', 'every weekday at HH:mm', "
    "'every week on mon,wed at HH:mm' (each optionally followed by ' in <IANA zone>'), "
    "or a five-field cron expression such as '0 9 * * mon-fri'"
)


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``, or ConfigurationError saying what a zone name looks like."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(
            f"unknown time zone {name!r}: use an IANA zone name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
        ) from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule: its kind, its canonical text, its zone, and how to find its occurrences."""

    kind: ScheduleKind
    text: str
    timezone: str
    period_s: float | None = None  # interval
    cron: str | None = None  # every wall-clock kind, as the cron expression it amounts to
    at: float | None = None  # once

    @classmethod
    def once(cls, at: float | dt.datetime, timezone: str = "UTC") -> Schedule:
        """A one-shot schedule at a unix time or an aware datetime (a naive one is read in ``timezone``)."""
        zone_of(timezone)
        if isinstance(at, dt.datetime):
            at = (at if at.tzinfo is not None else at.replace(tzinfo=zone_of(timezone))).timestamp()
        if not isinstance(at, int | float) or isinstance(at, bool) or not math.isfinite(at):
            raise ConfigurationError(f"a one-shot schedule needs a unix time or a datetime, got {at!r}")
        return cls("once", f"at {_iso(float(at))}", timezone, at=float(at))

    def first_after(self, now: float, anchor: float) -> float | None:
        """The first occurrence of a task created at ``anchor`` (``now``): a one-shot's time even if it has passed."""
        return self.at if self.kind == "once" else self.next_after(now, anchor)

    def next_after(self, t: float, anchor: float) -> float | None:
        """The first occurrence strictly after ``t``; None when there is none (a one-shot that has run)."""
        if self.kind == "once":
            assert self.at is not None
            return self.at if self.at > t else None
        if self.period_s is not None:
            k = max(math.floor((t - anchor) / self.period_s) + 1, 1)
            while anchor + k * self.period_s <= t:  # float rounding at the boundary
                k += 1
            return anchor + k * self.period_s
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        local = _local(t, zone)
        it = croniter(self.cron, local - _TRANSITION_REACH if _near_transition(t, zone) else local)
        while True:
            instant = _instant(it.get_next(dt.datetime), zone)
            if instant > t:
                return instant

    def latest_at_or_before(self, t: float, anchor: float) -> float | None:
        """The last occurrence at or before ``t``; None when there is none yet."""
        if self.kind == "once":
            assert self.at is not None
            return self.at if self.at <= t else None
        if self.period_s is not None:
            k = math.floor((t - anchor) / self.period_s)
            while k >= 1 and anchor + k * self.period_s > t:
                k -= 1
            return anchor + k * self.period_s if k >= 1 else None
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        local = _local(t, zone) + dt.timedelta(seconds=1)  # get_prev is strictly before its start
        it = croniter(self.cron, local + _TRANSITION_REACH if _near_transition(t, zone) else local)
        while True:
            instant = _instant(it.get_prev(dt.datetime), zone)
            if instant <= t:
                return instant


def parse_schedule(spec: str, default_timezone: str | None = None) -> Schedule:
    """Parse a schedule spec (see the module docstring); ConfigurationError says what is accepted."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigurationError(f"bad schedule {spec!r}: {_HELP}")
    text = " ".join(spec.strip().split())
    body, zone = text, default_timezone or "UTC"
    if match := _ZONE_SUFFIX.match(text):
        body, zone = match.group(1), match.group(2)
    zone_of(zone)
    lowered = body.lower()
    if match := _EVERY_N.fullmatch(lowered):
        count = int(match.group(1) or 1)
        if count < 1:
            raise ConfigurationError(f"bad schedule {spec!r}: the interval must be at least 1")
        unit = match.group(2)
        return Schedule(
            "interval", f"every {count} {unit}{'s' if count > 1 else ''}", zone, period_s=count * _UNITS[unit]
        )
    if match := _DAILY.fullmatch(lowered):
        hour, minute = _clock(spec, match.group(2), match.group(3))
        days = "*" if match.group(1) == "day" else "mon-fri"
        return Schedule(
            "daily" if days == "*" else "weekday",
            f"every {match.group(1)} at {hour:02d}:{minute:02d} in {zone}",
            zone,
            cron=f"{minute} {hour} * * {days}",
        )
    if match := _WEEKLY.fullmatch(lowered):
        named = [d.strip() for d in match.group(1).split(",")]
        unknown = [d for d in named if d not in _DAYS]
        if unknown:
            raise ConfigurationError(f"bad schedule {spec!r}: unknown day {unknown[0]!r}; use {', '.join(_DAYS)}")
        hour, minute = _clock(spec, match.group(2), match.group(3))
        ordered = [d for d in _DAYS if d in named]
        return Schedule(
            "weekly",
            f"every week on {','.join(ordered)} at {hour:02d}:{minute:02d} in {zone}",
            zone,
            cron=f"{minute} {hour} * * {','.join(ordered)}",
        )
    if lowered.startswith("every"):
        raise ConfigurationError(f"bad schedule {spec!r}: {_HELP}")
    fields = lowered.split()
    if len(fields) != 5:
        raise ConfigurationError(
            f"bad schedule {spec!r}: a cron expression has 5 fields, this has {len(fields)}; {_HELP}"
        )
    try:
        croniter(lowered, dt.datetime(2026, 1, 1)).get_next(dt.datetime)
    except (CroniterError, ValueError) as exc:
        raise ConfigurationError(f"bad cron expression {body!r}: {exc}") from None
    return Schedule("cron", f"{lowered} in {zone}", zone, cron=lowered)


def _clock(spec: str, hour: str, minute: str) -> tuple[int, int]:
    h, m = int(hour), int(minute)
    if not (0 <= h <= 23 and 0 <= m <= 59):
        raise ConfigurationError(f"bad schedule {spec!r}: {hour}:{minute} is not a time of day (HH:mm, 00:00-23:59)")
    return h, m


def _local(t: float, zone: ZoneInfo) -> dt.datetime:
    """The zone's clock reading at unix time ``t``, without a zone (what croniter iterates)."""
    return dt.datetime.fromtimestamp(t, zone).replace(tzinfo=None)


def _instant(clock: dt.datetime, zone: ZoneInfo) -> float:
    # fold=0: a skipped time maps past the gap, a repeated one to its first passing (module docstring, rule 2).
    return clock.replace(tzinfo=zone, fold=0).timestamp()


def _near_transition(t: float, zone: ZoneInfo) -> bool:
    reach = _TRANSITION_REACH.total_seconds()
    offsets = {dt.datetime.fromtimestamp(x, zone).utcoffset() for x in (t - reach, t, t + reach)}
    return len(offsets) > 1


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
