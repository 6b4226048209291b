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

from ..errors import StoreError
from ..messages import UIMessage

# store/__init__.py defines LATEST before it imports this module, so the partly initialised package has it.
from . import LATEST, validate_agent_name
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
    quoted_names,
    status_set,
    submission_fields,
    submission_record,
    submission_row,
    turn_record,
    turn_row,
    unpack,
)
from ._lease import fenced_error
from ._schema import SCHEMA, SCHEMA_VERSION, close_pools, migrate, shared_pool
from .records import EffectRecord, SubmissionRecord, TurnRecord
from .url import redact_url

__all__ = ["SCHEMA_VERSION", "PostgresStore", "close_pools"]

_S = SCHEMA


def _params(start: int, count: int) -> str:
    return ", ".join(f"${i}" for i in range(start, start + count))


def _fenced(*writes: str, count: str = "0") -> str:
    """One statement: lock the agent's lease row (``$1`` path), run ``writes`` (CTEs that join ``lease`` and
    write only while ``lease.generation = $2``), and return the owner's generation and ``count``."""
    ctes = ", ".join(writes)
    return (
        f"WITH lease AS (SELECT generation FROM {_S}.agents WHERE path = $1 FOR SHARE), {ctes} "
        f"SELECT (SELECT generation FROM lease) AS generation, {count} AS n"
    )


# -- messages --------------------------------------------------------------------------------------------------------
# Walk up from the latest leaf; ``m.seq < p.seq`` holds for every parent and bounds the recursion even over a
# hand-edited parent cycle.
_LOAD_PATH = f"""
WITH RECURSIVE path(seq, parent_id, body) AS (
    (SELECT seq, parent_id, body FROM {_S}.messages WHERE agent = $1 ORDER BY seq DESC LIMIT 1)
    UNION ALL
    SELECT m.seq, m.parent_id, m.body FROM {_S}.messages AS m
    JOIN path AS p ON m.agent = $1 AND m.id = p.parent_id AND m.seq < p.seq
)
SELECT body FROM path ORDER BY seq
"""
_LIST_MESSAGES = f"SELECT body FROM {_S}.messages WHERE agent = $1 ORDER BY seq"
_GET_MESSAGE = f"SELECT body FROM {_S}.messages WHERE agent = $1 AND id = $2"
# The tree lock: one agent's appends are serialised (the latest leaf cannot move between reading and appending).
_LOCK_TREE = f"SELECT generation FROM {_S}.agents WHERE path = $1 FOR UPDATE"
_INSERT_LOOKUP = f"""
SELECT EXISTS (SELECT 1 FROM {_S}.messages WHERE agent = $1 AND id = $2) AS taken,
       (SELECT id FROM {_S}.messages WHERE agent = $1 ORDER BY seq DESC LIMIT 1) AS latest,
       EXISTS (SELECT 1 FROM {_S}.messages WHERE agent = $1 AND id = $3) AS parent_found
"""
_INSERT_MESSAGE = (
    f"INSERT INTO {_S}.messages (agent, id, parent_id, role, body, created_at) VALUES ($1, $2, $3, $4, $5, $6)"
)
_UPDATE_SET = "role = $4, body = $5, created_at = $6"
_UPDATE_MESSAGE_LOCKED = f"UPDATE {_S}.messages SET role = $3, body = $4, created_at = $5 WHERE agent = $1 AND id = $2"
_UPDATE_MESSAGE = _fenced(
    f"w AS (UPDATE {_S}.messages AS m SET {_UPDATE_SET} FROM lease "
    "WHERE lease.generation = $2 AND m.agent = $1 AND m.id = $3 RETURNING 1)",
    count="(SELECT count(*) FROM w)",
)
_CLEAR_MESSAGES = _fenced(
    f"w AS (DELETE FROM {_S}.messages AS m USING lease WHERE lease.generation = $2 AND m.agent = $1 RETURNING 1)"
)

# -- kv ----------------------------------------------------------------------------------------------------------------
_GET_KV = f"SELECT value FROM {_S}.kv WHERE agent = $1 AND key = $2"
_SET_KV = _fenced(
    f"w AS (INSERT INTO {_S}.kv (agent, key, value) SELECT $1, $3, $4 FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, key) DO UPDATE SET value = excluded.value RETURNING 1)"
)
_DELETE_KV = _fenced(
    f"w AS (DELETE FROM {_S}.kv AS k USING lease WHERE lease.generation = $2 AND k.agent = $1 AND k.key = $3 "
    "RETURNING 1)"
)

