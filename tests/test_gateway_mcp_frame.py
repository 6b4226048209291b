"""The gateway's ``cf_agent_mcp_servers`` frame carries the agent's MCP servers (the reference's ``MCPServersState``):
a real MCP server (tests/mcp_servers.py, the official SDK, over stdio) declared on an agent class served by the
gateway on aiohttp's test server; an agent without servers still gets the empty state; a Ray-style handle (an async
``get_mcp_servers``) is read the same way. After connect, every change of a server's state or tools (it connects,
fails, lists new tools after ``tools/list_changed``, is removed) reaches every socket of the agent, pushed by the
agent's ``mcp:servers:changed`` events."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from helpers import MCP_TEST_SERVERS

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.gateway.directory import _mcp_state
from think_actors.mcp import McpServerState
from think_actors.testing import ScriptedModel

WAIT_S = 90.0  # upper bounds only: a busy machine starts a server in tens of seconds


async def connect_frames(client: Any, path: str) -> list[dict[str, Any]]:
    """The three frames a socket gets on connect: transcript, identity, MCP state."""
    ws = await client.ws_connect(path)
    frames = [json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data) for _ in range(3)]
    await ws.close()
    return frames


async def test_a_socket_gets_the_agents_mcp_servers_ready_with_their_tools(tmp_path: Path) -> None:
    env = {"MCP_TEST_LOG": str(tmp_path / "calls.log"), "MCP_TEST_HOLD_S": "0"}
    server = ta.mcp.stdio(sys.executable, str(MCP_TEST_SERVERS), "stdio", name="t", env=env, connect_timeout_s=WAIT_S)

    class WithMcp(ta.Think):
        mcp_servers = (server,)

    class Plain(ta.Think):
        pass

    directory = LocalDirectory([WithMcp, Plain], model=ScriptedModel(), store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        handle = await directory.get("with-mcp", "a")
        try:
            states = await handle.agent.wait_for_mcp_connections(WAIT_S)
            assert states["t"].state == "ready", states
            tools = states["t"].tools
            assert any(name.endswith("add") for name in tools), tools

            first, identity, mcp = await connect_frames(client, "/agents/with-mcp/a")
            assert first["type"] == "cf_agent_chat_messages"
            assert identity["type"] == "cf_agent_identity"
            assert mcp["type"] == "cf_agent_mcp_servers"
            assert mcp["mcp"]["servers"] == {
                "t": {
                    "auth_url": None,
                    "capabilities": None,
                    "error": None,
                    "instructions": None,
                    "name": "t",
                    "server_url": states["t"].target,
                    "state": "ready",
                }
            }
            assert mcp["mcp"]["tools"] == [{"name": name, "serverId": "t"} for name in tools]
            assert mcp["mcp"]["prompts"] == [] and mcp["mcp"]["resources"] == []

            # An agent without MCP servers: the empty state, exactly as before.
            *_, empty = await connect_frames(client, "/agents/plain/b")
            assert empty == {
                "mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []},
                "type": "cf_agent_mcp_servers",
            }
        finally:
            await handle.agent.close()


async def test_a_server_that_failed_is_sent_failed_with_its_error() -> None:
    class Broken(ta.Think):
        mcp_servers = (ta.mcp.stdio("/nonexistent/mcp-server", name="gone", connect_timeout_s=WAIT_S),)

    directory = LocalDirectory([Broken], model=ScriptedModel(), store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        handle = await directory.get("broken", "a")
        try:
            await handle.agent.wait_for_mcp_connections(WAIT_S)
            *_, mcp = await connect_frames(client, "/agents/broken/a")
            server = mcp["mcp"]["servers"]["gone"]
            assert server["state"] == "failed" and server["error"], server
            assert mcp["mcp"]["tools"] == []
        finally:
            await handle.agent.close()


async def test_a_ray_style_handle_is_read_through_its_async_get_mcp_servers() -> None:
    class Handle:
        async def get_mcp_servers(self) -> dict[str, McpServerState]:
            return {
                "s": McpServerState(
                    name="s", transport="http", target="http://h/mcp", state="closed", tools=("s_x",), tool_count=1
                )
            }

    state = await _mcp_state(Handle())
    assert state["servers"]["s"]["state"] == "not-connected"
    assert state["servers"]["s"]["server_url"] == "http://h/mcp"
    assert state["tools"] == [{"name": "s_x", "serverId": "s"}]
    assert await _mcp_state(object()) == {"prompts": [], "resources": [], "servers": {}, "tools": []}


async def next_mcp_frame(ws: Any, want: Any) -> dict[str, Any]:
    """The next ``cf_agent_mcp_servers`` frame for which ``want(frame["mcp"])`` holds (others are skipped)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            frame = json.loads((await ws.receive()).data)
            if frame["type"] == "cf_agent_mcp_servers" and want(frame["mcp"]):
                return frame


