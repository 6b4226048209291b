"""Re-attaching to an interrupted turn at a position: every chunk of the reply reaches the caller once.

A crash is simulated as in test_recovery.py (the agent frozen at a hook, its store copied as the dead process left
it). The caller here reads the stream as the actor boundary delivers it: a chunk is handed over only after
``Engine.durable()`` (what ``AgentHost.chat`` does before each batch leaves the actor), so it never holds what the
log lacks. Through real actor crashes: tests/ray/test_crash_recovery.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_recovery import WAIT_S, Crashable, Effects, FreezesMidPart, restart

import think_actors as ta
from think_actors._turn.journal import units
from think_actors.testing import ScriptedModel, delay, step, text, tool_call


def delivered_text(chunks: list[Any]) -> str:
    return "".join(c.delta for c in chunks if c.type == "text-delta")


def reply_text(agent: ta.Think) -> str:
    """The assistant text of the conversation's (one) turn, every message the turn and its recovery stored."""
    return "".join(m.text for m in agent.get_messages() if m.role == "assistant")


def tool_results(chunks: list[Any]) -> list[str]:
    return [c.tool_call_id for c in chunks if c.type in ("tool-output-available", "tool-output-error")]


async def across_the_boundary(agent: ta.Think, stream: AsyncIterator[Any], into: list[Any]) -> None:
    """Read ``stream`` as a caller on the other side of an actor boundary does: each chunk after the log has it."""
    async for chunk in stream:
        await agent._engine.durable()
        into.append(chunk)


