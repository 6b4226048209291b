"""``think-actors serve`` calls the ``--app`` module's ``setup()`` once, before it serves (on Ray after
``ta.init()``: ``tests/ray/test_serve_setup_on_ray.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import free_port, greeting

from think_actors.gateway.classes import run_app_setup


@pytest.fixture
def app_module() -> Any:
    """A throwaway ``--app`` module, registered under a fresh name."""
    module = types.ModuleType("serve_setup_probe")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


async def test_a_plain_or_async_setup_is_called_and_a_module_without_one_is_served_as_is(app_module: Any) -> None:
    calls: list[str] = []
    assert await run_app_setup(app_module.__name__) is False

    def plain() -> None:
        calls.append("plain")

    async def awaited() -> None:
        calls.append("async")

    for setup in (plain, awaited):
        setup.__module__ = app_module.__name__  # as if the module defined it
        app_module.setup = setup
        assert await run_app_setup(app_module.__name__) is True
    assert calls == ["plain", "async"]


async def test_a_setup_imported_from_elsewhere_is_not_called(app_module: Any) -> None:
    def setup() -> None:  # defined here, in the test module: as `from setuptools import setup` would be
        raise AssertionError("an imported setup() must not run")

    app_module.setup = setup
    assert await run_app_setup(app_module.__name__) is False


async def test_a_setup_that_raises_stops_serve(app_module: Any) -> None:
    async def setup() -> None:
        raise RuntimeError("the database is not reachable")

    setup.__module__ = app_module.__name__
    app_module.setup = setup
    with pytest.raises(RuntimeError, match="the database is not reachable"):
        await run_app_setup(app_module.__name__)


async def test_serve_local_runs_setup_in_the_serving_process_before_the_first_turn(tmp_path: Any) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "THINK_ACTORS_DATA_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "think_actors.gateway.cli", "serve", "--local", "--app", "setup_hook_app"]
    process = await asyncio.create_subprocess_exec(
        *command, "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(400):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        assert await response.json() == {"ok": True, "classes": ["checker"]}
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            async with session.ws_connect(f"http://127.0.0.1:{port}/agents/checker/one") as ws:
                await greeting(ws)
                messages = await chat(ws, "did setup run?")
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
    [part] = [p for p in messages[-1]["parts"] if p["type"] == "tool-set_up"]
    assert part["output"] == ["setup ran"]  # once, before the gateway took the request


async def chat(ws: Any, text: str) -> list[dict[str, Any]]:
    """Send one chat request; the stored transcript the gateway broadcasts when its turn is done."""
    body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]}
    frame = {"type": "cf_agent_use_chat_request", "id": "r1", "init": {"method": "POST", "body": json.dumps(body)}}
    await ws.send_str(json.dumps(frame))
    messages: list[dict[str, Any]] = []
    while True:
        data = json.loads((await asyncio.wait_for(ws.receive(), 60)).data)
        if data["type"] == "cf_agent_chat_messages":
            messages = data["messages"]
        if data["type"] == "cf_agent_use_chat_response" and data["done"]:
            return messages
