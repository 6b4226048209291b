"""The real client: Node runs the npm ``agents`` package's own chat client (``AgentClient`` and
``WebSocketChatTransport``, with the AI SDK's ``readUIMessageStream``; versions pinned in tests/node/package.json)
against the gateway on 127.0.0.1: a plain reply, a server tool, a client tool with auto-continue, a cancel, and a
mid-stream reconnect that resumes.

``make test`` installs the Node packages (``npm ci``) wherever npm exists; on a machine without Node.js and npm
the test is skipped, and under CI it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

NODE_DIR = Path(__file__).parent / "node"
NODE = shutil.which("node")

if NODE is None or not (NODE_DIR / "node_modules" / "agents").is_dir():
    if os.environ.get("CI"):
        raise RuntimeError("the Node client is missing: .ci/run runs npm ci in tests/node")
    pytest.skip(
        "the real-client test needs Node.js and npm: install them, then `make test` installs the pinned packages",
        allow_module_level=True,
    )


class Shop(ta.Think):
    @ta.tool
    async def price(self, item: str) -> dict[str, Any]:
        """The price of an item."""
        return {"item": item, "price": 3}


async def serve(model: ScriptedModel) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(Gateway(LocalDirectory([Shop], model=model, store=ta.MemoryStore())).app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


@pytest.fixture
async def node() -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []

    async def run(model: ScriptedModel, scenario: str) -> Any:
        runner, host = await serve(model)
        runners.append(runner)
        process = await asyncio.create_subprocess_exec(
            str(NODE),
            str(NODE_DIR / "client.mjs"),
            host,
            scenario,
            f"node-{scenario}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        return json.loads(out.decode().strip().splitlines()[-1])

    yield run
    for runner in runners:
        await runner.cleanup()


def texts(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


async def test_a_plain_reply(node: Any) -> None:
    message = await node(ScriptedModel([text("Hello from Python", chunk_size=4)]), "plain")
    assert (message["role"], texts(message)) == ("assistant", "Hello from Python")


async def test_a_server_tool(node: Any) -> None:
    model = ScriptedModel([tool_call("price", {"item": "tea"}, id="c1"), text("Tea costs 3.")])
    message = await node(model, "tool")
    [part] = [p for p in message["parts"] if p["type"] == "tool-price"]
    assert (part["state"], part["output"]) == ("output-available", {"item": "tea", "price": 3})
    assert texts(message) == "Tea costs 3."


async def test_a_client_tool_with_auto_continue(node: Any) -> None:
    # The continuation's model takes a moment to answer, as a real one does: the client acknowledges the
    # continuation's RESUMING frame before its stream ends (as with the reference, a stream that ends before
    # the acknowledgement reaches the client only as its end and the stored transcript).
    model = ScriptedModel([tool_call("get_location", {}, id="loc1"), delay(0.2) + text("You are in Oslo.")])
    result = await node(model, "clientTool")
    [call] = [p for p in result["first"]["parts"] if p["type"] == "tool-get_location"]
    assert call["state"] == "input-available"
    assert texts(result["second"]) == "You are in Oslo."


async def test_a_cancel(node: Any) -> None:
    model = ScriptedModel([step(text("Once upon a time"), delay(3), text(" the end."))])
    result = await node(model, "cancel")
    assert result == {"aborted": True}
    assert model.remaining == 0


async def test_a_mid_stream_reconnect_resumes(node: Any) -> None:
    model = ScriptedModel([step(text("Once upon a time, "), delay(0.8), text("they lived happily."))])
    result = await node(model, "reconnect")
    assert "text-delta" in result["before"]
    assert result["message"] is not None
    assert texts(result["message"]).endswith("they lived happily.")