# -- submissions (not fenced: see _lease) ------------------------------------------------------------------------------
_SUBMISSION_SELECT = f"SELECT {quoted_names(SUBMISSION_COLUMNS)} FROM {_S}.submissions"
_SUBMISSION_LOOKUP = f"{_SUBMISSION_SELECT} WHERE agent = $1 AND (submission_id = $2 OR idempotency_key = $3)"
# The agent's counter, not a sequence: a sequence would spend a number on every insert that loses a race, and seq
# (the FIFO tiebreak) is never reused, as SQLite's AUTOINCREMENT.
_NEXT_SUBMISSION_SEQ = (
    f"UPDATE {_S}.agents SET submission_seq = submission_seq + 1 WHERE path = $1 RETURNING submission_seq"
)
_INSERT_SUBMISSION = (
    f"INSERT INTO {_S}.submissions (agent, {quoted_names(SUBMISSION_COLUMNS)}) "
    f"VALUES ($1, {_params(2, len(SUBMISSION_COLUMNS))}) ON CONFLICT DO NOTHING RETURNING seq"
)

# -- turns, chunks, effects --------------------------------------------------------------------------------------------
_TURN_SELECT = f"SELECT {quoted_names(TURN_COLUMNS)} FROM {_S}.turns"
# ON CONFLICT DO UPDATE keeps the row's seq, the tiebreak of list_turns.
_PUT_TURN = _fenced(
    f"w AS (INSERT INTO {_S}.turns (agent, {quoted_names(TURN_COLUMNS)}) "
    f"SELECT $1, {_params(3, len(TURN_COLUMNS))} FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, request_id) DO UPDATE SET "
    + ", ".join(f'"{c}" = excluded."{c}"' for c in TURN_COLUMNS[1:])
    + " RETURNING 1)",
    count="(SELECT count(*) FROM w)",
)
_DELETE_TURN = _fenced(
    *(
        f"d_{table} AS (DELETE FROM {_S}.{table} AS t USING lease "
        "WHERE lease.generation = $2 AND t.agent = $1 AND t.request_id = $3 RETURNING 1)"
        for table in ("turns", "chunks", "effects")
    )
)
_CLEAR_TURN_STATE = _fenced(
    *(
        f"d_{table} AS (DELETE FROM {_S}.{table} AS t USING lease WHERE lease.generation = $2 AND t.agent = $1 "
        "RETURNING 1)"
        for table in ("turns", "chunks", "effects")
    )
)
# One row per batch (its chunks as one msgpack array): a batch costs one row, whatever its length.
_APPEND_CHUNKS = _fenced(
    f"w AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, $3, $4 FROM lease "
    "WHERE lease.generation = $2 RETURNING 1)"
)
_LOAD_CHUNKS = f"SELECT body FROM {_S}.chunks WHERE agent = $1 AND request_id = $2 ORDER BY seq"
_EFFECT_SELECT = f"SELECT {quoted_names(EFFECT_COLUMNS)} FROM {_S}.effects"
# The effect writes, as CTEs: alone, or with a batch of the request's chunk log in the same statement.
_N_EFFECT = len(EFFECT_COLUMNS)
_INSERT_EFFECT = (
    f"w AS (INSERT INTO {_S}.effects (agent, {quoted_names(EFFECT_COLUMNS)}) "
    f"SELECT $1, {_params(3, _N_EFFECT)} FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, key) DO NOTHING RETURNING 1)"
)
_UPDATE_EFFECT = (
    f"w AS (UPDATE {_S}.effects AS e SET status = $4, output = $5, error = $6, finished_at = $7 FROM lease "
    "WHERE lease.generation = $2 AND e.agent = $1 AND e.key = $3 RETURNING e.request_id)"
)
_START_EFFECT = _fenced(_INSERT_EFFECT, count="(SELECT count(*) FROM w)")
_START_EFFECT_LOGGED = _fenced(  # the chunks' request id and body follow the effect's columns
    f"c AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, ${3 + _N_EFFECT}, ${4 + _N_EFFECT} "
    "FROM lease WHERE lease.generation = $2)",
    _INSERT_EFFECT,
    count="(SELECT count(*) FROM w)",
)
_FINISH_EFFECT = _fenced(_UPDATE_EFFECT, count="(SELECT count(*) FROM w)")
_FINISH_EFFECT_LOGGED = _fenced(  # the chunks go under the request of the effect the update found
    _UPDATE_EFFECT,
    f"c AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, w.request_id, $8 FROM w)",
    count="(SELECT count(*) FROM w)",
)

_CLAIM = (
    f"INSERT INTO {_S}.agents (path, generation) VALUES ($1, 1) "
    "ON CONFLICT (path) DO UPDATE SET generation = agents.generation + 1, claimed_at = now() RETURNING generation"
)

