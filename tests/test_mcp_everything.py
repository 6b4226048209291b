"""MCP tools from the reference server: ``@modelcontextprotocol/server-everything`` (npm, pinned in
tests/mcp_node/package.json), started by the test over stdio (through ``npx``, as users declare it) and over
streamable HTTP, used by an agent in a turn through its hooks.

``make test`` installs the Node package (``npm ci``) wherever npm exists; on a machine without Node.js and npm
the test is skipped, and under CI it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port
from test_mcp import McpAgent, offered, tool_parts

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call

NODE_DIR = Path(__file__).parent / "mcp_node"
PACKAGE = "@modelcontextprotocol/server-everything"
NPX = shutil.which("npx")
WAIT_S = 90.0  # upper bounds only: on a busy machine npx and node take their time

if NPX is None or not (NODE_DIR / "node_modules" / PACKAGE).is_dir():
    if os.environ.get("CI"):
        raise RuntimeError("the npm MCP server is missing: `make test` runs npm ci in tests/mcp_node")
    pytest.skip(
        "the server-everything tests need Node.js and npm: install them, then `make test` installs the pinned package",
        allow_module_level=True,
    )


def everything_stdio(**options: Any) -> ta.mcp.McpServerConfig:
    # --no-install: npx runs the pinned copy in tests/mcp_node and never reaches the registry.
    options.setdefault("connect_timeout_s", WAIT_S)
    return ta.mcp.stdio(NPX or "npx", "--no-install", PACKAGE, "stdio", cwd=str(NODE_DIR), **options)


@pytest.fixture
async def agents() -> AsyncIterator[Any]:
    made: list[McpAgent] = []

    def make(*servers: ta.mcp.McpServerConfig, model: ScriptedModel) -> McpAgent:
        agent = McpAgent(model=model, store=ta.MemoryStore(), servers=list(servers))
        made.append(agent)
        return agent

    yield make
    for agent in made:
        await agent.close()


@pytest.fixture
async def everything_http() -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        NPX or "npx",
        "--no-install",
        PACKAGE,
        "streamableHttp",
        cwd=str(NODE_DIR),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port), "HOME": os.environ.get("HOME", "/")},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # npx runs the server through a shell: the whole group goes at the end
    )
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if process.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError("server-everything did not start listening") from None
                await asyncio.sleep(0.05)
            else:
                writer.close()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        # process.kill() alone ended npx and left its shell and the node server running after the suite.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


async def test_an_agent_uses_the_npm_servers_tools_over_stdio_through_its_hooks(agents: Any) -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("everything_echo", {"message": "hello"}, id="echo"),
                tool_call("everything_get-sum", {"a": 2, "b": 3}, id="sum"),
                tool_call("everything_get-tiny-image", {}, id="image"),
                tool_call("everything_get-structured-content", {"location": "New York"}, id="structured"),
                tool_call("everything_get-env", {}, id="blocked"),
            ),
            text("done"),
        ]
    )
    agent = agents(everything_stdio(name="everything"), model=model)
    states = await agent.wait_for_mcp_connections(WAIT_S)
    assert (states["everything"].state, states["everything"].error) == ("ready", None)
    assert {"everything_echo", "everything_get-sum", "everything_get-tiny-image"} <= set(states["everything"].tools)
    tools = {t.name: t for t in agent.get_tools()}
    assert tools["everything_get-sum"].idempotent is True  # readOnlyHint / idempotentHint
    assert tools["everything_toggle-simulated-logging"].idempotent is False

    def decide(ctx: ta.ToolCallContext) -> Any:
        if ctx.tool_call_id == "echo":
            return ta.Allow(input={"message": "changed by before_tool_call"})
        if ctx.tool_call_id == "blocked":
            return ta.Block("no environment dumps")
        return None

    agent.decide = decide
    await agent.save_messages("try everything")
    parts = tool_parts(agent)
    assert parts["echo"] == (
        "output-available",
        {"content": [{"type": "text", "text": "Echo: changed by before_tool_call"}]},
    )
    assert parts["sum"] == ("output-available", {"content": [{"type": "text", "text": "The sum of 2 and 3 is 5."}]})
    blocks = parts["image"][1]["content"]
    [image] = [b for b in blocks if b["type"] == "image"]
    assert image["mimeType"] == "image/png" and image["data"].startswith("iVBORw0KGgo")
    state, structured = parts["structured"]
    assert state == "output-available" and set(structured["structuredContent"]) == {
        "temperature",
        "conditions",
        "humidity",
    }
    assert parts["blocked"] == ("output-available", "no environment dumps")
    # The calls of one step run side by side: after_tool_call saw each once, whatever the order.
    assert sorted((c.tool_call_id, c.success) for c in agent.after) == [
        ("blocked", True),
        ("echo", True),
        ("image", True),
        ("structured", True),
        ("sum", True),
    ]
    assert "everything_echo" in offered(model.requests[0])
    model.assert_complete()


async def test_a_long_operation_of_the_npm_server_hits_the_call_timeout(agents: Any) -> None:
    model = ScriptedModel(
        [
            tool_call("everything_trigger-long-running-operation", {"duration": 30, "steps": 3}, id="long"),
            tool_call("everything_echo", {"message": "after"}, id="after"),
            text("ok"),
        ]
    )
    agent = agents(everything_stdio(name="everything", call_timeout_s=1), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.save_messages("wait for it")
    assert tool_parts(agent) == {
        "long": (
            "output-error",
            "MCP tool 'trigger-long-running-operation' of server 'everything' did not answer within 1s (timed out)",
        ),
        "after": ("output-available", {"content": [{"type": "text", "text": "Echo: after"}]}),
    }


async def test_an_agent_uses_the_npm_server_over_streamable_http(agents: Any, everything_http: str) -> None:
    model = ScriptedModel([tool_call("e_get-sum", {"a": 20, "b": 22}, id="sum"), text("42")])
    agent = agents(ta.mcp.http(everything_http, name="e", prefix="e_", connect_timeout_s=WAIT_S), model=model)
    states = await agent.wait_for_mcp_connections(WAIT_S)
    assert (states["e"].state, states["e"].transport) == ("ready", "http")
    await agent.save_messages("add")
    assert tool_parts(agent)["sum"] == (
        "output-available",
        {"content": [{"type": "text", "text": "The sum of 20 and 22 is 42."}]},
    )
    assert agent.get_messages()[-1].text == "42"


async def test_progress_notifications_reach_the_stream_live_and_are_not_stored(agents: Any) -> None:
    model = ScriptedModel(
        [tool_call("everything_trigger-long-running-operation", {"duration": 1, "steps": 3}, id="long"), text("done")]
    )
    agent = agents(everything_stdio(name="everything"), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    chunks = [c async for c in agent.chat("take your time")]
    progress = [c for c in chunks if c.type == "data-mcp-progress"]
    assert [(c.id, c.transient, c.data["toolCallId"], c.data["progress"], c.data["total"]) for c in progress] == [
        ("long", True, "long", 1, 3),
        ("long", True, "long", 2, 3),
        ("long", True, "long", 3, 3),
    ]
    kinds = [c.type for c in chunks]
    assert kinds.index("data-mcp-progress") < kinds.index("tool-output-available")  # live, before the result
    assert tool_parts(agent)["long"][0] == "output-available"
    assert not [p for m in agent.get_messages() for p in m.parts if getattr(p, "type", "").startswith("data-")]
