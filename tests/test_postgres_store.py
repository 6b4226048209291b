"""What only PostgresStore has: the schema and its migrations, one database shared by many agents and processes,
the pools a process shares, and its errors. The Store contract itself runs in test_store.py and
test_durable_records.py; fencing in test_store_fencing.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

import think_actors as ta
from think_actors.errors import StoreError
from think_actors.messages import TextPart, UIMessage, user_message
from think_actors.store import EffectRecord, PostgresStore, SubmissionRecord, TurnRecord, _schema
from think_actors.store._codec import TURN_COLUMNS, submission_row
from think_actors.store.postgres import SCHEMA_VERSION, close_pools


@pytest.fixture(autouse=True)
async def _close_pools() -> AsyncIterator[None]:
    yield
    await close_pools()


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[Any]:
    """A plain connection to the test's database, to look at what the stores wrote."""
    connection = await asyncpg.connect(postgres_url)
    yield connection
    await connection.close()


def submission(sid: str, key: str | None = None, text: str = "hi") -> SubmissionRecord:
    return SubmissionRecord(
        submission_id=sid,
        request_id=sid,
        status="pending",
        messages=[UIMessage(id=f"{sid}-m", role="user", parts=(TextPart(text=text),), created_at=1.0)],
        created_at=100.0,
        idempotency_key=key,
    )


def turn(request_id: str) -> TurnRecord:
    return TurnRecord(request_id=request_id, trigger="chat", status="running", started_at=1, updated_at=1)


def assistant_message(text: str, *, id: str) -> UIMessage:
    return UIMessage(id=id, role="assistant", parts=(TextPart(text=text),), created_at=2.0)


async def tables(conn: Any) -> list[str]:
    rows = await conn.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'think_actors' ORDER BY tablename", timeout=10
    )
    return [row[0] for row in rows]


# --- schema and migrations ----------------------------------------------------------------------------------------


async def test_first_use_creates_the_schema_in_an_empty_database(postgres_url: str, conn: Any) -> None:
    assert await tables(conn) == []
    store = PostgresStore(postgres_url, "lead/a")
    assert await conn.fetchval("SELECT to_regnamespace('think_actors')") is None  # nothing connects before use
    await store.load_messages()
    assert await tables(conn) == [
        "agents",
        "chunks",
        "effects",
        "kv",
        "messages",
        "schema_version",
        "submissions",
        "turns",
    ]
    # 2: message search (test_session_search_postgres.py); 3: the submitter's traceparent of a submission;
    # 4: a turn's two transactions as functions, one round trip each.
    assert SCHEMA_VERSION == len(_schema.MIGRATIONS) == 4
    assert [tuple(r) for r in await conn.fetch("SELECT version FROM think_actors.schema_version")] == [
        (1,),
        (2,),
        (3,),
        (4,),
    ]
    functions = "SELECT proname FROM pg_proc WHERE pronamespace = 'think_actors'::regnamespace ORDER BY proname"
    assert [r[0] for r in await conn.fetch(functions)] == ["begin_turn", "end_turn"]
    assert [tuple(r) for r in await conn.fetch("SELECT path, generation FROM think_actors.agents")] == [("lead/a", 1)]


async def test_rerunning_the_migration_is_a_no_op(postgres_url: str, conn: Any) -> None:
    assert await _schema.migrate(conn) == 0
    await PostgresStore(postgres_url, "lead/a").append_message(user_message("hi", id="u1"))
    assert await _schema.migrate(conn) == SCHEMA_VERSION
    assert await _schema.migrate(conn) == SCHEMA_VERSION
    assert await conn.fetchval("SELECT count(*) FROM think_actors.schema_version") == SCHEMA_VERSION
    assert await conn.fetchval("SELECT count(*) FROM think_actors.messages") == 1


