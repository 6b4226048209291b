"""Regeneration (reference §1.1, the client-tools.test.ts regeneration cases): a new reply becomes a sibling
branch of the old one; the history before the branch point stays; on_chat_response fires."""

from __future__ import annotations

import json

from aiohttp.test_utils import TestClient, TestServer
from helpers import RecordingAgent, greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, text


async def test_regenerating_makes_a_sibling_branch_and_keeps_the_old_reply() -> None:
    model = ScriptedModel([text("first try"), text("second try"), text("third try")])
    agent = RecordingAgent(model=model, store=ta.MemoryStore())
    await agent.save_messages(ta.user_message("a question", id="u1"))

    await agent.chat([], branch_from="u1").collect()
    await agent.chat([], branch_from="u1").collect()

    assert [m.text for m in agent.get_messages()] == ["a question", "third try"]  # the newest branch
    everything = [m.text for m in await agent.store.list_messages()]
    assert everything == ["a question", "first try", "second try", "third try"]  # every branch stays
    assert [m["role"] for m in model.requests[2].messages] == ["system", "user"]  # the old replies are not shown
    assert [r.message.text for r in agent.contexts("on_chat_response")] == ["first try", "second try", "third try"]


async def test_regeneration_keeps_the_history_before_the_branch_point() -> None:
    model = ScriptedModel([text("a1"), text("a2"), text("a2 again")])
    agent = RecordingAgent(model=model, store=ta.MemoryStore())
    await agent.save_messages(ta.user_message("q1", id="u1"))
    await agent.save_messages(ta.user_message("q2", id="u2"))
    await agent.chat([], branch_from="u2").collect()
    assert [m.text for m in agent.get_messages()] == ["q1", "a1", "q2", "a2 again"]


async def test_a_regenerate_message_request_over_the_websocket() -> None:
    model = ScriptedModel([text("old answer"), text("new answer")])
    directory = LocalDirectory([ta.Think], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/think/regen")
        await greeting(ws)
        user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
        for request_id, trigger in (("r1", "submit-message"), ("r2", "regenerate-message")):
            body = json.dumps({"messages": [user], "trigger": trigger})
            await ws.send_str(
                json.dumps(
                    {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": body}}
                )
            )
            while True:
                frame = json.loads((await ws.receive()).data)
                if frame["type"] == "cf_agent_chat_messages" and len(frame["messages"]) >= 2:
                    break
        assert [m["parts"][-1]["text"] for m in frame["messages"]] == ["hi", "new answer"]


async def test_a_regenerate_request_with_no_messages_is_a_normal_submit() -> None:
    from think_actors.gateway.app import _branch_point

    assert _branch_point({"messages": [], "trigger": "regenerate-message"}) is None
    assert _branch_point({"messages": [{"id": "u1", "role": "user", "parts": []}]}) == "u1"
