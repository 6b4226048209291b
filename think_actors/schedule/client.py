"""An agent's side of scheduling: add, list and cancel its tasks in the store, and run its handler tasks.

``AgentSchedules`` writes the agent's rows in the schedule store; the scheduler (in process, or the cluster's
actor) finds them there. It never talks to the scheduler except to ``notify`` it that something changed; on a
cluster there is nothing to notify and the scheduler sees the row at its next poll.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..limits import RunLimits
from .clock import Clock, SystemClock
from .spec import Schedule, parse_schedule
from .store import ScheduleStore
from .tasks import (
    ClassDeclaration,
    RetryPolicy,
    ScheduledTask,
    ScheduledTaskContext,
    TaskInfo,
    TaskRecord,
    check_action,
    check_metadata,
    check_task_id,
)

__all__ = ["AgentSchedules", "run_handler"]

_DONE_KEEP = 32  # occurrences of one handler task remembered as done (a late retry of an older one stays safe)


class AgentSchedules:
    """The scheduled tasks of the agent ``agent_path`` (class ``agent_class``) in ``store``."""

    def __init__(
        self,
        store: ScheduleStore,
        agent_path: str,
        agent_class: str,
        *,
        default_timezone: str | None = None,
        clock: Clock | None = None,
        notify: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.agent_path = agent_path
        self.agent_class = agent_class
        self.default_timezone = default_timezone or "UTC"
        self.clock: Clock = clock or SystemClock()
        self._notify = notify

    async def schedule(
        self,
        when: float | dt.datetime | str | Schedule,
        prompt: str | None = None,
        *,
        handler: str | None = None,
        metadata: dict[str, Any] | None = None,
        task_id: str | None = None,
        retry: RetryPolicy | None = None,
        timezone: str | None = None,
        limits: RunLimits | dict[str, Any] | None = None,
    ) -> TaskInfo:
        """Add a task (or replace the agent's task ``task_id``) and return it.

        ``when``: seconds from now or a datetime (one shot), or a schedule spec (recurring: Think's language or
        cron) or a ``Schedule``. ``timezone`` is the zone of a spec without one (default: the agent's). ``limits``
        (``RunLimits`` or a dict of its fields) bounds each turn a prompt starts, instead of the class's
        ``run_limits``.
        """
        check_action(prompt, handler)
        run_limits = RunLimits.of(limits)
        if run_limits is not None and prompt is None:
            raise ConfigurationError("limits= bounds the turn a scheduled prompt starts: a handler task has none")
        zone = timezone or self.default_timezone
        schedule = _schedule_of(when, zone, self.clock.now())
        now = self.clock.now()
        task = TaskRecord(
            agent_path=self.agent_path,
            agent_class=self.agent_class,
            task_id=check_task_id(task_id) if task_id is not None else f"task-{uuid.uuid4().hex[:12]}",
            spec=schedule.text,
            timezone=schedule.timezone,
            kind=schedule.kind,
            anchor=now,
            prompt=prompt,
            handler=handler,
            metadata=check_metadata(dict(metadata or {})),
            retry=retry or RetryPolicy(),
            source="runtime",
            created_at=now,
            next_at=schedule.first_after(now, now),
            limits=run_limits.model_dump(exclude_none=True) if run_limits is not None else None,
        )
        await self.store.put_task(task)
        self._changed()
        return task.info()

    async def list(self) -> list[TaskInfo]:
        """The agent's tasks, the next to run first."""
        return [t.info() for t in await self.store.list_tasks(self.agent_path)]

    async def cancel(self, task_id: str) -> bool:
        """Remove the task (a retry it was waiting for is cancelled too); False when there was none."""
        gone = await self.store.delete_task(self.agent_path, task_id)
        self._changed()
        return gone

    async def sync_class(self, declared: Sequence[ScheduledTask]) -> None:
        """Make the store hold exactly the class's declared tasks (an unchanged one keeps its next occurrence),
        and record the declaration as the class's latest (what the scheduler checks a class row against)."""
        declaration = ClassDeclaration.of(self.agent_class, declared, self.default_timezone)
        await self.store.sync_class_tasks(self.agent_path, declaration.records(self.agent_path, self.clock.now()))
        await self.store.declare_class(declaration)
        self._changed()

    def _changed(self) -> None:
        if self._notify is not None:
            self._notify()


def _schedule_of(when: Any, zone: str, now: float) -> Schedule:
    if isinstance(when, Schedule):
        return when
    if isinstance(when, dt.datetime):
        return Schedule.once(when, zone)
    if isinstance(when, int | float) and not isinstance(when, bool):
        if not math.isfinite(when) or when < 0:
            raise ConfigurationError(f"a delay is 0 or more seconds, got {when!r}")
        return Schedule.once(now + when, zone)
    if isinstance(when, str):
        return parse_schedule(when, zone)
    raise ConfigurationError(
        f"schedule when= takes seconds from now, a datetime, or a schedule spec string; got {type(when).__name__}"
    )


async def run_handler(agent: Any, handler: str, facts: dict[str, Any]) -> bool:
    """Run ``agent``'s handler task for one occurrence; False when that occurrence already ran to the end.

    The occurrences that finished are remembered in the agent's own store (kv), so a scheduler that delivers
    again after the handler finished (it died before it recorded the delivery) does not run it twice; a handler
    interrupted by a crash runs again (at least once).
    """
    method = getattr(agent, handler, None)
    if method is None or not callable(method):
        raise ConfigurationError(f"{type(agent).__name__} has no handler method {handler!r} for its scheduled task")
    ctx = ScheduledTaskContext.from_facts(facts)
    done_key = f"schedule:done:{ctx.task_id}"
    done: list[str] = list(await agent.store.get_kv(done_key) or [])
    if ctx.occurrence_key in done:
        return False
    await method(ctx)
    await agent.store.set_kv(done_key, [*done, ctx.occurrence_key][-_DONE_KEEP:])
    return True
