"""Port of ``packages/think/src/tests/message-reconciliation.test.ts``: what a chat request's messages do to the
stored transcript. A client's optimistic copy of a reply the server has is not stored beside it; the server's copy
of a tool result wins; stored tool calls are repaired before the next turn (an orphan errored, malformed input
normalised and the normalisation stored), and settled errors and denials are left alone.

All through the gateway, as the reference sends them: a request carries the client's whole message list. The
reference's agent answers in text-only mode; here the scripted model answers ``ok``.
"""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text

from .conftest import Recorder, chat_request, skip_greeting, until_done, wire_user

SRC = "packages/think/src/tests/message-reconciliation.test.ts"
CALL = "toolu_01concurrent_repro"


class Reconciling(Recorder):
    pass


def server_reply(message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [
            {
                "type": "tool-generateImage",
                "toolCallId": CALL,
                "state": "output-available",
                "input": {"prompt": "a cat"},
                "output": {"url": "https://example.test/cat.png"},
            }
        ],
    }


def optimistic_reply(message_id: str) -> dict[str, Any]:
    """The client's in-flight snapshot of the same call: its own id, the call still waiting."""
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": "tool-generateImage",
                "toolCallId": CALL,
                "state": "input-available",
                "input": {"prompt": "a cat"},
            },
        ],
    }


