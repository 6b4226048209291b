"""An agent hosted in a Ray actor behaves as in-process: hook order, every entry point of its handle, lookup."""

from __future__ import annotations

from typing import Any

import pytest
from ray_agents import HOOKS_IN_ORDER, EntryAgent, HookAgent

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text, tool_call


def types(chunks: list[Any]) -> list[str]:
    return [c.type for c in chunks]


def hooks(chunks: list[Any]) -> list[str]:
    return [c.data["hook"] for c in chunks if c.type == "data-hook"]


async def read_until(stream: Any, kind: str) -> list[Any]:
    """Chunks of ``stream`` up to and including the first of type ``kind``."""
    seen = []
    async for chunk in stream:
        seen.append(chunk)
        if chunk.type == kind:
            return seen
    raise AssertionError(f"the stream ended without a {kind!r} chunk: {types(seen)}")


async def test_hooks_run_in_order_inside_the_actor(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel([tool_call("lookup", {"q": "ray"}, id="call-1"), text("done"), text("again")])
    agent = await ta.spawn(HookAgent, unique, model=model)

    first = await agent.chat("find ray").collect()

    assert hooks(first) == HOOKS_IN_ORDER[:-1]  # on_chat_response runs after the stream's last chunk
    assert types(first) == [
        "start",
        "data-hook",
        "data-hook",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "tool-input-available",
        "data-hook",  # before_tool_call
        "tool-output-available",
        "data-hook",  # after_tool_call: after the call's output (one ordered stream)
        "data-hook",  # on_step_finish
        "finish-step",
        "data-hook",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "data-hook",
        "finish-step",
        "finish",
    ]
    assert {c.data["pid"] for c in first if c.type == "data-hook"} == {(await agent.info())["pid"]}

    second = await agent.chat("once more").collect()

    # The hook list the actor kept for the first turn (written by its on_chat_response) comes back first...
    [last_turn] = [c.data for c in second if c.type == "data-last-turn"]
    assert last_turn["hooks"] == HOOKS_IN_ORDER
    assert last_turn["status"] == "completed"
    # ... and the chunk on_chat_response emitted after the first stream ended is dropped, not replayed here.
    assert hooks(second) == ["before_turn", "before_step", "on_step_finish"]
    messages = await agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [
        ("user", "find ray"),
        ("assistant", "done"),
        ("user", "once more"),
        ("assistant", "again"),
    ]
    assert messages[1].tool_parts[0].output == "found ray"


@pytest.mark.timeout(60)
async def test_entry_points_through_the_handle(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel(
        [
            text("Hi there", chunk_size=3),
            text("saved"),
            text(" and more"),
            step(text("partial"), delay(60), text(" never")),  # ended by cancel_chat
            step(text("half"), delay(60), text(" never")),  # ended by closing the stream
            text("after the close"),
        ]
    )
    agent = await ta.spawn(EntryAgent, unique, model=model)

    chunks = await agent.chat("hello").collect()
    assert types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert "".join(c.delta for c in chunks if c.type == "text-delta") == "Hi there"

    saved = await agent.save_messages("save this")
    assert isinstance(saved, ta.TurnResult)
    assert (saved.status, saved.message.text if saved.message else None) == ("completed", "saved")

    continued = await agent.continue_last_turn()
    assert (continued.status, continued.continuation) == ("completed", True)

    await agent.add_messages(ta.user_message("a note", id="note-1"))
    messages = await agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [
        ("user", "hello"),
        ("assistant", "Hi there"),
        ("user", "save this"),
        ("assistant", "saved"),
        ("assistant", " and more"),
        ("user", "a note"),
    ]  # a continuation is a message of its own

    # cancel_chat on a streaming turn: an abort chunk ends the stream and the partial reply is kept.
    stream = agent.chat("go slowly")
    before = await read_until(stream, "text-delta")
    assert await agent.cancel_chat(stream.request_id) is True
    after = await stream.collect()
    assert types(before + after) == ["start", "start-step", "text-start", "text-delta", "abort"]
    assert await agent.cancel_chat(stream.request_id) is False  # the turn is over

    # Closing the stream early cancels the remote turn; the next turn (queued behind it) runs normally.
    closing = agent.chat("go slowly again")
    await read_until(closing, "text-delta")
    await closing.aclose()
    after_close = await agent.save_messages("are you there?")
    assert (after_close.status, after_close.message.text if after_close.message else None) == (
        "completed",
        "after the close",
    )

    messages = await agent.get_messages()
    assert [(m.role, m.text) for m in messages][6:] == [
        ("user", "go slowly"),
        ("assistant", "partial"),
        ("user", "go slowly again"),
        ("assistant", "half"),
        ("user", "are you there?"),
        ("assistant", "after the close"),
    ]

    await agent.clear()
    assert await agent.get_messages() == []


async def test_get_finds_an_existing_agent_and_rejects_missing_or_bad_names(ray_runtime: Any, unique: str) -> None:
    spawned = await ta.spawn(EntryAgent, unique, model=ScriptedModel([text("one")]))
    await spawned.save_messages("hi")

    found = await ta.get(EntryAgent, unique)

    assert found.path == spawned.path == f"entry-agent/{unique}"
    assert (await found.info())["pid"] == (await spawned.info())["pid"]
    assert [m.text for m in await found.get_messages()] == ["hi", "one"]
    with pytest.raises(ta.AgentUnavailableError) as missing:
        await ta.get(EntryAgent, f"missing-{unique}")
    assert missing.value.agent == f"entry-agent/missing-{unique}"
    with pytest.raises(ta.InvalidAgentNameError):
        await ta.get(EntryAgent, "../escape")
    with pytest.raises(ta.InvalidAgentNameError):
        await ta.spawn(EntryAgent, "a/b")
