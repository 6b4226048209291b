"""PostgresStore's schema, its versioned migrations, and the connection pools a process shares.

The tables live in their own PostgreSQL schema (``think_actors``), so they sit beside an application's tables
without clashing. ``think_actors.schema_version`` records every migration applied; ``MIGRATIONS`` is the ordered
list, version ``i + 1`` being ``MIGRATIONS[i]``. Migrating takes a transaction-scoped advisory lock first, so
processes that start together apply each migration once, and a failed migration rolls back whole (PostgreSQL's
DDL is transactional).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from ..errors import StoreError
from ._codec import decode_message
from ._search import search_text
from .redact import redact_url

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "close_pools", "migrate", "shared_pool"]

SCHEMA = "think_actors"


async def _backfill_search_text(conn: Any) -> None:
    """Migration 2's Python step: the searchable text of every message stored before it (the bodies are msgpack,
    which SQL cannot read), in batches by (agent, seq)."""
    last: tuple[str, int] = ("", -1)
    while True:
        rows = await conn.fetch(
            f"SELECT agent, seq, body FROM {SCHEMA}.messages WHERE search_text IS NULL AND (agent, seq) > ($1, $2) "
            "ORDER BY agent, seq LIMIT 500",
            *last,
        )
        if not rows:
            return
        updates = []
        for agent, seq, body in rows:
            try:
                text = search_text(decode_message(body))
            except StoreError:
                text = ""  # a row no reader can decode has nothing to find; it must not stop the migration
            updates.append((agent, seq, text))
        await conn.executemany(f"UPDATE {SCHEMA}.messages SET search_text = $3 WHERE agent = $1 AND seq = $2", updates)
        last = (rows[-1][0], rows[-1][1])


# Migration 4's functions. A PL/pgSQL function runs each statement with a fresh snapshot (read committed), as the
# store's own statements did one by one, so a message appended under the tree lock sees the newest leaf. They
# take the agent's lease row FOR UPDATE (the tree lock), write only while it holds ``p_generation``, and return the
# generation they found: the caller raises ``StoreFencedError`` when it is not its own (nothing was written then).
_BEGIN_TURN = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.begin_turn(
    p_agent text, p_generation bigint,
    p_request_id text, p_trigger text, p_status text, p_started_at double precision, p_updated_at double precision,
    p_continuation integer, p_input_ids bytea, p_message_id text, p_attempts bigint, p_progress bigint,
    p_submission_id text, p_data bytea,
    p_ids text[], p_roles text[], p_bodies bytea[], p_created double precision[], p_search text[],
    OUT lease_owner bigint, OUT appended boolean[]
) LANGUAGE plpgsql AS $fn$
DECLARE
    latest text;
BEGIN
    appended := '{{}}';
    SELECT a.generation INTO lease_owner FROM {SCHEMA}.agents AS a WHERE a.path = p_agent FOR UPDATE;
    IF lease_owner IS DISTINCT FROM p_generation THEN
        RETURN;
    END IF;
    INSERT INTO {SCHEMA}.turns AS t (agent, request_id, "trigger", status, started_at, updated_at, continuation,
                                     input_ids, message_id, attempts, progress, submission_id, data)
    VALUES (p_agent, p_request_id, p_trigger, p_status, p_started_at, p_updated_at, p_continuation, p_input_ids,
            p_message_id, p_attempts, p_progress, p_submission_id, p_data)
    ON CONFLICT (agent, request_id) DO UPDATE SET
        "trigger" = excluded."trigger", status = excluded.status, started_at = excluded.started_at,
        updated_at = excluded.updated_at, continuation = excluded.continuation, input_ids = excluded.input_ids,
        message_id = excluded.message_id, attempts = excluded.attempts, progress = excluded.progress,
        submission_id = excluded.submission_id, data = excluded.data;
    SELECT m.id INTO latest FROM {SCHEMA}.messages AS m WHERE m.agent = p_agent ORDER BY m.seq DESC LIMIT 1;
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        IF EXISTS (SELECT 1 FROM {SCHEMA}.messages AS m WHERE m.agent = p_agent AND m.id = p_ids[i]) THEN
            appended := appended || false;
        ELSE
            INSERT INTO {SCHEMA}.messages (agent, id, parent_id, role, body, created_at, search_text)
            VALUES (p_agent, p_ids[i], latest, p_roles[i], p_bodies[i], p_created[i], p_search[i]);
            latest := p_ids[i];
            appended := appended || true;
        END IF;
    END LOOP;
END
$fn$"""
_END_TURN = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.end_turn(
    p_agent text, p_generation bigint, p_request_id text,
    p_id text, p_role text, p_body bytea, p_created double precision, p_search text,
    OUT lease_owner bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
    latest text;
BEGIN
    SELECT a.generation INTO lease_owner FROM {SCHEMA}.agents AS a WHERE a.path = p_agent FOR UPDATE;
    IF lease_owner IS DISTINCT FROM p_generation THEN
        RETURN;
    END IF;
    IF p_id IS NOT NULL THEN
        UPDATE {SCHEMA}.messages AS m SET role = p_role, body = p_body, created_at = p_created, search_text = p_search
        WHERE m.agent = p_agent AND m.id = p_id;
        IF NOT FOUND THEN
            SELECT m.id INTO latest FROM {SCHEMA}.messages AS m WHERE m.agent = p_agent ORDER BY m.seq DESC LIMIT 1;
            INSERT INTO {SCHEMA}.messages (agent, id, parent_id, role, body, created_at, search_text)
            VALUES (p_agent, p_id, latest, p_role, p_body, p_created, p_search);
        END IF;
    END IF;
    DELETE FROM {SCHEMA}.turns AS t WHERE t.agent = p_agent AND t.request_id = p_request_id;
    DELETE FROM {SCHEMA}.chunks AS c WHERE c.agent = p_agent AND c.request_id = p_request_id;
    DELETE FROM {SCHEMA}.effects AS e WHERE e.agent = p_agent AND e.request_id = p_request_id;
END
$fn$"""


Step = str | Callable[[Any], Awaitable[None]]
"""A migration's step: a statement, or a coroutine function given the migrating connection."""

# Every table is keyed by the agent path first: an agent's rows are one index range, and no statement reaches
# another agent's. The types match _codec's encoders: text, float8 for times, bytea for msgpack.
MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    # 1: the lease rows, the message tree, kv, submissions, turn records, the chunk log and the effect ledger.
    (
        f"""CREATE TABLE {SCHEMA}.agents (
            path text PRIMARY KEY,
            generation bigint NOT NULL,
            submission_seq bigint NOT NULL DEFAULT 0,
            claimed_at timestamptz NOT NULL DEFAULT now()
        )""",
        f"""CREATE TABLE {SCHEMA}.messages (
            agent text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            id text NOT NULL,
            parent_id text,
            role text,
            body bytea NOT NULL,
            created_at double precision,
            PRIMARY KEY (agent, id)
        )""",
        f"CREATE UNIQUE INDEX messages_by_seq ON {SCHEMA}.messages (agent, seq)",
        f"""CREATE TABLE {SCHEMA}.kv (
            agent text NOT NULL,
            key text NOT NULL,
            value bytea NOT NULL,
            PRIMARY KEY (agent, key)
        )""",
        # A unique constraint holds any number of NULL keys, so submissions without a key never collide.
        f"""CREATE TABLE {SCHEMA}.submissions (
            agent text NOT NULL,
            seq bigint NOT NULL,
            submission_id text NOT NULL,
            request_id text NOT NULL,
            status text NOT NULL,
            messages bytea NOT NULL,
            created_at double precision NOT NULL,
            idempotency_key text,
            metadata bytea NOT NULL,
            error text,
            started_at double precision,
            completed_at double precision,
            messages_applied_at double precision,
            PRIMARY KEY (agent, submission_id),
            UNIQUE (agent, idempotency_key)
        )""",
        f"CREATE INDEX submissions_by_status ON {SCHEMA}.submissions (agent, status, created_at, seq)",
        f"""CREATE TABLE {SCHEMA}.turns (
            agent text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            request_id text NOT NULL,
            "trigger" text NOT NULL,
            status text NOT NULL,
            started_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            continuation integer NOT NULL,
            input_ids bytea NOT NULL,
            message_id text,
            attempts bigint NOT NULL,
            progress bigint NOT NULL,
            submission_id text,
            data bytea NOT NULL,
            PRIMARY KEY (agent, request_id)
        )""",
        f"""CREATE TABLE {SCHEMA}.chunks (
            agent text NOT NULL,
            request_id text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            body bytea NOT NULL,
            PRIMARY KEY (agent, request_id, seq)
        )""",
        f"""CREATE TABLE {SCHEMA}.effects (
            agent text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            key text NOT NULL,
            request_id text NOT NULL,
            tool_call_id text NOT NULL,
            tool_name text NOT NULL,
            status text NOT NULL,
            started_at double precision NOT NULL,
            input bytea NOT NULL,
            output bytea NOT NULL,
            error text,
            finished_at double precision,
            PRIMARY KEY (agent, key)
        )""",
        f"CREATE INDEX effects_by_request ON {SCHEMA}.effects (agent, request_id, seq)",
    ),
    # 2: message search. ``search_text`` is written with every message (``_search.search_text``); the tsvector is
    # generated from it and GIN-indexed (a search filters on the agent through the primary key beside it).
    (
        f"ALTER TABLE {SCHEMA}.messages ADD COLUMN search_text text",
        _backfill_search_text,
        f"ALTER TABLE {SCHEMA}.messages ADD COLUMN search_vector tsvector "
        "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, coalesce(search_text, ''))) STORED",
        f"CREATE INDEX messages_search ON {SCHEMA}.messages USING gin (search_vector)",
    ),
    # 3: the trace context of the span that submitted a submission (think_actors.tracing), NULL in older rows.
    (f"ALTER TABLE {SCHEMA}.submissions ADD COLUMN traceparent text",),
    # 4: a turn's two transactions as one round trip each (``begin_turn``, ``end_turn``): the statements the store
    # used to send one by one (BEGIN, the tree lock, the writes, COMMIT: 6-7 round trips each) run in the server.
    (_BEGIN_TURN, _END_TURN),
)
SCHEMA_VERSION = len(MIGRATIONS)
"""The newest schema this think_actors knows; a database at a higher version was migrated by a newer one."""