async def crash_mid_text(freeze_at: str, effects: Effects) -> tuple[ta.MemoryStore, str, list[Any]]:
    """A chat turn (a tool call, then 200 characters of text one at a time) frozen at ``freeze_at``; returns the
    store as the crash left it, the request id and what the caller had received."""
    store = ta.MemoryStore()
    model = ScriptedModel([tool_call("read", {}, id="r1"), text("x" * 200, chunk_size=1)])
    agent = FreezesMidPart(model=model, store=store, freeze_at=freeze_at, effects=effects)
    stream = agent.chat("go")
    received: list[Any] = []
    reader = asyncio.create_task(across_the_boundary(agent, stream, received))
    await asyncio.wait_for(agent.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    reader.cancel()
    assert stream.request_id is not None
    return snapshot, stream.request_id, received


async def test_a_caller_cut_off_mid_text_gets_the_rest_of_the_reply_once() -> None:
    effects = Effects()
    store, request_id, received = await crash_mid_text("delta:150", effects)
    assert len(delivered_text(received)) == 149  # the 150th delta never left: the process died in its hook

    agent = await restart(store, ScriptedModel([text(" and the rest.")]), effects)
    position = sum(units(c) for c in received)
    rest = [c async for c in agent.attach(request_id, position=position)]

    # What the caller saw before the crash is what the recovery continued from: nothing twice, nothing missing.
    assert delivered_text(received) + delivered_text(rest) == reply_text(agent) == "x" * 149 + " and the rest."
    assert tool_results(received + rest) == ["r1"]
    assert rest[-1].type == "finish"


async def test_what_the_log_holds_beyond_the_caller_is_replayed_before_the_continuation() -> None:
    # The caller lost the last chunks that left (they were logged, the batch never arrived): its position is
    # behind the log, and the replay brings it up to the continuation.
    effects = Effects()
    store, request_id, received = await crash_mid_text("delta:150", effects)
    lost = 30
    kept = received[:-lost]

    agent = await restart(store, ScriptedModel([text(" and the rest.")]), effects)
    rest = [c async for c in agent.attach(request_id, position=sum(units(c) for c in kept))]

    assert delivered_text(kept) + delivered_text(rest) == reply_text(agent)
    assert delivered_text(rest).startswith("x" * lost)


async def test_a_second_crash_in_the_continuation_still_delivers_every_chunk_once() -> None:
    # The log keeps the whole stream across the recovery's continuation (a new segment, not a new log), so a
    # caller's position stays valid through a second crash.
    effects = Effects()
    store, request_id, first = await crash_mid_text("delta:150", effects)

    model = ScriptedModel([text("y" * 200, chunk_size=1)])
    resumed = FreezesMidPart(model=model, store=store, freeze_at="delta:160", effects=effects)
    await resumed.load_messages()  # the restart: its recovery continues the turn until the second freeze
    second: list[Any] = []
    attached = resumed.attach(request_id, position=sum(units(c) for c in first))
    reader = asyncio.create_task(across_the_boundary(resumed, attached, second))
    await asyncio.wait_for(resumed.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    reader.cancel()

    agent = await restart(snapshot, ScriptedModel([text(" done.")]), effects)
    position = sum(units(c) for c in first + second)
    third = [c async for c in agent.attach(request_id, position=position)]

    assert [m.role for m in agent.get_messages()] == ["user", "assistant", "assistant", "assistant"]
    assert delivered_text(first + second + third) == reply_text(agent) == "x" * 149 + "y" * 159 + " done."
    assert tool_results(first + second + third) == ["r1"]


class Stalls(Crashable):
    chat_stream_stall_timeout_s = 0.1


async def test_every_position_of_a_resumed_turn_leads_to_the_same_reply() -> None:
    # A turn stopped by the stall watchdog and resumed in the same process: its stream is the stopped attempt
    # (a tool call and text) and the continuation. From any position, attach gives exactly the rest.
    effects = Effects()
    model = ScriptedModel(
        [step(tool_call("read", {}, id="r1")), step(text("before the stall", chunk_size=3), delay(5)), text("after")]
    )
    agent = Stalls(model=model, store=ta.MemoryStore(), effects=effects)
    stream = agent.chat("go")
    chat = [c async for c in stream]
    assert stream.request_id is not None
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)

    whole = [c async for c in agent.attach(stream.request_id, position=0)]
    assert delivered_text(whole) == reply_text(agent) == "before the stallafter"
    assert tool_results(whole) == ["r1"]
    # The caller that read the chat stream to its end (an abort saying the turn is resumed) is at the
    # continuation: attaching at its position or without one gives the same chunks.
    at_caller = [c async for c in agent.attach(stream.request_id, position=sum(units(c) for c in chat))]
    assert [c.model_dump() for c in at_caller] == [c.model_dump() for c in agent_live(agent, stream.request_id)]
    total = sum(units(c) for c in whole)
    for position in range(total + 1):
        rest = [c async for c in agent.attach(stream.request_id, position=position)]
        assert sum(units(c) for c in rest) == total - position
        head = cut(whole, position)
        assert delivered_text(head) + delivered_text(rest) == delivered_text(whole), position
        assert tool_results(head) + tool_results(rest) == ["r1"], position


def agent_live(agent: ta.Think, request_id: str) -> list[Any]:
    """The chunks this process followed of the turn (what attach without a position gives)."""
    return list(agent._engine.recovery.live[request_id].chunks)


def cut(chunks: list[Any], position: int) -> list[Any]:
    """The chunks a caller at ``position`` holds (a delta the position cuts, its beginning)."""
    out: list[Any] = []
    seen = 0
    for chunk in chunks:
        if seen >= position:
            break
        size = units(chunk)
        if seen + size > position:
            chunk = type(chunk)(id=chunk.id, delta=chunk.delta[: position - seen])
        out.append(chunk)
        seen += size
    return out


@pytest.mark.parametrize("position", [None, 0])
async def test_attaching_to_an_unknown_turn_is_an_error(position: int | None) -> None:
    agent = Crashable(model=ScriptedModel(), store=ta.MemoryStore(), effects=Effects())
    with pytest.raises(ta.TurnError, match="no recovered turn"):
        async for _ in agent.attach("never-interrupted", position=position):
            pass