def assistant(message_id: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": "assistant", "parts": [{"toolCallId": CALL, **part}]}


async def seeded_socket(gateway: Any, *stored: dict[str, Any]) -> tuple[Any, Reconciling]:
    client, agent_of = await gateway(Reconciling, model=ScriptedModel([text("ok")]))
    agent = await agent_of("reconciling", "r1")
    await agent.add_messages([ta.UIMessage.model_validate(m) for m in stored])
    ws = await client.ws_connect("/agents/reconciling/r1")
    await skip_greeting(ws)
    return ws, agent


def tool_part_of(agent: ta.Think, message_id: str) -> ta.ToolPart:
    [message] = [m for m in agent.get_messages() if m.id == message_id]
    [part] = [p for p in message.parts if isinstance(p, ta.ToolPart)]
    return part


async def test_an_optimistic_client_reply_collapses_into_the_server_reply(gateway: Any) -> None:
    """message-reconciliation.test.ts:169 "collapses a client's optimistic in-flight assistant into the existing
    server-owned row"."""
    user_a = wire_user("create a cat", "user-a")
    ws, agent = await seeded_socket(gateway, user_a, server_reply("server-cat-assistant"))
    await ws.send_str(
        chat_request("req-1", user_a, optimistic_reply("client-optimistic"), wire_user("create a dog", "user-b"))
    )
    await until_done(ws, "req-1")
    await agent.wait_idle()
    messages = agent.get_messages()
    assert [(m.role, m.id) for m in messages[:3]] == [
        ("user", "user-a"),
        ("assistant", "server-cat-assistant"),
        ("user", "user-b"),
    ]
    assert len(messages) == 4 and messages[3].text == "ok"
    assert tool_part_of(agent, "server-cat-assistant").state == "output-available"


async def test_a_stale_client_copy_under_the_same_id_keeps_the_server_output(gateway: Any) -> None:
    """message-reconciliation.test.ts:224 "merges server tool outputs into a stale client snapshot when IDs
    match"."""
    user_a = wire_user("create a cat", "user-a")
    ws, agent = await seeded_socket(gateway, user_a, server_reply("shared-asst-id"))
    await ws.send_str(
        chat_request("req-1", user_a, optimistic_reply("shared-asst-id"), wire_user("create a dog", "user-b"))
    )
    await until_done(ws, "req-1")
    await agent.wait_idle()
    part = tool_part_of(agent, "shared-asst-id")
    assert (part.tool_call_id, part.state, part.output) == (
        CALL,
        "output-available",
        {"url": "https://example.test/cat.png"},
    )


async def test_a_stored_orphan_call_is_errored_before_the_next_turn_and_kept(gateway: Any) -> None:
    """message-reconciliation.test.ts:261 "repairs a persisted orphan tool call before the next Think turn"."""
    ws, agent = await seeded_socket(gateway, wire_user("create a cat", "user-a"), optimistic_reply("orphan-assistant"))
    await ws.send_str(chat_request("req-1", wire_user("continue", "user-b")))
    [*_, done] = await until_done(ws, "req-1")
    await agent.wait_idle()
    assert done.get("error") is None
    assert [r.status for r in agent.seen("on_chat_response")] == ["completed"]
    assert tool_part_of(agent, "orphan-assistant").state == "output-error"
    assert "user-b" in [m.id for m in agent.get_messages()]


@pytest.mark.parametrize(
    ("stored_input", "expected", "line", "name"),
    [
        ('{"prompt":"a cat"}', {"prompt": "a cat"}, 306, "persists normalized tool inputs when repair only changes"),
        ('[{"id":1},{"id":2}]', {}, 349, "coerces an array tool input to {}"),
        (None, {}, 393, "defaults a missing tool input to an empty object"),
    ],
    ids=["json string", "array", "missing"],
)
async def test_a_settled_call_input_is_normalised_and_stored(
    gateway: Any, stored_input: Any, expected: dict[str, Any], line: int, name: str
) -> None:
    """message-reconciliation.test.ts:306, :349 and :393: the input the model is given is the one stored."""
    part: dict[str, Any] = {"type": "tool-generateImage", "state": "output-available", "output": {"ok": True}}
    if stored_input is not None:
        part["input"] = stored_input
    ws, agent = await seeded_socket(gateway, wire_user("create a cat", "user-a"), assistant("assistant-input", part))
    await ws.send_str(chat_request("req-1", wire_user("continue", "user-b")))
    [*_, done] = await until_done(ws, "req-1")
    await agent.wait_idle()
    assert done.get("error") is None
    assert tool_part_of(agent, "assistant-input").input == expected
    stored = await agent.store.get_message("assistant-input")
    assert stored is not None and [p.input for p in stored.parts if isinstance(p, ta.ToolPart)] == [expected]


async def test_an_errored_call_keeps_its_own_error_text(gateway: Any) -> None:
    """message-reconciliation.test.ts:438 "does not re-repair an already-errored tool call or clobber its
    errorText"."""
    real = "Image provider rejected the prompt (content policy)."
    errored = {"type": "tool-generateImage", "state": "output-error", "input": {"prompt": "a cat"}, "errorText": real}
    ws, agent = await seeded_socket(
        gateway, wire_user("create a cat", "user-a"), assistant("assistant-errored", errored)
    )
    await ws.send_str(chat_request("req-1", wire_user("continue", "user-b")))
    [*_, done] = await until_done(ws, "req-1")
    await agent.wait_idle()
    assert done.get("error") is None
    part = tool_part_of(agent, "assistant-errored")
    assert (part.state, part.error_text) == ("output-error", real)
    assert [e for e in agent.events if e.type == "chat:transcript:repaired"] == []


async def test_a_denied_call_stays_denied(gateway: Any) -> None:
    """message-reconciliation.test.ts:487 "preserves a denied tool approval (output-denied) instead of flipping it
    to errored"."""
    denied = {
        "type": "tool-deleteFiles",
        "state": "output-denied",
        "input": {"path": "/"},
        "approval": {"id": "appr-1", "approved": False, "reason": "Too dangerous"},
    }
    ws, agent = await seeded_socket(
        gateway, wire_user("delete everything", "user-a"), assistant("assistant-denied", denied)
    )
    await ws.send_str(chat_request("req-1", wire_user("continue", "user-b")))
    [*_, done] = await until_done(ws, "req-1")
    await agent.wait_idle()
    assert done.get("error") is None
    part = tool_part_of(agent, "assistant-denied")
    assert part.state == "output-denied"
    assert part.approval is not None and (part.approval.approved, part.approval.reason) == (False, "Too dangerous")