def server_states(mcp: dict[str, Any]) -> dict[str, str]:
    return {name: server["state"] for name, server in mcp["servers"].items()}


async def test_every_socket_hears_when_a_server_connects_changes_its_tools_or_goes(tmp_path: Path) -> None:
    env = {"MCP_TEST_LOG": str(tmp_path / "calls.log"), "MCP_TEST_HOLD_S": "0"}
    server = ta.mcp.stdio(sys.executable, str(MCP_TEST_SERVERS), "stdio", name="t", env=env, connect_timeout_s=WAIT_S)
    model = ScriptedModel([ta.testing.tool_call("t_grow", {"name": "fresh"}, id="g"), ta.testing.text("grown")])

    class Growing(ta.Think):
        pass

    directory = LocalDirectory([Growing], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        handle = await directory.get("growing", "a")
        try:
            ws = await client.ws_connect("/agents/growing/a")
            other = await client.ws_connect("/agents/growing/a")
            first = await next_mcp_frame(ws, lambda mcp: True)
            assert first["mcp"] == {"prompts": [], "resources": [], "servers": {}, "tools": []}

            # Added while the sockets are open: they hear it connect, with its tools.
            await handle.agent.add_mcp_server(server)
            for socket in (ws, other):
                ready = await next_mcp_frame(socket, lambda mcp: server_states(mcp) == {"t": "ready"})
                assert {"name": "t_add", "serverId": "t"} in ready["mcp"]["tools"]
                assert {"name": "t_fresh", "serverId": "t"} not in ready["mcp"]["tools"]

            # A turn has the server add a tool (tools/list_changed): the new listing reaches the sockets.
            await handle.save_messages("grow")
            grown = await next_mcp_frame(ws, lambda mcp: {"name": "t_fresh", "serverId": "t"} in mcp["tools"])
            assert server_states(grown["mcp"]) == {"t": "ready"}

            await handle.agent.remove_mcp_server("t")
            gone = await next_mcp_frame(other, lambda mcp: not mcp["servers"])
            assert gone["mcp"] == {"prompts": [], "resources": [], "servers": {}, "tools": []}
            model.assert_complete()
            await ws.close()
            await other.close()
        finally:
            await handle.agent.close()


async def test_a_server_that_fails_after_the_socket_connected_is_sent_failed() -> None:
    class Late(ta.Think):
        pass

    directory = LocalDirectory([Late], model=ScriptedModel(), store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        handle = await directory.get("late", "a")
        try:
            ws = await client.ws_connect("/agents/late/a")
            first = await next_mcp_frame(ws, lambda mcp: True)
            assert first["mcp"]["servers"] == {}
            await handle.agent.add_mcp_server(ta.mcp.stdio("/nonexistent/mcp-server", name="gone"), timeout_s=WAIT_S)
            failed = await next_mcp_frame(ws, lambda mcp: server_states(mcp) == {"gone": "failed"})
            assert failed["mcp"]["servers"]["gone"]["error"]
            await ws.close()
        finally:
            await handle.agent.close()


async def test_a_local_agent_has_its_servers_tools_in_its_first_turn(tmp_path: Path) -> None:
    """As an agent actor does before it starts, a directory's new in-process agent connects its servers first."""
    env = {"MCP_TEST_LOG": str(tmp_path / "calls.log"), "MCP_TEST_HOLD_S": "0"}
    server = ta.mcp.stdio(sys.executable, str(MCP_TEST_SERVERS), "stdio", name="t", env=env, connect_timeout_s=WAIT_S)
    model = ScriptedModel([ta.testing.tool_call("t_echo", {"text": "first"}, id="e"), ta.testing.text("done")])

    class Eager(ta.Think):
        mcp_servers = (server,)

    directory = LocalDirectory([Eager], model=model, store=ta.MemoryStore())
    handle = await directory.get("eager", "a")
    try:
        assert handle.agent.get_mcp_servers()["t"].state == "ready"
        result = await handle.save_messages("echo something")
        part = next(p for p in result.message.parts if getattr(p, "tool_call_id", None) == "e")
        assert part.state == "output-available", part
    finally:
        await handle.agent.close()
