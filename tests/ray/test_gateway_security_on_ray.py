"""On Ray, a read through the gateway never starts an agent actor: one the cluster never started is a 404."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import ray
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from ray_agents import Survivor

import think_actors as ta
from think_actors import registry
from think_actors.gateway import Gateway, RayDirectory


def actor_exists(config: Any, path: str) -> bool:
    try:
        ray.get_actor(path, namespace=config.namespace)
    except ValueError:
        return False
    return True


async def test_a_read_of_an_agent_never_started_is_a_404_and_starts_no_actor(ray_runtime: Any, unique: str) -> None:
    path = f"survivor/{unique}"
    async with TestClient(TestServer(Gateway(RayDirectory([Survivor])).app())) as client:
        response = await client.get(f"/agents/survivor/{unique}/get-messages")
        assert response.status == 404
        assert await response.json() == {
            "error": f"no agent {path} here: it never ran (a chat over its WebSocket starts it)"
        }
        assert not actor_exists(ray_runtime, path)
        assert registry.lookup(ray_runtime.namespace, path) is None

        async with client.ws_connect(f"/agents/survivor/{unique}") as ws:  # a chat starts it, as before
            await greeting(ws)
            body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
            frame = {
                "type": "cf_agent_use_chat_request",
                "id": "r1",
                "init": {"method": "POST", "body": json.dumps(body)},
            }
            await ws.send_str(json.dumps(frame))
            while not (reply := json.loads((await asyncio.wait_for(ws.receive(), 30)).data)).get("done"):
                pass
            assert reply["id"] == "r1"
        messages = await (await client.get(f"/agents/survivor/{unique}/get-messages")).json()
        assert [m["parts"][-1]["text"] for m in messages] == ["hi", "echo: hi"]


async def test_a_provisioned_agent_exists_for_reads(ray_runtime: Any, unique: str) -> None:
    """Provisioned (a registry record, no actor yet): it exists, so a read starts it, as any call does."""
    ta.provision(Survivor, unique)
    async with TestClient(TestServer(Gateway(RayDirectory([Survivor])).app())) as client:
        response = await client.get(f"/agents/survivor/{unique}/get-messages")
        assert (response.status, await response.json()) == (200, [])
