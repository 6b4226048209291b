"""One ordered stream per turn: the turn's chunks, chunks hooks and tools emit, and forwarded child chunks
reach the caller in the order they happened (Ray: tests/ray/test_ordered_stream.py)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import drain

import think_actors as ta
from think_actors.chunks import DataChunk
from think_actors.testing import ScriptedModel, step, text, tool_call


def shape(chunks: list[Any]) -> list[str]:
    """Chunk types, with an agent-tool event's kind and a data chunk's payload, to read orders at a glance."""
    out = []
    for c in chunks:
        if c.type == "agent-tool-event":
            out.append(f"child:{c.parent_tool_call_id}:{c.kind}" + (f":{c.chunk.type}" if c.chunk else ""))
        elif c.type.startswith("data-"):
            out.append(f"{c.type}:{next(iter(c.data.values()))}")
        elif c.type.startswith("tool-output"):
            out.append(f"{c.type}:{c.tool_call_id}")
        else:
            out.append(c.type)
    return out


class QuickChild(ta.Think):
    model = ScriptedModel([text("hi")])


class Lead(ta.Think):
    tools = (ta.agent_tool(QuickChild, description="Ask the child"),)

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> None:
        self.emit(DataChunk(type="data-before", data={"call": ctx.tool_call_id}, transient=True))

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.emit(DataChunk(type="data-after", data={"call": ctx.tool_call_id}, transient=True))

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.emit({"type": "data-step", "data": {"step": ctx.step_number}, "transient": True})


CHILD = ["started", "chunk:start", "chunk:start-step", "chunk:text-start", "chunk:text-delta", "chunk:text-end"]
CHILD += ["chunk:finish-step", "chunk:finish", "finished"]


def child_run(call: str) -> list[str]:
    return [f"child:{call}:{kind}" for kind in CHILD]


async def test_a_quick_childs_chunks_and_the_call_output_come_before_after_tool_call_emits() -> None:
    QuickChild.model = ScriptedModel([text("hi")])
    model = ScriptedModel([tool_call("quick_child", {"input": "hello"}, id="c1"), text("done")])
    lead = Lead(model=model, store=ta.MemoryStore())

    chunks = await drain(lead.chat("go"))

    assert shape(chunks) == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "tool-input-available",
        "data-before:c1",
        *child_run("c1"),
        "tool-output-available:c1",
        "data-after:c1",
        "data-step:0",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "data-step:1",
        "finish-step",
        "finish",
    ]


async def test_concurrent_calls_keep_each_calls_chunks_in_order() -> None:
    QuickChild.model = ScriptedModel([text("hi")])
    model = ScriptedModel(
        [
            step(
                tool_call("quick_child", {"input": "a"}, id="a"),
                tool_call("note", {"text": "b"}, id="b"),
            ),
            text("done"),
        ]
    )

    @ta.tool
    async def note(text: str, context: ta.ToolContext) -> str:
        """Take a note, reporting progress."""
        context.agent.emit(DataChunk(type="data-progress", data={"n": 1}, transient=True))
        assert context.emit is not None
        context.emit(DataChunk(type="data-progress", data={"n": 2}, transient=True))
        return f"noted {text}"

    lead = Lead(model=model, tools=[*Lead.tools, note], store=ta.MemoryStore())
    chunks = await drain(lead.chat("go"))
    got = shape(chunks)

    def of_call(call: str, extra: tuple[str, ...]) -> list[str]:
        return [s for s in got if f":{call}" in s or s in extra]

    assert of_call("a", ()) == ["data-before:a", *child_run("a"), "tool-output-available:a", "data-after:a"]
    assert of_call("b", ("data-progress:1", "data-progress:2")) == [
        "data-before:b",
        "data-progress:1",
        "data-progress:2",
        "tool-output-available:b",
        "data-after:b",
    ]
    step_end = got.index("finish-step")
    assert got[step_end - 1] == "data-step:0"
    assert max(got.index("data-after:a"), got.index("data-after:b")) < step_end


async def test_emit_refuses_what_is_not_a_chunk_and_drops_outside_a_turn() -> None:
    agent = ta.Think(model=ScriptedModel(), store=ta.MemoryStore())
    with pytest.raises(ta.ConfigurationError, match="emit needs a UI chunk"):
        agent.emit(42)
    agent.emit(DataChunk(type="data-x", data=1, transient=True))  # no turn: dropped, no error
    assert agent._engine.emitted == []