# Any constant works, as long as no other code takes this advisory lock for something else: "think" in ASCII.
_MIGRATION_LOCK = 0x7468696E6B
_VERSION = f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.schema_version"


async def schema_version(conn: Any) -> int:
    """The database's schema version (0 for a database without think_actors' tables)."""
    if await conn.fetchval("SELECT to_regclass($1)", f"{SCHEMA}.schema_version") is None:
        return 0
    version: int = await conn.fetchval(_VERSION)
    return version


async def migrate(conn: Any) -> int:
    """Apply the migrations the database lacks; returns the version it had. Refuses a newer schema.

    A database already current is only read (no lock), so every open but the first costs two short queries.
    """
    found = await schema_version(conn)
    if found == SCHEMA_VERSION:
        return found
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        # Re-read under the lock: another process may have migrated while this one waited.
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        found = await conn.fetchval(_VERSION)
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"PostgreSQL schema {SCHEMA!r} has version {found}; this think_actors reads up to {SCHEMA_VERSION}. "
                "Upgrade think_actors to use this database."
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for step in MIGRATIONS[version - 1]:
                if isinstance(step, str):
                    await conn.execute(step)
                else:
                    await step(conn)
            await conn.execute(f"INSERT INTO {SCHEMA}.schema_version (version) VALUES ($1)", version)
    return int(found)


