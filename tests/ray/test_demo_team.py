"""The demo's research team (agents/) on Ray: the lead fans out to researchers, who search the library through its
MCP server (agents/library.py over stdio, shared: one connection actor and one server process for the node), and
the lead answers from their reports with the passages' ids."""

from __future__ import annotations

from typing import Any

import pytest
import ray

import think_actors as ta
from agents.team import LIBRARY, Lead
from think_actors.mcp.shared import shared_actor_name

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(300)]


async def test_the_research_team_searches_its_library_through_the_mcp_server(unique: str) -> None:
    lead = await ta.spawn(Lead, unique)
    searches: list[Any] = []
    text = []
    async for chunk in lead.chat("Compare Ray actors and asyncio"):
        if chunk.type == "agent-tool-event" and chunk.chunk is not None:
            inner = chunk.chunk
            if inner.type == "tool-output-available" and inner.tool_call_id in {s.tool_call_id for s in searches}:
                searches[[s.tool_call_id for s in searches].index(inner.tool_call_id)] = inner
            elif inner.type == "tool-input-available" and inner.tool_name == "library_search":
                searches.append(inner)
        elif chunk.type == "text-delta":
            text.append(chunk.delta)
    assert len(searches) == 2  # one per researcher, each through the MCP server
    for search in searches:
        assert search.type == "tool-output-available", search
        passages = search.output["structuredContent"]["passages"]
        assert passages and all(set(p) == {"id", "passage"} for p in passages)
    answer = "".join(text)
    assert "[ray-actors]" in answer and "[asyncio]" in answer, answer
    # The library's connection is the node's shared actor: one for every researcher.
    node = ray.get_runtime_context().get_node_id()
    ray.get_actor(shared_actor_name(LIBRARY, node), namespace="think_actors")
