"""The ordered stream and observability through actors."""

from __future__ import annotations

import asyncio
from typing import Any

from ray_agents import ObservedAgent, OrderedLead

import think_actors as ta
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
