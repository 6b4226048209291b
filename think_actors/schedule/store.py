"""Where schedules live: one table of tasks and one of fires, shared by every agent and every scheduler.

On one machine a SQLite file (``_schedules.db`` beside the agents' files: agent names start with a letter or a
digit, so no agent's file can be it); on a cluster the agents' PostgreSQL database (its own two tables in the
``think_actors`` schema); in process, memory. The two rules every implementation keeps:

- ``claim`` inserts the fire row (unique by agent and occurrence key) and moves the task's ``next_at`` on in one
  transaction, and only if the task still has the ``next_at`` the scheduler read: two schedulers racing on one
  occurrence both try, one commits, the other's claim returns False and it delivers nothing.
- ``take_fire`` moves an open fire (a retry that is due, a claim whose scheduler died) to the taker only if its
  status and attempt count are still what the taker read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from ..store import check_store_url
from .tasks import OPEN_FIRES, ClassDeclaration, FireRecord, FireStatus, TaskRecord

__all__ = ["SCHEDULE_FILE", "MemoryScheduleStore", "ScheduleStore", "open_schedule_store"]

SCHEDULE_FILE = "_schedules.db"


class ScheduleStore(Protocol):
    """The tasks and fires of every agent (module docstring)."""

    async def put_task(self, task: TaskRecord) -> None:
        """Insert or replace the task (by agent and id)."""

    async def get_task(self, agent_path: str, task_id: str) -> TaskRecord | None: ...

    async def list_tasks(self, agent_path: str) -> list[TaskRecord]:
        """The agent's tasks, by next occurrence (finished one-shots last), then id."""

    async def delete_task(self, agent_path: str, task_id: str) -> bool:
        """Remove the task and cancel its open fires; False when there was none."""

    async def sync_class_tasks(self, agent_path: str, tasks: Sequence[TaskRecord]) -> None:
        """Make the agent's class-declared tasks exactly ``tasks``; an unchanged declaration keeps its row."""

    async def declare_class(self, declaration: ClassDeclaration) -> None:
        """Record what the class ``declaration.agent_class`` declares now (replacing what it declared before)."""

    async def class_declaration(self, agent_class: str) -> ClassDeclaration | None:
        """The latest declaration recorded for the class; None when none was (rows of older versions)."""

    async def next_wake_at(self) -> float | None:
        """The earliest ``next_at`` of a task or ``wake_at`` of an open fire."""

    async def due_tasks(self, now: float, limit: int) -> list[TaskRecord]: ...

    async def claim(self, task: TaskRecord, fire: FireRecord, next_at: float | None) -> bool:
        """Insert ``fire`` and set the task's ``next_at`` (None: a one-shot, removed) if nobody did first."""

    async def due_fires(self, now: float, limit: int) -> list[FireRecord]: ...

    async def take_fire(self, fire: FireRecord, owner: str, wake_at: float) -> FireRecord | None:
        """Claim an open fire again (next attempt); None when another scheduler changed it first."""

    async def finish_fire(
        self, fire: FireRecord, status: FireStatus, *, wake_at: float | None = None, error: str | None = None
    ) -> None:
        """Record a delivery's outcome (``delivered``, ``failed``, or ``retry`` at ``wake_at``)."""

    async def list_fires(self, agent_path: str) -> list[FireRecord]:
        """The agent's fires, oldest occurrence first."""

    async def close(self) -> None: ...


def open_schedule_store(store_url: str | None, data_dir: str | None) -> ScheduleStore:
    """The schedule store of a cluster (``store_url``: PostgreSQL or a ``sqlite:`` directory) or of one machine
    (a SQLite file under ``data_dir``, default ``$THINK_ACTORS_DATA_DIR`` or ``./.think_actors``)."""
    if store_url:
        url = check_store_url(store_url)
        if not url.startswith("sqlite:"):
            from .postgres import PostgresScheduleStore  # asyncpg loads only where PostgreSQL is used

            return PostgresScheduleStore(url)
        directory = url[len("sqlite://") :]
    else:
        directory = os.path.abspath(data_dir or os.environ.get("THINK_ACTORS_DATA_DIR") or ".think_actors")
    from .sqlite import SQLiteScheduleStore

    return SQLiteScheduleStore(os.path.join(directory, SCHEDULE_FILE))


