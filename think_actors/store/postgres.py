"""PostgresStore: every agent's store in one PostgreSQL database, for clusters (agents on any node see one data set).

Each store is scoped to one agent path: every row carries the path, and every statement filters on it, so two
agents never share rows. The stores of one process share one asyncpg connection pool per (URL, event loop)
(``shared_pool``); the first pool of a process brings the schema up to date (``_schema``), under an advisory lock
so that processes starting together migrate once.

Opening a store claims the agent's next lease generation (``_lease``). Turn writes check it in the same statement
(a ``FOR SHARE`` lock on the agent's row, taken before the write and held to its commit) or, for the message tree,
in the same transaction (``FOR UPDATE``, which also serialises the read-the-latest-leaf-then-append of one agent).
A claim waits for those locks, so an old writer's statement either commits before the new owner's claim or sees
the new generation and is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ..errors import StoreError, StoreFencedError
from ..messages import UIMessage
from ._codec import (
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
from ._postgres_sql import (
    APPEND_CHUNKS,
    BEGIN_TURN,
    CLAIM,
    CLEAR_MESSAGES,
    CLEAR_TURN_STATE,
    DELETE_KV,
    DELETE_TURN,
    EFFECT_SELECT,
    END_TURN,
    EXISTS,
    FINISH_EFFECT,
    FINISH_EFFECT_LOGGED,
    GET_KV,
    GET_MESSAGE,
    INSERT_LOOKUP,
    INSERT_MESSAGE,
    INSERT_SUBMISSION,
    LEASE_OWNER,
    LIST_MESSAGES,
    LOAD_CHUNKS,
    LOAD_PATH,
    LOCK_TREE,
    NEXT_SUBMISSION_SEQ,
    PUT_TURN,
    SEARCH_MESSAGES,
    SET_KV,
    START_EFFECT,
    START_EFFECT_LOGGED,
    SUBMISSION_LOOKUP,
    SUBMISSION_SELECT,
    TURN_SELECT,
    UPDATE_MESSAGE,
    UPDATE_MESSAGE_LOCKED,
)
from ._schema import SCHEMA, SCHEMA_VERSION, close_pools, migrate, shared_pool
from ._search import MessageHit, check_search, hits, search_text
from .protocol import LATEST, validate_agent_name
from .records import EffectRecord, SubmissionRecord, TurnRecord
from .redact import redact_url

__all__ = ["SCHEMA_VERSION", "PostgresStore", "close_pools"]

_S = SCHEMA


class _LostRace(Exception):
    """Rolls back an insert whose id or key another writer took first."""


class PostgresStore:
    """A Store for one agent in a PostgreSQL database, over a pool shared by the process's stores.

    ``url`` is a libpq-style URL (``postgresql://user:password@host:5432/database``); ``pool`` an asyncpg pool to
    use instead of the shared one (it is migrated on first use and never closed by the store). Nothing connects
    until the first call, so an actor can build its store in ``__init__``; that first call claims the agent's
    next lease generation.
    """

    def __init__(self, url: str, agent_path: str, *, pool: asyncpg.Pool | None = None) -> None:
        segments = agent_path.split("/") if isinstance(agent_path, str) else [agent_path]
        for segment in segments:
            validate_agent_name(segment)
        self._url = url
        self._agent = agent_path
        self._own_pool = pool
        self._pool: asyncpg.Pool | None = None
        self._generation = 0
        # The error of the first write refused because a newer store owns the agent (``_lease.superseded``).
        self.superseded: StoreFencedError | None = None
        self._open_lock = asyncio.Lock()
        self._closed = False

    @property
    def url(self) -> str:
        return self._url

    @property
    def agent_path(self) -> str:
        return self._agent

    @property
    def generation(self) -> int:
        """The lease generation this store claimed when it opened (0 until its first use)."""
        return self._generation

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self._url)!r}, {self._agent!r})"

    # -- messages --------------------------------------------------------------------------------------------------

    async def load_messages(self) -> list[UIMessage]:
        """The active transcript: root to latest leaf."""
        async with self._connection("load messages") as conn:
            rows = await conn.fetch(LOAD_PATH, self._agent)
        return [decode_message(row[0]) for row in rows]

    async def list_messages(self) -> list[UIMessage]:
        """Every stored message, all branches, in the order they were first written."""
        async with self._connection("list messages") as conn:
            rows = await conn.fetch(LIST_MESSAGES, self._agent)
        return [decode_message(row[0]) for row in rows]

    async def get_message(self, message_id: str) -> UIMessage | None:
        async with self._connection("get message") as conn:
            body = await conn.fetchval(GET_MESSAGE, self._agent, message_id)
        return None if body is None else decode_message(body)

    async def append_message(self, message: UIMessage, parent_id: str | None = LATEST) -> bool:
        """Insert unless the id exists anywhere in the tree (then a no-op returning False).

        ``parent_id`` defaults to the latest leaf; None makes a root; an unknown id raises ``StoreError``.
        """
        body = encode_message(message)
        async with self._tree("append message") as conn:
            return await self._insert(conn, message, body, parent_id)

    async def upsert_message(self, message: UIMessage, parent_id: str | None = LATEST) -> None:
        """Update the message in place if its id exists, else append it under ``parent_id``.

        An update keeps the row's seq and parent, so the latest leaf and the transcript order do not move.
        """
        body = encode_message(message)
        async with self._tree("upsert message") as conn:
            status = await conn.execute(
                UPDATE_MESSAGE_LOCKED,
                self._agent,
                message.id,
                message.role,
                body,
                message.created_at,
                search_text(message),
            )
            if status == "UPDATE 0":
                await self._insert(conn, message, body, parent_id)

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message's content in place; returns whether it existed (nothing is inserted)."""
        body = encode_message(message)
        n = await self._write(
            "update message", UPDATE_MESSAGE, message.id, message.role, body, message.created_at, search_text(message)
        )
        return n > 0

    async def clear_messages(self) -> None:
        await self._write("clear messages", CLEAR_MESSAGES)

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """The agent's stored messages (every branch) whose text matches ``query``, best first, at most ``limit``.

        PostgreSQL full-text search (``english``: stemmed, stop words dropped) with ``websearch_to_tsquery``, which
        reads any input without a syntax error. Raises ``ConfigurationError`` for a blank query or a limit outside
        1..1000.
        """
        query, limit = check_search(query, limit)
        async with self._connection("search messages") as conn:
            rows = await conn.fetch(SEARCH_MESSAGES, self._agent, query, limit)
        return hits(tuple(row) for row in rows)

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        async with self._connection("get kv") as conn:
            value = await conn.fetchval(GET_KV, self._agent, key)
        return None if value is None else unpack(value)

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        if value is None:
            await self._write("delete kv", DELETE_KV, key)
        else:
            await self._write("set kv", SET_KV, key, pack(value))

    # -- submissions -----------------------------------------------------------------------------------------------

    async def insert_submission(
        self, record: SubmissionRecord, *, id_given: bool = True
    ) -> tuple[SubmissionRecord, bool]:
        """Insert ``record`` unless its id or idempotency key is already taken; atomic.

        Returns ``(the stored record, True)`` for a new row (``seq`` assigned) or ``(the existing record,
        False)``, whose payload is not compared. Raises ``ConfigurationError`` when the id and the key name two
        different submissions (or the id's row has another non-null key). The table's unique constraints on
        ``(agent, submission_id)`` and ``(agent, idempotency_key)`` decide a race: the loser's insert does
        nothing, its transaction (and so its seq) is rolled back, and it returns the winner's row.
        """
        row = submission_row(record)
        async with self._connection("insert submission") as conn:
            for _attempt in range(3):
                found = await self._submission_lookup(conn, record)
                existing = existing_submission(record, *found, id_given=id_given)
                if existing is not None:
                    return submission_record(existing), False
                try:
                    async with conn.transaction():
                        seq = await conn.fetchval(NEXT_SUBMISSION_SEQ, self._agent)
                        if await conn.fetchval(INSERT_SUBMISSION, self._agent, seq, *row.values()) is None:
                            raise _LostRace  # another insert took the id or the key since the look-up
                except _LostRace:
                    continue
                return submission_record({"seq": seq, **row}), True
        raise StoreError(
            f"PostgreSQL store for agent {self._agent!r}: insert submission failed: the id or key kept changing "
            "under concurrent writers",
            retryable=True,
        )

    async def get_submission(self, submission_id: str) -> SubmissionRecord | None:
        async with self._connection("get submission") as conn:
            row = await conn.fetchrow(
                f"{SUBMISSION_SELECT} WHERE agent = $1 AND submission_id = $2", self._agent, submission_id
            )
        return None if row is None else submission_record(dict(row))

    async def update_submission(
        self, submission_id: str, *, expect_status: Sequence[str] | None = None, **fields: Any
    ) -> bool:
        """Set ``fields`` on the row, only while its status is in ``expect_status`` (when given); atomic.

        Returns whether the row was updated (False: unknown id, or its status moved on). Any SubmissionRecord
        field but ``seq`` may be set; another name raises ``ConfigurationError``.
        """
        columns = submission_fields(fields)
        params: list[Any] = [self._agent, submission_id]
        where = "WHERE agent = $1 AND submission_id = $2"
        if (expected := status_set(expect_status)) is not None:
            params.append(list(expected))
            where += f" AND status = ANY(${len(params)}::text[])"
        # One statement, so the status check and the write are one atomic step.
        async with self._connection("update submission") as conn:
            if not columns:
                return await conn.fetchval(f"SELECT 1 FROM {_S}.submissions {where}", *params) is not None
            start = len(params) + 1
            assignments = ", ".join(f'"{name}" = ${start + i}' for i, name in enumerate(columns))
            status = await conn.execute(
                f"UPDATE {_S}.submissions SET {assignments} {where}", *params, *columns.values()
            )
        return bool(status != "UPDATE 0")

    async def list_submissions(
        self, *, statuses: Sequence[str] | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[SubmissionRecord]:
        """Rows with a status in ``statuses`` (all when None), oldest first by ``(created_at, seq)`` (the drain's
        FIFO), or with ``newest_first`` by ``created_at`` then ``submission_id``, both descending (Think's
        listing); ``limit`` applies after the status filter and the order.
        """
        check_limit(limit)
        sql = f"{SUBMISSION_SELECT} WHERE agent = $1"
        params: list[Any] = [self._agent]
        if (wanted := status_set(statuses)) is not None:
            params.append(list(wanted))
            sql += f" AND status = ANY(${len(params)}::text[])"
        sql += (
            ' ORDER BY created_at DESC, submission_id COLLATE "C" DESC' if newest_first else " ORDER BY created_at, seq"
        )
        if limit is not None:
            params.append(limit)
            sql += f" LIMIT ${len(params)}"
        async with self._connection("list submissions") as conn:
            rows = await conn.fetch(sql, *params)
        return [submission_record(dict(row)) for row in rows]

    async def delete_submission(self, submission_id: str) -> bool:
        """Delete the row; returns whether it existed."""
        async with self._connection("delete submission") as conn:
            status = await conn.execute(
                f"DELETE FROM {_S}.submissions WHERE agent = $1 AND submission_id = $2", self._agent, submission_id
            )
        return bool(status != "DELETE 0")

    # -- turn records and the chunk log ----------------------------------------------------------------------------

    async def put_turn(self, record: TurnRecord) -> None:
        """Insert or replace the turn record of ``record.request_id``."""
        await self._write("put turn", PUT_TURN, *turn_row(record).values())

    async def get_turn(self, request_id: str) -> TurnRecord | None:
        async with self._connection("get turn") as conn:
            row = await conn.fetchrow(f"{TURN_SELECT} WHERE agent = $1 AND request_id = $2", self._agent, request_id)
        return None if row is None else turn_record(dict(row))

    async def list_turns(self, *, statuses: Sequence[str] | None = None) -> list[TurnRecord]:
        """Turn records, oldest ``started_at`` first (ties in the order they were first put)."""
        sql = f"{TURN_SELECT} WHERE agent = $1"
        params: list[Any] = [self._agent]
        if (wanted := status_set(statuses)) is not None:
            params.append(list(wanted))
            sql += " AND status = ANY($2::text[])"
        async with self._connection("list turns") as conn:
            rows = await conn.fetch(f"{sql} ORDER BY started_at, seq", *params)
        return [turn_record(dict(row)) for row in rows]

    async def delete_turn(self, request_id: str) -> None:
        """Remove the turn record, its chunk log and its effects (the turn ended: nothing is left to recover)."""
        await self._write("delete turn", DELETE_TURN, request_id)

    async def begin_turn(self, record: TurnRecord, messages: Sequence[UIMessage] = ()) -> list[bool]:
        """Put the turn record and append ``messages`` under the latest leaf, in one transaction (one round trip:
        the schema's ``begin_turn`` function).

        Returns whether each message was appended (False: its id existed)."""
        columns = [
            [m.id for m in messages],
            [m.role for m in messages],
            [encode_message(m) for m in messages],
            [m.created_at for m in messages],
            [search_text(m) for m in messages],
        ]
        async with self._connection("begin turn") as conn:
            row = await conn.fetchrow(BEGIN_TURN, self._agent, self._generation, *turn_row(record).values(), *columns)
        self._check(row["lease_owner"])
        appended: list[bool] = row["appended"]
        return appended

    async def end_turn(self, request_id: str, reply: UIMessage | None = None) -> None:
        """Upsert ``reply`` (when given) and remove the turn record, its chunk log and its effects, in one
        transaction (``upsert_message`` then ``delete_turn``, committed once; one round trip: the schema's
        ``end_turn`` function)."""
        message: tuple[Any, ...] = (None,) * 5
        if reply is not None:
            message = (reply.id, reply.role, encode_message(reply), reply.created_at, search_text(reply))
        async with self._connection("end turn") as conn:
            owner = await conn.fetchval(END_TURN, self._agent, self._generation, request_id, *message)
        self._check(owner)

    async def append_chunks(self, request_id: str, chunks: Sequence[dict[str, Any]]) -> None:
        """Append wire-form chunks to the request's chunk log, in order (one row for the batch)."""
        body = chunk_batch(chunks)
        if not chunks:
            async with self._connection("append chunks"):  # a closed store refuses even an empty batch
                return
        await self._write("append chunks", APPEND_CHUNKS, request_id, body)

    async def load_chunks(self, request_id: str) -> list[dict[str, Any]]:
        """The request's chunk log, in the order appended."""
        async with self._connection("load chunks") as conn:
            rows = await conn.fetch(LOAD_CHUNKS, self._agent, request_id)
        return chunk_log(row[0] for row in rows)

    # -- the effect ledger -----------------------------------------------------------------------------------------

    async def start_effect(self, record: EffectRecord, *, chunks: Sequence[dict[str, Any]] = ()) -> EffectRecord:
        """Record that a tool call starts, unless its key exists: returns the stored record either way.

        ``chunks`` go to the request's chunk log in the same statement (one row for the batch).
        """
        row = effect_row(record)
        if chunks:
            written = await self._write(
                "start effect", START_EFFECT_LOGGED, *row.values(), record.request_id, chunk_batch(chunks)
            )
        else:
            written = await self._write("start effect", START_EFFECT, *row.values())
        if written > 0:
            return effect_record(row)
        stored = await self.get_effect(record.key)
        if stored is None:  # deleted between the two statements: a cleared turn's effect
            raise StoreError(
                f"PostgreSQL store for agent {self._agent!r}: effect {record.key!r} vanished", retryable=True
            )
        return stored

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None, chunks: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Mark the effect ``finished`` with its output or error, ``finished_at`` now (a second finish overwrites),
        and append ``chunks`` to its request's chunk log in the same statement.

        Raises ``StoreError`` for an unknown key (and writes nothing).
        """
        columns = effect_finish(output, error)
        values = (key, columns["status"], columns["output"], columns["error"], time.time())
        if chunks:
            n = await self._write("finish effect", FINISH_EFFECT_LOGGED, *values, chunk_batch(chunks))
        else:
            n = await self._write("finish effect", FINISH_EFFECT, *values)
        if n == 0:
            raise StoreError(f"cannot finish effect {key!r}: it was never started")

    async def get_effect(self, key: str) -> EffectRecord | None:
        async with self._connection("get effect") as conn:
            row = await conn.fetchrow(f"{EFFECT_SELECT} WHERE agent = $1 AND key = $2", self._agent, key)
        return None if row is None else effect_record(dict(row))

    async def list_effects(self, request_id: str) -> list[EffectRecord]:
        """The request's effects in the order they started."""
        async with self._connection("list effects") as conn:
            rows = await conn.fetch(
                f"{EFFECT_SELECT} WHERE agent = $1 AND request_id = $2 ORDER BY seq", self._agent, request_id
            )
        return [effect_record(dict(row)) for row in rows]

    async def clear_turn_state(self) -> None:
        """Delete every turn record, chunk log and effect; submissions and messages stay."""
        await self._write("clear turn state", CLEAR_TURN_STATE)

    def _fenced_out(self, owner: int | None) -> StoreFencedError:
        """The error of a refused write; from now on this store says it is ``superseded``."""
        error = fenced_error(self._agent, self._generation, owner)
        self.superseded = self.superseded or error
        return error

    async def holds_lease(self) -> bool:
        """Whether this store still holds the agent's newest lease generation (no newer store opened it since)."""
        async with self._connection("read lease") as conn:
            owner = await conn.fetchval(LEASE_OWNER, self._agent)
        return bool(owner == self._generation)

    async def exists(self) -> bool:
        """Whether the agent has a lease row (every store of it that was ever used claimed one), asked without
        claiming one."""
        if self._pool is not None:
            return True
        try:
            if self._own_pool is not None:
                async with self._own_pool.acquire() as conn:
                    await migrate(conn)
                    return bool(await conn.fetchval(EXISTS, self._agent))
            return bool(await (await shared_pool(self._url)).fetchval(EXISTS, self._agent))
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise self._error("look the agent up", exc) from exc

    async def close(self) -> None:
        """Refuse further use; the shared pool stays open for the process's other stores. Closing twice is fine."""
        self._closed = True
        self._pool = None

    # -- internals -------------------------------------------------------------------------------------------------

    async def _open(self) -> asyncpg.Pool:
        """The pool, after the first call has migrated the schema and claimed the agent's next generation."""
        if self._closed:
            raise StoreError(f"PostgreSQL store for agent {self._agent!r} is closed")
        if self._pool is not None:
            return self._pool
        async with self._open_lock:  # concurrent first calls claim one generation
            if self._pool is None:
                if self._own_pool is not None:
                    pool = self._own_pool
                    async with pool.acquire() as conn:
                        await migrate(conn)
                else:
                    pool = await shared_pool(self._url)
                self._generation = await pool.fetchval(CLAIM, self._agent)
                if self._closed:
                    raise StoreError(f"PostgreSQL store for agent {self._agent!r} is closed")
                self._pool = pool
        return self._pool

    @asynccontextmanager
    async def _connection(self, what: str) -> AsyncIterator[Any]:
        """A pooled connection, asyncpg's and the network's errors turned into ``StoreError``."""
        try:
            pool = await self._open()
            async with pool.acquire() as conn:
                yield conn
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise self._error(what, exc) from exc

    @asynccontextmanager
    async def _tree(self, what: str) -> AsyncIterator[Any]:
        """A transaction holding the agent's tree lock, refused with ``StoreFencedError`` for a superseded store."""
        async with self._connection(what) as conn, conn.transaction():
            self._check(await conn.fetchval(LOCK_TREE, self._agent))
            yield conn

    async def _write(self, what: str, sql: str, *args: Any) -> int:
        """Run a ``fenced`` statement with this agent's path and generation; returns its count."""
        async with self._connection(what) as conn:
            row = await conn.fetchrow(sql, self._agent, self._generation, *args)
        self._check(row["generation"])
        n: int = row["n"]
        return n

    def _check(self, owner: int | None) -> None:
        if owner != self._generation:
            raise self._fenced_out(owner)

    async def _submission_lookup(self, conn: Any, record: SubmissionRecord) -> tuple[Any, Any]:
        """The rows that hold the record's id and its key (None for each that none does)."""
        rows = await conn.fetch(SUBMISSION_LOOKUP, self._agent, record.submission_id, record.idempotency_key)
        by_id = by_key = None
        for row in rows:
            values = dict(row)
            if values["submission_id"] == record.submission_id:
                by_id = values
            if record.idempotency_key is not None and values["idempotency_key"] == record.idempotency_key:
                by_key = values
        return by_id, by_key

    async def _insert(self, conn: Any, message: UIMessage, body: bytes, parent_id: str | None) -> bool:
        explicit = None if parent_id is LATEST else parent_id
        found = await conn.fetchrow(INSERT_LOOKUP, self._agent, message.id, explicit)
        if found["taken"]:
            return False
        if parent_id is LATEST:
            parent_id = found["latest"]
        elif parent_id is not None and not found["parent_found"]:
            raise StoreError(f"cannot append message {message.id!r}: parent {parent_id!r} does not exist")
        await conn.execute(
            INSERT_MESSAGE,
            self._agent,
            message.id,
            parent_id,
            message.role,
            body,
            message.created_at,
            search_text(message),
        )
        return True

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"PostgreSQL store for agent {self._agent!r} at {redact_url(self._url)}: {what} failed: "
            f"{type(exc).__name__}: {exc}",
            retryable=_retryable(exc),
        )


# SQLSTATE classes worth a retry: connection exceptions, transaction rollbacks (serialization failures,
# deadlocks), insufficient resources (too many connections), operator intervention (a restarting server).
_RETRYABLE_CLASSES = ("08", "40", "53", "57")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, OSError | TimeoutError | asyncpg.PostgresConnectionError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return isinstance(sqlstate, str) and sqlstate[:2] in _RETRYABLE_CLASSES
