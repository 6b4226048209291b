"""Every turn of an agent reaches every socket of it, whatever started the turn, and so does a clear (reference
§1.0: ``chat()`` and ``saveMessages()`` turns are broadcast to the WebSocket; ``clearMessages()`` sends
``cf_agent_chat_clear`` to all). The agent keeps a turn's chunks for the gateway only while a gateway follows it
(``agents:stream``): an agent without sockets pays nothing per chunk.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, step, text

WAIT_S = 5


class Relayed(ta.Think):
    pass


async def receive(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
    return frame


async def until(ws: Any, predicate: Any) -> list[dict[str, Any]]:
    seen = []
    while True:
        seen.append(await receive(ws))
        if predicate(seen[-1]):
            return seen


async def silent(ws: Any, probe: str) -> list[dict[str, Any]]:
    """The frames the socket gets before the answer to a resume request sent now (its earlier frames are all out
    once it is answered: a socket's frames are handled in order)."""
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": probe}))
    seen = await until(ws, lambda f: f.get("probeId") == probe)
    return seen[:-1]


def done(frame: dict[str, Any]) -> bool:
    return frame["type"] == "cf_agent_use_chat_response" and frame["done"]


def deltas(frames: list[dict[str, Any]]) -> list[str]:
    bodies = [json.loads(f["body"]) for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
    return [b["delta"] for b in bodies if b["type"] == "text-delta"]


@pytest.fixture
async def rig() -> AsyncIterator[Any]:
    clients: list[TestClient[Any, Any]] = []

    async def make(*steps: Any) -> tuple[TestClient[Any, Any], ta.Think, Gateway]:
        directory = LocalDirectory([Relayed], model=ScriptedModel(list(steps)), store=ta.MemoryStore())
        gateway = Gateway(directory)
        client: TestClient[Any, Any] = TestClient(TestServer(gateway.app()))
        await client.start_server()
        clients.append(client)
        return client, (await directory.get("relayed", "r")).agent, gateway

    yield make
    for client in clients:
        await client.close()


async def test_a_save_messages_turn_streams_to_every_socket_then_its_transcript(rig: Any) -> None:
    client, agent, _ = await rig(step(text("one "), text("two")))
    tabs = [await client.ws_connect("/agents/relayed/r") for _ in range(2)]
    for ws in tabs:
        await greeting(ws)
    result = await agent.save_messages("from a job")
    for ws in tabs:
        frames = await until(ws, done)
        assert deltas(frames) == ["one ", "two"]
        assert {f["id"] for f in frames if f["type"] == "cf_agent_use_chat_response"} == {result.request_id}
        assert [m["role"] for m in frames[-2]["messages"]] == ["user", "assistant"]  # stored, then done
        assert (frames[-1]["body"], frames[-1]["outcome"]) == ("", "completed")


async def test_a_socket_that_comes_back_resumes_an_in_process_turn(rig: Any) -> None:
    client, agent, _ = await rig(step(text("before "), text("after")))
    watcher = await client.ws_connect("/agents/relayed/r")  # the agent is followed: its turns are relayed
    await greeting(watcher)
    stream = agent.chat("hi")
    chunks = stream.__aiter__()  # the turn goes only as far as this reads it
    while (await chunks.__anext__()).type != "text-delta":
        pass
    later = await client.ws_connect("/agents/relayed/r")
    assert await receive(later) == {"type": "cf_agent_stream_resuming", "id": stream.request_id}
    await later.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": stream.request_id}))
    assert deltas(await until(later, lambda f: f.get("replayComplete"))) == ["before "]
    async for _ in chunks:
        pass
    frames = await until(later, done)
    assert deltas(frames) == ["after"]
    assert deltas(await until(watcher, done)) == ["before ", "after"]


async def test_the_gateways_own_request_is_streamed_once(rig: Any) -> None:
    client, _, _ = await rig(step(text("a"), text("b")))
    ws = await client.ws_connect("/agents/relayed/r")
    await greeting(ws)
    body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    init = {"method": "POST", "body": json.dumps(body)}
    await ws.send_str(json.dumps({"type": "cf_agent_use_chat_request", "id": "req", "init": init}))
    frames = await until(ws, done)
    assert deltas(frames) == ["a", "b"]
    assert await silent(ws, "after") == []  # no second copy of the stream through the agent's relay


async def test_an_in_process_clear_reaches_every_socket_and_a_sockets_own_clear_is_not_echoed(rig: Any) -> None:
    client, agent, _ = await rig(text("hi"))
    first, second = [await client.ws_connect("/agents/relayed/r") for _ in range(2)]
    for ws in (first, second):
        await greeting(ws)
    await agent.clear()
    for ws in (first, second):
        assert await receive(ws) == {"type": "cf_agent_chat_clear"}
    await first.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    assert await silent(first, "sender") == []  # as the reference: the socket that cleared is not told
    assert await silent(second, "other") == [{"type": "cf_agent_chat_clear"}]  # and the others once


async def test_an_agent_without_sockets_keeps_no_chunks_of_its_turns(rig: Any) -> None:
    client, agent, _ = await rig(text("alone"), text("watched"))
    stream = agent.chat("hi")
    await stream.collect()
    assert stream.request_id not in agent._engine.recovery.live  # nothing kept: no gateway follows it
    ws = await client.ws_connect("/agents/relayed/r")
    await greeting(ws)
    followed = agent.chat("again")
    await followed.collect()
    assert agent._engine.recovery.live[followed.request_id].done  # kept for the gateway's attach
    await until(ws, done)


async def test_a_socket_that_leaves_while_a_turn_is_relayed_lets_go_of_the_agent_after_it(rig: Any) -> None:
    client, agent, gateway = await rig(step(text("a"), text("b")), text("unwatched"))
    ws = await client.ws_connect("/agents/relayed/r")
    await greeting(ws)
    stream = agent.chat("hi")
    chunks = stream.__aiter__()  # the turn goes only as far as this reads it
    while (await chunks.__anext__()).type != "text-delta":
        pass
    await ws.close()  # while the gateway relays the turn: the room cannot let go yet
    async for _ in chunks:
        pass
    await gateway.turns_idle()
    later = agent.chat("no one watches")
    await later.collect()
    assert later.request_id not in agent._engine.recovery.live  # no gateway follows it: nothing kept
