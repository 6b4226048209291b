"""The gateway in front of agent actors: a chat through a WebSocket reaches the actor and streams back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from ray_agents import SharedEcho, Survivor
from test_think_wire import LATE, LOCATE, WIRE, normalised, play

import think_actors as ta
from think_actors.agent import kebab_case
from think_actors.gateway import Gateway, RayDirectory
from think_actors.testing import ScriptedModel, text


class Locator(ta.Think):
    """test_think_wire's agent of the client tool recordings, as an actor (its worker imports this module)."""

    model = ScriptedModel([LOCATE, LATE + text("You are in Paris.")])


@pytest.mark.parametrize("agent_class", [Survivor, SharedEcho])  # an actor of its own; many to a shared host
async def test_a_websocket_chat_reaches_the_agent_actor(
    ray_runtime: Any, unique: str, agent_class: type[ta.Think]
) -> None:
    client = TestClient(TestServer(Gateway(RayDirectory([agent_class])).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect(f"/agents/{kebab_case(agent_class.__name__)}/{unique}")
        assert await greeting(ws) == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}
        body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "over ray"}]}]}
        frame = {"type": "cf_agent_use_chat_request", "id": "r1", "init": {"method": "POST", "body": json.dumps(body)}}
        await ws.send_str(json.dumps(frame))
        frames = []
        while True:
            frames.append(json.loads((await asyncio.wait_for(ws.receive(), 30)).data))
            if frames[-1]["type"] == "cf_agent_use_chat_response" and frames[-1]["done"]:
                break
        chunk_frames = [f for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
        deltas = [json.loads(f["body"]) for f in chunk_frames]
        assert "".join(d["delta"] for d in deltas if d["type"] == "text-delta") == "echo: over ray"
        assert frames[-1] == {
            "type": "cf_agent_use_chat_response",
            "id": "r1",
            "body": "",
            "done": True,
            "outcome": "completed",
            "messageIds": ["u1"],
        }
        assert [m["role"] for m in frames[-2]["messages"]] == ["user", "assistant"]  # stored, then done
    finally:
        await client.close()


async def test_think_actors_serve_runs_one_gateway_actor_per_machine(ray_runtime: Any, unique: str) -> None:
    import aiohttp

    from think_actors.gateway.ray_server import start_gateways

    gateways = await start_gateways("ray_agents", host="127.0.0.1", port=0, options={"token": "t0k"})
    try:
        [(_, url)] = gateways  # one machine: one gateway, however many simulated nodes
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/healthz") as health:
                assert await health.json() == {"ok": True}  # the classes only with the token
            async with session.get(f"{url}/healthz?token=t0k") as health:
                assert "survivor" in (await health.json())["classes"]
            async with session.ws_connect(f"{url}/agents/survivor/{unique}?token=t0k") as ws:
                await greeting(ws)
                body = {
                    "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "via the actor"}]}]
                }
                frame = {
                    "type": "cf_agent_use_chat_request",
                    "id": "r1",
                    "init": {"method": "POST", "body": json.dumps(body)},
                }
                await ws.send_str(json.dumps(frame))
                while True:
                    data = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
                    if data["type"] == "cf_agent_chat_messages":
                        break
        assert data["messages"][-1]["parts"][-1]["text"] == "echo: via the actor"
    finally:
        for actor, _ in gateways:
            await actor.stop.remote()


async def test_the_resumed_client_tool_continuation_matches_the_reference_on_ray(ray_runtime: Any) -> None:
    """tests/test_think_wire.py's recording ``client_tool_resumed`` against agent actors: the answer's message
    update reaches the socket before its resume request is answered (it comes by the actor's events), the pending
    frame carries the continuation's id, and the continuation's start chunk is in the replay its ACK asks for."""
    recording = json.loads((WIRE / "client_tool_resumed.json").read_text())
    client = TestClient(TestServer(Gateway(RayDirectory([Locator])).app()))
    await client.start_server()
    try:
        ours = await play(client, "/agents/locator/client-tool-resumed", recording["actions"])
    finally:
        await client.close()
    expected = normalised(recording["sockets"]["a"], {})
    got = normalised(ours["a"], {})
    if not any(f["type"] == "cf_agent_stream_pending" for f in got):
        # The reference answers the probe with PENDING because the probe lands inside the continuation's 50 ms
        # coalesce window; on a loaded machine the tool result's trip through the actor can take longer, and the
        # continuation has started when the probe is answered: then RESUMING (with the probe's id) is the right
        # answer, as the reference does when the window has passed (its resume handshake: active stream → RESUMING).
        at = next(i for i, f in enumerate(expected) if f["type"] == "cf_agent_stream_pending")
        expected[at : at + 2] = [{**expected[at + 1], "probeId": expected[at]["probeId"]}]
    assert got == expected


async def test_a_turn_and_a_clear_through_the_actors_handle_reach_the_gateways_sockets(
    ray_runtime: Any, unique: str
) -> None:
    """think-session.test.ts:195, :229 and :298 on Ray: a turn started through the handle (not by a socket) streams
    to the gateway's sockets, its transcript after it, and a clear through the handle is broadcast; the gateway
    follows the actor's agents:stream events and attaches to the turn."""
    client = TestClient(TestServer(Gateway(RayDirectory([Survivor])).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect(f"/agents/survivor/{unique}")
        await greeting(ws)
        handle = await ta.spawn(Survivor, unique)
        result = await handle.save_messages("from a job")
        frames = []
        while not frames or frames[-1]["type"] != "cf_agent_use_chat_response" or not frames[-1]["done"]:
            frames.append(json.loads((await asyncio.wait_for(ws.receive(), 30)).data))
        deltas = [json.loads(f["body"]) for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
        assert "".join(d["delta"] for d in deltas if d["type"] == "text-delta") == "echo: from a job"
        assert {f["id"] for f in frames if f["type"] == "cf_agent_use_chat_response"} == {result.request_id}
        assert [m["role"] for m in frames[-2]["messages"]] == ["user", "assistant"]
        await handle.clear()
        assert json.loads((await asyncio.wait_for(ws.receive(), 30)).data) == {"type": "cf_agent_chat_clear"}
    finally:
        await client.close()


async def test_several_gateways_per_machine_share_one_port_and_each_serves_every_agent(
    ray_runtime: Any, unique: str
) -> None:
    """``serve --gateways-per-node 2``: two gateway processes bind the same port (SO_REUSEPORT); each answers
    chats for any agent, and when one stops the port still serves."""
    import socket

    import aiohttp

    from think_actors.gateway.ray_server import start_gateways

    with socket.socket() as probe:  # a free port both gateways then bind
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gateways = await start_gateways("ray_agents", host="127.0.0.1", port=port, options={"token": "t0k"}, per_node=2)
    try:
        assert [url for _, url in gateways] == [f"http://127.0.0.1:{port}"] * 2

        async def chat(n: int) -> str:
            url = f"http://127.0.0.1:{port}/agents/survivor/{unique}-{n}?token=t0k"
            async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
                await greeting(ws)
                body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": f"n{n}"}]}]}
                frame = {
                    "type": "cf_agent_use_chat_request",
                    "id": "r1",
                    "init": {"method": "POST", "body": json.dumps(body)},
                }
                await ws.send_str(json.dumps(frame))
                while True:
                    data = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
                    if data["type"] == "cf_agent_chat_messages":
                        return str(data["messages"][-1]["parts"][-1]["text"])

        assert await asyncio.gather(*(chat(n) for n in range(6))) == [f"echo: n{n}" for n in range(6)]
        await gateways[0][0].stop.remote()
        assert await chat(7) == "echo: n7"  # the other gateway holds the port
    finally:
        for actor, _ in gateways:
            await actor.stop.remote()
