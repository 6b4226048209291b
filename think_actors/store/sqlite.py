"""SQLiteStore: one SQLite file per agent, messages as a tree of msgpack rows, beside the durable turn records.

The methods are coroutines but call sqlite3 directly on the event loop: a local write costs tens of microseconds,
less than a hop to a thread pool would. WAL with ``synchronous=NORMAL`` means a returned write survives a crash of
the process; an OS crash or power loss may roll back the last few commits.

A file can be opened by two processes at once (an old actor still draining while its restart begins): opening
claims the next generation of the file's lease, and every turn write checks it inside its write transaction
(``_lease``), so the older store's writes are refused with ``StoreFencedError`` instead of interleaving.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError, StoreFencedError
from ..messages import UIMessage
from ._codec import (
    EFFECT_COLUMNS,
    SUBMISSION_COLUMNS,
    TURN_COLUMNS,
    check_limit,
    chunk_batch,
    chunk_log,
    decode_message,
    effect_finish,
    effect_record,
    effect_row,
    encode_message,
    existing_submission,
    pack,
    status_set,
    submission_fields,
    submission_record,
    submission_row,
    turn_record,
    turn_row,
    unpack,
)
from ._lease import fenced_error
from ._search import FTS_HIT, MessageHit, check_search, fts5_query, hits, search_text
from ._sqlite_schema import (
    APPEND_NEW,
    CHUNK_INSERT,
    CHUNK_INSERT_FENCED,
    CLAIM,
    EFFECT_INSERT,
    EFFECT_SELECT,
    LOAD_PATH,
    SCHEMA_VERSION,
    SUBMISSION_INSERT,
    SUBMISSION_SELECT,
    TURN_SELECT,
    TURN_UPSERT,
    UPSERT,
    migrate,
    placeholders,
    use_wal,
)
from .protocol import LATEST, validate_agent_name
from .records import EffectRecord, SubmissionRecord, TurnRecord

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _lease_owner(conn: sqlite3.Connection) -> int | None:
    """The file's newest lease generation; None when its lease row is gone."""
    row = conn.execute("SELECT generation FROM lease").fetchone()
    return None if row is None else int(row[0])


