"""Observability channels in process: which events, on which channel, with which payload (reference §6)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, error, step, text


def agent_with(model: ScriptedModel, store: ta.Store | None = None) -> ta.Think:
    return ta.Think("obs", model=model, store=store or ta.MemoryStore())


async def test_turn_start_and_finish_on_agents_chat() -> None:
    agent = agent_with(ScriptedModel([step(text("hi"), usage=ta.Usage(input_tokens=3, output_tokens=1))]))
    events: list[ta.Event] = []
    agent.observe("chat", events.append)  # "chat" is short for "agents:chat"
    result = await agent.save_messages("hello")

    assert [e.type for e in events] == ["chat:turn:start", "chat:turn:finish"]
    start, finish = events
    assert start.payload == {
        "requestId": result.request_id,
        "trigger": "programmatic",
        "admission": "queue",
        "continuation": False,
        "generation": 0,
    }
    duration = finish.payload.pop("durationMs")
    first_chunk = finish.payload.pop("firstChunkMs")  # from the turn's start to the model's first stream event
    assert isinstance(duration, float) and 0 <= first_chunk <= duration
    assert finish.payload == {
        **start.payload,
        "status": "completed",
        "steps": 1,
        "usage": {"inputTokens": 3, "outputTokens": 1},
    }
    assert (start.agent, start.name, start.path, start.channel) == ("Think", "obs", "think/obs", "agents:chat")


async def test_an_in_band_error_is_published_on_both_channels() -> None:
    agent = agent_with(ScriptedModel([error(ta.ProviderError("boom"))]))
    chat: list[ta.Event] = []
    message: list[ta.Event] = []
    agent.observe("agents:chat", chat.append)
    agent.observe("agents:message", message.append)
    result = await agent.save_messages("hi")

    assert [e.type for e in chat] == ["chat:turn:start", "chat:request:failed", "chat:turn:finish"]
    assert chat[-1].payload["status"] == "error" and chat[-1].payload["error"] == "boom"
    assert [(e.type, e.payload) for e in message] == [
        ("message:error", {"requestId": result.request_id, "error": "boom"})
    ]


async def test_a_transcript_repair_is_published_on_agents_transcript() -> None:
    store = ta.MemoryStore()
    await store.append_message(ta.user_message("q"))
    await store.append_message(
        ta.UIMessage(
            id="a0",
            role="assistant",
            parts=(ta.ToolPart(type="tool-search", tool_call_id="t0", state="input-available", input={}),),
        )
    )
    agent = agent_with(ScriptedModel([text("ok")]), store)
    events: list[ta.Event] = []
    agent.observe("agents:transcript", events.append)
    result = await agent.save_messages("again")

    assert [(e.type, e.payload) for e in events] == [
        (
            "chat:transcript:repaired",
            {"requestId": result.request_id, "removedToolCalls": 1, "toolCallIds": ["t0"]},
        )
    ]


async def test_unsubscribe_async_callbacks_and_a_raising_callback() -> None:
    agent = agent_with(ScriptedModel([text("a"), text("b")]))
    seen: list[str] = []
    done = asyncio.Event()

    async def slow(event: ta.Event) -> None:
        seen.append(f"async {event.type}")
        if event.type == "chat:turn:finish":
            done.set()

    def broken(event: ta.Event) -> None:
        raise RuntimeError("observer bug")

    unsubscribe = agent.observe("agents:chat", lambda e: seen.append(e.type))
    agent.observe("agents:chat", broken)  # logged, never fails the turn
    agent.observe("agents:chat", slow)
    first = await agent.save_messages("one")
    await asyncio.wait_for(done.wait(), 5)
    unsubscribe()
    unsubscribe()  # twice is fine
    second = await agent.save_messages("two")

    assert (first.status, second.status) == ("completed", "completed")
    assert seen[:2] == ["chat:turn:start", "chat:turn:finish"]
    assert seen.count("chat:turn:start") == 1  # nothing after unsubscribing
    assert seen.count("async chat:turn:finish") >= 1


def test_observe_refuses_unknown_channels_and_non_callables() -> None:
    agent = agent_with(ScriptedModel())
    with pytest.raises(ta.ConfigurationError, match="unknown observability channel 'agents:everything'"):
        agent.observe("agents:everything", print)
    callback: Any = "print"
    with pytest.raises(ta.ConfigurationError, match="needs a callable"):
        agent.observe("chat", callback)
