"""Port of ``packages/ai-chat/src/tests/chat-turn-serialization.test.ts`` (the chat turn Think builds on): one
turn at a time across WebSocket requests, ``saveMessages`` and tool-result continuations; aborting the active turn;
a clear skipping what was queued.

The reference's ``SlowStreamAgent`` streams a few chunks slowly and logs the request id of every turn that starts;
here the start log is ``chat:turn:start`` and the slow stream is a scripted model that waits on an event the
test sets, so "while the first turn runs" is a state, not a timing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text

from .conftest import WAIT_S, Recorder, chat_request, handled, next_frame, skip_greeting, until_done, wire_user

SRC = "packages/ai-chat/src/tests/chat-turn-serialization.test.ts"


class Gated(ScriptedModel):
    """A scripted model whose first request streams ``partial`` and then waits for ``release``."""

    def __init__(self, steps: list[Any]) -> None:
        super().__init__(steps)
        self.release = asyncio.Event()
        self.streaming = asyncio.Event()

    def stream(self, request: Any) -> Any:
        inner = super().stream(request)
        first = len(self.requests) == 1

        async def gated() -> Any:
            async for event in inner:
                yield event
                if first and not self.release.is_set():
                    self.streaming.set()
                    await self.release.wait()

        return gated()


class Slow(Recorder):
    def started(self) -> list[str]:
        """Turns whose model work began (the reference logs them in ``onChatMessage``)."""
        return [ctx.request_id for ctx in self.seen("before_turn")]


def tool_message(message_id: str, tool_call_id: str) -> ta.UIMessage:
    return ta.UIMessage.model_validate(
        {
            "id": message_id,
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-testTool",
                    "toolCallId": tool_call_id,
                    "toolName": "testTool",
                    "state": "input-available",
                    "input": {},
                }
            ],
        }
    )


async def connect(gateway: Any, model: Gated) -> tuple[Any, Slow]:
    client, agent_of = await gateway(Slow, model=model)
    ws = await client.ws_connect("/agents/slow/r1")
    await skip_greeting(ws)
    return ws, await agent_of("slow", "r1")


async def test_a_second_websocket_request_waits_for_the_active_turn(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:87 "queues a second websocket request behind the active turn"."""
    model = Gated([step(text("one "), text("two")), text("second")])
    ws, agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-turn-1", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    await ws.send_str(chat_request("req-turn-2", wire_user("First", "user-1"), wire_user("Second", "user-2")))
    await handled(ws)
    assert agent.started() == ["req-turn-1"]
    model.release.set()
    done = []
    while len(done) < 2:
        frame = await next_frame(ws)
        if frame["type"] == "cf_agent_use_chat_response" and frame["done"]:
            done.append(frame["id"])
    await agent.wait_idle()
    assert done == ["req-turn-1", "req-turn-2"] and agent.started() == ["req-turn-1", "req-turn-2"]


