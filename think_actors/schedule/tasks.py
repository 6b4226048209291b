"""Scheduled tasks: what a class or a call declares, what the store keeps, and what a handler is told.

A task belongs to one agent and does one of two things when an occurrence is due: a ``prompt`` becomes the
agent's ``submit_messages`` with the occurrence's idempotency key (so a second scheduler, or a restart in the
middle, cannot run it twice), or a ``handler`` (the name of an async method of the agent) is called with a
``ScheduledTaskContext``. Every due occurrence is one *fire*, keyed ``<task id>@<UTC time>``; its row in the
store is what makes two schedulers fire it once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from zoneinfo import ZoneInfo

from ..errors import ConfigurationError
from ..limits import RunLimits
from .spec import Schedule, ScheduleKind, parse_schedule

__all__ = [
    "ClassDeclaration",
    "FireRecord",
    "RetryPolicy",
    "ScheduledTask",
    "ScheduledTaskContext",
    "TaskInfo",
    "TaskRecord",
    "cron",
    "every",
    "occurrence_key",
]

FireStatus = Literal["claimed", "retry", "delivered", "failed", "cancelled"]
OPEN_FIRES: tuple[FireStatus, ...] = ("claimed", "retry")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often a fire is tried: a prompt whose agent cannot be reached, a handler that raised.

    Attempt ``n`` (from 1) failing waits ``min(max_delay_s, base_delay_s * 2 ** (n - 1))`` before the next; after
    ``max_attempts`` the fire is ``failed`` with the last error.
    """

    max_attempts: int = 3
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.max_attempts must be an int of at least 1, got {self.max_attempts!r}"
            )
        if not (self.base_delay_s >= 0 and self.max_delay_s >= 0):
            raise ConfigurationError("RetryPolicy delays must be 0 or more seconds")

    def delay_after(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledTask:
    """A task declared on an agent class (``schedules = [ta.every("1 hour", "check the inbox")]``).

    Exactly one of ``prompt`` and ``handler`` is set. ``id`` names the task across restarts (default: derived from
    the schedule and what it does, so an unchanged declaration keeps its place in the store). ``limits``
    (``RunLimits`` or a dict of its fields) bounds each turn a prompt starts, in place of the class's
    ``run_limits``; it is kept as the dict of the fields set.
    """

    schedule: str
    prompt: str | None = None
    handler: str | None = None
    id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()
    limits: Any = None

    def __post_init__(self) -> None:
        check_action(self.prompt, self.handler)
        check_metadata(self.metadata)
        parse_schedule(self.schedule)  # a bad spec fails where the class is defined
        if self.limits is not None:
            if self.prompt is None:
                raise ConfigurationError("limits= bounds the turn a scheduled prompt starts: a handler task has none")
            checked = RunLimits.of(self.limits)
            object.__setattr__(self, "limits", checked.model_dump(exclude_none=True) if checked else None)

    def task_id(self) -> str:
        if self.id is not None:
            return check_task_id(self.id)
        digest = hashlib.sha256(f"{self.schedule}\0{self.prompt}\0{self.handler}".encode()).hexdigest()[:12]
        return f"class-{digest}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassDeclaration:
    """What an agent class declares: its ``schedules`` and the zone of those that name none.

    The schedule store keeps the latest one registered per class name (``ScheduleStore.declare_class``), so a
    scheduler can tell a class row that the class no longer declares from one it does without importing the
    class: the process that registers it runs the class's current code, the scheduler may not.
    """

    agent_class: str
    default_timezone: str
    tasks: tuple[ScheduledTask, ...]

    @classmethod
    def of(cls, agent_class: str, declared: Any, default_timezone: str | None = None) -> ClassDeclaration:
        """The declaration of ``declared`` (a class's ``schedules``); ConfigurationError for an entry that is not a
        ``ScheduledTask`` or two entries with one id."""
        tasks = tuple(declared)
        for task in tasks:
            if not isinstance(task, ScheduledTask):
                raise ConfigurationError(
                    f"{agent_class}.schedules holds {task!r}: use ta.every(...) or ta.cron(...) entries"
                )
        ids = [t.task_id() for t in tasks]
        if len(set(ids)) != len(ids):
            raise ConfigurationError(f"{agent_class}.schedules declares one task twice: give each its own id=")
        return cls(agent_class=agent_class, default_timezone=default_timezone or "UTC", tasks=tasks)

    def records(self, agent_path: str, now: float) -> list[TaskRecord]:
        """The agent's class rows, as a registration at ``now`` writes them."""
        records = []
        for task in self.tasks:
            schedule = parse_schedule(task.schedule, self.default_timezone)
            records.append(
                TaskRecord(
                    agent_path=agent_path,
                    agent_class=self.agent_class,
                    task_id=task.task_id(),
                    spec=schedule.text,
                    timezone=schedule.timezone,
                    kind=schedule.kind,
                    anchor=now,
                    prompt=task.prompt,
                    handler=task.handler,
                    metadata=dict(task.metadata),
                    retry=task.retry,
                    source="class",
                    created_at=now,
                    next_at=schedule.first_after(now, now),
                    limits=task.limits,
                )
            )
        return records

    def matcher(self) -> Callable[[TaskRecord], bool]:
        """``declares(task)``: whether ``task``, a class row of an agent of this class, is one of these
        declarations as they are (the rows are built once, for every agent the matcher is asked about)."""
        templates = {r.task_id: r for r in self.records("", 0.0)}

        def declares(task: TaskRecord) -> bool:
            template = templates.get(task.task_id)
            return template is not None and task.same_declaration(replace(template, agent_path=task.agent_path))

        return declares

    def body(self) -> str:
        tasks = [
            {
                "schedule": t.schedule,
                "prompt": t.prompt,
                "handler": t.handler,
                "id": t.id,
                "metadata": t.metadata,
                "retry": [t.retry.max_attempts, t.retry.base_delay_s, t.retry.max_delay_s],
                **({"limits": t.limits} if t.limits is not None else {}),
            }
            for t in self.tasks
        ]
        return json.dumps({"default_timezone": self.default_timezone, "tasks": tasks}, separators=(",", ":"))

    @classmethod
    def from_body(cls, agent_class: str, body: str) -> ClassDeclaration:
        f = json.loads(body)
        tasks = []
        for t in f["tasks"]:
            attempts, base, most = t.pop("retry")
            tasks.append(
                ScheduledTask(retry=RetryPolicy(max_attempts=attempts, base_delay_s=base, max_delay_s=most), **t)
            )
        return cls(agent_class=agent_class, default_timezone=f["default_timezone"], tasks=tuple(tasks))


def every(schedule: str, prompt: str | None = None, *, handler: str | None = None, **options: Any) -> ScheduledTask:
    """A recurring task in Think's schedule language: ``every("1 hour", "check the inbox")``,
    ``every("day at 09:00 in Europe/Berlin", handler="report")`` (the leading ``every`` may be left out)."""
    text = schedule.strip()
    if not text.lower().startswith("every"):
        text = f"every {text}"
    return ScheduledTask(schedule=text, prompt=prompt, handler=handler, **options)


def cron(expression: str, prompt: str | None = None, *, handler: str | None = None, **options: Any) -> ScheduledTask:
    """A recurring task on a five-field cron expression: ``cron("0 9 * * mon-fri in Europe/Berlin", "standup")``."""
    if expression.strip().lower().startswith("every"):
        raise ConfigurationError(f"{expression!r} is Think's schedule language, not cron: use ta.every")
    return ScheduledTask(schedule=expression, prompt=prompt, handler=handler, **options)


def check_action(prompt: str | None, handler: str | None) -> None:
    if (prompt is None) == (handler is None):
        raise ConfigurationError(
            "a scheduled task needs exactly one of a prompt (a string) or a handler (a method name)"
        )
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise ConfigurationError(f"a scheduled prompt must be a non-empty string, got {prompt!r}")
    if handler is not None and (not isinstance(handler, str) or not handler.isidentifier()):
        raise ConfigurationError(f"a scheduled handler is the name of an async method of the agent, got {handler!r}")


def check_metadata(metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        raise ConfigurationError(f"schedule metadata must be a dict, got {type(metadata).__name__}")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"schedule metadata must be JSON (it is stored): {exc}") from None
    return metadata


def check_task_id(task_id: Any) -> str:
    if not isinstance(task_id, str) or not 1 <= len(task_id) <= 128 or "@" in task_id:
        raise ConfigurationError(f"a task id is 1-128 characters without '@', got {task_id!r}")
    return task_id


def occurrence_key(task_id: str, at: float) -> str:
    """``<task id>@<UTC time to the millisecond>``: the same occurrence always gets the same key."""
    stamp = dt.datetime.fromtimestamp(round(at, 3), dt.UTC).isoformat(timespec="milliseconds")
    return f"{task_id}@{stamp.replace('+00:00', 'Z')}"


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRecord:
    """A task as the store keeps it. ``next_at`` is its next due occurrence (None: a one-shot that has fired)."""

    agent_path: str
    agent_class: str
    task_id: str
    spec: str
    timezone: str
    kind: ScheduleKind
    anchor: float
    prompt: str | None
    handler: str | None
    metadata: dict[str, Any]
    retry: RetryPolicy
    source: Literal["class", "runtime"]
    created_at: float
    next_at: float | None
    limits: dict[str, Any] | None = None  # a prompt's RunLimits (their set fields), for the turn it starts

    def parsed(self) -> Schedule:
        if self.kind == "once":
            return Schedule.once(dt.datetime.fromisoformat(self.spec.removeprefix("at ")), self.timezone)
        return parse_schedule(self.spec, self.timezone)

    def body(self) -> str:
        """Everything but the indexed columns (agent, id, next_at), as JSON."""
        fields = {
            "agent_class": self.agent_class,
            "spec": self.spec,
            "timezone": self.timezone,
            "kind": self.kind,
            "anchor": self.anchor,
            "prompt": self.prompt,
            "handler": self.handler,
            "metadata": self.metadata,
            "retry": [self.retry.max_attempts, self.retry.base_delay_s, self.retry.max_delay_s],
            "source": self.source,
            "created_at": self.created_at,
        }
        if self.limits is not None:  # in the JSON body: no column, and rows without it read as before
            fields["limits"] = self.limits
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_row(cls, agent_path: str, task_id: str, next_at: float | None, body: str) -> TaskRecord:
        f = json.loads(body)
        attempts, base, most = f.pop("retry")
        return cls(
            agent_path=agent_path,
            task_id=task_id,
            next_at=next_at,
            retry=RetryPolicy(max_attempts=attempts, base_delay_s=base, max_delay_s=most),
            **f,
        )

    def same_declaration(self, other: TaskRecord) -> bool:
        """Whether ``other`` declares the same task (so a restart keeps this one's place)."""
        return replace(other, anchor=self.anchor, created_at=self.created_at, next_at=self.next_at) == self

    def info(self) -> TaskInfo:
        return TaskInfo(
            task_id=self.task_id,
            schedule=self.spec,
            kind=self.kind,
            timezone=self.timezone,
            prompt=self.prompt,
            handler=self.handler,
            metadata=self.metadata,
            source=self.source,
            next_at=self.next_at,
            created_at=self.created_at,
            limits=self.limits,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskInfo:
    """A task as ``list_schedules`` shows it; ``next_at`` is a unix time (None: nothing more will run)."""

    task_id: str
    schedule: str
    kind: ScheduleKind
    timezone: str
    prompt: str | None
    handler: str | None
    metadata: dict[str, Any]
    source: Literal["class", "runtime"]
    next_at: float | None
    created_at: float
    limits: dict[str, Any] | None = None  # the RunLimits fields a prompt's turn runs with (None: the class's)


@dataclass(frozen=True, kw_only=True, slots=True)
class FireRecord:
    """One due occurrence of a task, claimed by a scheduler.

    ``wake_at`` is when a scheduler looks at it again: the end of the claim (``claimed``: a scheduler that died
    while delivering it leaves it to the next) or the next attempt (``retry``).
    """

    agent_path: str
    key: str
    task: TaskRecord
    scheduled_for: float
    status: FireStatus
    attempts: int
    wake_at: float | None
    owner: str
    error: str | None = None

    def taken_by(self, owner: str, wake_at: float) -> FireRecord:
        """This fire as claimed again by ``owner`` until ``wake_at`` (one attempt more)."""
        return replace(self, status="claimed", attempts=self.attempts + 1, owner=owner, wake_at=wake_at)

    def facts(self) -> dict[str, Any]:
        """What the agent is told (a submission's metadata, a handler's context), as plain data."""
        task = self.task
        return {
            "task_id": task.task_id,
            "scheduled_for": self.scheduled_for,
            "occurrence_key": self.key,
            "idempotency_key": f"schedule:{self.key}",
            "schedule": task.spec,
            "schedule_kind": task.kind,
            "timezone": task.timezone,
            "metadata": task.metadata,
            "attempt": self.attempts,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduledTaskContext:
    """What a handler task gets for one occurrence (Think's ``{taskId, scheduledFor, ...}``)."""

    task_id: str
    scheduled_for: float
    scheduled_for_date: dt.datetime  # in the task's zone
    occurrence_key: str
    idempotency_key: str
    schedule: str
    schedule_kind: ScheduleKind
    timezone: str
    metadata: dict[str, Any]
    attempt: int

    @classmethod
    def from_facts(cls, facts: dict[str, Any]) -> ScheduledTaskContext:
        date = dt.datetime.fromtimestamp(facts["scheduled_for"], ZoneInfo(facts["timezone"]))
        return cls(scheduled_for_date=date, **facts)
