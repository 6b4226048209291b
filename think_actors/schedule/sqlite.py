"""The schedule store in one SQLite file (one machine): every agent's tasks and fires, WAL mode.

Claims run in ``BEGIN IMMEDIATE`` transactions, so schedulers in several processes sharing the file serialise on
SQLite's write lock and the loser of a race sees the winner's rows (store.py's two rules). Statements are short
and synchronous, as ``SQLiteStore``'s are: cheaper on the event loop than a hop to a thread.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError
from ..store._sqlite_schema import use_wal
from .tasks import ClassDeclaration, FireRecord, FireStatus, TaskRecord

__all__ = ["SQLiteScheduleStore"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS schedule_tasks (
        agent TEXT NOT NULL, task_id TEXT NOT NULL, next_at REAL, source TEXT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (agent, task_id))""",
    "CREATE INDEX IF NOT EXISTS schedule_tasks_due ON schedule_tasks (next_at) WHERE next_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS schedule_fires (
        agent TEXT NOT NULL, key TEXT NOT NULL, task_id TEXT NOT NULL, scheduled_for REAL NOT NULL,
        status TEXT NOT NULL, attempts INTEGER NOT NULL, wake_at REAL, owner TEXT NOT NULL, error TEXT,
        task TEXT NOT NULL, PRIMARY KEY (agent, key))""",
    "CREATE INDEX IF NOT EXISTS schedule_fires_open ON schedule_fires (wake_at) WHERE status IN ('claimed', 'retry')",
    "CREATE INDEX IF NOT EXISTS schedule_fires_task ON schedule_fires (agent, task_id)",
    "CREATE TABLE IF NOT EXISTS schedule_classes (agent_class TEXT PRIMARY KEY, body TEXT NOT NULL)",
)
_OPEN = "('claimed', 'retry')"
_FIRE_COLUMNS = "agent, key, scheduled_for, status, attempts, wake_at, owner, error, task_id, task"
_ORDER = "ORDER BY next_at IS NULL, next_at, task_id"


def _task(row: Sequence[Any]) -> TaskRecord:
    return TaskRecord.from_row(row[0], row[1], row[2], row[3])


def _fire(row: Sequence[Any]) -> FireRecord:
    agent, key, scheduled_for, status, attempts, wake_at, owner, error, task_id, body = row
    task = TaskRecord.from_row(agent, task_id, None, body)
    return FireRecord(
        agent_path=agent,
        key=key,
        task=task,
        scheduled_for=scheduled_for,
        status=status,
        attempts=attempts,
        wake_at=wake_at,
        owner=owner,
        error=error,
    )


class SQLiteScheduleStore:
    """A ScheduleStore in the SQLite file ``path`` (created, with its directory, on first use)."""

    def __init__(self, path: str, *, busy_timeout_s: float = 10.0) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteScheduleStore({self.path!r})"

    async def put_task(self, task: TaskRecord) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO schedule_tasks (agent, task_id, next_at, source, body) VALUES (?, ?, ?, ?, ?)",
                (task.agent_path, task.task_id, task.next_at, task.source, task.body()),
            )

    async def get_task(self, agent_path: str, task_id: str) -> TaskRecord | None:
        row = self._read(
            "SELECT agent, task_id, next_at, body FROM schedule_tasks WHERE agent = ? AND task_id = ?",
            (agent_path, task_id),
        )
        return _task(row[0]) if row else None

    async def list_tasks(self, agent_path: str) -> list[TaskRecord]:
        rows = self._read(
            f"SELECT agent, task_id, next_at, body FROM schedule_tasks WHERE agent = ? {_ORDER}", (agent_path,)
        )
        return [_task(r) for r in rows]

    async def delete_task(self, agent_path: str, task_id: str) -> bool:
        with self._write() as conn:
            return self._delete(conn, agent_path, task_id)

    def _delete(self, conn: sqlite3.Connection, agent_path: str, task_id: str) -> bool:
        gone = conn.execute("DELETE FROM schedule_tasks WHERE agent = ? AND task_id = ?", (agent_path, task_id))
        conn.execute(
            f"UPDATE schedule_fires SET status = 'cancelled', wake_at = NULL "
            f"WHERE agent = ? AND task_id = ? AND status IN {_OPEN}",
            (agent_path, task_id),
        )
        return gone.rowcount > 0

    async def sync_class_tasks(self, agent_path: str, tasks: Sequence[TaskRecord]) -> None:
        with self._write() as conn:
            rows = conn.execute(
                "SELECT agent, task_id, next_at, body FROM schedule_tasks WHERE agent = ? AND source = 'class'",
                (agent_path,),
            ).fetchall()
            old = {r[1]: _task(r) for r in rows}
            wanted = {t.task_id: t for t in tasks}
            for task_id in old.keys() - wanted.keys():
                self._delete(conn, agent_path, task_id)
            for task in tasks:
                previous = old.get(task.task_id)
                if previous is None or not previous.same_declaration(task):
                    conn.execute(
                        "INSERT OR REPLACE INTO schedule_tasks (agent, task_id, next_at, source, body) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (agent_path, task.task_id, task.next_at, task.source, task.body()),
                    )

    async def declare_class(self, declaration: ClassDeclaration) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO schedule_classes (agent_class, body) VALUES (?, ?)",
                (declaration.agent_class, declaration.body()),
            )

    async def class_declaration(self, agent_class: str) -> ClassDeclaration | None:
        rows = self._read("SELECT body FROM schedule_classes WHERE agent_class = ?", (agent_class,))
        return ClassDeclaration.from_body(agent_class, rows[0][0]) if rows else None

    async def next_wake_at(self) -> float | None:
        row = self._read(
            "SELECT min(t) FROM (SELECT min(next_at) AS t FROM schedule_tasks WHERE next_at IS NOT NULL "
            f"UNION ALL SELECT min(wake_at) FROM schedule_fires WHERE status IN {_OPEN})",
            (),
        )
        value = row[0][0]
        return None if value is None else float(value)

    async def due_tasks(self, now: float, limit: int) -> list[TaskRecord]:
        rows = self._read(
            "SELECT agent, task_id, next_at, body FROM schedule_tasks WHERE next_at IS NOT NULL AND next_at <= ? "
            "ORDER BY next_at, task_id LIMIT ?",
            (now, limit),
        )
        return [_task(r) for r in rows]

    async def claim(self, task: TaskRecord, fire: FireRecord, next_at: float | None) -> bool:
        with self._write() as conn:
            if next_at is None:
                moved = conn.execute(
                    "DELETE FROM schedule_tasks WHERE agent = ? AND task_id = ? AND next_at = ?",
                    (task.agent_path, task.task_id, task.next_at),
                )
            else:
                moved = conn.execute(
                    "UPDATE schedule_tasks SET next_at = ? WHERE agent = ? AND task_id = ? AND next_at = ?",
                    (next_at, task.agent_path, task.task_id, task.next_at),
                )
            if moved.rowcount != 1:
                conn.execute("ROLLBACK")
                return False
            inserted = conn.execute(
                f"INSERT OR IGNORE INTO schedule_fires ({_FIRE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
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
                ),
            )
            if inserted.rowcount != 1:
                conn.execute("ROLLBACK")
                return False
            return True

    async def due_fires(self, now: float, limit: int) -> list[FireRecord]:
        rows = self._read(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires WHERE status IN {_OPEN} AND wake_at <= ? "
            "ORDER BY wake_at, key LIMIT ?",
            (now, limit),
        )
        return [_fire(r) for r in rows]

    async def take_fire(self, fire: FireRecord, owner: str, wake_at: float) -> FireRecord | None:
        with self._write() as conn:
            taken = conn.execute(
                "UPDATE schedule_fires SET status = 'claimed', attempts = attempts + 1, owner = ?, wake_at = ? "
                "WHERE agent = ? AND key = ? AND status = ? AND attempts = ?",
                (owner, wake_at, fire.agent_path, fire.key, fire.status, fire.attempts),
            )
            if taken.rowcount != 1:
                return None
        return fire.taken_by(owner, wake_at)

    async def finish_fire(
        self, fire: FireRecord, status: FireStatus, *, wake_at: float | None = None, error: str | None = None
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE schedule_fires SET status = ?, wake_at = ?, error = ? "
                "WHERE agent = ? AND key = ? AND status = 'claimed' AND attempts = ?",
                (status, wake_at, error, fire.agent_path, fire.key, fire.attempts),
            )

    async def list_fires(self, agent_path: str) -> list[FireRecord]:
        rows = self._read(
            f"SELECT {_FIRE_COLUMNS} FROM schedule_fires WHERE agent = ? ORDER BY scheduled_for, key", (agent_path,)
        )
        return [_fire(r) for r in rows]

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- connection --------------------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                conn = sqlite3.connect(
                    self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
                )
                use_wal(conn, self._busy_timeout_s)
                conn.execute("PRAGMA synchronous = NORMAL")
                for statement in _SCHEMA:
                    conn.execute(statement)
            except (sqlite3.Error, OSError) as exc:
                raise StoreError(f"cannot open the schedule store {self.path}: {exc}") from exc
            self._conn = conn
        return self._conn

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return self._connect().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"schedule store {self.path}: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction (the body may ROLLBACK it itself), sqlite3 errors as ``StoreError``."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if conn.in_transaction:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"schedule store {self.path}: {exc}") from exc
