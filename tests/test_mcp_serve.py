"""Agents as an MCP server (gateway/mcp_server.py): the official SDK's own client (``ClientSession`` over
``streamable_http_client``) against a real gateway on 127.0.0.1 (aiohttp's test server) with ``mcp=True``: one
tool per agent class, a call is a turn whose reply comes back as text and structured content, progress while it
streams, conversations kept per ``agent_name``, clear tool errors, the gateway's token and Origin rules on ``/mcp``,
and one agent calling another through our own MCP client (``ta.mcp.http``). Also ``think-actors serve --mcp-stdio``
as a real subprocess driven over stdio."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from aiohttp.test_utils import TestServer
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, error, text, tool_call

WAIT_S = 60.0  # upper bounds only


class Helper(ta.Think):
    """Answers questions about the weather."""


class Other(ta.Think):
    pass


@asynccontextmanager
async def gateway(directory: LocalDirectory, **options: Any) -> AsyncIterator[str]:
    """A real gateway with ``/mcp`` on 127.0.0.1; yields its base URL."""
    server = TestServer(Gateway(directory, mcp=True, **options).app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@asynccontextmanager
async def session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT_S) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await asyncio.wait_for(client.initialize(), WAIT_S)
        yield client


async def test_each_agent_class_is_a_tool_and_a_call_is_a_turn_with_progress() -> None:
    model = ScriptedModel([text("sunny and warm", chunks=3), text("still sunny")])
    directory = LocalDirectory([Helper, Other], model=model, store=ta.MemoryStore())
    async with gateway(directory) as url, session(f"{url}/mcp") as client:
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["helper", "other"]
        helper = listed.tools[0]
        assert helper.input_schema["required"] == ["message"]
        assert set(helper.input_schema["properties"]) == {"message", "agent_name"}
        assert "Answers questions about the weather." in (helper.description or "")

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        result = await client.call_tool(
            "helper", {"message": "weather?", "agent_name": "w1"}, progress_callback=on_progress
        )
        assert not result.is_error
        assert [c.text for c in result.content if c.type == "text"] == ["sunny and warm"]
        facts = result.structured_content
        assert facts is not None
        assert {k: facts[k] for k in ("agent", "name", "status")} == {
            "agent": "helper",
            "name": "w1",
            "status": "completed",
        }
        assert facts["requestId"].startswith("mcp-") and facts["messageId"]
        # One notification per text delta, in order, counting up.
        assert [m for _, _, m in progress] == ["sunny", " and ", "warm"]
        assert [d for d, _, _ in progress] == [1, 2, 3]

        # The same agent_name is the same conversation: the second turn sees the first.
        again = await client.call_tool("helper", {"message": "and tomorrow?", "agent_name": "w1"})
        assert [c.text for c in again.content if c.type == "text"] == ["still sunny"]
        assert model.requests[-1].messages[-3:] == [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "sunny and warm"},
            {"role": "user", "content": "and tomorrow?"},
        ]
        agent = await directory.find("helper", "w1")
        assert agent is not None and len(await agent.get_messages()) == 4
        model.assert_complete()


async def test_bad_calls_and_failed_turns_are_tool_errors_that_say_why() -> None:
    model = ScriptedModel([error(RuntimeError("the provider is down"))])
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore())
    async with gateway(directory) as url, session(f"{url}/mcp") as client:

        async def error_text(name: str, arguments: dict[str, Any]) -> str:
            result = await client.call_tool(name, arguments)
            assert result.is_error, result
            return "".join(c.text for c in result.content if c.type == "text")

        assert await error_text("nobody", {"message": "hi"}) == (
            "no agent class 'nobody' here: the tools (agent classes) are helper"
        )
        assert "not an agent name" in await error_text("helper", {"message": "hi", "agent_name": "../etc"})
        assert await error_text("helper", {"message": "  "}) == (
            "give message: what to say to the agent, a non-empty string"
        )
        assert await error_text("helper", {"message": "hi", "colour": "red"}) == (
            "unknown input colour: give message (and agent_name, optionally)"
        )
        failed = await client.call_tool("helper", {"message": "hi"})
        assert failed.is_error
        assert "the turn failed" in failed.content[0].text and "the provider is down" in failed.content[0].text  # type: ignore[union-attr]
        assert failed.structured_content is not None
        assert failed.structured_content["status"] == "error" and failed.structured_content["name"] == "mcp"
        model.assert_complete()


async def test_mcp_follows_the_gateways_token_and_origin_rules() -> None:
    directory = LocalDirectory([Helper], model=ScriptedModel([text("ok")]), store=ta.MemoryStore())
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with gateway(directory, token="s3cret") as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/mcp", json=initialize, headers=accept) as refused:
            assert refused.status == 401
            assert (await refused.json())["error"].startswith("missing token: send Authorization: Bearer <token>")
        headers = {**accept, "Authorization": "Bearer s3cret", "Origin": "https://evil.example"}
        async with http.post(f"{url}/mcp", json=initialize, headers=headers) as refused:
            assert refused.status == 403
            assert "may not use this gateway" in (await refused.json())["error"]
        async with session(f"{url}/mcp", {"Authorization": "Bearer s3cret"}) as client:
            result = await client.call_tool("helper", {"message": "hi"})
            assert [c.text for c in result.content if c.type == "text"] == ["ok"]


async def test_without_mcp_the_gateway_has_no_mcp_route() -> None:
    directory = LocalDirectory([Helper], model=ScriptedModel(), store=ta.MemoryStore())
    server = TestServer(Gateway(directory).app(), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.post(server.make_url("/mcp"), json={}) as response:
            assert response.status == 404
    finally:
        await server.close()


async def test_one_agent_calls_another_served_as_an_mcp_tool() -> None:
    served = LocalDirectory([Helper], model=ScriptedModel([text("it will rain")]), store=ta.MemoryStore())

    class Asker(ta.Think):
        model = ScriptedModel(
            [
                tool_call("team_helper", {"message": "rain tomorrow?", "agent_name": "forecast"}),
                text("take an umbrella"),
            ]
        )

    async with gateway(served) as url:
        asker = Asker("asker", store=ta.MemoryStore())
        try:
            state = await asker.add_mcp_server(ta.mcp.http(f"{url}/mcp", name="team", connect_timeout_s=WAIT_S))
            assert state.state == "ready" and state.tools == ("team_helper",), state
            chunks = [c async for c in asker.chat("ask the helper")]
            outputs = [c.output for c in chunks if c.type == "tool-output-available"]
            assert len(outputs) == 1
            assert outputs[0]["content"] == [{"type": "text", "text": "it will rain"}]
            assert outputs[0]["structuredContent"]["name"] == "forecast"
            assert outputs[0]["structuredContent"]["status"] == "completed"
            assert "".join(c.delta for c in chunks if c.type == "text-delta") == "take an umbrella"
        finally:
            await asker.close()
    helper = await served.find("helper", "forecast")
    assert helper is not None
    assert [m.role for m in await helper.get_messages()] == ["user", "assistant"]


@pytest.mark.timeout(180)
async def test_serve_mcp_stdio_is_an_mcp_server_on_stdin_and_stdout(tmp_path: Path) -> None:
    # The console script, run in tests/: --app names a module of the directory it runs in, as `python -m` would.
    env = {**os.environ, "THINK_ACTORS_DATA_DIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("think-actors")),
        args=["serve", "--mcp-stdio", "--local", "--app", "gateway_app"],
        env=env,
        cwd=str(Path(__file__).parent),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await asyncio.wait_for(client.initialize(), 120)
        assert [t.name for t in (await client.list_tools()).tools] == ["echo"]
        result = await client.call_tool("echo", {"message": "over stdio"})
        assert [c.text for c in result.content if c.type == "text"] == ["echo: over stdio"]
        assert result.structured_content is not None and result.structured_content["status"] == "completed"