def _order(task: TaskRecord) -> tuple[bool, float, str]:
    return (task.next_at is None, task.next_at or 0.0, task.task_id)


class MemoryScheduleStore:
    """A ScheduleStore in one process's memory (in-process agents and tests)."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], TaskRecord] = {}
        self._fires: dict[tuple[str, str], FireRecord] = {}
        self._classes: dict[str, ClassDeclaration] = {}

    async def put_task(self, task: TaskRecord) -> None:
        self._tasks[(task.agent_path, task.task_id)] = task

    async def get_task(self, agent_path: str, task_id: str) -> TaskRecord | None:
        return self._tasks.get((agent_path, task_id))

    async def list_tasks(self, agent_path: str) -> list[TaskRecord]:
        return sorted((t for (a, _), t in self._tasks.items() if a == agent_path), key=_order)

    async def delete_task(self, agent_path: str, task_id: str) -> bool:
        found = self._tasks.pop((agent_path, task_id), None) is not None
        for key, fire in list(self._fires.items()):
            if fire.agent_path == agent_path and fire.task.task_id == task_id and fire.status in OPEN_FIRES:
                self._fires[key] = replace(fire, status="cancelled", wake_at=None)
        return found

    async def sync_class_tasks(self, agent_path: str, tasks: Sequence[TaskRecord]) -> None:
        wanted = {t.task_id: t for t in tasks}
        for (agent, task_id), kept in list(self._tasks.items()):
            if agent == agent_path and kept.source == "class" and task_id not in wanted:
                await self.delete_task(agent_path, task_id)
        for task in tasks:
            old = self._tasks.get((agent_path, task.task_id))
            if old is None or not old.same_declaration(task):
                self._tasks[(agent_path, task.task_id)] = task

    async def declare_class(self, declaration: ClassDeclaration) -> None:
        self._classes[declaration.agent_class] = declaration

    async def class_declaration(self, agent_class: str) -> ClassDeclaration | None:
        return self._classes.get(agent_class)

    async def next_wake_at(self) -> float | None:
        times = [t.next_at for t in self._tasks.values() if t.next_at is not None]
        times += [f.wake_at for f in self._fires.values() if f.status in OPEN_FIRES and f.wake_at is not None]
        return min(times, default=None)

    async def due_tasks(self, now: float, limit: int) -> list[TaskRecord]:
        due = [t for t in self._tasks.values() if t.next_at is not None and t.next_at <= now]
        return sorted(due, key=_order)[:limit]

    async def claim(self, task: TaskRecord, fire: FireRecord, next_at: float | None) -> bool:
        key = (task.agent_path, task.task_id)
        current = self._tasks.get(key)
        if current is None or current.next_at != task.next_at or (fire.agent_path, fire.key) in self._fires:
            return False
        self._fires[(fire.agent_path, fire.key)] = fire
        if next_at is None:
            del self._tasks[key]
        else:
            self._tasks[key] = replace(current, next_at=next_at)
        return True

    async def due_fires(self, now: float, limit: int) -> list[FireRecord]:
        due = [f for f in self._fires.values() if f.status in OPEN_FIRES and f.wake_at is not None and f.wake_at <= now]
        return sorted(due, key=lambda f: (f.wake_at or 0.0, f.key))[:limit]

    async def take_fire(self, fire: FireRecord, owner: str, wake_at: float) -> FireRecord | None:
        current = self._fires.get((fire.agent_path, fire.key))
        if current is None or (current.status, current.attempts) != (fire.status, fire.attempts):
            return None
        taken = current.taken_by(owner, wake_at)
        self._fires[(fire.agent_path, fire.key)] = taken
        return taken

    async def finish_fire(
        self, fire: FireRecord, status: FireStatus, *, wake_at: float | None = None, error: str | None = None
    ) -> None:
        key = (fire.agent_path, fire.key)
        current = self._fires.get(key)
        if current is not None and current.status == "claimed" and current.attempts == fire.attempts:
            self._fires[key] = replace(current, status=status, wake_at=wake_at, error=error)

    async def list_fires(self, agent_path: str) -> list[FireRecord]:
        fires = [f for f in self._fires.values() if f.agent_path == agent_path]
        return sorted(fires, key=lambda f: (f.scheduled_for, f.key))

    async def close(self) -> None:
        return None
