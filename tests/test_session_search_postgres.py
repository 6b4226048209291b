"""What only PostgreSQL's message search has (issue 21): migration 2 over a database that already holds
messages (their text computed from the stored bodies), the GIN index, and one agent's search never reaching
another's rows. The search itself runs on every store kind in test_session_search.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from think_actors.messages import TextPart, UIMessage
from think_actors.store import PostgresStore, _schema
from think_actors.store._codec import encode_message
from think_actors.store.postgres import SCHEMA_VERSION, close_pools


@pytest.fixture(autouse=True)
async def _close_pools() -> AsyncIterator[None]:
    yield
    await close_pools()


def said(mid: str, role: Any, words: str, at: float) -> UIMessage:
    return UIMessage(id=mid, role=role, parts=(TextPart(text=words),), created_at=at)


async def test_migration_2_indexes_the_messages_a_version_1_database_holds(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        with monkeypatch.context() as patch:  # a database think_actors with migration 1 only created
            patch.setattr(_schema, "MIGRATIONS", _schema.MIGRATIONS[:1])
            patch.setattr(_schema, "SCHEMA_VERSION", 1)
            assert await _schema.migrate(conn) == 0
        old = [
            ("lead/a", said("u1", "user", "The dogs were running", 1.0)),
            ("lead/a", said("a1", "assistant", "Running dogs are happy", 2.0)),
            ("lead/b", said("u1", "user", "Another agent runs too", 3.0)),
        ]
        # More rows than one backfill batch (500), so the batches' cursor is exercised.
        old += [("lead/c", said(f"m{i}", "user", f"filler message {i}", 10.0 + i)) for i in range(520)]
        old.append(("lead/c", said("last", "user", "the final sprint ran late", 999.0)))
        await conn.executemany(
            "INSERT INTO think_actors.messages (agent, id, parent_id, role, body, created_at) "
            "VALUES ($1, $2, NULL, $3, $4, $5)",
            [(agent, m.id, m.role, encode_message(m), m.created_at) for agent, m in old],
        )

        a, b, c = (PostgresStore(postgres_url, path) for path in ("lead/a", "lead/b", "lead/c"))
        assert [m.id for m in await a.list_messages()] == ["u1", "a1"]  # the first use migrates (to the newest version)
        assert [(h.message_id, h.snippet) for h in await a.search_messages("run")] == [
            ("a1", "**Running** dogs are happy"),
            ("u1", "The dogs were **running**"),
        ]
        assert [h.message_id for h in await b.search_messages("run")] == ["u1"]  # its own rows only
        assert [h.message_id for h in await c.search_messages("ran")] == ["last"]
        assert len(await c.search_messages("filler", limit=1000)) == 520
        assert await conn.fetchval("SELECT count(*) FROM think_actors.messages WHERE search_text IS NULL") == 0
        versions = await conn.fetch("SELECT version FROM think_actors.schema_version ORDER BY version")
        assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'think_actors' AND indexname = 'messages_search'"
        )
        assert index is not None and "USING gin (search_vector)" in index
        await a.update_message(said("a1", "assistant", "Sleeping cats", 2.0))  # written with the new column
        assert [h.message_id for h in await a.search_messages("sleep")] == ["a1"]
        assert [h.message_id for h in await a.search_messages("run")] == ["u1"]
        for store in (a, b, c):
            await store.close()
    finally:
        await conn.close()