class SQLiteStore:
    """A Store in one SQLite file, with one connection opened on first use.

    Opening lazily lets an actor build its store in ``__init__`` and use it from the event-loop thread, which Ray
    may run in a different thread. Opening claims the file's next lease generation; ``agent`` only names the
    agent in errors (``for_agent`` passes the agent path; the file path otherwise).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0, agent: str | None = None) -> None:
        self._path = os.fspath(path)
        self._busy_timeout_s = busy_timeout_s
        self._agent = agent or self._path
        self._conn: sqlite3.Connection | None = None
        self._generation = 0
        # The error of the first write refused because a newer store owns the agent (``_lease.superseded``).
        self.superseded: StoreFencedError | None = None
        self._closed = False

    @classmethod
    def for_agent(
        cls, data_dir: str | os.PathLike[str], agent_path: str, *, busy_timeout_s: float = 5.0
    ) -> SQLiteStore:
        """Open ``<data_dir>/<seg1>/.../<last>.db`` for a ``/``-separated agent path, creating the directories.

        Every segment must pass ``validate_agent_name``, so no agent path can name a file outside ``data_dir``.
        """
        segments = agent_path.split("/") if isinstance(agent_path, str) else [agent_path]
        for segment in segments:
            validate_agent_name(segment)
        directory = Path(data_dir).joinpath(*segments[:-1])
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {directory} for agent {agent_path!r}: {exc}") from exc
        return cls(directory / f"{segments[-1]}.db", busy_timeout_s=busy_timeout_s, agent=agent_path)

    @property
    def path(self) -> str:
        return self._path

    @property
    def generation(self) -> int:
        """The lease generation this store claimed when it opened (0 until its first use)."""
        return self._generation

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"

    async def load_messages(self) -> list[UIMessage]:
        """The active transcript: root to latest leaf."""
        with self._guard("load messages") as conn:
            rows = conn.execute(LOAD_PATH).fetchall()
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
        with self._fenced("append message") as conn:
            return self._insert(conn, message, body, parent_id)

    async def upsert_message(self, message: UIMessage, parent_id: str | None = LATEST) -> None:
        """Update the message in place if its id exists, else append it under ``parent_id``.

        An update keeps the row's seq and parent, so the latest leaf and the transcript order do not move.
        """
        body = encode_message(message)
        # One transaction, so another writer on the same file cannot insert the id between the two statements.
        with self._fenced("upsert message") as conn:
            if not self._update(conn, message, body):
                self._insert(conn, message, body, parent_id)

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message's content in place; returns whether it existed (nothing is inserted)."""
        body = encode_message(message)
        with self._fenced("update message") as conn:
            return self._update(conn, message, body)

    async def clear_messages(self) -> None:
        with self._fenced("clear messages") as conn:
            conn.execute("DELETE FROM messages")

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """The stored messages (every branch) whose text matches ``query``, best first, at most ``limit``.

        FTS5 with ``porter`` stemming (``_search`` gives the query language; no query is a syntax error). Raises
        ``ConfigurationError`` for a blank query or a limit outside 1..1000.
        """
        query, limit = check_search(query, limit)
        match = fts5_query(query)
        if match is None:
            return []
        with self._guard("search messages") as conn:
            rows = conn.execute(FTS_HIT, (match, limit)).fetchall()
        return hits(rows)

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        with self._guard("get kv") as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else unpack(row[0])

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        if value is None:
            with self._fenced("delete kv") as conn:
                conn.execute("DELETE FROM kv WHERE key = ?", (key,))
            return
        data = pack(value)
        with self._fenced("set kv") as conn:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, data),
            )

    # -- submissions -------------------------------------------------------------------------------------------

    async def insert_submission(
        self, record: SubmissionRecord, *, id_given: bool = True
    ) -> tuple[SubmissionRecord, bool]:
        """Insert ``record`` unless its id or idempotency key is already taken; atomic.

        Returns ``(the stored record, True)`` for a new row (``seq`` assigned) or ``(the existing record,
        False)``, whose payload is not compared. Raises ``ConfigurationError`` when the id and the key name two
        different submissions (or the id's row has another non-null key).
        """
        row = submission_row(record)
        # IMMEDIATE: no other connection can insert the id or the key between the look-ups and the insert.
        with self._transaction("insert submission") as conn:
            by_id = self._submission_row(conn, "submission_id", record.submission_id)
            by_key = (
                None
                if record.idempotency_key is None
                else self._submission_row(conn, "idempotency_key", record.idempotency_key)
            )
            existing = existing_submission(record, by_id, by_key, id_given=id_given)
            if existing is not None:
                return submission_record(existing), False
            cursor = conn.execute(SUBMISSION_INSERT, tuple(row.values()))
        return submission_record({"seq": cursor.lastrowid, **row}), True

    async def get_submission(self, submission_id: str) -> SubmissionRecord | None:
        with self._guard("get submission") as conn:
            row = self._submission_row(conn, "submission_id", submission_id)
        return None if row is None else submission_record(row)

    async def update_submission(
        self, submission_id: str, *, expect_status: Sequence[str] | None = None, **fields: Any
    ) -> bool:
        """Set ``fields`` on the row, only while its status is in ``expect_status`` (when given); atomic.

        Returns whether the row was updated (False: unknown id, or its status moved on). Any SubmissionRecord
        field but ``seq`` may be set; another name raises ``ConfigurationError``.
        """
        columns = submission_fields(fields)
        where = "WHERE submission_id = ?"
        params: list[Any] = [submission_id]
        if (expected := status_set(expect_status)) is not None:
            where += f" AND status IN {placeholders(expected)}"
            params.extend(expected)
        # One statement, so the status check and the write are one atomic step.
        with self._guard("update submission") as conn:
            if not columns:
                return conn.execute(f"SELECT 1 FROM submissions {where}", params).fetchone() is not None
            assignments = ", ".join(f'"{name}" = ?' for name in columns)
            cursor = conn.execute(f"UPDATE submissions SET {assignments} {where}", [*columns.values(), *params])
            return cursor.rowcount > 0

    async def list_submissions(
        self, *, statuses: Sequence[str] | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[SubmissionRecord]:
        """Rows with a status in ``statuses`` (all when None), oldest first by ``(created_at, seq)`` (the drain's
        FIFO), or with ``newest_first`` by ``created_at`` then ``submission_id``, both descending (Think's
        listing); ``limit`` applies after the status filter and the order.
        """
        check_limit(limit)
        sql = SUBMISSION_SELECT
        params: list[Any] = []
        if (wanted := status_set(statuses)) is not None:
            sql += f" WHERE status IN {placeholders(wanted)}"
            params.extend(wanted)
        sql += " ORDER BY created_at DESC, submission_id DESC" if newest_first else " ORDER BY created_at, seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._guard("list submissions") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [submission_record(dict(zip(SUBMISSION_COLUMNS, row, strict=True))) for row in rows]

    async def delete_submission(self, submission_id: str) -> bool:
        """Delete the row; returns whether it existed."""
        with self._guard("delete submission") as conn:
            return conn.execute("DELETE FROM submissions WHERE submission_id = ?", (submission_id,)).rowcount > 0

    # -- turn records and the chunk log ------------------------------------------------------------------------

    async def put_turn(self, record: TurnRecord) -> None:
        """Insert or replace the turn record of ``record.request_id``."""
        row = turn_row(record)
        with self._fenced("put turn") as conn:
            conn.execute(TURN_UPSERT, tuple(row.values()))

    async def get_turn(self, request_id: str) -> TurnRecord | None:
        with self._guard("get turn") as conn:
            row = conn.execute(f"{TURN_SELECT} WHERE request_id = ?", (request_id,)).fetchone()
        return None if row is None else turn_record(dict(zip(TURN_COLUMNS, row, strict=True)))

    async def list_turns(self, *, statuses: Sequence[str] | None = None) -> list[TurnRecord]:
        """Turn records, oldest ``started_at`` first (ties in the order they were first put)."""
        sql = TURN_SELECT
        params: list[Any] = []
        if (wanted := status_set(statuses)) is not None:
            sql += f" WHERE status IN {placeholders(wanted)}"
            params.extend(wanted)
        with self._guard("list turns") as conn:
            rows = conn.execute(f"{sql} ORDER BY started_at, rowid", params).fetchall()
        return [turn_record(dict(zip(TURN_COLUMNS, row, strict=True))) for row in rows]

    async def delete_turn(self, request_id: str) -> None:
        """Remove the turn record, its chunk log and its effects (the turn ended: nothing is left to recover)."""
        with self._fenced("delete turn") as conn:
            self._delete_turn_rows(conn, request_id)

    async def append_chunks(self, request_id: str, chunks: Sequence[dict[str, Any]]) -> None:
        """Append wire-form chunks to the request's chunk log, in order (one write for the batch)."""
        # Packed before the write lock: a chunk that cannot be stored writes nothing.
        body = chunk_batch(chunks) if chunks else None
        if body is None:
            with self._fenced("append chunks"):
                return
        # One statement, its own transaction: a turn streaming at a provider's pace appends a batch per token, so
        # the lease check rides in the insert instead of a BEGIN / SELECT / INSERT / COMMIT of its own.
        with self._guard("append chunks") as conn:
            inserted = conn.execute(CHUNK_INSERT_FENCED, (request_id, body, self._generation)).rowcount
            if inserted != 1:
                raise self._fenced_out(_lease_owner(conn))

    async def load_chunks(self, request_id: str) -> list[dict[str, Any]]:
        """The request's chunk log, in the order appended."""
        with self._guard("load chunks") as conn:
            rows = conn.execute("SELECT body FROM chunks WHERE request_id = ? ORDER BY seq", (request_id,)).fetchall()
        return chunk_log(body for (body,) in rows)

    async def begin_turn(self, record: TurnRecord, messages: Sequence[UIMessage] = ()) -> list[bool]:
        """Put the turn record and append ``messages`` under the latest leaf, in one transaction.

        Returns whether each message was appended (False: its id existed).
        """
        row = turn_row(record)
        rows = [(m.id, m.role, encode_message(m), m.created_at, search_text(m)) for m in messages]  # before the lock
        with self._fenced("begin turn") as conn:
            conn.execute(TURN_UPSERT, tuple(row.values()))
            return [conn.execute(APPEND_NEW, message).rowcount > 0 for message in rows]

    async def end_turn(self, request_id: str, reply: UIMessage | None = None) -> None:
        """Upsert ``reply`` (when given) and remove the turn record, its chunk log and its effects, in one
        transaction (``upsert_message`` then ``delete_turn``, committed once)."""
        message = (
            None
            if reply is None
            else (reply.id, reply.role, encode_message(reply), reply.created_at, search_text(reply))
        )
        with self._fenced("end turn") as conn:
            if message is not None:
                conn.execute(UPSERT, message)
            self._delete_turn_rows(conn, request_id)

    # -- the effect ledger -------------------------------------------------------------------------------------

    async def start_effect(self, record: EffectRecord, *, chunks: Sequence[dict[str, Any]] = ()) -> EffectRecord:
        """Record that a tool call starts, unless its key exists: returns the stored record either way.

        ``chunks`` go to the request's chunk log first, in the same transaction.
        """
        row = effect_row(record)
        body = chunk_batch(chunks) if chunks else None
        with self._fenced("start effect") as conn:
            if body is not None:
                conn.execute(CHUNK_INSERT, (record.request_id, body))
            if conn.execute(EFFECT_INSERT, tuple(row.values())).rowcount > 0:
                return effect_record(row)
            stored = conn.execute(f"{EFFECT_SELECT} WHERE key = ?", (record.key,)).fetchone()
        return effect_record(dict(zip(EFFECT_COLUMNS, stored, strict=True)))

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None, chunks: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Mark the effect ``finished`` with its output or error, ``finished_at`` now (a second finish overwrites),
        and append ``chunks`` to its request's chunk log, in one transaction.

        Raises ``StoreError`` for an unknown key (and writes nothing).
        """
        columns = {**effect_finish(output, error), "finished_at": time.time()}
        assignments = ", ".join(f'"{name}" = ?' for name in columns)
        body = chunk_batch(chunks) if chunks else None
        with self._fenced("finish effect") as conn:
            updated = conn.execute(
                f"UPDATE effects SET {assignments} WHERE key = ? RETURNING request_id", [*columns.values(), key]
            ).fetchall()
            if not updated:
                raise StoreError(f"cannot finish effect {key!r}: it was never started")
            if body is not None:
                conn.execute(CHUNK_INSERT, (updated[0][0], body))

    async def get_effect(self, key: str) -> EffectRecord | None:
        with self._guard("get effect") as conn:
            row = conn.execute(f"{EFFECT_SELECT} WHERE key = ?", (key,)).fetchone()
        return None if row is None else effect_record(dict(zip(EFFECT_COLUMNS, row, strict=True)))

    async def list_effects(self, request_id: str) -> list[EffectRecord]:
        """The request's effects in the order they started."""
        with self._guard("list effects") as conn:
            rows = conn.execute(f"{EFFECT_SELECT} WHERE request_id = ? ORDER BY seq", (request_id,)).fetchall()
        return [effect_record(dict(zip(EFFECT_COLUMNS, row, strict=True))) for row in rows]

    async def clear_turn_state(self) -> None:
        """Delete every turn record, chunk log and effect; submissions and messages stay."""
        with self._fenced("clear turn state") as conn:
            conn.execute("DELETE FROM turns")
            conn.execute("DELETE FROM chunks")
            conn.execute("DELETE FROM effects")

    def _fenced_out(self, owner: int | None) -> StoreFencedError:
        """The error of a refused write; from now on this store says it is ``superseded``."""
        error = fenced_error(self._agent, self._generation, owner)
        self.superseded = self.superseded or error
        return error

    async def holds_lease(self) -> bool:
        """Whether this store still holds the file's newest lease generation (no newer store opened it since)."""
        with self._guard("read lease") as conn:
            return _lease_owner(conn) == self._generation

    async def exists(self) -> bool:
        """Whether the agent's file exists (any first use creates it); looking creates nothing."""
        # One stat, in the loop's thread as every sqlite3 call of this store is.
        return self._conn is not None or os.path.exists(self._path)  # noqa: ASYNC240

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
    def _submission_row(conn: sqlite3.Connection, column: str, value: str) -> dict[str, Any] | None:
        row = conn.execute(f"{SUBMISSION_SELECT} WHERE {column} = ?", (value,)).fetchone()
        return None if row is None else dict(zip(SUBMISSION_COLUMNS, row, strict=True))

    @staticmethod
    def _delete_turn_rows(conn: sqlite3.Connection, request_id: str) -> None:
        for table in ("turns", "chunks", "effects"):  # constants, never user input
            conn.execute(f"DELETE FROM {table} WHERE request_id = ?", (request_id,))

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
            "INSERT INTO messages (id, parent_id, role, body, created_at, search_text) VALUES (?, ?, ?, ?, ?, ?)",
            (message.id, parent_id, message.role, body, message.created_at, search_text(message)),
        )
        return True

    @staticmethod
    def _update(conn: sqlite3.Connection, message: UIMessage, body: bytes) -> bool:
        cursor = conn.execute(
            "UPDATE messages SET role = ?, body = ?, created_at = ?, search_text = ? WHERE id = ?",
            (message.role, body, message.created_at, search_text(message), message.id),
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
    def _transaction(self, what: str, *, fenced: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction committed on exit, rolled back on any error (sqlite3 errors become ``StoreError``).

        IMMEDIATE takes the write lock at BEGIN, so a read-then-write (does the id exist? which is the latest
        leaf?) cannot be raced by another connection to the same file. ``fenced`` first checks that this store
        still holds the lease (``StoreFencedError`` if not), under that lock, so no newer open can claim the file
        between the check and the commit. One frame for all of it: a turn makes several of these writes.
        """
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if fenced:
                    owner = _lease_owner(conn)
                    if owner != self._generation:
                        raise self._fenced_out(owner)
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._error(what, exc) from exc

    def _fenced(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction of this store's lease holder (``_transaction`` with ``fenced``)."""
        return self._transaction(what, fenced=True)

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
            # A new file gets 1 KiB pages (a file that exists keeps its own): a turn's writes are small rows, and
            # every commit copies each page it touched into the WAL, so smaller pages make each commit cheaper.
            conn.execute("PRAGMA page_size = 1024")
            use_wal(conn, self._busy_timeout_s)
            conn.execute("PRAGMA synchronous = NORMAL")
            migrate(conn, self._path)
            # fetchall: the statement must run to its end, or its write transaction stays open.
            [(self._generation,)] = conn.execute(CLAIM).fetchall()
        except sqlite3.Error as exc:
            conn.close()
            raise self._error("open", exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _error(self, what: str, exc: sqlite3.Error) -> StoreError:
        # Primary result code: extended codes such as SQLITE_BUSY_SNAPSHOT carry it in the low byte.
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        return StoreError(f"SQLite store {self._path}: {what} failed: {exc}", retryable=code in _BUSY_CODES)
