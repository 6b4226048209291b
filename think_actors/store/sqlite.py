"""SQLiteStore: one SQLite file per agent, messages as a tree of msgpack rows.

The methods are coroutines but call sqlite3 directly on the event loop: a local write costs tens of microseconds,
less than a hop to a thread pool would. WAL with ``synchronous=NORMAL`` means a returned write survives a crash of
the process; an OS crash or power loss may roll back the last few commits.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..messages import UIMessage

# store/__init__.py defines LATEST before it imports this module, so the partly initialised package has it.
from . import LATEST
from ._codec import decode_message, encode_message, pack, unpack

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1
"""Kept in ``PRAGMA user_version``; a file with a higher number was written by a newer think_actors."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE NOT NULL,
        parent_id TEXT,
        role TEXT,
        body BLOB NOT NULL,
        created_at REAL
    )""",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB)",
)

# Walk up from the latest leaf. ``m.seq < p.seq`` always holds (a parent exists before its child), and saying so
# guarantees the recursion ends even in a hand-edited file with a parent cycle.
_LOAD_PATH = """
WITH RECURSIVE path(seq, parent_id, body) AS (
    SELECT seq, parent_id, body FROM messages WHERE seq = (SELECT MAX(seq) FROM messages)
    UNION ALL
    SELECT m.seq, m.parent_id, m.body FROM messages AS m JOIN path AS p ON m.id = p.parent_id AND m.seq < p.seq
)
SELECT body FROM path ORDER BY seq
"""

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


class SQLiteStore:
    """A Store in one SQLite file, with one connection opened on first use.

    Opening lazily lets an actor build its store in ``__init__`` and use it from the event-loop thread, which Ray
    may run in a different thread.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        self._path = os.fspath(path)
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    @classmethod
    def for_agent(
        cls, data_dir: str | os.PathLike[str], agent_path: str, *, busy_timeout_s: float = 5.0
    ) -> SQLiteStore:
        """Open ``<data_dir>/<seg1>/.../<last>.db`` for a ``/``-separated agent path, creating the directories.

        Every segment must pass ``validate_agent_name``, so no agent path can name a file outside ``data_dir``.
        """
        # Imported here, not at the top: store/__init__.py imports this module before it has finished loading.
        from . import validate_agent_name

        segments = agent_path.split("/") if isinstance(agent_path, str) else [agent_path]
        for segment in segments:
            validate_agent_name(segment)
        directory = Path(data_dir).joinpath(*segments[:-1])
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {directory} for agent {agent_path!r}: {exc}") from exc
        return cls(directory / f"{segments[-1]}.db", busy_timeout_s=busy_timeout_s)

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"

    async def load_messages(self) -> list[UIMessage]:
        """The active transcript: root to latest leaf."""
        with self._guard("load messages") as conn:
            rows = conn.execute(_LOAD_PATH).fetchall()
        return [decode_message(body) for (body,) in rows]

    async def list_messages(self) -> list[UIMessage]:
        """Every stored message, all branches, in the order they were first written."""
        with self._guard("list messages") as conn:
            rows = conn.execute("SELECT body FROM messages ORDER BY seq").fetchall()
        return [decode_message(body) for (body,) in rows]

    async def get_message(self, message_id: str) -> UIMessage | None:
        with self._guard("get message") as conn:
            row = conn.execute("SELECT body FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else decode_message(row[0])

    async def append_message(self, message: UIMessage, parent_id: str | None = LATEST) -> bool:
        """Insert unless the id exists anywhere in the tree (then a no-op returning False).

        ``parent_id`` defaults to the latest leaf; None makes a root; an unknown id raises ``StoreError``.
        """
        # Encode before taking the write lock, so a value that cannot be stored holds nothing up.
        body = encode_message(message)
        with self._transaction("append message") as conn:
            return self._insert(conn, message, body, parent_id)

    async def upsert_message(self, message: UIMessage, parent_id: str | None = LATEST) -> None:
        """Update the message in place if its id exists, else append it under ``parent_id``.

        An update keeps the row's seq and parent, so the latest leaf and the transcript order do not move.
        """
        body = encode_message(message)
        # One transaction, so another writer on the same file cannot insert the id between the two statements.
        with self._transaction("upsert message") as conn:
            if not self._update(conn, message, body):
                self._insert(conn, message, body, parent_id)

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message's content in place; returns whether it existed (nothing is inserted)."""
        body = encode_message(message)
        with self._guard("update message") as conn:
            return self._update(conn, message, body)

    async def clear_messages(self) -> None:
        with self._guard("clear messages") as conn:
            conn.execute("DELETE FROM messages")

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        with self._guard("get kv") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else unpack(row[0])

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        if value is None:
            with self._guard("delete kv") as conn:
                conn.execute("DELETE FROM kv WHERE key = ?", (key,))
            return
        data = pack(value)
        with self._guard("set kv") as conn:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, data),
            )

    async def close(self) -> None:
        """Close the connection; the store refuses further use. Closing twice is fine."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise self._error("close", exc) from exc

    @staticmethod
    def _insert(conn: sqlite3.Connection, message: UIMessage, body: bytes, parent_id: str | None) -> bool:
        if conn.execute("SELECT 1 FROM messages WHERE id = ?", (message.id,)).fetchone() is not None:
            return False
        if parent_id is LATEST:
            row = conn.execute("SELECT id FROM messages ORDER BY seq DESC LIMIT 1").fetchone()
            parent_id = None if row is None else row[0]
        elif (
            parent_id is not None
            and conn.execute("SELECT 1 FROM messages WHERE id = ?", (parent_id,)).fetchone() is None
        ):
            raise StoreError(f"cannot append message {message.id!r}: parent {parent_id!r} does not exist")
        conn.execute(
            "INSERT INTO messages (id, parent_id, role, body, created_at) VALUES (?, ?, ?, ?, ?)",
            (message.id, parent_id, message.role, body, message.created_at),
        )
        return True

    @staticmethod
    def _update(conn: sqlite3.Connection, message: UIMessage, body: bytes) -> bool:
        cursor = conn.execute(
            "UPDATE messages SET role = ?, body = ?, created_at = ? WHERE id = ?",
            (message.role, body, message.created_at, message.id),
        )
        return cursor.rowcount > 0

    @contextmanager
    def _guard(self, what: str) -> Iterator[sqlite3.Connection]:
        """Yield the connection, turning sqlite3 errors into ``StoreError``. Lone statements autocommit."""
        conn = self._connect()
        try:
            yield conn
        except sqlite3.Error as exc:
            raise self._error(what, exc) from exc

    @contextmanager
    def _transaction(self, what: str) -> Iterator[sqlite3.Connection]:
        """A write transaction committed on exit, rolled back on any error.

        IMMEDIATE takes the write lock at BEGIN, so a read-then-write (does the id exist? which is the latest
        leaf?) cannot be raced by another connection to the same file.
        """
        with self._guard(what) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self._closed:
            raise StoreError(f"SQLite store {self._path} is closed")
        if os.path.isdir(self._path):
            # sqlite3 would only say "unable to open database file"; the usual cause is passing the data directory.
            raise StoreError(
                f"SQLite store path {self._path} is a directory; SQLiteStore takes a database file path. "
                "To keep one file per agent under a data directory, use SQLiteStore.for_agent(data_dir, agent_path)."
            )
        try:
            # isolation_level=None: no implicit BEGINs; _transaction says where a transaction starts and ends.
            # check_same_thread=False: the store may be built in one thread and used from another (see class doc);
            # callers never use it from two threads at once.
            conn = sqlite3.connect(
                self._path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._error("open", exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise self._error("open", exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Create the tables in a new file; refuse a file from a newer schema rather than misread it."""
        # Read first without a lock: every open but the first finds the schema current and takes no write lock.
        if self._schema_version(conn) == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._schema_version(conn)
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"SQLite store {self._path} has schema version {version}; this think_actors reads up to "
                    f"{SCHEMA_VERSION}. Upgrade think_actors to open it."
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        return version

    def _error(self, what: str, exc: sqlite3.Error) -> StoreError:
        # Primary result code: extended codes such as SQLITE_BUSY_SNAPSHOT carry it in the low byte.
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        return StoreError(f"SQLite store {self._path}: {what} failed: {exc}", retryable=code in _BUSY_CODES)
