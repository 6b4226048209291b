"""``think-actors serve`` on Ray: the ``--app`` module's ``setup()`` runs after ``ta.init()`` and before the
gateways, so an actor it starts is there when an agent served over the gateway calls it through ``actor_tool``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import ray
from actor_setup_app import ADDER
from helpers import greeting

from think_actors.gateway.classes import run_app_setup
from think_actors.gateway.ray_server import start_gateways


async def test_an_actor_started_by_setup_is_reached_by_an_agent_served_over_the_gateway(
    ray_runtime: Any, unique: str
) -> None:
    # What `think-actors serve --app actor_setup_app` does once Ray is up: the set-up, then the gateways.
    assert await run_app_setup("actor_setup_app")
    gateways = await start_gateways("actor_setup_app", host="127.0.0.1", port=0, options={})
    try:
        [(_, url)] = gateways
        async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/agents/adding-agent/{unique}") as ws:
            await greeting(ws)
            body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "2 + 3?"}]}]}
            frame = {
                "type": "cf_agent_use_chat_request",
                "id": "r1",
                "init": {"method": "POST", "body": json.dumps(body)},
            }
            await ws.send_str(json.dumps(frame))
            messages: list[dict[str, Any]] = []
            while True:
                data = json.loads((await asyncio.wait_for(ws.receive(), 60)).data)
                if data["type"] == "cf_agent_chat_messages":
                    messages = data["messages"]
                if data["type"] == "cf_agent_use_chat_response" and data["done"]:
                    break
        [part] = [p for p in messages[-1]["parts"] if p["type"] == "tool-add"]
        assert (part["state"], part["output"]) == ("output-available", 5)
        adder = ray.get_actor(ADDER, namespace=ray_runtime.namespace)
        assert await adder.count.remote() == 1
    finally:
        for actor, _ in gateways:
            await actor.stop.remote()
        ray.kill(ray.get_actor(ADDER, namespace=ray_runtime.namespace))
