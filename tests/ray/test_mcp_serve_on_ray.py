"""Agents on Ray as an MCP server: ``think-actors serve --mcp``'s gateway actor (``start_gateways`` with
``mcp: True``) serves ``/mcp``; the official SDK's client lists the agent classes and chats with an agent actor,
token required, and the conversation is the actor's (its history through ``ta.get``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from ray_agents import Survivor

import think_actors as ta
from think_actors.gateway.ray_server import start_gateways

WAIT_S = 120.0  # upper bounds only: actors start slowly on a busy machine


@pytest.mark.timeout(300)
async def test_an_mcp_client_chats_with_an_agent_actor_through_the_gateway_actor(ray_runtime: Any, unique: str) -> None:
    gateways = await start_gateways("ray_agents", host="127.0.0.1", port=0, options={"token": "t0k", "mcp": True})
    try:
        [(_, url)] = gateways
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer t0k"}, timeout=WAIT_S) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await asyncio.wait_for(client.initialize(), WAIT_S)
            names = [t.name for t in (await client.list_tools()).tools]
            assert "survivor" in names, names

            progress: list[str | None] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(message)

            result = await client.call_tool(
                "survivor", {"message": "over mcp", "agent_name": unique}, progress_callback=on_progress
            )
            assert not result.is_error, result
            assert [c.text for c in result.content if c.type == "text"] == ["echo: over mcp"]
            assert result.structured_content is not None
            assert result.structured_content["status"] == "completed"
            assert result.structured_content["name"] == unique
            assert progress == ["echo: over mcp"]

            bad = await client.call_tool("survivor", {"message": "x", "agent_name": "a/../b"})
            assert bad.is_error and "not an agent name" in bad.content[0].text  # type: ignore[union-attr]

        handle = await ta.get(Survivor, unique)
        assert [(m.role, m.parts[-1].text) for m in await handle.get_messages()] == [  # type: ignore[union-attr]
            ("user", "over mcp"),
            ("assistant", "echo: over mcp"),
        ]
    finally:
        for actor, _ in gateways:
            await actor.stop.remote()