# -- the process's pools ----------------------------------------------------------------------------------------------
# One pool per (URL, event loop): asyncpg connections belong to the loop that made them, and an actor has one loop.
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 10

_pools: dict[tuple[str, int], tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = {}


async def _skip_reset(conn: Any) -> None:
    # The stores leave no session state behind (no SET, LISTEN, cursors or session-level advisory locks), so the
    # default reset (one more round trip per release) is needed only when a cancelled call left a transaction open.
    if conn.is_in_transaction():
        await conn.reset()


async def _create_pool(url: str) -> Any:
    pool = await asyncpg.create_pool(url, min_size=POOL_MIN_SIZE, max_size=POOL_MAX_SIZE, reset=_skip_reset)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
    except BaseException:
        await pool.close()
        raise
    return pool


async def shared_pool(url: str) -> Any:
    """The process's pool for ``url`` on the running loop, created (and the schema migrated) on first use."""
    loop = asyncio.get_running_loop()
    key = (url, id(loop))
    entry = _pools.get(key)
    if entry is None or entry[0] is not loop:
        for stale in [k for k, (other, _) in _pools.items() if other.is_closed()]:
            del _pools[stale]
        entry = _pools[key] = (loop, loop.create_task(_create_pool(url)))
    try:
        # Shielded: one caller giving up does not cancel the pool the others wait for.
        return await asyncio.shield(entry[1])
    except BaseException:
        if entry[1].done() and _pools.get(key) is entry:
            del _pools[key]  # a failed creation is retried by the next call
        raise


async def close_pools() -> None:
    """Close the shared pools of the running loop (at shutdown, or between tests); stores opened later reconnect."""
    loop = asyncio.get_running_loop()
    for key, (owner, task) in list(_pools.items()):
        if owner is not loop:
            continue
        del _pools[key]
        try:
            pool = await task
        except Exception:
            continue
        try:
            await pool.close()
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise StoreError(f"closing the PostgreSQL pool of {redact_url(key[0])} failed: {exc}") from exc