async def test_save_messages_queues_behind_the_active_turn_and_wait_idle_covers_both(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:150 "queues saveMessages behind the active turn and waitForIdle covers both
    turns"."""
    model = Gated([text("one"), text("follow-up")])
    ws, agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-save-1", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    save = asyncio.ensure_future(agent.save_messages("Scheduled follow-up"))
    idle = asyncio.ensure_future(agent.wait_idle())
    await asyncio.sleep(0)
    assert not idle.done() and agent.started() == ["req-save-1"]
    model.release.set()
    await asyncio.wait_for(save, WAIT_S)
    await asyncio.wait_for(idle, WAIT_S)
    assert agent.started()[0] == "req-save-1" and len(agent.started()) == 2


async def test_cancelling_the_active_turn_ends_its_stream(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:195 "abortActiveTurn aborts the current stream" (and no abort is left
    registered afterwards)."""
    model = Gated([text("aborted soon")])
    ws, agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-abort-turn", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    assert agent.cancel_chat("req-abort-turn") is True
    await until_done(ws, "req-abort-turn")
    await agent.wait_idle()
    assert [r.status for r in agent.seen("on_chat_response")] == ["aborted"]
    assert agent.cancel_chat("req-abort-turn") is False


async def test_wait_idle_covers_a_continuation_queued_during_the_active_turn(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:226 "waitForIdle covers tool-result continuations queued during an active
    turn" and :279 "coalesces rapid auto-continued tool results into a single continuation turn"."""
    model = Gated([text("first"), text("continued")])
    ws, agent = await connect(gateway, model)
    await agent.add_messages([ta.user_message("earlier"), tool_message("assistant-tool-1", "call_tool_1")])
    await agent.add_messages(tool_message("assistant-tool-2", "call_tool_2"))
    await ws.send_str(chat_request("req-tool-turn", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    for call in ("call_tool_1", "call_tool_2"):
        await agent.add_tool_result(call, {"result": "ok"}, auto_continue=True)
    model.release.set()
    await agent.wait_until_stable(timeout_s=WAIT_S)
    started = agent.started()
    assert started[0] == "req-tool-turn" and len(started) <= 2


async def test_rapid_results_with_no_turn_running_make_one_continuation() -> None:
    """chat-turn-serialization.test.ts:337 "processes rapid auto-continued tool results when no turn is active"."""
    agent = Slow(model=ScriptedModel([text("continued")]), store=ta.MemoryStore())
    await agent.add_messages(
        [
            ta.user_message("go"),
            ta.UIMessage.model_validate(
                {
                    "id": "a1",
                    "role": "assistant",
                    "parts": [
                        {
                            "type": "tool-testTool",
                            "toolCallId": "idle-1",
                            "toolName": "testTool",
                            "state": "input-available",
                            "input": {},
                        },
                        {
                            "type": "tool-testTool",
                            "toolCallId": "idle-2",
                            "toolName": "testTool",
                            "state": "input-available",
                            "input": {},
                        },
                    ],
                }
            ),
        ]
    )
    await agent.add_tool_result("idle-1", {"result": "ok-1"}, auto_continue=True)
    await agent.add_tool_result("idle-2", {"result": "ok-2"}, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert len(agent.started()) == 1
    assert [r.continuation for r in agent.seen("on_chat_response")] == [True]


async def test_a_clear_during_the_active_turn_skips_the_queued_continuation(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:457 "chat clear during active turn skips queued continuation"."""
    model = Gated([text("first"), text("never")])
    ws, agent = await connect(gateway, model)
    await agent.add_messages([ta.user_message("earlier"), tool_message("assistant-clear-tool", "call_clear_tool")])
    await ws.send_str(chat_request("req-pre-clear", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    await agent.add_tool_result("call_clear_tool", {"result": "ok"}, auto_continue=True)
    await ws.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    await handled(ws)
    model.release.set()
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert agent.started() == ["req-pre-clear"]
    assert agent.get_messages() == []


async def test_a_save_messages_queued_behind_the_active_turn_is_skipped_by_a_clear(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:508 "saveMessages queued behind active turn is skipped after clear"."""
    model = Gated([text("first"), text("never")])
    ws, agent = await connect(gateway, model)
    await ws.send_str(chat_request("req-save-clear", wire_user("First", "user-1")))
    await asyncio.wait_for(model.streaming.wait(), WAIT_S)
    save = asyncio.ensure_future(agent.save_messages("queued"))
    await asyncio.sleep(0)
    await agent.clear()
    model.release.set()
    result = await asyncio.wait_for(save, WAIT_S)
    await agent.wait_idle()
    assert result.status == "skipped"
    assert agent.started() == ["req-save-clear"]


class HeldContinuation(Slow):
    """Holds its first continuation in ``before_turn``: coalesced and admitted, its stream not started yet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitted = asyncio.Event()
        self.go_on = asyncio.Event()

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        config = await super().before_turn(ctx)
        if ctx.continuation and not self.go_on.is_set():
            self.admitted.set()
            await self.go_on.wait()
        return config


def tool_result(tool_call_id: str, result: str) -> str:
    return json.dumps(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": tool_call_id,
            "toolName": "testTool",
            "output": {"result": result},
            "autoContinue": True,
        }
    )


async def test_a_result_after_the_continuation_was_admitted_queues_a_follow_up(gateway: Any) -> None:
    """chat-turn-serialization.test.ts:392 "queues a follow-up continuation when a tool result arrives after
    coalesce but before stream start"."""
    client, agent_of = await gateway(HeldContinuation, model=ScriptedModel([text("one"), text("two"), text("three")]))
    agent = await agent_of("held-continuation", "r1")
    ws = await client.ws_connect("/agents/held-continuation/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-pre-stream-window", wire_user("First", "user-1")))
    await until_done(ws, "req-pre-stream-window")
    await agent.add_messages(tool_message("assistant-pre-stream-tool-1", "call_pre_stream_tool_1"))
    await agent.add_messages(tool_message("assistant-pre-stream-tool-2", "call_pre_stream_tool_2"))
    await ws.send_str(tool_result("call_pre_stream_tool_1", "ok-1"))
    await asyncio.wait_for(agent.admitted.wait(), 1.0)  # coalesced after 50 ms in the reference
    await ws.send_str(tool_result("call_pre_stream_tool_2", "ok-2"))
    await handled(ws)
    agent.go_on.set()
    await agent.wait_until_stable(timeout_s=WAIT_S)
    started = agent.started()
    assert started[0] == "req-pre-stream-window" and len(started) == 3
    assert [r.continuation for r in agent.seen("on_chat_response")] == [False, True, True]
