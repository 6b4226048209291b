"""The schedule store in the agents' PostgreSQL database (a cluster): two tables of the ``think_actors`` schema.

It uses the process's shared pool for the URL (the one the agents' stores use, which brings the schema up to
date) and creates its own tables once per pool, under an advisory lock of its own. A claim is one transaction
(store.py's two rules); the unique key of the fire row decides a race between schedulers on two nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg

from ..errors import StoreError
from ..store._schema import SCHEMA, shared_pool
from ..store.url import redact_url
from .tasks import ClassDeclaration, FireRecord, FireStatus, TaskRecord

__all__ = ["PostgresScheduleStore"]

_T = f"{SCHEMA}.schedule_tasks"
_F = f"{SCHEMA}.schedule_fires"
_C = f"{SCHEMA}.schedule_classes"
_LOCK = 0x7468696E6B5F7363  # advisory lock id for creating the tables ("think_sc")
_TABLES = (
    f"""CREATE TABLE IF NOT EXISTS {_T} (
        agent text NOT NULL, task_id text NOT NULL, next_at float8, source text NOT NULL, body text NOT NULL,
        PRIMARY KEY (agent, task_id))""",
    f"CREATE INDEX IF NOT EXISTS schedule_tasks_due ON {_T} (next_at) WHERE next_at IS NOT NULL",
    f"""CREATE TABLE IF NOT EXISTS {_F} (
        agent text NOT NULL, key text NOT NULL, task_id text NOT NULL, scheduled_for float8 NOT NULL,
        status text NOT NULL, attempts integer NOT NULL, wake_at float8, owner text NOT NULL, error text,
        task text NOT NULL, PRIMARY KEY (agent, key))""",
    f"CREATE INDEX IF NOT EXISTS schedule_fires_open ON {_F} (wake_at) WHERE status IN ('claimed', 'retry')",
    f"CREATE INDEX IF NOT EXISTS schedule_fires_task ON {_F} (agent, task_id)",
    f"CREATE TABLE IF NOT EXISTS {_C} (agent_class text PRIMARY KEY, body text NOT NULL)",
)
_OPEN = "('claimed', 'retry')"
_FIRE_COLUMNS = "agent, key, scheduled_for, status, attempts, wake_at, owner, error, task_id, task"
_TASK_COLUMNS = "agent, task_id, next_at, body"
_UPSERT = (
    f"INSERT INTO {_T} (agent, task_id, next_at, source, body) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (agent, task_id) DO UPDATE SET next_at = EXCLUDED.next_at, source = EXCLUDED.source, "
    "body = EXCLUDED.body"
)
_CANCEL_FIRES = (
    f"UPDATE {_F} SET status = 'cancelled', wake_at = NULL WHERE agent = $1 AND task_id = $2 AND status IN {_OPEN}"
)
# Tables made per pool (a pool of one loop in one process). The pool is kept beside its id, so that a new pool
# that happens to get a closed one's id is never taken for it.
_ready: dict[int, tuple[Any, asyncio.Task[None]]] = {}


def _task(row: Any) -> TaskRecord:
    return TaskRecord.from_row(row["agent"], row["task_id"], row["next_at"], row["body"])


def _fire(row: Any) -> FireRecord:
    return FireRecord(
        agent_path=row["agent"],
        key=row["key"],
        task=TaskRecord.from_row(row["agent"], row["task_id"], None, row["task"]),
        scheduled_for=row["scheduled_for"],
        status=row["status"],
        attempts=row["attempts"],
        wake_at=row["wake_at"],
        owner=row["owner"],
        error=row["error"],
    )


async def _create_tables(pool: Any) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        for statement in _TABLES:
            await conn.execute(statement)


class PostgresScheduleStore:
    """A ScheduleStore in the PostgreSQL database at ``url``."""

    def __init__(self, url: str) -> None:
        self._url = url

    def __repr__(self) -> str:
        return f"PostgresScheduleStore({redact_url(self._url)!r})"

    async def _pool(self) -> Any:
        try:
            pool = await shared_pool(self._url)
            entry = _ready.get(id(pool))
            if entry is None or entry[0] is not pool or (entry[1].done() and entry[1].exception() is not None):
                entry = _ready[id(pool)] = (pool, asyncio.get_running_loop().create_task(_create_tables(pool)))
            await asyncio.shield(entry[1])
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc
        return pool

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        pool = await self._pool()
        try:
            return list(await pool.fetch(sql, *args))
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc

    async def _execute(self, sql: str, *args: Any) -> str:
        pool = await self._pool()
        try:
            return str(await pool.execute(sql, *args))
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc

    async def put_task(self, task: TaskRecord) -> None:
        await self._execute(_UPSERT, task.agent_path, task.task_id, task.next_at, task.source, task.body())

    async def get_task(self, agent_path: str, task_id: str) -> TaskRecord | None:
        rows = await self._fetch(
            f"SELECT {_TASK_COLUMNS} FROM {_T} WHERE agent = $1 AND task_id = $2", agent_path, task_id
        )
        return _task(rows[0]) if rows else None

    async def list_tasks(self, agent_path: str) -> list[TaskRecord]:
        rows = await self._fetch(
            f'SELECT {_TASK_COLUMNS} FROM {_T} WHERE agent = $1 ORDER BY next_at NULLS LAST, task_id COLLATE "C"',
            agent_path,
        )
        return [_task(r) for r in rows]

    async def delete_task(self, agent_path: str, task_id: str) -> bool:
        pool = await self._pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                gone = await conn.execute(f"DELETE FROM {_T} WHERE agent = $1 AND task_id = $2", agent_path, task_id)
                await conn.execute(_CANCEL_FIRES, agent_path, task_id)
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc
        return str(gone) != "DELETE 0"

    async def sync_class_tasks(self, agent_path: str, tasks: Sequence[TaskRecord]) -> None:
        pool = await self._pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    f"SELECT {_TASK_COLUMNS} FROM {_T} WHERE agent = $1 AND source = 'class' FOR UPDATE", agent_path
                )
                old = {r["task_id"]: _task(r) for r in rows}
                wanted = {t.task_id: t for t in tasks}
                for task_id in old.keys() - wanted.keys():
                    await conn.execute(f"DELETE FROM {_T} WHERE agent = $1 AND task_id = $2", agent_path, task_id)
                    await conn.execute(_CANCEL_FIRES, agent_path, task_id)
                for task in tasks:
                    previous = old.get(task.task_id)
                    if previous is None or not previous.same_declaration(task):
                        await conn.execute(_UPSERT, agent_path, task.task_id, task.next_at, task.source, task.body())
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc

    async def declare_class(self, declaration: ClassDeclaration) -> None:
        await self._execute(
            f"INSERT INTO {_C} (agent_class, body) VALUES ($1, $2) "
            "ON CONFLICT (agent_class) DO UPDATE SET body = EXCLUDED.body",
            declaration.agent_class,
            declaration.body(),
        )

    async def class_declaration(self, agent_class: str) -> ClassDeclaration | None:
        rows = await self._fetch(f"SELECT body FROM {_C} WHERE agent_class = $1", agent_class)
        return ClassDeclaration.from_body(agent_class, rows[0]["body"]) if rows else None

    async def next_wake_at(self) -> float | None:
        rows = await self._fetch(
            f"SELECT least((SELECT min(next_at) FROM {_T} WHERE next_at IS NOT NULL), "
            f"(SELECT min(wake_at) FROM {_F} WHERE status IN {_OPEN})) AS t"
        )
        value = rows[0]["t"]
        return None if value is None else float(value)

    async def due_tasks(self, now: float, limit: int) -> list[TaskRecord]:
        rows = await self._fetch(
            f"SELECT {_TASK_COLUMNS} FROM {_T} WHERE next_at IS NOT NULL AND next_at <= $1 "
            'ORDER BY next_at, task_id COLLATE "C" LIMIT $2',
            now,
            limit,
        )
        return [_task(r) for r in rows]

    async def claim(self, task: TaskRecord, fire: FireRecord, next_at: float | None) -> bool:
        pool = await self._pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                if next_at is None:
                    moved = await conn.execute(
                        f"DELETE FROM {_T} WHERE agent = $1 AND task_id = $2 AND next_at = $3",
                        task.agent_path,
                        task.task_id,
                        task.next_at,
                    )
                else:
                    moved = await conn.execute(
                        f"UPDATE {_T} SET next_at = $4 WHERE agent = $1 AND task_id = $2 AND next_at = $3",
                        task.agent_path,
                        task.task_id,
                        task.next_at,
                        next_at,
                    )
                if moved.endswith(" 0"):
                    return False  # another scheduler moved the task on first: leaving the block rolls back nothing
                inserted = await conn.execute(
                    f"INSERT INTO {_F} ({_FIRE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
                    "ON CONFLICT (agent, key) DO NOTHING",
                    fire.agent_path,
                    fire.key,
                    fire.scheduled_for,
                    fire.status,
                    fire.attempts,
                    fire.wake_at,
                    fire.owner,
                    fire.error,
                    fire.task.task_id,
                    fire.task.body(),
                )
                if inserted.endswith(" 0"):
                    raise _Lost
        except _Lost:
            return False
        except (asyncpg.PostgresError, OSError) as exc:
            raise StoreError(f"schedule store {redact_url(self._url)}: {exc}") from exc
        return True

    async def due_fires(self, now: float, limit: int) -> list[FireRecord]:
        rows = await self._fetch(
            f"SELECT {_FIRE_COLUMNS} FROM {_F} WHERE status IN {_OPEN} AND wake_at <= $1 "
            'ORDER BY wake_at, key COLLATE "C" LIMIT $2',
            now,
            limit,
        )
        return [_fire(r) for r in rows]

    async def take_fire(self, fire: FireRecord, owner: str, wake_at: float) -> FireRecord | None:
        status = await self._execute(
            f"UPDATE {_F} SET status = 'claimed', attempts = attempts + 1, owner = $1, wake_at = $2 "
            "WHERE agent = $3 AND key = $4 AND status = $5 AND attempts = $6",
            owner,
            wake_at,
            fire.agent_path,
            fire.key,
            fire.status,
            fire.attempts,
        )
        if status.endswith(" 0"):
            return None
        return fire.taken_by(owner, wake_at)

    async def finish_fire(
        self, fire: FireRecord, status: FireStatus, *, wake_at: float | None = None, error: str | None = None
    ) -> None:
        await self._execute(
            f"UPDATE {_F} SET status = $1, wake_at = $2, error = $3 "
            "WHERE agent = $4 AND key = $5 AND status = 'claimed' AND attempts = $6",
            status,
            wake_at,
            error,
            fire.agent_path,
            fire.key,
            fire.attempts,
        )

    async def list_fires(self, agent_path: str) -> list[FireRecord]:
        rows = await self._fetch(
            f'SELECT {_FIRE_COLUMNS} FROM {_F} WHERE agent = $1 ORDER BY scheduled_for, key COLLATE "C"', agent_path
        )
        return [_fire(r) for r in rows]

    async def close(self) -> None:
        return None  # the pool is the process's, shared with the agents' stores


class _Lost(Exception):
    """The fire row exists: roll the claim's transaction back."""
