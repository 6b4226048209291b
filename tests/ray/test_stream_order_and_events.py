"""The ordered stream and observability through actors."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from ray_agents import EntryAgent, ObservedAgent, OrderedLead, Survivor

import think_actors as ta
from think_actors.batching import _unpack, pack_call
from think_actors.runtime import _spawn_path
from think_actors.store import agent_path
from think_actors.testing import ScriptedModel, error, text, tool_call


async def test_a_quick_childs_chunks_and_output_come_before_after_tool_call_emits_on_ray(
    ray_runtime: Any, unique: str
) -> None:
    model = ScriptedModel([tool_call("quick_child", {"input": "hello"}, id="c1"), text("done")])
    lead = await ta.spawn(OrderedLead, unique, model=model)

    chunks = await lead.chat("go").collect()

    kinds = []
    for c in chunks:
        if c.type == "agent-tool-event":
            kinds.append(f"child:{c.kind}")
        elif c.type in ("data-after", "data-step", "tool-output-available", "finish-step"):
            kinds.append(c.type)
    assert kinds == [
        "child:started",
        *["child:chunk"] * 7,
        "child:finished",
        "tool-output-available",
        "data-after",
        "data-step",
        "finish-step",
        "data-step",
        "finish-step",
    ]


async def test_observe_through_the_handle_sees_turn_events_and_failures(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel([text("hi"), error(ta.ProviderError("upstream broke"))])
    agent = await ta.spawn(ObservedAgent, unique, model=model)
    events: list[ta.Event] = []
    failed = asyncio.Event()

    def record(event: ta.Event) -> None:
        events.append(event)
        if event.type == "chat:request:failed":
            failed.set()

    unsubscribe = await agent.observe("agents:chat", record)
    ok = await agent.save_messages("hello")
    bad = await agent.save_messages("again")
    await asyncio.wait_for(failed.wait(), 10)
    unsubscribe()

    types = [(e.type, e.payload["requestId"]) for e in events]
    assert types[:3] == [
        ("chat:turn:start", ok.request_id),
        ("chat:turn:finish", ok.request_id),
        ("chat:turn:start", bad.request_id),
    ]
    [failure] = [e for e in events if e.type == "chat:request:failed"]
    assert failure.payload == {
        "requestId": bad.request_id,
        "stage": "stream",
        "messagesPersisted": True,
        "error": "upstream broke",
    }
    assert (failure.agent, failure.name, failure.path) == ("ObservedAgent", unique, f"observed-agent/{unique}")


async def test_observe_refuses_an_unknown_channel_through_the_handle(ray_runtime: Any, unique: str) -> None:
    agent = await ta.spawn(ObservedAgent, unique, model=ScriptedModel())
    try:
        await agent.observe("agents:nope", print)
    except ta.ConfigurationError as err:
        assert "unknown observability channel 'agents:nope'" in str(err)
    else:
        raise AssertionError("observe accepted an unknown channel")


async def test_a_long_turn_crosses_whole_and_the_actor_call_still_ends_on_its_own(
    ray_runtime: Any, unique: str
) -> None:
    # The caller's stream ends at the batch marked last, without waiting for Ray's end-of-stream message; the
    # actor's side of the call must still run to its end (never cancelled), or the agent would look busy forever.
    pieces = [f"{i:04d}" for i in range(1500)]  # more than one full batch (batch_max is 1024)

    def script() -> ScriptedModel:
        return ScriptedModel([text("".join(pieces), chunk_size=4)])

    agent = await ta.spawn(EntryAgent, unique, model=script())
    local = EntryAgent(unique, model=script(), data_dir=ray_runtime.data_dir + "/local")
    stream = agent.chat("go")
    remote_chunks = await stream.collect()
    local_chunks = [chunk async for chunk in local.chat("go")]
    await local.close()

    assert [c.type for c in remote_chunks] == [c.type for c in local_chunks]
    assert [c.delta for c in remote_chunks if c.type == "text-delta"] == pieces
    with pytest.raises(StopAsyncIteration):  # Ray's end of the stream still comes: the call returned by itself
        await stream._generator.__anext__()
    assert await agent._actor.__ray_call__.remote(lambda host: host._calls) == 0
    assert (await agent.get_messages())[-1].text == "".join(pieces)


async def _items_of_a_turn(handle: Any, message: str) -> list[list[str]]:
    """A turn of the agent actor as Ray stream items: the chunk types each item carried (the turn's outcome,
    which follows its last chunk, as ``outcome``)."""
    call = handle._actor.chat.options(num_returns="streaming").remote(
        pack_call(message, {"request_id": None}, (), None)
    )
    return [[getattr(item, "type", "outcome") for item in _unpack(await ref)] async for ref in call]


async def test_an_agent_started_with_first_chunk_at_once_off_sends_a_quick_turn_as_one_item(
    ray_runtime: Any, unique: str
) -> None:
    held = await _spawn_path(
        Survivor, unique, agent_path("survivor", unique), {}, replace(ray_runtime, first_chunk_at_once=False)
    )
    at_once = await ta.spawn(Survivor, unique + "-b")
    try:
        one = await _items_of_a_turn(held, "hi")
        two = await _items_of_a_turn(at_once, "hi")
    finally:
        await held.kill(restart=False)
        await at_once.kill(restart=False)
    # The turn's outcome (what the caller's stream.status and stream.outcome say) crosses with its last chunks.
    kinds = ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish", "outcome"]
    assert one == [kinds]  # the opening chunks waited for the text and crossed with it
    assert two == [["start"], kinds[1:]]  # the default: the start leaves the moment the turn starts
    assert (await held.get_messages())[-1].text == "echo: hi"
