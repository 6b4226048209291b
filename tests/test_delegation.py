"""Delegation in-process (no Ray): sub-agent handles, agent tools, idempotent runs, abort propagation, emit.

Children that ``agent_tool`` creates take their class attribute ``model``, and a ScriptedModel class attribute is
shared by every instance of the class in this process, so each scenario has its own child class.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import chunk_types, drain
from pydantic import BaseModel

import think_actors as ta
from think_actors.chunks import DataChunk
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

WAIT_S = 5.0
SLOW_S = 30.0  # a scripted pause only an abort ends within WAIT_S


def child_events(chunks: list[Any], call_id: str) -> list[Any]:
    return [c for c in chunks if c.type == "agent-tool-event" and c.parent_tool_call_id == call_id]


def tool_outputs(chunks: list[Any]) -> dict[str, Any]:
    return {c.tool_call_id: c.output for c in chunks if c.type == "tool-output-available" and not c.preliminary}


def transcript(messages: list[ta.UIMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


async def collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


# ---------------------------------------------------------------------------------------------- sub_agent


class NoteTaker(ta.Think):
    model = ScriptedModel([text("hello from q1", chunk_size=5), text("noted"), text("fresh start")])


class DeskLead(ta.Think):
    """A parent that never takes a turn itself."""


async def test_sub_agent_returns_a_cached_local_handle_named_under_the_parent() -> None:
    lead = DeskLead("d1", store=ta.MemoryStore())

    child = await lead.sub_agent(NoteTaker, "q1")

    assert isinstance(child, ta.LocalAgentHandle)
    assert child.path == "desk-lead/d1/note-taker/q1"
    assert await lead.sub_agent(NoteTaker, "q1") is child
    assert isinstance(child.agent, NoteTaker)
    assert isinstance(child.agent.store, ta.MemoryStore)
    assert child.agent.store is not lead.store

    chunks = [chunk async for chunk in child.chat("hi")]
    assert chunk_types(chunks) == [
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
    result = await child.save_messages("note this")
    assert (result.status, result.message.text if result.message else None) == ("completed", "noted")
    assert transcript(await child.get_messages()) == [
        ("user", "hi"),
        ("assistant", "hello from q1"),
        ("user", "note this"),
        ("assistant", "noted"),
    ]
    assert await lead.load_messages() == []  # the child's history is its own

    await child.clear()
    assert await child.get_messages() == []
    await child.save_messages("again")
    assert transcript(await child.get_messages()) == [("user", "again"), ("assistant", "fresh start")]
    NoteTaker.model.assert_complete()


@pytest.mark.parametrize("name", ["", "../escape", "a/b", "-dash-first"])
async def test_sub_agent_rejects_a_bad_name(name: str) -> None:
    lead = DeskLead("d2", store=ta.MemoryStore())
    with pytest.raises(ta.InvalidAgentNameError):
        await lead.sub_agent(NoteTaker, name)
    assert lead._engine.children == {}


class Dawdler(ta.Think):
    model = ScriptedModel([step(text("partial"), delay(SLOW_S), text(" never")), text("back")])


async def test_cancel_chat_through_a_handle_aborts_the_childs_turn() -> None:
    lead = DeskLead("d3", store=ta.MemoryStore())
    child = await lead.sub_agent(Dawdler, "slow")
    stream = child.chat("take your time")
    chunks: list[Any] = []

    async def read_until_text() -> None:
        async for chunk in stream:
            chunks.append(chunk)
            if chunk.type == "text-delta":
                return

    await asyncio.wait_for(read_until_text(), WAIT_S)
    assert await child.cancel_chat(stream.request_id, "stop") is True
    chunks += await asyncio.wait_for(drain(stream), WAIT_S)

    assert chunk_types(chunks) == ["start", "start-step", "text-start", "text-delta", "abort"]
    assert chunks[-1].reason == "stop"
    assert await child.cancel_chat(stream.request_id) is False
    result = await child.save_messages("come back")
    assert (result.status, result.message.text if result.message else None) == ("completed", "back")
    assert transcript(await child.get_messages()) == [
        ("user", "take your time"),
        ("assistant", "partial"),
        ("user", "come back"),
        ("assistant", "back"),
    ]


# ---------------------------------------------------------------------------------------------- agent_tool


class Researcher(ta.Think):
    model = ScriptedModel([text("Ray runs actors.", chunk_size=4)])


class ResearchLead(ta.Think):
    tools = [ta.agent_tool(Researcher, description="Research a topic.")]


async def test_agent_tool_streams_tagged_child_events_and_returns_the_childs_text() -> None:
    model = ScriptedModel([tool_call("researcher", {"input": "What is Ray?"}, id="call-r"), text("Done.")])
    lead = ResearchLead("r1", model=model, store=ta.MemoryStore())

    chunks = await drain(lead.chat("go"))

    path = "research-lead/r1/researcher/run-call-r"
    events = child_events(chunks, "call-r")
    assert {(e.agent, e.run_id) for e in events} == {(path, "agent-tool:call-r")}
    assert [e.kind for e in events] == ["started"] + ["chunk"] * 10 + ["finished"]
    inner = [e for e in events if e.kind == "chunk"]
    assert [e.sequence for e in inner] == list(range(1, 11))
    assert [e.chunk.type for e in inner] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert "".join(e.chunk.delta for e in inner if e.chunk.type == "text-delta") == "Ray runs actors."
    assert events[-1].summary == "Ray runs actors."
    # The child's events sit between the call's input and its output, in the lead's own stream.
    types = chunk_types(chunks)
    assert types.index("tool-input-available") < chunks.index(events[0])
    assert chunks.index(events[-1]) < types.index("tool-output-available")
    assert types[-1] == "finish"

    assert tool_outputs(chunks) == {"call-r": "Ray runs actors."}
    assert model.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "call-r", "content": "Ray runs actors."}
    [user, reply] = lead.get_messages()
    assert (user.role, user.text) == ("user", "go")
    assert [p.type for p in reply.parts] == ["step-start", "tool-researcher", "step-start", "text"]
    assert reply.parts[1].output == "Ray runs actors."  # type: ignore[union-attr]
    assert "agent-tool-event" not in json.dumps([m.model_dump(mode="json") for m in await lead.store.load_messages()])
    child = await lead.sub_agent(Researcher, "run-call-r")
    assert transcript(await child.get_messages()) == [("user", "What is Ray?"), ("assistant", "Ray runs actors.")]


class MeetingModel:
    """Marks its own arrival, then answers only once the other child's request has arrived too.

    Two children run one after the other would wait here for each other until ``wait_for`` gives up.
    """

    model_id = "meeting"

    def __init__(self, answer: str, mine: asyncio.Event, other: asyncio.Event):
        self.answer = answer
        self.mine = mine
        self.other = other

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        self.mine.set()
        await asyncio.wait_for(self.other.wait(), WAIT_S)
        yield TextDelta(self.answer)
        yield FinishEvent("stop", Usage())


_LEFT_ARRIVED = asyncio.Event()
_RIGHT_ARRIVED = asyncio.Event()


class LeftScout(ta.Think):
    model = MeetingModel("left side clear", _LEFT_ARRIVED, _RIGHT_ARRIVED)


class RightScout(ta.Think):
    model = MeetingModel("right side clear", _RIGHT_ARRIVED, _LEFT_ARRIVED)


class ScoutLead(ta.Think):
    tools = [
        ta.agent_tool(LeftScout, description="Scout left."),
        ta.agent_tool(RightScout, description="Scout right."),
    ]


async def test_two_agent_tools_in_one_step_run_concurrently() -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("left_scout", {"input": "look left"}, id="call-left"),
                tool_call("right_scout", {"input": "look right"}, id="call-right"),
            ),
            text("Both sides clear."),
        ]
    )
    lead = ScoutLead("s1", model=model, store=ta.MemoryStore())

    chunks = await asyncio.wait_for(drain(lead.chat("scout")), 2 * WAIT_S)

    assert tool_outputs(chunks) == {"call-left": "left side clear", "call-right": "right side clear"}
    for call_id, child in (("call-left", "left-scout"), ("call-right", "right-scout")):
        events = child_events(chunks, call_id)
        assert {e.agent for e in events} == {f"scout-lead/s1/{child}/run-{call_id}"}
        assert events[0].kind == "started" and events[-1].kind == "finished"
    # Both children started before either finished.
    kinds = [(c.parent_tool_call_id, c.kind) for c in chunks if c.type == "agent-tool-event"]
    starts = [kinds.index(("call-left", "started")), kinds.index(("call-right", "started"))]
    ends = [kinds.index(("call-left", "finished")), kinds.index(("call-right", "finished"))]
    assert max(starts) < min(ends)
    assert chunks[-1].type == "finish"
    model.assert_complete()


# ---------------------------------------------------------------------------------------------- output and input


class Verdict(BaseModel):
    title: str
    score: int


class Grader(ta.Think):
    model = ScriptedModel([text('{"title": "Ray actors", "score": 3}', chunk_size=8)])


class SloppyGrader(ta.Think):
    model = ScriptedModel([text('{"title": "Ray actors"}')])


class GradingLead(ta.Think):
    tools = [
        ta.agent_tool(Grader, description="Grade a topic.", output_schema=Verdict),
        ta.agent_tool(SloppyGrader, description="Grade a topic, badly.", output_schema=Verdict),
    ]


async def test_output_schema_validates_the_childs_answer_or_fails_the_call() -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("grader", {"input": "Grade Ray"}, id="call-good"),
                tool_call("sloppy_grader", {"input": "Grade Ray"}, id="call-bad"),
            ),
            text("Graded."),
        ]
    )
    lead = GradingLead("g1", model=model, store=ta.MemoryStore())

    chunks = await drain(lead.chat("grade"))

    outputs = tool_outputs(chunks)
    assert outputs["call-good"] == {"title": "Ray actors", "score": 3}
    failure = outputs["call-bad"]
    assert {k: v for k, v in failure.items() if k != "error"} == {
        "ok": False,
        "status": "error",
        "retryable": False,
        "agent": "grading-lead/g1/sloppy-grader/run-call-bad",
    }
    assert failure["error"].startswith("The model's answer does not match the output schema:")
    assert "score" in failure["error"]
    assert [e.kind for e in child_events(chunks, "call-bad")][-1] == "error"
    assert child_events(chunks, "call-bad")[-1].error == failure["error"]
    assert chunks[-1].type == "finish"
    # The child was asked for JSON of the schema.
    response_format = Grader.model.requests[0].response_format
    assert response_format is not None
    assert response_format["json_schema"]["name"] == "Verdict"


class Brief(BaseModel):
    topic: str
    depth: int = 1


class PlainWriter(ta.Think):
    model = ScriptedModel([text("plain done")])


class BriefWriter(ta.Think):
    model = ScriptedModel([text("brief done")])


class WritingLead(ta.Think):
    tools = [
        ta.agent_tool(PlainWriter, description="Write plainly."),
        ta.agent_tool(BriefWriter, description="Write to a brief.", input_schema=Brief, name="write_brief"),
    ]


async def test_input_schemas_shape_the_childs_user_message() -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("plain_writer", {"input": "Write about Ray"}, id="call-plain"),
                tool_call("write_brief", {"topic": "Ray"}, id="call-brief"),
            ),
            text("Written."),
        ]
    )
    lead = WritingLead("w1", model=model, store=ta.MemoryStore())

    chunks = await drain(lead.chat("write"))

    specs = {t["function"]["name"]: t["function"]["parameters"] for t in model.requests[0].tools}
    assert specs["plain_writer"] == {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The task for the agent, in plain words."}},
        "required": ["input"],
    }
    assert specs["write_brief"] == {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "depth": {"type": "integer", "default": 1}},
        "required": ["topic"],
    }
    assert tool_outputs(chunks) == {"call-plain": "plain done", "call-brief": "brief done"}
    plain = await lead.sub_agent(PlainWriter, "run-call-plain")
    brief = await lead.sub_agent(BriefWriter, "run-call-brief")
    assert transcript(await plain.get_messages()) == [("user", "Write about Ray"), ("assistant", "plain done")]
    assert transcript(await brief.get_messages()) == [
        ("user", json.dumps({"topic": "Ray", "depth": 1}, indent=2)),
        ("assistant", "brief done"),
    ]


# ---------------------------------------------------------------------------------------------- idempotent runs


class GatedModel:
    """Streams ``one``, waits for ``gate``, then streams `` two``; counts its requests."""

    model_id = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.requests = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        self.requests += 1
        yield TextDelta("one")
        await asyncio.wait_for(self.gate.wait(), WAIT_S)
        yield TextDelta(" two")
        yield FinishEvent("stop", Usage())


class Counter(ta.Think):
    model = GatedModel()


async def test_a_run_id_is_joined_while_live_and_answered_from_the_store_once_finished() -> None:
    lead = DeskLead("d4", store=ta.MemoryStore())
    child = await lead.sub_agent(Counter, "c1")
    run_id = "agent-tool:call-1"
    gated: GatedModel = Counter.model

    first = child.run_as_tool(run_id, {"input": "count"})
    seen = []
    async for item in first:
        seen.append(item)
        if getattr(item, "type", None) == "text-delta":
            break
    # Joined while the run is live: the chunks so far are replayed, then followed to the end.
    joined = child.run_as_tool(run_id, {"input": "count"})
    replayed = [await joined.__anext__() for _ in seen]
    assert replayed == seen
    gated.gate.set()
    rest = await asyncio.wait_for(collect(joined), WAIT_S)
    seen += await asyncio.wait_for(collect(first), WAIT_S)

    result = seen[-1]
    assert result == ta.AgentRunResult(
        run_id=run_id, status="completed", summary="one two", output="one two", usage=ta.RunUsage(requests=1)
    )
    assert replayed + rest == seen
    assert chunk_types(seen[:-1]) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    # Asked again after it finished: the stored result, without running the model again.
    assert await collect(child.run_as_tool(run_id, {"input": "count"})) == [result]
    assert await collect(child.run_as_tool(run_id, {"input": "something else"})) == [result]
    assert gated.requests == 1
    assert await child.agent.store.get_kv("agent-tool-run:" + run_id) == {
        "status": "completed",
        "summary": "one two",
        "output": "one two",
        "error": None,
        "usage": ta.RunUsage(requests=1).as_dict(),
    }
    # The record lives in the store: a fresh agent on the same store answers from it too.
    reborn = Counter("c1", path=child.path, store=child.agent.store)
    assert await collect(reborn.run_as_tool(run_id, {"input": "count"})) == [result]
    assert gated.requests == 1
    assert transcript(await child.get_messages()) == [("user", "count"), ("assistant", "one two")]


# ---------------------------------------------------------------------------------------------- failures


class Flaky(ta.Think):
    model = ScriptedModel([error(ta.ProviderError("upstream exploded"))])


class FlakyLead(ta.Think):
    tools = [ta.agent_tool(Flaky, description="Fails.")]


async def test_a_child_model_error_becomes_a_failure_output_and_the_lead_goes_on() -> None:
    model = ScriptedModel([tool_call("flaky", {"input": "try"}, id="call-f"), text("The child failed.")])
    lead = FlakyLead("f1", model=model, store=ta.MemoryStore())

    chunks = await drain(lead.chat("go"))

    failure = {
        "ok": False,
        "status": "error",
        "error": "upstream exploded",
        "retryable": False,
        "agent": "flaky-lead/f1/flaky/run-call-f",
    }
    assert tool_outputs(chunks) == {"call-f": failure}
    events = child_events(chunks, "call-f")
    assert [(e.kind, e.chunk.type if e.chunk else None) for e in events] == [
        ("started", None),
        ("chunk", "start"),
        ("chunk", "error"),  # the child's model failed before its stream started: no step
        ("error", None),
    ]
    assert events[-1].error == events[-2].chunk.error_text == "upstream exploded"
    assert model.requests[1].messages[-1]["content"] == json.dumps(failure)
    assert chunks[-1].type == "finish"
    assert transcript(lead.get_messages()) == [("user", "go"), ("assistant", "The child failed.")]


class SlowChild(ta.Think):
    model = ScriptedModel([step(text("child partial"), delay(SLOW_S), text(" never")), text("child again")])


class CancelLead(ta.Think):
    tools = [ta.agent_tool(SlowChild, description="Take your time.")]


async def test_cancelling_the_lead_aborts_the_childs_run() -> None:
    model = ScriptedModel([tool_call("slow_child", {"input": "take your time"}, id="call-slow")])
    lead = CancelLead("c1", model=model, store=ta.MemoryStore())
    stream = lead.chat("delegate")
    chunks: list[Any] = []

    async def read_until_child_text() -> None:
        async for chunk in stream:
            chunks.append(chunk)
            if chunk.type == "agent-tool-event" and chunk.chunk is not None and chunk.chunk.type == "text-delta":
                return  # the child is mid-stream, inside its long pause

    await asyncio.wait_for(read_until_child_text(), WAIT_S)
    assert lead.cancel_chat(stream.request_id) is True
    chunks += await asyncio.wait_for(drain(stream), WAIT_S)

    assert chunks[-1].type == "abort"
    assert "finish" not in chunk_types(chunks)
    run_id = "agent-tool:call-slow"
    child = await lead.sub_agent(SlowChild, "run-call-slow")
    # Joining follows the run to its end (if it is still stopping), then the stored record answers alone.
    joined = await asyncio.wait_for(collect(child.run_as_tool(run_id, {"input": "take your time"})), WAIT_S)
    stored = joined[-1]
    assert (stored.status, stored.summary) == ("aborted", "child partial")
    assert await collect(child.run_as_tool(run_id, {"input": "take your time"})) == [stored]
    assert (await child.agent.store.get_kv("agent-tool-run:" + run_id))["status"] == "aborted"
    again = await asyncio.wait_for(child.save_messages("again"), WAIT_S)
    assert (again.status, again.message.text if again.message else None) == ("completed", "child again")
    assert transcript(await child.get_messages()) == [
        ("user", "take your time"),
        ("assistant", "child partial"),
        ("user", "again"),
        ("assistant", "child again"),
    ]


class CycleB(ta.Think):
    model = ScriptedModel([tool_call("ask_a", {"question": "pong"}), text("B done")])
    parent: ta.Think | None = None

    @ta.tool
    async def ask_a(self, question: str) -> str:
        """Ask A (which is waiting for this very turn)."""
        assert self.parent is not None
        await self.parent.save_messages(question)
        return "A answered"


class RunCycleB(ta.Think):
    model = ScriptedModel([tool_call("run_a", {"question": "pong"}), text("B done")])
    parent: ta.Think | None = None

    @ta.tool
    async def run_a(self, question: str) -> str:
        """Run A as an agent tool (A is waiting for this very turn)."""
        assert self.parent is not None
        items = [item async for item in self.parent.run_as_tool("agent-tool:loop", question)]
        return repr(items[-1])


class CycleA(ta.Think):
    partner: type[ta.Think] = CycleB

    @ta.tool
    async def ask_b(self, question: str) -> str:
        """Ask B; return the tool errors B saw."""
        b = await self.sub_agent(self.partner, "b")
        b.agent.parent = self
        errors = [chunk.error_text async for chunk in b.chat(question) if chunk.type == "tool-output-error"]
        return "\n".join(errors) or "B saw no error"


async def test_an_in_process_call_cycle_is_a_nested_turn_tool_error_not_a_hang() -> None:
    a = CycleA(
        "a1", model=ScriptedModel([tool_call("ask_b", {"question": "ping"}), text("A done")]), store=ta.MemoryStore()
    )

    chunks = await asyncio.wait_for(drain(a.chat("start")), WAIT_S)

    [reported] = tool_outputs(chunks).values()
    assert reported.startswith("save_messages() cannot be called from inside an active turn")
    assert chunks[-1].type == "finish"
    assert transcript(a.get_messages()) == [("user", "start"), ("assistant", "A done")]  # "pong" never reached A
    b = await a.sub_agent(CycleB, "b")
    [b_reply] = [m for m in await b.get_messages() if m.role == "assistant"]
    assert b_reply.tool_parts[0].error_text == reported
    assert b_reply.text == "B done"


class RunCycleA(CycleA):
    partner = RunCycleB


async def test_run_as_tool_from_inside_the_agents_own_turn_is_a_nested_turn_error_not_a_hang() -> None:
    model = ScriptedModel([tool_call("ask_b", {"question": "ping"}), text("A done")])
    a = RunCycleA("a2", model=model, store=ta.MemoryStore())

    chunks = await asyncio.wait_for(drain(a.chat("start")), WAIT_S)

    [reported] = tool_outputs(chunks).values()
    assert reported.startswith("run_as_tool() cannot be called from inside an active turn")
    assert chunks[-1].type == "finish"
    assert a._engine.agent_runs == {}  # no run was started, so none is left waiting for A's slot
    assert await a.store.get_kv("agent-tool-run:agent-tool:loop") is None
    assert transcript(a.get_messages()) == [("user", "start"), ("assistant", "A done")]


# ---------------------------------------------------------------------------------------------- emit


class Emitter(ta.Think):
    """Emits a transient chunk before each step, and one more after the stream has ended."""

    model = ScriptedModel([text("first"), text("second")])

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.emit(DataChunk(type="data-step", data={"step": ctx.step_number}, transient=True))
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        # After the stream's last chunk: dropped, never carried into the next turn's stream.
        self.emit(DataChunk(type="data-late", data={"request_id": result.request_id}, transient=True))


async def test_emit_goes_out_before_the_next_chunk_and_a_late_emit_never_leaks() -> None:
    agent = Emitter("e1", store=ta.MemoryStore())
    agent.emit(DataChunk(type="data-idle", data={}, transient=True))  # outside a turn: dropped

    first = await drain(agent.chat("one"))
    second = await drain(agent.chat("two"))

    for chunks in (first, second):
        assert chunk_types(chunks) == [
            "start",
            "data-step",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish",
        ]
        assert chunks[1].data == {"step": 0}
    assert [[p.type for p in m.parts] for m in await agent.store.load_messages()] == [
        ["text"],
        ["step-start", "text"],
        ["text"],
        ["step-start", "text"],
    ]
    assert transcript(agent.get_messages()) == [
        ("user", "one"),
        ("assistant", "first"),
        ("user", "two"),
        ("assistant", "second"),
    ]
