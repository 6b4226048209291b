"""The gateway in front of agent actors: a chat through a WebSocket reaches the actor and streams back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from ray_agents import Survivor

from think_actors.gateway import Gateway, RayDirectory


async def test_a_websocket_chat_reaches_the_agent_actor(ray_runtime: Any, unique: str) -> None:
    client = TestClient(TestServer(Gateway(RayDirectory([Survivor])).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect(f"/agents/survivor/{unique}")
        assert json.loads((await ws.receive()).data) == {"type": "cf_agent_chat_messages", "messages": []}
        body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "over ray"}]}]}
        frame = {"type": "cf_agent_use_chat_request", "id": "r1", "init": {"method": "POST", "body": json.dumps(body)}}
        await ws.send_str(json.dumps(frame))
        frames = []
        while True:
            frames.append(json.loads((await asyncio.wait_for(ws.receive(), 30)).data))
            if frames[-1]["type"] == "cf_agent_chat_messages":
                break
        deltas = [json.loads(f["body"]) for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
        assert "".join(d["delta"] for d in deltas if d["type"] == "text-delta") == "echo: over ray"
        assert frames[-2] == {"type": "cf_agent_use_chat_response", "id": "r1", "body": "", "done": True}
        assert [m["role"] for m in frames[-1]["messages"]] == ["user", "assistant"]
    finally:
        await client.close()
