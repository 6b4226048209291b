"""Port of ``packages/think/src/tests/hooks.test.ts``: every lifecycle hook, tool-call decisions, streaming tools,
``max_steps`` / ``stop_when``, dynamic context blocks and ``TurnConfig`` overrides.

Each test names the reference test it ports (file:line "name"). The reference's test agents are mirrored here:
``ThinkTestAgent`` answers with text, ``ThinkToolsTestAgent`` / ``LoopToolTestAgent`` call ``echo`` once and then
answer. Left out (see README.md): actions and the action ledger, extension observation hooks, host-bridge methods.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

import think_actors as ta
from think_actors.models import ModelEvent, TextDelta
from think_actors.testing import ScriptedModel, reasoning, step, text, tool_call

from .conftest import (
    EchoTool,
    Recorder,
    chat_request,
    skip_greeting,
    texts,
    types,
    until_done,
    wire_chunk_types,
    wire_user,
)

SRC = "packages/think/src/tests/hooks.test.ts"


def echo_then(answer: str = "done", message: str = "hello") -> list[Any]:
    return [tool_call("echo", {"message": message}, id="tc1"), text(answer)]


def tools_agent(mode: str = "default", *, steps: list[Any] | None = None, **options: Any) -> tuple[Recorder, EchoTool]:
    echo = EchoTool(mode, needs_approval=options.pop("needs_approval", False))
    agent = Recorder(model=ScriptedModel(steps or echo_then()), tools=[echo.tool], store=ta.MemoryStore(), **options)
    return agent, echo


# -- beforeTurn ---------------------------------------------------------------------------------------------------


async def test_before_turn_receives_the_assembled_context() -> None:
    """hooks.test.ts:118 "receives correct TurnContext with system prompt and tools".

    The reference checks its own default prompt's wording; think_actors' default prompt is the documented one
    plus a sentence naming the turn's tools (README: where Think's code and docs differ, the docs win), so this
    asserts the instructions, the tool names in the prompt and in ``ctx.tools``, and ``continuation``.
    """
    agent, _ = tools_agent(instructions="You are terse.")
    await agent.save_messages("Hello")

    [ctx] = agent.seen("before_turn")
    assert ctx.system.startswith("You are terse.")
    assert "echo" in ctx.system
    assert sorted(ctx.tools) == ["echo"]
    assert ctx.continuation is False
    assert [m["role"] for m in ctx.messages] == ["user"]


async def test_before_turn_fires_on_every_turn() -> None:
    """hooks.test.ts:132 "fires on every turn"."""
    agent = Recorder(model=ScriptedModel([text("one"), text("two")]), store=ta.MemoryStore())
    await agent.save_messages("First")
    await agent.save_messages("Second")
    assert [ctx.messages[-1]["content"] for ctx in agent.seen("before_turn")] == ["First", "Second"]


async def test_before_turn_fires_from_the_chat_path() -> None:
    """hooks.test.ts:141 "fires from chat() sub-agent path" and :1513 "beforeTurn fires from chat() RPC path"."""
    agent = Recorder(model=ScriptedModel([text("hi")]), store=ta.MemoryStore())
    await agent.chat("Via chat()").collect()
    [ctx] = agent.seen("before_turn")
    assert (ctx.continuation, ctx.trigger) == (False, "rpc")


async def test_before_turn_captures_the_continuation_flag_on_the_programmatic_path() -> None:
    """hooks.test.ts:150 "captures continuation flag from programmatic path" (and :1521 "beforeTurn fires from
    saveMessages path"); the continuation turn's flag is the other half of the same capture."""
    agent = Recorder(model=ScriptedModel([text("first"), text("more")]), store=ta.MemoryStore())
    await agent.save_messages("First message")
    await agent.continue_last_turn()
    assert [ctx.continuation for ctx in agent.seen("before_turn")] == [False, True]


async def test_every_entry_point_fires_before_turn_and_on_chat_response() -> None:
    """Seed (``/work/shared/seeds``): hooks fire on every turn whatever its entry point — chat, saveMessages,
    submitMessages, continueLastTurn and the auto-continuation after tool results (hooks.test.ts:1512
    "hook convergence" checks two of them)."""
    client = ta.ClientToolSchema(name="getLocation")
    model = ScriptedModel(
        [text("a"), text("b"), text("c"), text("d"), tool_call("getLocation", {}, id="loc"), text("Paris")]
    )
    agent = Recorder(model=model, store=ta.MemoryStore())
    await agent.chat("one").collect()
    await agent.save_messages("two")
    sub = await agent.submit_messages("three")
    await agent.wait_for_submission(sub.submission_id, timeout_s=5)
    await agent.continue_last_turn()
    await agent.chat("where am I?", client_tools=[client]).collect()
    await agent.add_tool_result("loc", {"city": "Paris"}, auto_continue=True)
    await agent.wait_until_stable(timeout_s=5)

    assert [ctx.trigger for ctx in agent.seen("before_turn")] == [
        "rpc",
        "programmatic",
        "submission",
        "programmatic",
        "rpc",
        "auto-continuation",
    ]
    assert [(r.status, r.continuation) for r in agent.seen("on_chat_response")] == [
        ("completed", False),
        ("completed", False),
        ("completed", False),
        ("completed", True),
        ("completed", False),
        ("completed", True),
    ]


# -- beforeStep ---------------------------------------------------------------------------------------------------


async def test_before_step_receives_the_step_context() -> None:
    """hooks.test.ts:162 "receives the AI SDK prepareStep context before each step"."""
    agent = Recorder(model=ScriptedModel([text("hi")], model_id="mock-model"), store=ta.MemoryStore())
    await agent.save_messages("Hello")
    [ctx] = agent.seen("before_step")
    assert (ctx.step_number, ctx.steps) == (0, ())
    assert [m["role"] for m in ctx.messages] == ["user"]
    assert ctx.model.model_id == "mock-model"


async def test_before_step_can_override_the_model_for_a_step() -> None:
    """hooks.test.ts:174 "can override the model for a step"."""
    override = ScriptedModel([text("Overridden from beforeStep")])
    agent = Recorder(model=ScriptedModel(), store=ta.MemoryStore())
    agent.step_config = lambda ctx: ta.StepConfig(model=override)
    result = await agent.save_messages("Hello")
    assert result.message is not None and result.message.text == "Overridden from beforeStep"
    assert [s.text for s in agent.seen("on_step_finish")] == ["Overridden from beforeStep"]
    override.assert_complete()


async def test_an_async_before_step_is_awaited_before_the_step_runs() -> None:
    """hooks.test.ts:184 "awaits async beforeStep hooks before continuing the step"."""
    override = ScriptedModel([text("Async override applied")])

    class Slow(Recorder):
        async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
            await super().before_step(ctx)
            later: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(later.set_result, None)
            await later  # resolves only after the loop has run other callbacks
            return ta.StepConfig(model=override)

    agent = Slow(model=ScriptedModel(), store=ta.MemoryStore())
    result = await agent.save_messages("Hello async")
    assert result.message is not None and result.message.text == "Async override applied"


async def test_before_step_fires_once_per_step_with_the_growing_previous_steps() -> None:
    """hooks.test.ts:197 "fires once per step across a tool-call loop with growing previous-step state"."""
    agent, _ = tools_agent()
    await agent.save_messages("Run a tool")
    contexts = agent.seen("before_step")
    assert [(c.step_number, len(c.steps), sum(len(s.tool_results) for s in c.steps)) for c in contexts] == [
        (0, 0, 0),
        (1, 1, 1),
    ]


# -- onStepFinish ---------------------------------------------------------------------------------------------------


async def test_on_step_finish_fires_after_the_step_with_its_finish_reason() -> None:
    """hooks.test.ts:222 "fires after step completes with correct data"."""
    agent = Recorder(model=ScriptedModel([text("hi")]), store=ta.MemoryStore())
    await agent.save_messages("Hello")
    assert [s.finish_reason for s in agent.seen("on_step_finish")] == ["stop"]
    assert agent.hooks() == ["before_turn", "before_step", "on_step_finish", "on_chat_response"]


async def test_on_step_finish_gets_the_whole_step_record_text_and_usage() -> None:
    """hooks.test.ts:231 "forwards the AI SDK's full StepResult — text and usage"."""
    usage = ta.Usage(input_tokens=10, output_tokens=5, total_tokens=15)
    agent = Recorder(
        model=ScriptedModel([step(text("Hello from the assistant!"), usage=usage)]), store=ta.MemoryStore()
    )
    await agent.save_messages("Hello")
    [record] = agent.seen("on_step_finish")
    assert record.text == "Hello from the assistant!"
    assert (record.usage.input_tokens, record.usage.output_tokens) == (10, 5)


async def test_on_step_finish_gets_the_tool_calls_and_results_of_the_step() -> None:
    """hooks.test.ts:247 "forwards typed toolCalls/toolResults arrays"."""
    agent, _ = tools_agent(steps=echo_then(message="ping"))
    await agent.save_messages("Use echo")
    records = agent.seen("on_step_finish")
    assert [[(c.tool_name, c.input) for c in r.tool_calls] for r in records] == [[("echo", {"message": "ping"})], []]
    assert [[(t.tool_call_id, t.output, t.success) for t in r.tool_results] for r in records] == [
        [("tc1", "echo: ping", True)],
        [],
    ]


# -- beforeToolCall / afterToolCall ---------------------------------------------------------------------------------


async def test_before_tool_call_receives_the_tool_name_and_its_input() -> None:
    """hooks.test.ts:265 "beforeToolCall receives toolName and typed input"."""
    agent, _ = tools_agent(steps=echo_then(message="ping"))
    await agent.save_messages("Use echo")
    [ctx] = agent.seen("before_tool_call")
    assert (ctx.tool_name, ctx.tool_call_id) == ("echo", "tc1")
    assert _plain(ctx.input) == {"message": "ping"}


async def test_after_tool_call_receives_the_output_and_a_duration() -> None:
    """hooks.test.ts:277 "afterToolCall receives typed output (was always undefined before)"."""
    agent, _ = tools_agent(steps=echo_then(message="ping"))
    await agent.save_messages("Use echo")
    [ctx] = agent.seen("after_tool_call")
    assert (ctx.tool_name, _plain(ctx.input), ctx.success, ctx.output, ctx.error) == (
        "echo",
        {"message": "ping"},
        True,
        "echo: ping",
        None,
    )
    assert isinstance(ctx.duration_ms, float) and ctx.duration_ms >= 0


# -- ToolCallDecision ------------------------------------------------------------------------------------------------


async def test_no_decision_runs_the_tool_once_with_the_model_input() -> None:
    """hooks.test.ts:1061 "void decision runs the original execute with original input" and :1213 "runs execute
    exactly once on a void decision"."""
    agent, echo = tools_agent()
    await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert (after.tool_name, _plain(after.input), after.output) == ("echo", {"message": "hello"}, "echo: hello")
    assert echo.runs == [{"message": "hello"}]


async def test_allow_with_new_input_runs_the_tool_once_with_that_input() -> None:
    """hooks.test.ts:1074 "'allow' with modified input runs execute with the substituted input" and :1221 "runs
    execute exactly once when 'allow' substitutes the input": ``after_tool_call.input`` stays the model's."""
    agent, echo = tools_agent()
    agent.decision = lambda ctx: ta.Allow(input={"message": "rewritten"})
    await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert (_plain(after.input), after.output) == ({"message": "hello"}, "echo: rewritten")
    assert echo.runs == [{"message": "rewritten"}]


async def test_block_skips_the_tool_and_the_model_sees_the_reason() -> None:
    """hooks.test.ts:1091 "'block' short-circuits execute and returns reason as the result" and :1234 "never runs
    execute when the call is blocked"; the seed: a blocked call is ``success: true``."""
    agent, echo = tools_agent()
    agent.decision = lambda ctx: ta.Block("not allowed in this context")
    await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert (after.success, after.output) == (True, "not allowed in this context")
    assert echo.runs == []


async def test_block_without_a_reason_gives_a_default_sentence() -> None:
    """hooks.test.ts:1107 "'block' with no reason returns a default string"."""
    agent, echo = tools_agent()
    agent.decision = lambda ctx: ta.Block()
    await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert isinstance(after.output, str) and "blocked" in after.output.lower()
    assert echo.runs == []


async def test_substitute_skips_the_tool_and_the_model_sees_the_substitute() -> None:
    """hooks.test.ts:1117 "'substitute' short-circuits execute and returns the substituted output" and :1247
    "never runs execute when the result is substituted"."""
    agent, echo = tools_agent()
    agent.decision = lambda ctx: ta.Substitute({"fake": "value", "reason": "cached"})
    await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert (after.success, after.output) == (True, {"fake": "value", "reason": "cached"})
    assert echo.runs == []
    [part] = [p for p in agent.get_messages()[-1].parts if isinstance(p, ta.ToolPart)]
    assert (part.state, part.output) == ("output-available", {"fake": "value", "reason": "cached"})


async def test_an_async_decision_is_awaited() -> None:
    """hooks.test.ts:1133 "async beforeToolCall (Promise<ToolCallDecision>) is awaited correctly"."""
    agent, echo = tools_agent()

    async def later(ctx: ta.ToolCallContext) -> ta.Substitute:
        await asyncio.sleep(0)
        return ta.Substitute("from async hook")

    agent.decision = later
    await agent.save_messages("call echo")
    assert [a.output for a in agent.seen("after_tool_call")] == ["from async hook"]
    assert echo.runs == []


async def test_a_raising_before_tool_call_is_a_tool_error_and_the_turn_goes_on() -> None:
    """hooks.test.ts:1149 "a throwing beforeToolCall surfaces as a tool error in afterToolCall"."""
    agent, echo = tools_agent()

    def refuse(ctx: ta.ToolCallContext) -> None:
        raise RuntimeError("policy violation")

    agent.decision = refuse
    result = await agent.save_messages("call echo")
    [after] = agent.seen("after_tool_call")
    assert after.success is False and after.error is not None and "policy violation" in after.error
    assert echo.runs == []
    assert result.status == "completed" and result.message is not None and result.message.text == "done"


async def test_a_coroutine_returning_an_async_iterator_collapses_to_its_last_value() -> None:
    """hooks.test.ts:1163 "collapses Promise<AsyncIterable> returns to the last yielded value" and :1303
    "collapses a Promise<AsyncIterable> (non-canonical) execute": no preliminary chunk either."""
    agent, echo = tools_agent("async-iterable")
    chunks = await agent.chat("call echo").collect()
    assert [a.output for a in agent.seen("after_tool_call")] == ["echo: hello"]
    assert [(c.output, c.preliminary) for c in chunks if c.type == "tool-output-available"] == [("echo: hello", None)]
    assert len(echo.runs) == 1


async def test_a_plain_function_returning_an_async_iterator_collapses_to_its_last_value() -> None:
    """hooks.test.ts:1182 "collapses sync AsyncIterable returns to the last yielded value"."""
    agent, _ = tools_agent("sync-iterable")
    await agent.save_messages("call echo")
    assert [a.output for a in agent.seen("after_tool_call")] == ["echo: hello"]


async def test_add_messages_inside_a_tool_persists_at_once_mid_turn() -> None:
    """hooks.test.ts:1195 "addMessages from inside a tool execute runs mid-turn and persists"."""
    probe: dict[str, Any] = {}
    agent: Recorder

    async def note(value: Any, context: ta.ToolContext) -> str:
        await agent.add_messages(ta.user_message("a note", id="note-1"))
        probe["stored"] = await agent.store.get_message("note-1") is not None
        probe["turn running"] = agent._engine.queue.active_request_id == context.request_id
        return "noted"

    tool = ta.Tool("note", "Take a note", {"type": "object", "properties": {}}, executor=note)
    agent = Recorder(model=ScriptedModel([tool_call("note", {}), text("ok")]), tools=[tool], store=ta.MemoryStore())
    result = await agent.save_messages("take a note")
    assert result.status == "completed"
    assert probe == {"stored": True, "turn running": True}
    assert "note-1" in [m.id for m in agent.get_messages()]


# -- streaming tools -------------------------------------------------------------------------------------------------


async def test_an_async_generator_tool_keeps_its_preliminary_outputs() -> None:
    """hooks.test.ts:1264 "preserves preliminary chunks for an async-generator execute", with a
    ``before_tool_call`` override in place (Recorder's). The seed's sentence that an intercepted tool's
    AsyncIterable collapses is about the non-canonical form (:1303), which the collapse tests above cover."""
    agent, echo = tools_agent("async-generator")
    chunks = await agent.chat("call echo").collect()
    # As the AI SDK does: every yield goes out as a preliminary output, then the last one as the final output.
    assert [(c.output, bool(c.preliminary)) for c in chunks if c.type == "tool-output-available"] == [
        ("echo-prelim-1: hello", True),
        ("echo-prelim-2: hello", True),
        ("echo: hello", True),
        ("echo: hello", False),
    ]
    assert [a.output for a in agent.seen("after_tool_call")] == ["echo: hello"]
    assert len(echo.runs) == 1


async def test_a_scalar_tool_emits_no_preliminary_output() -> None:
    """hooks.test.ts:1289 "emits no synthetic preliminary chunk for a scalar execute"."""
    agent, _ = tools_agent()
    chunks = await agent.chat("call echo").collect()
    assert [(c.output, c.preliminary) for c in chunks if c.type == "tool-output-available"] == [("echo: hello", None)]


# -- needs_approval and before_tool_call ----------------------------------------------------------------------------


async def test_before_tool_call_stays_the_outer_gate_after_an_approval() -> None:
    """hooks.test.ts:1321 "keeps beforeToolCall as the outer gate after approval (block)"."""
    agent, echo = tools_agent(needs_approval=True)
    agent.decision = lambda ctx: ta.Block("blocked after approval")
    first = await agent.save_messages("call echo")
    assert [p.state for p in first.message.parts if isinstance(p, ta.ToolPart)] == ["approval-requested"]  # type: ignore[union-attr]
    assert echo.runs == []

    assert await agent.add_tool_approval("tc1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=5)
    assert echo.runs == []
    assert [a.output for a in agent.seen("after_tool_call")] == ["blocked after approval"]


async def test_an_approved_call_runs_once_when_both_gates_allow() -> None:
    """hooks.test.ts:1358 "runs execute exactly once when both gates allow"."""
    agent, echo = tools_agent(needs_approval=True)
    await agent.save_messages("call echo")
    assert echo.runs == []
    assert await agent.add_tool_approval("tc1", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=5)
    assert echo.runs == [{"message": "hello"}]
    assert [a.output for a in agent.seen("after_tool_call")] == ["echo: hello"]
    assert texts(agent)[-1] == ("assistant", "done")


# -- onChunk ------------------------------------------------------------------------------------------------------


async def test_on_chunk_fires_for_streaming_chunks() -> None:
    """hooks.test.ts:1475 "fires for streaming chunks"."""
    agent = Recorder(model=ScriptedModel([text("Hello", chunk_size=2)]), store=ta.MemoryStore())
    await agent.save_messages("Hello")
    assert [(c.type, c.text) for c in agent.seen("on_chunk")] == [
        ("text-delta", "He"),
        ("text-delta", "ll"),
        ("text-delta", "o"),
    ]


# -- max_steps ------------------------------------------------------------------------------------------------------


async def test_the_class_max_steps_bounds_the_loop() -> None:
    """hooks.test.ts:1487 "respects maxSteps override on class": the turn still completes."""

    class OneStep(Recorder):
        max_steps = 1

    echo = EchoTool()
    model = ScriptedModel([tool_call("echo", {"message": "hello"}, id="tc1")])
    agent = OneStep(model=model, tools=[echo.tool], store=ta.MemoryStore())
    result = await agent.save_messages("Test")
    assert result.status == "completed"
    assert len(model.requests) == 1 and echo.runs == [{"message": "hello"}]


async def test_turn_config_stop_when_composes_with_max_steps() -> None:
    """hooks.test.ts:1493 "composes TurnConfig stopWhen with the maxSteps bound"."""
    agent, echo = tools_agent(steps=[tool_call("echo", {"message": "hello"}, id="tc1")])
    agent.turn_config = ta.TurnConfig(stop_when=[ta.has_tool_call("echo")])
    result = await agent.save_messages("Call echo")
    assert result.status == "completed"
    assert len(agent.seen("before_step")) == 1 and len(agent.seen("after_tool_call")) == 1
    assert echo.runs == [{"message": "hello"}]


async def test_a_tool_loop_agent_starts_with_an_empty_history() -> None:
    """hooks.test.ts:1503 "works with tool-calling loop agent"."""
    agent, _ = tools_agent()
    assert await agent.load_messages() == []


# -- dynamic context ----------------------------------------------------------------------------------------------


class Noted(Recorder):
    """The reference's ``ThinkSessionTestAgent``: a ``memory`` block from ``configure_session``."""

    async def configure_session(self, session: ta.Session) -> ta.Session:
        return session.with_context("memory", description="Long-term memory")


async def started(cls: type[ta.Think] = Noted) -> Any:
    agent = cls(model=ScriptedModel(), store=ta.MemoryStore())
    await agent.load_messages()
    assert agent.session is not None
    return agent, agent.session


async def test_add_context_registers_a_new_block() -> None:
    """hooks.test.ts:1543 "addContext registers a new block"."""
    _agent, session = await started()
    await session.add_context("notes", description="User notes")
    assert await session.get_context("notes") == ""
    assert await session.get_context("memory") == ""
    assert await session.get_context("absent") is None


async def test_an_added_block_shows_in_the_prompt_after_a_refresh() -> None:
    """hooks.test.ts:1552 "addContext block appears in system prompt after refresh"."""
    _agent, session = await started()
    await session.add_context("extra", description="Extra context block")
    await session.set_context("extra", "Some important content")
    prompt = await session.refresh_system_prompt("base")
    assert "EXTRA" in prompt and "Some important content" in prompt


async def test_remove_context_removes_the_block() -> None:
    """hooks.test.ts:1562 "removeContext removes the block" and :1576 "removeContext returns false for
    non-existent block"."""
    _agent, session = await started()
    await session.add_context("temp", description="Temporary block")
    assert await session.remove_context("temp") is True
    assert await session.get_context("temp") is None
    assert await session.remove_context("nonexistent") is False


async def test_a_removed_block_leaves_the_prompt_after_a_refresh() -> None:
    """hooks.test.ts:1582 "removed block disappears from system prompt after refresh"."""
    _agent, session = await started()
    await session.add_context("ephemeral", description="Gone soon")
    await session.set_context("ephemeral", "Temporary data")
    assert "EPHEMERAL" in await session.refresh_system_prompt("base")
    await session.remove_context("ephemeral")
    assert "EPHEMERAL" not in await session.refresh_system_prompt("base")


async def test_a_dynamic_block_is_writable_by_default_and_gets_set_context() -> None:
    """hooks.test.ts:1596 "dynamic block is writable by default", :1605 "dynamic block content can be written via
    setContextBlock" and :1614 "session tools include set_context after adding writable block"."""

    class Bare(Recorder):
        pass

    _agent, session = await started(Bare)
    assert [t.name for t in session.tools()] == []
    await session.add_context("data", description="Stored data")
    await session.set_context("data", "Hello world")
    assert await session.get_context("data") == "Hello world"
    assert [t.name for t in session.tools()] == ["set_context"]


async def test_an_added_block_coexists_with_configure_session_blocks() -> None:
    """hooks.test.ts:1622 "addContext coexists with configureSession blocks"."""
    _agent, session = await started()
    await session.add_context("extra", description="Extra block")
    await session.set_context("extra", "Extra content")
    await session.set_context("memory", "Memory content")
    prompt = await session.refresh_system_prompt("base")
    for expected in ("MEMORY", "EXTRA", "Extra content", "Memory content"):
        assert expected in prompt


async def test_an_agent_without_writable_blocks_offers_no_set_context() -> None:
    """hooks.test.ts:1635 "dynamic block visible in chat turn tools" (which asserts a plain agent's turn has no
    ``set_context``); the other half: an agent with a writable block offers it to the turn."""
    plain = Recorder(model=ScriptedModel([text("hi")]), store=ta.MemoryStore())
    await plain.save_messages("First turn")
    assert "set_context" not in plain.seen("before_turn")[0].tools

    noted = Noted(model=ScriptedModel([text("hi")]), store=ta.MemoryStore())
    await noted.save_messages("First turn")
    assert "set_context" in noted.seen("before_turn")[0].tools


# -- TurnConfig overrides -------------------------------------------------------------------------------------------


async def test_turn_config_max_steps_applies_to_the_turn() -> None:
    """hooks.test.ts:1773 "maxSteps override is applied per-turn"."""
    agent, _echo = tools_agent(steps=[tool_call("echo", {"message": "hello"}, id="tc1")])
    agent.turn_config = ta.TurnConfig(max_steps=1)
    result = await agent.save_messages("Hello")
    assert result.status == "completed"
    assert len(agent.seen("before_step")) == 1


async def test_before_turn_sees_the_original_prompt_and_the_model_gets_the_override() -> None:
    """hooks.test.ts:1780 "beforeTurn still sees original system prompt when override is set"."""
    model = ScriptedModel([text("Arr")])
    agent = Recorder(model=model, instructions="You are careful.", store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(system="You are a pirate.")
    await agent.save_messages("With override")
    assert agent.seen("before_turn")[0].system == "You are careful."
    assert model.requests[0].messages[0] == {"role": "system", "content": "You are a pirate."}


async def test_turn_config_instructions_replace_the_system_prompt() -> None:
    """hooks.test.ts:1790 "accepts instructions as the preferred TurnConfig system prompt name"."""
    model = ScriptedModel([text("Arr")])
    agent = Recorder(model=model, store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(instructions="You are a pirate.")
    result = await agent.save_messages("With instructions override")
    assert result.status == "completed"
    assert model.requests[0].messages[0] == {"role": "system", "content": "You are a pirate."}


async def test_turn_config_active_tools_limit_the_tools_offered() -> None:
    """hooks.test.ts:1798 "activeTools override limits tool availability"."""
    read = ta.Tool("read", "Read", {"type": "object", "properties": {}}, executor=lambda v, c: "r")
    write = ta.Tool("write", "Write", {"type": "object", "properties": {}}, executor=lambda v, c: "w")
    model = ScriptedModel([text("ok")])
    agent = Recorder(model=model, tools=[read, write], store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(active_tools=["read"])
    result = await agent.save_messages("Restricted tools")
    assert result.status == "completed"
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["read"]


async def test_turn_config_call_settings_reach_the_model_request() -> None:
    """hooks.test.ts:1805 "accepts stable AI SDK call settings from TurnConfig"."""
    model = ScriptedModel([text("ok")])
    agent = Recorder(model=model, store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(
        max_output_tokens=123,
        temperature=0.2,
        top_p=0.8,
        top_k=40,
        presence_penalty=0.1,
        frequency_penalty=0.3,
        stop_sequences=["STOP"],
        seed=1234,
        max_retries=0,
        timeout_s=10.0,
        headers={"x-test-turn": "enabled"},
        provider_options={"test": {"mode": "turn"}},
    )
    result = await agent.save_messages("Use call settings")
    assert result.status == "completed"
    [request] = model.requests
    assert request.params == {
        "max_tokens": 123,
        "temperature": 0.2,
        "top_p": 0.8,
        "top_k": 40,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.3,
        "stop": ["STOP"],
        "seed": 1234,
    }
    assert (request.max_retries, request.timeout_s, request.headers) == (0, 10.0, {"x-test-turn": "enabled"})
    assert request.provider_options == {"test": {"mode": "turn"}}


async def test_turn_config_output_gives_a_structured_result() -> None:
    """hooks.test.ts:1840 "output override is accepted on TurnConfig and forwarded to streamText"."""

    class Severity(BaseModel):
        severity: str

    agent = Recorder(model=ScriptedModel([text(json.dumps({"severity": "high"}))]), store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(output=Severity)
    result = await agent.save_messages("Structured-output turn")
    assert result.status == "completed"
    assert result.output == Severity(severity="high")


async def test_a_turn_config_transform_rewrites_the_stream() -> None:
    """hooks.test.ts:1852 "experimental_transform override is forwarded to streamText and applied": a per-turn
    transform that upper-cases every text delta leaves the persisted reply upper-cased."""

    async def upper(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
        async for event in events:
            yield TextDelta(event.text.upper()) if isinstance(event, TextDelta) else event

    agent = Recorder(model=ScriptedModel([text("hello from the assistant")]), store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(transform=upper)
    result = await agent.save_messages("Transform turn")
    assert result.message is not None and result.message.text == "HELLO FROM THE ASSISTANT"


async def test_turn_config_repair_tool_call_repairs_invalid_input_before_it_runs() -> None:
    """hooks.test.ts:1873 "repairToolCall repairs invalid tool input before execution"."""
    agent, echo = tools_agent(steps=[tool_call("echo", {"wrong": 1}, id="tc1"), text("done")])

    async def repair(ctx: Any) -> dict[str, Any]:
        return {"message": "repaired"}

    agent.turn_config = ta.TurnConfig(repair_tool_call=repair)
    result = await agent.save_messages("Repair the tool call")
    assert (result.status, result.error) == ("completed", None)
    assert echo.runs == [{"message": "repaired"}]
    assert [_plain(c.input) for c in agent.seen("before_tool_call")] == [{"message": "repaired"}]
    assert [(_plain(a.input), a.output) for a in agent.seen("after_tool_call")] == [
        ({"message": "repaired"}, "echo: repaired")
    ]


THINKING = step(reasoning("Visible thinking"), text("Final answer"))
REASONING_CHUNKS = ["reasoning-start", "reasoning-delta", "reasoning-end"]


async def test_reasoning_is_streamed_by_default_on_the_chat_path() -> None:
    """hooks.test.ts:1893 "sends reasoning chunks by default on the chat() path"."""
    agent = Recorder(model=ScriptedModel([THINKING]), store=ta.MemoryStore())
    chunks = types(await agent.chat("Show reasoning").collect())
    assert [t for t in chunks if t.startswith("reasoning")] == REASONING_CHUNKS


async def test_the_class_send_reasoning_default_hides_reasoning() -> None:
    """hooks.test.ts:1905 "uses the instance-level sendReasoning default"."""

    class Quiet(Recorder):
        send_reasoning = False

    agent = Quiet(model=ScriptedModel([THINKING]), store=ta.MemoryStore())
    chunks = types(await agent.chat("Hide reasoning").collect())
    assert [t for t in chunks if t.startswith("reasoning")] == []
    assert "text-delta" in chunks


async def test_turn_config_can_hide_reasoning_for_one_turn() -> None:
    """hooks.test.ts:1919 "allows TurnConfig to suppress reasoning for one turn"."""
    agent = Recorder(model=ScriptedModel([THINKING, THINKING]), store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(send_reasoning=False)
    hidden = types(await agent.chat("Hide reasoning this turn").collect())
    agent.turn_config = None
    shown = types(await agent.chat("and now").collect())
    assert [t for t in hidden if t.startswith("reasoning")] == []
    assert [t for t in shown if t.startswith("reasoning")] == REASONING_CHUNKS


async def test_turn_config_can_send_reasoning_when_the_class_default_is_off() -> None:
    """hooks.test.ts:1931 "allows TurnConfig to send reasoning when the instance default is false"."""

    class Quiet(Recorder):
        send_reasoning = False

    agent = Quiet(model=ScriptedModel([THINKING]), store=ta.MemoryStore())
    agent.turn_config = ta.TurnConfig(send_reasoning=True)
    chunks = types(await agent.chat("Show reasoning this turn").collect())
    assert [t for t in chunks if t.startswith("reasoning")] == REASONING_CHUNKS


class HiddenThoughts(ta.Think):
    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
        return ta.TurnConfig(send_reasoning=False)


async def test_send_reasoning_applies_on_the_websocket_path(gateway: Any) -> None:
    """hooks.test.ts:1944 "applies sendReasoning on the WebSocket stream path"."""
    client, _ = await gateway(HiddenThoughts, model=ScriptedModel([THINKING]))
    ws = await client.ws_connect("/agents/hidden-thoughts/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-1", wire_user("Hide reasoning over WebSocket", "u1")))
    frames = await until_done(ws, "req-1")
    chunks = wire_chunk_types(frames)
    assert [t for t in chunks if t.startswith("reasoning")] == []
    assert "text-delta" in chunks
    await ws.close()


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value
