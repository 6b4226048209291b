"""The store URL travels to agent actors: their history lives in PostgreSQL, and a restarted actor claims the
agent's next lease generation and carries on from it."""

from __future__ import annotations

import dataclasses
from typing import Any

import asyncpg
import pytest
from ray_agents import Survivor
from test_recovery_and_errors import info_after_restart

from think_actors.runtime import _spawn_path
from think_actors.store import agent_path


async def rows(url: str, path: str) -> tuple[int, list[str]]:
    """The agent's generation and message ids, read with plain SQL (a store would claim the agent)."""
    conn = await asyncpg.connect(url)
    try:
        generation = await conn.fetchval("SELECT generation FROM think_actors.agents WHERE path = $1", path)
        ids = await conn.fetch("SELECT role FROM think_actors.messages WHERE agent = $1 ORDER BY seq", path)
    finally:
        await conn.close()
    return generation, [r[0] for r in ids]


@pytest.mark.timeout(90)
async def test_an_actor_keeps_its_history_in_postgres_through_a_restart(
    ray_runtime: Any, unique: str, postgres_url: str
) -> None:
    # ta.init(store=url) puts the URL in the runtime config that every spawn hands to its actor.
    config = dataclasses.replace(ray_runtime, store_url=postgres_url)
    path = agent_path("survivor", unique)
    agent = await _spawn_path(Survivor, unique, path, {}, config)
    try:
        await agent.save_messages("before the crash")
        assert await rows(postgres_url, path) == (1, ["user", "assistant"])
        old = await agent.info()

        await agent.kill(restart=True)
        info = await info_after_restart(agent, old["pid"])

        assert info["messages"] == 2  # reloaded from PostgreSQL by the new process
        result = await agent.save_messages("after the crash")
        assert (result.status, result.message.text if result.message else None) == (
            "completed",
            "echo: after the crash",
        )
        assert await rows(postgres_url, path) == (2, ["user", "assistant", "user", "assistant"])
    finally:
        await agent.kill(restart=False)
