"""Which waiting calls are pending interactions, and when the auto-continuation barrier holds (reference §1.9:
``hasPendingInteraction`` counts approvals and calls of the stored client tools; ``hasIncompleteToolBatch`` holds
only a newest reply with one call answered and another still waiting)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, step, text, tool_call

WAIT_S = 5
ASK = ta.ClientToolSchema(name="ask", description="Ask the person")


class Desk(ta.Think):
    pass


def call(tool: str, tool_call_id: str, state: str = "input-available") -> dict[str, Any]:
    part: dict[str, Any] = {"type": f"tool-{tool}", "toolCallId": tool_call_id, "state": state, "input": {}}
    if state == "approval-requested":
        part["approval"] = {"id": f"ap-{tool_call_id}"}
    return part


def reply(message_id: str, *parts: dict[str, Any]) -> ta.UIMessage:
    return ta.UIMessage.model_validate({"id": message_id, "role": "assistant", "parts": list(parts)})


def text_of(message: ta.UIMessage) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, ta.TextPart))


async def test_an_approval_waiting_in_an_earlier_reply_is_pending() -> None:
    agent = Desk(model=ScriptedModel(), store=ta.MemoryStore())
    await agent.add_messages(
        [
            ta.user_message("first", id="u1"),
            reply("a1", call("refund", "c1", "approval-requested")),
            ta.user_message("second", id="u2"),
            reply("a2", {"type": "text", "text": "fine"}),
        ]
    )
    assert agent.has_pending_interaction() is True


async def test_a_call_of_a_stored_client_tool_is_pending_and_one_of_another_tool_is_not() -> None:
    agent = Desk(model=ScriptedModel(), store=ta.MemoryStore())
    await agent.set_client_tools([ASK])
    await agent.add_messages([ta.user_message("go", id="u1"), reply("a1", call("search", "c1"))])
    assert agent.has_pending_interaction() is False
    await agent.add_messages([reply("a2", call("ask", "c2"))])
    assert agent.has_pending_interaction() is True


async def test_a_chat_request_stores_its_client_tools_so_their_calls_wait() -> None:
    # The gateway is Think's WebSocket path: the client tools a request brings are stored (chat() alone keeps
    # them for its turn), so a call of one waits for the browser's answer, even after a restart.
    directory = LocalDirectory([Desk], model=ScriptedModel([tool_call("ask", {}, id="c1")]), store=ta.MemoryStore())
    client: TestClient[Any, Any] = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect("/agents/desk/d")
        await greeting(ws)
        payload = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        payload |= {"trigger": "submit-message", "clientTools": [{"name": "ask"}]}
        init = {"method": "POST", "body": json.dumps(payload)}
        await ws.send_str(json.dumps({"type": "cf_agent_use_chat_request", "id": "r", "init": init}))
        while True:
            frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
            if frame["type"] == "cf_agent_use_chat_response" and frame["done"]:
                break
        agent = (await directory.get("desk", "d")).agent
        assert agent.has_pending_interaction() is True
    finally:
        await client.close()


async def test_a_half_answered_batch_holds_the_continuation_until_its_last_answer() -> None:
    model = ScriptedModel([step(tool_call("ask", {}, id="c1"), tool_call("ask", {}, id="c2")), text("both answered")])
    agent = Desk(model=model, store=ta.MemoryStore())
    await agent.set_client_tools([ASK])
    await agent.chat("go", client_tools=[ASK]).collect()
    await agent.add_tool_result("c1", "yes", auto_continue=True)
    await asyncio.sleep(0.2)  # well past the 50 ms coalescing: a continuation would have started
    assert len(model.requests) == 1
    await agent.add_tool_result("c2", "no", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert text_of(agent.get_messages()[-1]) == "both answered"
    model.assert_complete()


async def test_an_answer_to_a_call_of_an_earlier_reply_continues_at_once() -> None:
    # The newest reply's call has no answer, so it is not mid-batch: the barrier does not hold (the reference
    # scopes it to the newest reply, so a call left dangling elsewhere does not block a continuation).
    model = ScriptedModel([text("went on")])
    agent = Desk(model=model, store=ta.MemoryStore())
    await agent.add_messages(
        [ta.user_message("go", id="u1"), reply("a1", call("ask", "c1")), reply("a2", call("ask", "c2"))]
    )
    await agent.add_tool_result("c1", "yes", auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert text_of(agent.get_messages()[-1]) == "went on"
    model.assert_complete()
