"""Agent tools across actors: tagged child streams, structured output, parallel children, re-attach, cancel, cycles."""

from __future__ import annotations

from typing import Any

import pytest
from ray_agents import (
    Barrier,
    CancelLead,
    CycleA,
    CycleB,
    EntryAgent,
    Reporter,
    SlowChild,
    Summarizer,
    TeamLead,
    handle_at,
)

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text, tool_call


def child_events(chunks: list[Any], call_id: str) -> list[Any]:
    return [c for c in chunks if c.type == "agent-tool-event" and c.parent_tool_call_id == call_id]


def tool_outputs(chunks: list[Any]) -> dict[str, Any]:
    return {c.tool_call_id: c.output for c in chunks if c.type == "tool-output-available" and not c.preliminary}


@pytest.mark.timeout(60)
async def test_parallel_agent_tools_stream_tagged_child_events_from_their_own_actors(
    ray_runtime: Any, unique: str
) -> None:
    Barrier.options(name=f"barrier/{unique}", namespace=ray_runtime.namespace, lifetime="detached").remote(2)
    lead = await ta.spawn(
        TeamLead,
        unique,
        model=ScriptedModel(
            [
                step(
                    tool_call("summarizer", {"input": "Summarize Ray"}, id="call-sum"),
                    tool_call("reporter", {"input": "Report on Ray"}, id="call-rep"),
                ),
                text("Both reported."),
            ]
        ),
    )

    chunks = await lead.chat("Research Ray").collect()

    assert chunks[-1].type == "finish"
    for call_id, child_kebab, child_class in (
        ("call-sum", "summarizer", Summarizer),
        ("call-rep", "reporter", Reporter),
    ):
        events = child_events(chunks, call_id)
        path = f"{lead.path}/{child_kebab}/run-{call_id}"
        assert {(e.agent, e.run_id) for e in events} == {(path, f"agent-tool:{call_id}")}
        kinds = [e.kind for e in events]
        assert kinds[0] == "started" and kinds[-1] == "finished" and set(kinds[1:-1]) == {"chunk"}
        inner = [e.chunk for e in events if e.kind == "chunk"]
        assert [e.sequence for e in events if e.kind == "chunk"] == list(range(1, len(inner) + 1))
        assert [c.type for c in inner][:2] == ["start", "start-step"] and inner[-1].type == "finish"
        assert (await handle_at(path, child_class).info())["path"] == path
    outputs = tool_outputs(chunks)
    assert outputs["call-sum"] == "The child summary."  # the child's final text
    assert outputs["call-rep"] == {"title": "Ray actors", "score": 3}  # validated against output_schema
    summary_events = child_events(chunks, "call-sum")
    assert summary_events[-1].summary == "The child summary."
    assert (
        "".join(e.chunk.delta for e in summary_events if e.kind == "chunk" and e.chunk.type == "text-delta")
        == "The child summary."
    )

    # Each child's rendezvous tool waited at a barrier for the other: the runs overlapped, in two processes.
    met = [
        e.chunk.output
        for e in child_events(chunks, "call-sum") + child_events(chunks, "call-rep")
        if e.kind == "chunk" and e.chunk.type == "tool-output-available"
    ]
    assert [m["met"] for m in met] == [True, True]
    pids = {m["pid"] for m in met}
    assert len(pids) == 2
    assert (await lead.info())["pid"] not in pids


async def test_reissuing_a_run_id_reattaches_instead_of_running_again(ray_runtime: Any, unique: str) -> None:
    child = await ta.spawn(EntryAgent, unique, model=ScriptedModel([step(text("one"), delay(0.5), text(" two"))]))
    run_id = "agent-tool:call-1"

    first = child.run_as_tool(run_id, {"input": "count"})
    seen = []
    async for item in first:
        seen.append(item)
        if getattr(item, "type", None) == "text-delta":
            break
    # Joined while the run is live: the chunks so far are replayed, then followed to the end.
    joined = await child.run_as_tool(run_id, {"input": "count"}).collect()
    seen += await first.collect()
    # Asked again after it finished: the stored result, without running the model again.
    again = await child.run_as_tool(run_id, {"input": "count"}).collect()

    result = seen[-1]
    assert isinstance(result, ta.AgentRunResult)
    assert (result.status, result.summary, result.output) == ("completed", "one two", "one two")
    assert joined == seen
    assert again == [result]
    # One turn: a second model request would have found the script empty and failed the run.
    assert [(m.role, m.text) for m in await child.get_messages()] == [("user", "count"), ("assistant", "one two")]


@pytest.mark.timeout(30)  # the child pauses 60 s unless the cancel reaches it
async def test_cancelling_the_parent_cancels_the_child(ray_runtime: Any, unique: str) -> None:
    lead = await ta.spawn(
        CancelLead, unique, model=ScriptedModel([tool_call("slow_child", {"input": "take your time"}, id="call-slow")])
    )
    child_path = f"{lead.path}/slow-child/run-call-slow"

    stream = lead.chat("delegate")
    async for chunk in stream:
        if chunk.type == "agent-tool-event" and chunk.chunk is not None and chunk.chunk.type == "text-delta":
            break  # the child is mid-stream, inside a 60 s pause
    assert await lead.cancel_chat(stream.request_id) is True
    rest = await stream.collect()

    assert rest[-1].type == "abort"
    child = handle_at(child_path, SlowChild)
    # The child's turn ended aborted with its partial reply, and the child takes a new turn at once.
    again = await child.save_messages("again")
    assert (again.status, again.message.text if again.message else None) == ("completed", "child again")
    assert [(m.role, m.text) for m in await child.get_messages()] == [
        ("user", "take your time"),
        ("assistant", "child partial"),
        ("user", "again"),
        ("assistant", "child again"),
    ]
    [stored] = await child.run_as_tool("agent-tool:call-slow", {"input": "take your time"}).collect()
    assert (stored.status, stored.summary) == ("aborted", "child partial")


@pytest.mark.timeout(30)
async def test_a_call_cycle_fails_fast_with_agent_cycle_error(ray_runtime: Any, unique: str) -> None:
    a = await ta.spawn(CycleA, unique, model=ScriptedModel([tool_call("ask_b", {"question": "ping"}), text("A done")]))
    b = await ta.spawn(CycleB, unique, model=ScriptedModel([tool_call("ask_a", {"question": "pong"}), text("B done")]))

    chunks = await a.chat("start").collect()

    cycle = f"cycle-a/{unique} -> cycle-b/{unique} -> cycle-a/{unique}"
    [reported] = tool_outputs(chunks).values()  # the tool errors B's stream showed, as A's tool returned them
    assert f"agent call cycle: {cycle}" in reported
    assert chunks[-1].type == "finish"
    [b_reply] = [m for m in await b.get_messages() if m.role == "assistant"]
    assert "cycle" in (b_reply.tool_parts[0].error_text or "")
    assert [m.text for m in await a.get_messages()] == ["start", "A done"]  # B's "pong" never reached A
