"""The gateway's ``cf_agent_mcp_servers`` frame in front of agent actors with a real MCP server (tests/mcp_servers.py,
the official SDK, over stdio): the sockets get the server's state on connect, and after it every change, pushed
across actors by the agent's ``mcp:servers:changed`` events (the gateway follows the actor's ``agents:message``
channel through its handle): new tools after ``tools/list_changed``, and the server's removal. Per agent and
``shared`` (the node's connection actor, whose listing the agent follows)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import think_actors as ta
from think_actors.gateway import Gateway, RayDirectory
from think_actors.testing import ScriptedModel, text, tool_call

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(300)]

SERVERS = Path(__file__).parent.parent / "mcp_servers.py"
WAIT_S = 120.0  # upper bounds only: a busy machine starts actors and servers slowly


def _server(shared: bool) -> Any:
    return ta.mcp.stdio(sys.executable, str(SERVERS), "stdio", name="t", shared=shared, connect_timeout_s=WAIT_S)


class GrowingOnRay(ta.Think):
    model = ScriptedModel([tool_call("t_grow", {"name": "fresh"}, id="g"), text("grown")])
    mcp_servers = (_server(False),)


class SharedGrowingOnRay(ta.Think):
    model = ScriptedModel([tool_call("t_grow", {"name": "sprout"}, id="g"), text("grown")])
    mcp_servers = (_server(True),)


async def next_mcp_frame(ws: Any, want: Any) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            frame = json.loads((await ws.receive()).data)
            if frame["type"] == "cf_agent_mcp_servers" and want(frame["mcp"]):
                return frame


@pytest.mark.parametrize(("cls", "added"), [(GrowingOnRay, "t_fresh"), (SharedGrowingOnRay, "t_sprout")])
async def test_the_sockets_hear_an_agent_actors_server_change_its_tools_and_go(
    cls: type[ta.Think], added: str, unique: str
) -> None:
    slug = ta.kebab_case(cls.__name__)
    client = TestClient(TestServer(Gateway(RayDirectory([cls])).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect(f"/agents/{slug}/{unique}")
        handle = await ta.get(cls, unique)
        await handle.wait_for_mcp_connections(WAIT_S)
        ready = await next_mcp_frame(ws, lambda mcp: mcp["servers"].get("t", {}).get("state") == "ready")
        assert {"name": "t_echo", "serverId": "t"} in ready["mcp"]["tools"]
        assert {"name": added, "serverId": "t"} not in ready["mcp"]["tools"]

        result = await handle.save_messages("grow")
        assert result.status == "completed", result
        grown = await next_mcp_frame(ws, lambda mcp: {"name": added, "serverId": "t"} in mcp["tools"])
        assert grown["mcp"]["servers"]["t"]["state"] == "ready"

        assert await handle.remove_mcp_server("t")
        gone = await next_mcp_frame(ws, lambda mcp: not mcp["servers"])
        assert gone["mcp"] == {"prompts": [], "resources": [], "servers": {}, "tools": []}
        await ws.close()
    finally:
        await client.close()
