"""Message search through an agent actor's handle (issue 21): the actor searches its PostgreSQL history with
stemming, and a refused query crosses the actor boundary as the same error."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ray_agents import Survivor

from think_actors.errors import ConfigurationError
from think_actors.runtime import _spawn_path
from think_actors.store import MessageHit, agent_path


@pytest.mark.timeout(90)
async def test_an_actor_searches_its_postgres_history_through_the_handle(
    ray_runtime: Any, unique: str, postgres_url: str
) -> None:
    config = dataclasses.replace(ray_runtime, store_url=postgres_url)
    agent = await _spawn_path(Survivor, unique, agent_path("survivor", unique), {}, config)
    try:
        await agent.save_messages("the dogs were running in the park")
        await agent.save_messages("cats sleep all day")
        hits = await agent.search_messages("runs", limit=5)
        assert all(isinstance(hit, MessageHit) for hit in hits)
        assert sorted((hit.role, hit.snippet) for hit in hits) == [
            ("assistant", "echo: the dogs were **running** in the park"),
            ("user", "the dogs were **running** in the park"),
        ]
        found = await agent.search_messages("sleeping cat -dog")
        assert sorted((hit.role, hit.snippet) for hit in found) == [
            ("assistant", "echo: **cats** **sleep** all day"),
            ("user", "**cats** **sleep** all day"),
        ]
        with pytest.raises(ConfigurationError, match="the search query is empty"):
            await agent.search_messages("  ")
    finally:
        await agent.kill(restart=False)
