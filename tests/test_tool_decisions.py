"""Tool-call hooks (Think's hooks.test.ts): what before_tool_call / after_tool_call see, how each
ToolCallDecision gates execute, streaming tools, and the tool failures the model sees instead of a crashed turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import TOOL_THEN_TEXT_CHUNKS, TOOL_THEN_TEXT_HOOKS, HookedAgent, RecordingAgent, chunk_types, drain
from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call


def recording_lookup() -> tuple[ta.Tool, list[str]]:
    """A weather tool and the list of cities it was executed with."""
    executed: list[str] = []

    @ta.tool
    async def lookup(city: str, units: str = "C") -> dict[str, Any]:
        """Look up the weather in a city."""
        executed.append(city)
        return {"city": city, "forecast": "sunny", "units": units}

    return lookup, executed


def tool_outputs(chunks: list[Any]) -> list[tuple[str, Any, bool | None]]:
    return [(c.tool_call_id, c.output, c.preliminary) for c in chunks if c.type == "tool-output-available"]


def tool_messages(request: ta.ModelRequest) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] == "tool"]


# ------------------------------------------------------------------ what the tool-call hooks see


async def test_before_tool_call_receives_tool_name_and_validated_input(scripted: ScriptedModel) -> None:
    lookup, _ = recording_lookup()
    scripted.extend([text("hm"), tool_call("lookup", {"city": "Oslo"}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    first = await agent.save_messages("warm up")
    second = await agent.save_messages("weather in Oslo?")
    assert first.request_id != second.request_id
    [ctx] = agent.contexts("before_tool_call")
    assert ctx == ta.ToolCallContext(
        request_id=second.request_id,
        tool_call_id="c1",
        tool_name="lookup",
        input={"city": "Oslo", "units": "C"},  # validated: defaults filled in, as the tool will get it
        step_number=0,
        messages=[
            {"role": "user", "content": "warm up"},
            {"role": "assistant", "content": "hm"},
            {"role": "user", "content": "weather in Oslo?"},
        ],
    )
    scripted.assert_complete()


async def test_after_tool_call_receives_typed_output_success_and_duration(scripted: ScriptedModel) -> None:
    lookup, _ = recording_lookup()
    scripted.extend([text("checking", chunk_size=3), tool_call("lookup", {"city": "Oslo"}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    await agent.save_messages("warm up")
    result = await agent.save_messages("weather in Oslo?")
    [ctx] = agent.contexts("after_tool_call")
    assert (ctx.request_id, ctx.tool_call_id, ctx.tool_name, ctx.input, ctx.step_number) == (
        result.request_id,
        "c1",
        "lookup",
        {"city": "Oslo"},
        0,
    )
    assert (ctx.success, ctx.output, ctx.error) == (True, {"city": "Oslo", "forecast": "sunny", "units": "C"}, None)
    assert ctx.duration_ms >= 0
    scripted.assert_complete()


async def test_tool_hooks_report_the_step_number(scripted: ScriptedModel) -> None:
    lookup, _ = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}), tool_call("lookup", {"city": "Rome"}), text("done")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    await agent.save_messages("two cities")
    assert [(c.step_number, c.input) for c in agent.contexts("before_tool_call")] == [
        (0, {"city": "Oslo", "units": "C"}),
        (1, {"city": "Rome", "units": "C"}),
    ]
    assert [(c.step_number, c.input) for c in agent.contexts("after_tool_call")] == [
        (0, {"city": "Oslo"}),
        (1, {"city": "Rome"}),
    ]
    scripted.assert_complete()


# ------------------------------------------------------------------ ToolCallDecision


@pytest.mark.parametrize("decision", [None, ta.Allow()], ids=["none", "allow"])
async def test_go_ahead_runs_execute_once_with_the_original_input(
    scripted: ScriptedModel, decision: ta.Allow | None
) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(model=scripted, tools=[lookup], store=ta.MemoryStore(), decide=lambda ctx: decision)
    chunks = await drain(agent.chat("weather?"))
    assert executed == ["Oslo"]
    assert tool_outputs(chunks) == [("c1", {"city": "Oslo", "forecast": "sunny", "units": "C"}, None)]
    scripted.assert_complete()


async def test_allow_with_input_runs_execute_with_the_substituted_input(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted,
        tools=[lookup],
        store=ta.MemoryStore(),
        decide=lambda ctx: ta.Allow(input={"city": "Bergen", "units": "F"}),
    )
    chunks = await drain(agent.chat("weather?"))
    assert executed == ["Bergen"]
    bergen = {"city": "Bergen", "forecast": "sunny", "units": "F"}
    assert tool_outputs(chunks) == [("c1", bergen, None)]
    [after] = agent.contexts("after_tool_call")
    assert (after.input, after.output) == ({"city": "Oslo"}, bergen)  # the model's input, the tool's output
    [part] = agent.get_messages()[-1].tool_parts
    assert (part.input, part.output) == ({"city": "Oslo"}, bergen)
    scripted.assert_complete()


async def test_block_skips_execute_and_returns_the_reason(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("ok")])
    agent = HookedAgent(
        model=scripted,
        tools=[lookup],
        store=ta.MemoryStore(),
        decide=lambda ctx: ta.Block("Weather lookups are disabled."),
    )
    chunks = await drain(agent.chat("weather?"))
    assert executed == []
    assert tool_outputs(chunks) == [("c1", "Weather lookups are disabled.", None)]
    [after] = agent.contexts("after_tool_call")
    assert (after.success, after.output, after.error) == (True, "Weather lookups are disabled.", None)
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "Weather lookups are disabled."}
    ]
    scripted.assert_complete()


async def test_block_without_reason_returns_the_default_sentence(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("ok")])
    agent = HookedAgent(model=scripted, tools=[lookup], store=ta.MemoryStore(), decide=lambda ctx: ta.Block())
    chunks = await drain(agent.chat("weather?"))
    assert executed == []
    assert tool_outputs(chunks) == [("c1", 'Tool "lookup" was blocked by before_tool_call.', None)]
    scripted.assert_complete()


async def test_substitute_skips_execute_and_returns_the_output(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("ok")])
    agent = HookedAgent(
        model=scripted,
        tools=[lookup],
        store=ta.MemoryStore(),
        decide=lambda ctx: ta.Substitute({"city": "Oslo", "forecast": "cached"}),
    )
    chunks = await drain(agent.chat("weather?"))
    assert executed == []
    assert tool_outputs(chunks) == [("c1", {"city": "Oslo", "forecast": "cached"}, None)]
    [after] = agent.contexts("after_tool_call")
    assert (after.success, after.output) == (True, {"city": "Oslo", "forecast": "cached"})
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": '{"city": "Oslo", "forecast": "cached"}'}
    ]
    scripted.assert_complete()


async def test_async_decision_is_awaited(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("ok")])

    async def decide(ctx: ta.ToolCallContext) -> ta.ToolCallDecision:
        await asyncio.sleep(0)  # a real suspension, so an un-awaited decision would be a coroutine
        return ta.Substitute(f"no lookups for {ctx.input['city']}")

    agent = HookedAgent(model=scripted, tools=[lookup], store=ta.MemoryStore(), decide=decide)
    chunks = await drain(agent.chat("weather?"))
    assert executed == []
    assert tool_outputs(chunks) == [("c1", "no lookups for Oslo", None)]
    scripted.assert_complete()


async def test_raising_before_tool_call_becomes_a_tool_error_and_the_turn_goes_on(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("Sorry, I cannot look that up.")])

    def decide(ctx: ta.ToolCallContext) -> None:
        raise PermissionError("lookup not permitted")

    agent = HookedAgent(model=scripted, tools=[lookup], store=ta.MemoryStore(), decide=decide)
    chunks = await drain(agent.chat("weather?"))
    assert executed == []
    assert [(c.tool_call_id, c.error_text) for c in chunks if c.type == "tool-output-error"] == [
        ("c1", "lookup not permitted")
    ]
    [after] = agent.contexts("after_tool_call")
    assert (after.success, after.output, after.error) == (False, None, "lookup not permitted")
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "Error: lookup not permitted"}
    ]
    assert agent.hooks_called(skip={"on_chunk"}) == TOOL_THEN_TEXT_HOOKS
    assert agent.contexts("on_chat_response")[0].status == "completed"
    assert agent.get_messages()[-1].text == "Sorry, I cannot look that up."
    scripted.assert_complete()


# ------------------------------------------------------------------ streaming tools


@ta.tool
async def progress(steps: int) -> AsyncIterator[dict[str, int]]:
    """Report progress, one yield per step."""
    for done in range(1, steps + 1):
        yield {"done": done, "of": steps}


async def _numbers(count: int) -> AsyncIterator[int]:
    for n in range(1, count + 1):
        yield n


@ta.tool
async def awaited_iterable(count: int) -> Any:
    """A coroutine that returns an async iterable (not a generator function itself)."""
    return _numbers(count)


@ta.tool
def plain_iterable(count: int) -> Any:
    """A plain function that returns an async iterable."""
    return _numbers(count)


async def test_async_generator_tool_streams_preliminary_outputs(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("progress", {"steps": 3}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[progress], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    assert tool_outputs(chunks) == [
        ("c1", {"done": 1, "of": 3}, True),
        ("c1", {"done": 2, "of": 3}, True),
        ("c1", {"done": 3, "of": 3}, True),
        ("c1", {"done": 3, "of": 3}, None),
    ]
    assert agent.contexts("after_tool_call")[0].output == {"done": 3, "of": 3}
    [part] = agent.get_messages()[-1].tool_parts
    assert (part.state, part.output, part.preliminary) == ("output-available", {"done": 3, "of": 3}, None)
    scripted.assert_complete()


@pytest.mark.parametrize("name", ["awaited_iterable", "plain_iterable"])
async def test_returned_async_iterable_collapses_to_its_last_value(scripted: ScriptedModel, name: str) -> None:
    scripted.extend([tool_call(name, {"count": 3}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[awaited_iterable, plain_iterable], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    assert tool_outputs(chunks) == [("c1", 3, None)]
    assert agent.contexts("after_tool_call")[0].output == 3
    assert tool_messages(scripted.requests[1]) == [{"role": "tool", "tool_call_id": "c1", "content": "3"}]
    scripted.assert_complete()


async def test_scalar_tool_emits_no_preliminary_output(scripted: ScriptedModel) -> None:
    lookup, _ = recording_lookup()
    scripted.extend([tool_call("lookup", {"city": "Oslo"}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    assert chunk_types(chunks) == TOOL_THEN_TEXT_CHUNKS
    assert tool_outputs(chunks) == [("c1", {"city": "Oslo", "forecast": "sunny", "units": "C"}, None)]
    scripted.assert_complete()


@pytest.mark.parametrize(
    ("decision", "output"),
    [(ta.Block("no progress"), "no progress"), (ta.Substitute({"done": 0, "of": 0}), {"done": 0, "of": 0})],
    ids=["block", "substitute"],
)
async def test_short_circuited_streaming_tool_shows_one_preliminary_then_final(
    scripted: ScriptedModel, decision: ta.ToolCallDecision, output: Any
) -> None:
    scripted.extend([tool_call("progress", {"steps": 3}, id="c1"), text("done")])
    agent = HookedAgent(model=scripted, tools=[progress], store=ta.MemoryStore(), decide=lambda ctx: decision)
    chunks = await drain(agent.chat("go"))
    assert tool_outputs(chunks) == [("c1", output, True), ("c1", output, None)]
    scripted.assert_complete()


class Reading(BaseModel):
    celsius: int


@ta.tool
async def thermometer(samples: int) -> AsyncIterator[Reading]:
    """Stream temperature readings as pydantic models."""
    for celsius in range(samples):
        yield Reading(celsius=celsius)


async def test_streamed_and_substituted_outputs_are_made_json_safe(scripted: ScriptedModel) -> None:
    scripted.extend(
        [
            step(tool_call("thermometer", {"samples": 2}, id="c1"), tool_call("thermometer", {"samples": 1}, id="c2")),
            text("done"),
        ]
    )
    agent = HookedAgent(
        model=scripted,
        tools=[thermometer],
        store=ta.MemoryStore(),
        decide=lambda ctx: ta.Substitute(Reading(celsius=-5)) if ctx.tool_call_id == "c2" else None,
    )
    chunks = await drain(agent.chat("temperature?"))
    assert [o for o in tool_outputs(chunks) if o[0] == "c1"] == [
        ("c1", {"celsius": 0}, True),
        ("c1", {"celsius": 1}, True),
        ("c1", {"celsius": 1}, None),
    ]
    assert [o for o in tool_outputs(chunks) if o[0] == "c2"] == [
        ("c2", {"celsius": -5}, True),
        ("c2", {"celsius": -5}, None),
    ]
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": '{"celsius": 1}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"celsius": -5}'},
    ]
    assert [p.output for p in agent.get_messages()[-1].tool_parts] == [{"celsius": 1}, {"celsius": -5}]
    scripted.assert_complete()


# ------------------------------------------------------------------ tool failures the model sees


@ta.tool
async def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@ta.tool
async def explode_silently() -> str:
    """Fails with an exception that has no message."""
    raise KeyError


async def test_tool_raising_becomes_an_error_result(scripted: ScriptedModel) -> None:
    scripted.extend(
        [
            step(tool_call("explode", {"reason": "disk full"}, id="c1"), tool_call("explode_silently", {}, id="c2")),
            text("Both failed."),
        ]
    )
    agent = RecordingAgent(model=scripted, tools=[explode, explode_silently], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    errors = sorted((c.tool_call_id, c.error_text) for c in chunks if c.type == "tool-output-error")
    assert errors == [("c1", "disk full"), ("c2", "KeyError")]
    assert [
        (c.tool_call_id, c.success, c.error)
        for c in sorted(agent.contexts("after_tool_call"), key=lambda c: c.tool_call_id)
    ] == [("c1", False, "disk full"), ("c2", False, "KeyError")]
    assert [(r.tool_call_id, r.success, r.error) for r in agent.contexts("on_step_finish")[0].tool_results] == [
        ("c1", False, "disk full"),
        ("c2", False, "KeyError"),
    ]
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "Error: disk full"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: KeyError"},
    ]
    message = agent.get_messages()[-1]
    assert [(p.tool_call_id, p.state, p.error_text) for p in message.tool_parts] == [
        ("c1", "output-error", "disk full"),
        ("c2", "output-error", "KeyError"),
    ]
    assert message.text == "Both failed."
    scripted.assert_complete()


async def test_unknown_tool_is_an_input_error_the_model_sees(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("teleport", {"to": "Mars"}, id="c1"), text("I cannot teleport.")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    error = "Model tried to call unavailable tool 'teleport'. Available tools: lookup."
    assert [
        (c.type, c.tool_call_id, c.tool_name, c.input, c.error_text) for c in chunks if c.type == "tool-input-error"
    ] == [("tool-input-error", "c1", "teleport", {"to": "Mars"}, error)]
    assert "tool-output-available" not in chunk_types(chunks)
    assert agent.hooks_called(skip={"on_chunk"}) == [
        "before_turn",
        "before_step",
        "on_step_finish",
        "before_step",
        "on_step_finish",
        "on_chat_response",
    ]
    assert tool_messages(scripted.requests[1]) == [{"role": "tool", "tool_call_id": "c1", "content": f"Error: {error}"}]
    [part] = agent.get_messages()[-1].tool_parts
    assert (part.type, part.state, part.error_text) == ("tool-teleport", "output-error", error)
    assert executed == []
    scripted.assert_complete()


async def test_invalid_json_arguments_are_an_input_error_the_model_sees(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", '{"a": ', id="c1"), text("Let me retry.")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    error = "Invalid JSON in tool call arguments: Expecting value: line 1 column 7 (char 6)"
    assert [(c.tool_call_id, c.input, c.error_text) for c in chunks if c.type == "tool-input-error"] == [
        ("c1", '{"a": ', error)
    ]
    assert tool_messages(scripted.requests[1]) == [{"role": "tool", "tool_call_id": "c1", "content": f"Error: {error}"}]
    assert executed == []
    assert agent.contexts("before_tool_call") == []
    scripted.assert_complete()


async def test_schema_invalid_input_is_an_input_error_the_model_sees(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    scripted.extend([tool_call("lookup", {"town": "Oslo"}, id="c1"), text("Let me retry.")])
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    chunks = await drain(agent.chat("go"))
    error = "Invalid input for tool 'lookup': city: Field required; town: Extra inputs are not permitted"
    assert [(c.tool_call_id, c.input, c.error_text) for c in chunks if c.type == "tool-input-error"] == [
        ("c1", {"town": "Oslo"}, error)
    ]
    assert tool_messages(scripted.requests[1]) == [{"role": "tool", "tool_call_id": "c1", "content": f"Error: {error}"}]
    [part] = agent.get_messages()[-1].tool_parts
    assert (part.state, part.input, part.error_text) == ("output-error", {"town": "Oslo"}, error)
    assert executed == []
    assert agent.contexts("on_step_finish")[0].tool_results == ()
    scripted.assert_complete()


async def test_repair_tool_call_repairs_invalid_input_before_execution(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()
    seen: list[tuple[str, str, Any, str, str]] = []

    async def repair(ctx: Any) -> dict[str, Any] | None:
        seen.append((ctx.tool_call_id, ctx.tool_name, ctx.input, ctx.raw_arguments, ctx.error))
        return {"city": ctx.input["town"]}

    scripted.extend([tool_call("lookup", {"town": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted, tools=[lookup], store=ta.MemoryStore(), turn_config=ta.TurnConfig(repair_tool_call=repair)
    )
    chunks = await drain(agent.chat("go"))
    assert seen == [
        (
            "c1",
            "lookup",
            {"town": "Oslo"},
            '{"town": "Oslo"}',
            "Invalid input for tool 'lookup': city: Field required; town: Extra inputs are not permitted",
        )
    ]
    assert executed == ["Oslo"]
    assert "tool-input-error" not in chunk_types(chunks)
    assert [(c.tool_call_id, c.input) for c in chunks if c.type == "tool-input-available"] == [("c1", {"city": "Oslo"})]
    assert agent.contexts("before_tool_call")[0].input == {"city": "Oslo", "units": "C"}
    scripted.assert_complete()


async def test_repair_tool_call_result_is_revalidated(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()

    async def bad_repair(ctx: Any) -> dict[str, Any]:
        return {"city": 42}

    scripted.extend([tool_call("lookup", {"town": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted, tools=[lookup], store=ta.MemoryStore(), turn_config=ta.TurnConfig(repair_tool_call=bad_repair)
    )
    chunks = await drain(agent.chat("go"))
    assert [(c.input, c.error_text) for c in chunks if c.type == "tool-input-error"] == [
        ({"city": 42}, "Invalid input for tool 'lookup': city: Input should be a valid string")
    ]
    assert executed == []
    scripted.assert_complete()


async def test_repair_tool_call_can_rename_an_unknown_tool(scripted: ScriptedModel) -> None:
    lookup, executed = recording_lookup()

    async def rename(ctx: Any) -> dict[str, Any] | None:
        return {"tool_name": "lookup", "input": ctx.input} if ctx.tool_name == "weather" else None

    scripted.extend([tool_call("weather", {"city": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted, tools=[lookup], store=ta.MemoryStore(), turn_config=ta.TurnConfig(repair_tool_call=rename)
    )
    chunks = await drain(agent.chat("go"))
    assert executed == ["Oslo"]
    assert [(c.tool_call_id, c.tool_name) for c in chunks if c.type == "tool-input-available"] == [("c1", "lookup")]
    assert agent.contexts("before_tool_call")[0].tool_name == "lookup"
    scripted.assert_complete()


# ------------------------------------------------------------------ the agent from inside a tool


class Notebook(RecordingAgent):
    @ta.tool
    async def note(self, text: str) -> dict[str, Any]:
        """Write a note into the conversation."""
        await self.add_messages(ta.user_message(f"note: {text}", id="note-1"))
        return {"noted": [m.id for m in self.get_messages()]}

    @ta.tool
    async def nested(self, text: str) -> str:
        """Start a blocking turn from inside a tool (not allowed)."""
        await self.save_messages(text)
        return "unreachable"


async def test_add_messages_from_inside_a_tool_runs_mid_turn_and_persists(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("note", {"text": "remember milk"}, id="c1"), text("Noted.")])
    store = ta.MemoryStore()
    agent = Notebook(model=scripted, store=store)
    result = await asyncio.wait_for(agent.save_messages(ta.user_message("take a note", id="u1")), timeout=5)
    assert result.status == "completed"
    assert result.message is not None
    # The tool saw the new message immediately, before the turn's reply was persisted.
    assert agent.contexts("after_tool_call")[0].output == {"noted": ["u1", "note-1"]}
    assert [m.id for m in await store.load_messages()] == ["u1", "note-1", result.message.id]
    assert (await store.load_messages())[1].text == "note: remember milk"
    scripted.assert_complete()


async def test_save_messages_from_inside_a_tool_is_a_nested_turn_error(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("nested", {"text": "again"}, id="c1"), text("I cannot do that.")])
    agent = Notebook(model=scripted, store=ta.MemoryStore())
    result = await asyncio.wait_for(agent.save_messages("go"), timeout=5)
    [after] = agent.contexts("after_tool_call")
    assert after.success is False
    assert after.error is not None
    assert after.error.startswith("save_messages() cannot be called from inside an active turn")
    assert result.status == "completed"
    assert [m.role for m in agent.get_messages()] == ["user", "assistant"]
    scripted.assert_complete()


# ------------------------------------------------------------------ parallel calls


async def test_parallel_tool_calls_of_one_step_run_concurrently(scripted: ScriptedModel) -> None:
    ping_ran = asyncio.Event()
    pong_ran = asyncio.Event()

    @ta.tool
    async def ping() -> str:
        """Wait for pong."""
        ping_ran.set()
        await asyncio.wait_for(pong_ran.wait(), timeout=2)  # run one after the other, this times out
        return "ping done"

    @ta.tool
    async def pong() -> str:
        """Wait for ping."""
        pong_ran.set()
        await asyncio.wait_for(ping_ran.wait(), timeout=2)
        return "pong done"

    scripted.extend([step(tool_call("ping", {}, id="c1"), tool_call("pong", {}, id="c2")), text("both done")])
    agent = RecordingAgent(model=scripted, tools=[ping, pong], store=ta.MemoryStore())
    result = await asyncio.wait_for(agent.save_messages("go"), timeout=10)
    assert result.status == "completed"
    assert [(r.tool_call_id, r.output, r.error) for r in agent.contexts("on_step_finish")[0].tool_results] == [
        ("c1", "ping done", None),
        ("c2", "pong done", None),
    ]
    assert [c.tool_call_id for c in agent.contexts("before_tool_call")] == ["c1", "c2"]
    assert tool_messages(scripted.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "ping done"},
        {"role": "tool", "tool_call_id": "c2", "content": "pong done"},
    ]
    scripted.assert_complete()


async def test_a_tool_call_id_the_provider_repeats_gets_a_unique_one(scripted: ScriptedModel) -> None:
    lookup, _ = recording_lookup()
    scripted.extend(
        [
            tool_call("lookup", {"city": "Oslo"}, id="call_0"),
            text("one"),
            tool_call("lookup", {"city": "Rome"}, id="call_0"),
            text("two"),
        ]
    )
    agent = RecordingAgent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    await agent.save_messages("first")
    await agent.save_messages("second")
    ids = [p.tool_call_id for m in agent.get_messages() for p in m.tool_parts]
    assert ids[0] == "call_0" and ids[1].startswith("call_0-") and len(set(ids)) == 2
    outputs = [p.output["city"] for m in agent.get_messages() for p in m.tool_parts]
    assert outputs == ["Oslo", "Rome"]  # the second result did not land on the first call
    scripted.assert_complete()