_EXISTS = f"SELECT EXISTS (SELECT 1 FROM {_S}.agents WHERE path = $1)"


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
            rows = await conn.fetch(_LOAD_PATH, self._agent)
        return [decode_message(row[0]) for row in rows]

    async def list_messages(self) -> list[UIMessage]:
        """Every stored message, all branches, in the order they were first written."""
        async with self._connection("list messages") as conn:
            rows = await conn.fetch(_LIST_MESSAGES, self._agent)
        return [decode_message(row[0]) for row in rows]

    async def get_message(self, message_id: str) -> UIMessage | None:
        async with self._connection("get message") as conn:
            body = await conn.fetchval(_GET_MESSAGE, self._agent, message_id)
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
                _UPDATE_MESSAGE_LOCKED, self._agent, message.id, message.role, body, message.created_at
            )
            if status == "UPDATE 0":
                await self._insert(conn, message, body, parent_id)

    async def update_message(self, message: UIMessage) -> bool:
        """Replace a stored message's content in place; returns whether it existed (nothing is inserted)."""
        body = encode_message(message)
        n = await self._write("update message", _UPDATE_MESSAGE, message.id, message.role, body, message.created_at)
        return n > 0

    async def clear_messages(self) -> None:
        await self._write("clear messages", _CLEAR_MESSAGES)

    async def get_kv(self, key: str) -> Any:
        """A small msgpack-able value, or None."""
        async with self._connection("get kv") as conn:
            value = await conn.fetchval(_GET_KV, self._agent, key)
        return None if value is None else unpack(value)

    async def set_kv(self, key: str, value: Any) -> None:
        """Store a value; None deletes the key."""
        if value is None:
            await self._write("delete kv", _DELETE_KV, key)
        else:
            await self._write("set kv", _SET_KV, key, pack(value))

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
                        seq = await conn.fetchval(_NEXT_SUBMISSION_SEQ, self._agent)
                        if await conn.fetchval(_INSERT_SUBMISSION, self._agent, seq, *row.values()) is None:
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
                f"{_SUBMISSION_SELECT} WHERE agent = $1 AND submission_id = $2", self._agent, submission_id
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
        sql = f"{_SUBMISSION_SELECT} WHERE agent = $1"
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
        await self._write("put turn", _PUT_TURN, *turn_row(record).values())

    async def get_turn(self, request_id: str) -> TurnRecord | None:
        async with self._connection("get turn") as conn:
            row = await conn.fetchrow(f"{_TURN_SELECT} WHERE agent = $1 AND request_id = $2", self._agent, request_id)
        return None if row is None else turn_record(dict(row))

    async def list_turns(self, *, statuses: Sequence[str] | None = None) -> list[TurnRecord]:
        """Turn records, oldest ``started_at`` first (ties in the order they were first put)."""
        sql = f"{_TURN_SELECT} WHERE agent = $1"
        params: list[Any] = [self._agent]
        if (wanted := status_set(statuses)) is not None:
            params.append(list(wanted))
            sql += " AND status = ANY($2::text[])"
        async with self._connection("list turns") as conn:
            rows = await conn.fetch(f"{sql} ORDER BY started_at, seq", *params)
        return [turn_record(dict(row)) for row in rows]

    async def delete_turn(self, request_id: str) -> None:
        """Remove the turn record, its chunk log and its effects (the turn ended: nothing is left to recover)."""
        await self._write("delete turn", _DELETE_TURN, request_id)

    async def begin_turn(self, record: TurnRecord, messages: Sequence[UIMessage] = ()) -> list[bool]:
        """Put the turn record and append ``messages`` under the latest leaf, in one transaction.

        Returns whether each message was appended (False: its id existed)."""
        bodies = [encode_message(m) for m in messages]
        async with self._tree("begin turn") as conn:
            row = await conn.fetchrow(_PUT_TURN, self._agent, self._generation, *turn_row(record).values())
            self._check(row["generation"])
            return [await self._insert(conn, m, body, LATEST) for m, body in zip(messages, bodies, strict=True)]

    async def end_turn(self, request_id: str, reply: UIMessage | None = None) -> None:
        """Upsert ``reply`` (when given) and remove the turn record, its chunk log and its effects, in one
        transaction (``upsert_message`` then ``delete_turn``, committed once)."""
        body = None if reply is None else encode_message(reply)
        async with self._tree("end turn") as conn:
            if reply is not None and body is not None:
                status = await conn.execute(
                    _UPDATE_MESSAGE_LOCKED, self._agent, reply.id, reply.role, body, reply.created_at
                )
                if status == "UPDATE 0":
                    await self._insert(conn, reply, body, LATEST)
            row = await conn.fetchrow(_DELETE_TURN, self._agent, self._generation, request_id)
            self._check(row["generation"])

    async def append_chunks(self, request_id: str, chunks: Sequence[dict[str, Any]]) -> None:
        """Append wire-form chunks to the request's chunk log, in order (one row for the batch)."""
        body = chunk_batch(chunks)
        if not chunks:
            async with self._connection("append chunks"):  # a closed store refuses even an empty batch
                return
        await self._write("append chunks", _APPEND_CHUNKS, request_id, body)

    async def load_chunks(self, request_id: str) -> list[dict[str, Any]]:
        """The request's chunk log, in the order appended."""
        async with self._connection("load chunks") as conn:
            rows = await conn.fetch(_LOAD_CHUNKS, self._agent, request_id)
        return chunk_log(row[0] for row in rows)

    # -- the effect ledger -----------------------------------------------------------------------------------------

    async def start_effect(self, record: EffectRecord, *, chunks: Sequence[dict[str, Any]] = ()) -> EffectRecord:
        """Record that a tool call starts, unless its key exists: returns the stored record either way.

        ``chunks`` go to the request's chunk log in the same statement (one row for the batch).
        """
        row = effect_row(record)
        if chunks:
            written = await self._write(
                "start effect", _START_EFFECT_LOGGED, *row.values(), record.request_id, chunk_batch(chunks)
            )
        else:
            written = await self._write("start effect", _START_EFFECT, *row.values())
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
            n = await self._write("finish effect", _FINISH_EFFECT_LOGGED, *values, chunk_batch(chunks))
        else:
            n = await self._write("finish effect", _FINISH_EFFECT, *values)
        if n == 0:
            raise StoreError(f"cannot finish effect {key!r}: it was never started")

    async def get_effect(self, key: str) -> EffectRecord | None:
        async with self._connection("get effect") as conn:
            row = await conn.fetchrow(f"{_EFFECT_SELECT} WHERE agent = $1 AND key = $2", self._agent, key)
        return None if row is None else effect_record(dict(row))

    async def list_effects(self, request_id: str) -> list[EffectRecord]:
        """The request's effects in the order they started."""
        async with self._connection("list effects") as conn:
            rows = await conn.fetch(
                f"{_EFFECT_SELECT} WHERE agent = $1 AND request_id = $2 ORDER BY seq", self._agent, request_id
            )
        return [effect_record(dict(row)) for row in rows]

    async def clear_turn_state(self) -> None:
        """Delete every turn record, chunk log and effect; submissions and messages stay."""
        await self._write("clear turn state", _CLEAR_TURN_STATE)

    async def exists(self) -> bool:
        """Whether the agent has a lease row (every store of it that was ever used claimed one), asked without
        claiming one."""
        if self._pool is not None:
            return True
        try:
            if self._own_pool is not None:
                async with self._own_pool.acquire() as conn:
                    await migrate(conn)
                    return bool(await conn.fetchval(_EXISTS, self._agent))
            return bool(await (await shared_pool(self._url)).fetchval(_EXISTS, self._agent))
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
                self._generation = await pool.fetchval(_CLAIM, self._agent)
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
            self._check(await conn.fetchval(_LOCK_TREE, self._agent))
            yield conn

    async def _write(self, what: str, sql: str, *args: Any) -> int:
        """Run a ``_fenced`` statement with this agent's path and generation; returns its count."""
        async with self._connection(what) as conn:
            row = await conn.fetchrow(sql, self._agent, self._generation, *args)
        self._check(row["generation"])
        n: int = row["n"]
        return n

    def _check(self, owner: int | None) -> None:
        if owner != self._generation:
            raise fenced_error(self._agent, self._generation, owner)

    async def _submission_lookup(self, conn: Any, record: SubmissionRecord) -> tuple[Any, Any]:
        """The rows that hold the record's id and its key (None for each that none does)."""
        rows = await conn.fetch(_SUBMISSION_LOOKUP, self._agent, record.submission_id, record.idempotency_key)
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
        found = await conn.fetchrow(_INSERT_LOOKUP, self._agent, message.id, explicit)
        if found["taken"]:
            return False
        if parent_id is LATEST:
            parent_id = found["latest"]
        elif parent_id is not None and not found["parent_found"]:
            raise StoreError(f"cannot append message {message.id!r}: parent {parent_id!r} does not exist")
        await conn.execute(_INSERT_MESSAGE, self._agent, message.id, parent_id, message.role, body, message.created_at)
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