async def test_migration_3_keeps_the_submissions_a_version_2_database_holds(
    postgres_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:  # a database think_actors with migrations 1 and 2 only created
        patch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:2])
        patch.setattr(_schema, "SCHEMA_VERSION", 2)
        assert await _schema.migrate(conn) == 0
        row = {"seq": 1, **submission_row(submission("s1"))}  # the columns of migration 1, as a store wrote them
        del row["traceparent"]
        columns = ", ".join(f'"{name}"' for name in row)
        values = ", ".join(f"${i}" for i in range(2, len(row) + 2))
        await conn.execute("INSERT INTO think_actors.agents (path, generation) VALUES ($1, 1)", "lead/a")
        await conn.execute(
            f"INSERT INTO think_actors.submissions (agent, {columns}) VALUES ($1, {values})", "lead/a", *row.values()
        )

    traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    store = PostgresStore(postgres_url, "lead/a")
    old = await store.get_submission("s1")
    assert old is not None and (old.submission_id, old.traceparent) == ("s1", None)
    await conn.execute("UPDATE think_actors.agents SET submission_seq = 1 WHERE path = 'lead/a'")
    stored, created = await store.insert_submission(dataclasses.replace(submission("s2"), traceparent=traced))
    assert (stored.traceparent, created) == (traced, True)
    assert [(r.submission_id, r.traceparent) for r in await store.list_submissions()] == [("s1", None), ("s2", traced)]
    assert await conn.fetchval("SELECT max(version) FROM think_actors.schema_version") == SCHEMA_VERSION


async def test_migration_4_lets_a_turn_begun_on_a_version_3_database_end(
    postgres_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A version-3 store began a turn (record and user message, written statement by statement) and its process
    # stopped; the upgraded store ends that turn and begins the next through migration 4's functions.
    with monkeypatch.context() as patch:
        patch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:3])
        patch.setattr(_schema, "SCHEMA_VERSION", 3)
        old = PostgresStore(postgres_url, "lead/a")
        assert await conn.fetchval("SELECT to_regproc('think_actors.begin_turn')") is None
        await old.put_turn(turn("r1"))
        await old.append_message(user_message("hi", id="u1"))
        await old.close()
        await close_pools()  # the old process ends; the upgraded one opens its own pool, which migrates
    store = PostgresStore(postgres_url, "lead/a")
    assert [t.request_id for t in await store.list_turns()] == ["r1"]
    await store.end_turn("r1", assistant_message("hello", id="a1"))
    assert await store.begin_turn(turn("r2"), [user_message("again", id="u2"), user_message("hi", id="u1")]) == [
        True,
        False,
    ]
    assert [m.id for m in await store.load_messages()] == ["u1", "a1", "u2"]
    assert [t.request_id for t in await store.list_turns()] == ["r2"]
    assert await conn.fetchval("SELECT max(version) FROM think_actors.schema_version") == 4


async def test_processes_starting_together_migrate_once(
    postgres_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second migration that fails if it runs twice (a duplicate primary key), to show each runs exactly once.
    extra = (f"INSERT INTO {_schema.SCHEMA}.agents (path, generation) VALUES ('migrated', 0)",)
    monkeypatch.setattr(_schema, "MIGRATIONS", (*_schema.MIGRATIONS, extra))
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    connections = [await asyncpg.connect(postgres_url) for _ in range(8)]  # eight sessions, as eight processes
    try:
        found = await asyncio.gather(*(_schema.migrate(c) for c in connections))
    finally:
        for c in connections:
            await c.close()
    # one migrated from empty; the others waited, then found it done
    assert sorted(found) == [0] + [SCHEMA_VERSION + 1] * 7
    assert [tuple(r) for r in await conn.fetch("SELECT version FROM think_actors.schema_version ORDER BY 1")] == [
        (v,) for v in range(1, SCHEMA_VERSION + 2)
    ]
    assert await conn.fetchval("SELECT count(*) FROM think_actors.agents WHERE path = 'migrated'") == 1


async def test_stores_of_many_processes_opening_an_empty_database_at_once(postgres_url: str, conn: Any) -> None:
    # Separate pools stand for separate processes: each migrates on its first use.
    pools = [await asyncpg.create_pool(postgres_url, min_size=1, max_size=1) for _ in range(6)]
    try:
        stores = [PostgresStore(postgres_url, f"lead/a{i}", pool=pool) for i, pool in enumerate(pools)]
        await asyncio.gather(*(s.append_message(user_message("hi", id="u1")) for s in stores))
    finally:
        for pool in pools:
            await pool.close()
    assert await conn.fetchval("SELECT count(*) FROM think_actors.schema_version") == SCHEMA_VERSION
    assert await conn.fetchval("SELECT count(DISTINCT agent) FROM think_actors.messages") == 6


async def test_a_database_migrated_by_a_newer_think_actors_is_refused(postgres_url: str, conn: Any) -> None:
    await _schema.migrate(conn)
    await conn.execute("INSERT INTO think_actors.schema_version (version) VALUES (99)")
    store = PostgresStore(postgres_url, "lead/a")
    with pytest.raises(StoreError) as raised:
        await store.load_messages()
    assert raised.value.message == (
        f"PostgreSQL schema 'think_actors' has version 99; this think_actors reads up to {SCHEMA_VERSION}. "
        "Upgrade think_actors to use this database."
    )


# --- one database, many agents ------------------------------------------------------------------------------------


async def test_two_agents_never_see_each_others_rows(postgres_url: str) -> None:
    a, b = PostgresStore(postgres_url, "lead/a"), PostgresStore(postgres_url, "lead/b")
    for store, who in ((a, "a"), (b, "b")):  # the same ids and keys in both
        await store.append_message(user_message(f"hi from {who}", id="u1"))
        await store.set_kv("k", who)
        assert (await store.insert_submission(submission("s1", key="k1", text=who)))[1] is True
        await store.put_turn(TurnRecord(request_id="r1", trigger=who, status="running", started_at=1, updated_at=1))
        await store.append_chunks("r1", [{"type": "text-delta", "id": "t", "delta": who}])
        await store.start_effect(
            EffectRecord(
                key="k/r1/c1", request_id="r1", tool_call_id="c1", tool_name=who, status="started", started_at=1
            )
        )
    await a.append_message(UIMessage(id="a1", role="assistant", parts=(TextPart(text="only a"),)))

    assert [m.text for m in await a.load_messages()] == ["hi from a", "only a"]
    assert [m.text for m in await b.load_messages()] == ["hi from b"]
    assert (await a.get_kv("k"), await b.get_kv("k")) == ("a", "b")
    assert [(s.seq, s.messages[0].text) for s in await b.list_submissions()] == [(1, "b")]  # seq counts per agent
    assert [t.trigger for t in await b.list_turns()] == ["b"]
    assert await b.load_chunks("r1") == [{"type": "text-delta", "id": "t", "delta": "b"}]
    assert [e.tool_name for e in await b.list_effects("r1")] == ["b"]

    await a.clear_messages()
    await a.clear_turn_state()
    assert await a.delete_submission("s1") is True
    assert [m.text for m in await b.load_messages()] == ["hi from b"]
    assert [t.request_id for t in await b.list_turns()] == ["r1"]
    assert await b.get_submission("s1") is not None
    assert await b.get_effect("k/r1/c1") is not None


async def test_fifty_concurrent_submissions_with_one_key_over_fifty_connections_accept_one(
    postgres_url: str, conn: Any
) -> None:
    await _schema.migrate(conn)
    # One single-connection pool per store: fifty sessions race, as fifty processes would.
    pools = [await asyncpg.create_pool(postgres_url, min_size=1, max_size=1) for _ in range(50)]
    try:
        stores = [PostgresStore(postgres_url, "lead/a", pool=pool) for pool in pools]
        await asyncio.gather(*(s.get_kv("warm") for s in stores))  # every store opened: the race is the insert
        results = await asyncio.gather(
            *(
                s.insert_submission(submission(f"s{i}", key="nightly", text=str(i)), id_given=False)
                for i, s in enumerate(stores)
            )
        )
    finally:
        for pool in pools:
            await pool.close()
    assert sorted(created for _, created in results) == [False] * 49 + [True]
    [winner] = [record for record, created in results if created]
    assert {(r.submission_id, r.seq, r.messages[0].text) for r, _ in results} == {
        (winner.submission_id, 1, winner.messages[0].text)
    }
    rows = await conn.fetch("SELECT submission_id, seq FROM think_actors.submissions")
    assert [tuple(r) for r in rows] == [(winner.submission_id, 1)]
    # No seq was spent by the 49 that lost: the next submission is 2.
    later = PostgresStore(postgres_url, "lead/a")
    assert (await later.insert_submission(submission("next")))[0].seq == 2


async def test_the_stores_of_a_process_share_one_pool(postgres_url: str, conn: Any) -> None:
    stores = [PostgresStore(postgres_url, f"lead/a{i}") for i in range(30)]
    await asyncio.gather(*(s.append_message(user_message("hi", id="u1")) for s in stores))
    connections = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    assert 1 <= connections <= _schema.POOL_MAX_SIZE
    assert await _schema.shared_pool(postgres_url) is await _schema.shared_pool(postgres_url)


async def test_history_survives_a_new_process(postgres_url: str) -> None:
    first = PostgresStore(postgres_url, "lead/a")
    await first.append_message(user_message("hi", id="u1"))
    await first.append_message(UIMessage(id="a1", role="assistant", parts=(TextPart(text="first"),)))
    await first.append_message(UIMessage(id="a2", role="assistant", parts=(TextPart(text="second"),)), parent_id="u1")
    await first.set_kv("cursor", {"step": 4})
    await first.close()
    await close_pools()  # as if the process had exited

    second = PostgresStore(postgres_url, "lead/a")
    assert [m.id for m in await second.load_messages()] == ["u1", "a2"]
    assert [m.id for m in await second.list_messages()] == ["u1", "a1", "a2"]
    assert await second.get_kv("cursor") == {"step": 4}
    assert second.generation == 2


async def test_an_agent_keeps_its_history_in_postgres(postgres_url: str) -> None:
    model = ta.testing.ScriptedModel([ta.testing.text("hello back")])
    agent = ta.Think("pg-1", model=model, store=postgres_url)
    assert isinstance(agent.store, PostgresStore) and agent.store.agent_path == "think/pg-1"
    assert (await agent.save_messages("hello")).status == "completed"
    await agent.close()
    again = ta.Think("pg-1", store=postgres_url)
    assert [m.text for m in await again.load_messages()] == ["hello", "hello back"]
    await again.close()


# --- errors -------------------------------------------------------------------------------------------------------


async def test_an_unreachable_server_is_a_retryable_store_error_naming_the_agent_without_the_password() -> None:
    with socket_closed_port() as port:
        store = PostgresStore(f"postgresql://u:secret@127.0.0.1:{port}/db", "lead/a")
        with pytest.raises(StoreError) as raised:
            await store.load_messages()
    error = raised.value
    assert error.retryable is True
    assert error.message.startswith(
        f"PostgreSQL store for agent 'lead/a' at postgresql://u:***@127.0.0.1:{port}/db: load messages failed: "
    )
    assert "secret" not in error.message and "secret" not in repr(store)


async def test_invalid_agent_paths_are_refused_before_anything_connects(postgres_url: str) -> None:
    for bad in ("../x", "a//b", "", "a/./b"):
        with pytest.raises(ta.InvalidAgentNameError):
            PostgresStore(postgres_url, bad)


async def test_a_closed_store_refuses_use_and_leaves_the_shared_pool_to_others(postgres_url: str) -> None:
    closed, other = PostgresStore(postgres_url, "lead/a"), PostgresStore(postgres_url, "lead/b")
    await closed.append_message(user_message("hi", id="u1"))
    await closed.close()
    await closed.close()
    with pytest.raises(StoreError, match="is closed"):
        await closed.load_messages()
    assert await other.append_message(user_message("hi", id="u1")) is True


class socket_closed_port:
    """A port on 127.0.0.1 that nothing listens on (bound, never listened, so connecting is refused)."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        port: int = self._socket.getsockname()[1]
        return port

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


async def test_the_turn_functions_take_the_turn_columns_in_the_codecs_order(postgres_url: str, conn: Any) -> None:
    # begin_turn passes turn_row's values by position: a column added to the codec needs the function changed too.
    await PostgresStore(postgres_url, "lead/a").load_messages()
    names = await conn.fetchval(
        "SELECT proargnames FROM pg_proc WHERE proname = 'begin_turn' AND pronamespace = 'think_actors'::regnamespace"
    )
    turn_columns = [f"p_{column}" for column in TURN_COLUMNS]
    arrays = ["p_ids", "p_roles", "p_bodies", "p_created", "p_search"]
    assert names == ["p_agent", "p_generation", *turn_columns, *arrays, "lease_owner", "appended"]
