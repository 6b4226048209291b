"""Turn and step hooks (Think's hooks.test.ts): what before_turn, before_step, on_step_finish, on_chunk and
on_chat_response see and may change, in which order, and the per-turn overrides a TurnConfig carries.

Tool-call decisions, streaming tools and tool failures live in test_tool_decisions.py.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import TOOL_THEN_TEXT_HOOKS, HookedAgent, RecordingAgent, chunk_types, drain
from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, reasoning, step, text, tool_call

CAPABILITY = "Do not claim access to capabilities that are not exposed as tools in this turn."


@ta.tool
async def search(q: str) -> dict[str, list[str]]:
    """Search the docs.

    Args:
        q: What to look for.
    """
    return {"hits": [f"{q} docs"]}


@ta.tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@ta.tool
async def finish(summary: str) -> str:
    """Hand in the final answer."""
    return summary


def offered(request: ta.ModelRequest) -> list[str]:
    return [t["function"]["name"] for t in request.tools]


# ------------------------------------------------------------------ before_turn


async def test_before_turn_sees_system_prompt_tools_messages_and_model(scripted: ScriptedModel) -> None:
    scripted.add(text("hello"))
    agent = RecordingAgent(
        model=scripted, instructions="You are terse.", tools=[search, weather], store=ta.MemoryStore()
    )
    await agent.save_messages(ta.user_message("hi", id="u1"), body={"tenant": "acme"})

    [ctx] = agent.contexts("before_turn")
    system = f"You are terse.\n\nTools available in this turn: search, weather. {CAPABILITY}"
    assert ctx.system == system
    assert list(ctx.tools) == ["search", "weather"]
    assert ctx.tools["search"] is search
    assert ctx.tools["weather"] is weather
    assert ctx.messages == [{"role": "user", "content": "hi"}]
    assert ctx.model is scripted
    assert ctx.continuation is False
    assert ctx.body == {"tenant": "acme"}
    assert ctx.trigger == "programmatic"
    assert scripted.requests[0].messages == [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]
    scripted.assert_complete()


async def test_before_turn_without_tools_has_no_tools_sentence(scripted: ScriptedModel) -> None:
    scripted.add(text("hello"))
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    await agent.save_messages("hi")
    [ctx] = agent.contexts("before_turn")
    assert ctx.system == "You are a helpful assistant."
    assert ctx.tools == {}
    assert ctx.body is None
    scripted.assert_complete()


async def test_before_turn_fires_on_every_turn_with_the_growing_transcript(scripted: ScriptedModel) -> None:
    scripted.extend([text("one"), text("two")])
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    await agent.save_messages("first")
    await agent.save_messages("second")
    assert [ctx.messages for ctx in agent.contexts("before_turn")] == [
        [{"role": "user", "content": "first"}],
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "second"},
        ],
    ]
    scripted.assert_complete()


async def test_before_turn_fires_from_chat_and_save_messages(scripted: ScriptedModel) -> None:
    scripted.extend([text("streamed"), text("blocking")])
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    await drain(agent.chat("via chat", body={"path": "chat"}))
    await agent.save_messages("via save", body={"path": "save"})
    contexts = agent.contexts("before_turn")
    assert [(c.trigger, c.body, c.continuation, c.messages[-1]) for c in contexts] == [
        ("rpc", {"path": "chat"}, False, {"role": "user", "content": "via chat"}),
        ("programmatic", {"path": "save"}, False, {"role": "user", "content": "via save"}),
    ]
    assert agent.hooks_called(skip={"on_chunk"}) == [
        "before_turn",
        "before_step",
        "on_step_finish",
        "on_chat_response",
        "before_turn",
        "before_step",
        "on_step_finish",
        "on_chat_response",
    ]
    scripted.assert_complete()


async def test_before_turn_sees_continuation_flag_from_continue_last_turn(scripted: ScriptedModel) -> None:
    scripted.extend([text("part one"), text(" and part two")])
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    first = await agent.save_messages("tell me")
    second = await agent.continue_last_turn(body={"reason": "resume"})

    assert [c.continuation for c in agent.contexts("before_turn")] == [False, True]
    assert agent.contexts("before_turn")[1].body == {"reason": "resume"}
    assert [r.continuation for r in agent.contexts("on_chat_response")] == [False, True]
    assert (first.continuation, second.continuation) == (False, True)
    assert second.status == "completed"
    scripted.assert_complete()


# ------------------------------------------------------------------ before_step


async def test_before_step_gets_step_number_steps_model_and_messages(scripted: ScriptedModel) -> None:
    scripted.add(text("hello"))
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    result = await agent.save_messages("hi")
    [ctx] = agent.contexts("before_step")
    assert ctx.request_id == result.request_id
    assert ctx.step_number == 0
    assert ctx.steps == ()
    assert ctx.model is scripted
    assert ctx.messages == [{"role": "user", "content": "hi"}]
    scripted.assert_complete()


async def test_before_step_fires_once_per_step_with_growing_previous_steps(scripted: ScriptedModel) -> None:
    scripted.extend(
        [
            tool_call("search", {"q": "ray"}, id="c1"),
            tool_call("weather", {"city": "Oslo"}, id="c2"),
            text("done"),
        ]
    )
    agent = RecordingAgent(model=scripted, tools=[search, weather], store=ta.MemoryStore())
    await agent.save_messages("go")

    steps = agent.contexts("before_step")
    finished = agent.contexts("on_step_finish")
    assert [c.step_number for c in steps] == [0, 1, 2]
    assert [c.steps for c in steps] == [(), tuple(finished[:1]), tuple(finished[:2])]
    assert [r.step_number for r in finished] == [0, 1, 2]
    # Each step's messages carry the previous steps' assistant calls and tool results.
    assert steps[2].messages == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ray"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"hits": ["ray docs"]}'},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "sunny in Oslo"},
    ]
    scripted.assert_complete()


async def test_before_step_can_override_the_model_for_one_step(scripted: ScriptedModel) -> None:
    other = ScriptedModel([text("from other")], model_id="other")
    scripted.extend([tool_call("search", {"q": "ray"}, id="c1")])
    agent = HookedAgent(
        model=scripted,
        tools=[search],
        store=ta.MemoryStore(),
        step_config=lambda ctx: ta.StepConfig(model=other) if ctx.step_number == 1 else None,
    )
    result = await agent.save_messages("go")

    assert [r.model for r in scripted.requests] == ["scripted"]
    assert [r.model for r in other.requests] == ["other"]
    assert other.requests[0].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"hits": ["ray docs"]}'}
    assert [r.model for r in agent.contexts("on_step_finish")] == ["scripted", "other"]
    assert result.message is not None
    assert result.message.text == "from other"
    scripted.assert_complete()
    other.assert_complete()


async def test_before_step_overrides_apply_to_that_step_only(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}, id="c1"), text("done")])

    def first_step_only(ctx: ta.StepContext) -> ta.StepConfig | None:
        if ctx.step_number == 0:
            return ta.StepConfig(
                instructions="Step zero.",
                active_tools=["search"],
                tool_choice="required",
                provider_options={"cache": True},
            )
        return None

    agent = HookedAgent(model=scripted, tools=[search, weather], store=ta.MemoryStore(), step_config=first_step_only)
    await agent.save_messages("go")
    first, second = scripted.requests
    assert (first.messages[0], offered(first), first.tool_choice, first.provider_options) == (
        {"role": "system", "content": "Step zero."},
        ["search"],
        "required",
        {"cache": True},
    )
    assert (offered(second), second.tool_choice, second.provider_options) == (["search", "weather"], None, {})
    assert second.messages[0]["content"].startswith("You are a helpful assistant.")
    scripted.assert_complete()


async def test_before_step_messages_override_applies_to_that_step_only(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted,
        tools=[search],
        store=ta.MemoryStore(),
        step_config=lambda ctx: (
            ta.StepConfig(messages=[{"role": "user", "content": "trimmed"}]) if ctx.step_number == 0 else None
        ),
    )
    await agent.save_messages("original question")
    assert scripted.requests[0].messages[1:] == [{"role": "user", "content": "trimmed"}]
    # The next step builds on the turn's messages, not on the previous step's override.
    assert scripted.requests[1].messages[1:] == [
        {"role": "user", "content": "original question"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ray"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"hits": ["ray docs"]}'},
    ]
    assert agent.contexts("before_step")[1].messages == scripted.requests[1].messages[1:]
    scripted.assert_complete()


async def test_async_before_step_is_awaited_before_the_model_request(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}), text("done")])
    seen: list[tuple[int, int]] = []

    class SlowStep(ta.Think):
        async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
            release = asyncio.Event()
            asyncio.get_running_loop().call_soon(release.set)
            await release.wait()  # suspends until the loop runs the callback
            seen.append((ctx.step_number, len(scripted.requests)))
            return None

    await SlowStep(model=scripted, tools=[search], store=ta.MemoryStore()).save_messages("go")
    assert seen == [(0, 0), (1, 1)]
    scripted.assert_complete()


# ------------------------------------------------------------------ on_step_finish


async def test_on_step_finish_reports_text_reasoning_finish_reason_and_usage(scripted: ScriptedModel) -> None:
    usage = ta.Usage(input_tokens=12, output_tokens=5, total_tokens=17, reasoning_tokens=3, cached_input_tokens=4)
    scripted.add(step(reasoning("think first"), text("hello there", chunk_size=4), usage=usage))
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    result = await agent.save_messages("hi")
    [record] = agent.contexts("on_step_finish")
    assert record == ta.StepResult(
        step_number=0,
        text="hello there",
        reasoning="think first",
        tool_calls=(),
        tool_results=(),
        finish_reason="stop",
        usage=usage,
        model="scripted",
        request=scripted.requests[0],
        response=ta.StepResponse(
            id="scripted-1",
            model="scripted",
            timestamp=record.response.timestamp,
            messages=({"role": "assistant", "content": "hello there"},),
        ),
    )
    assert isinstance(record.response.timestamp, float)
    assert (result.status, result.usage, result.cost_usd) == ("completed", usage, None)
    scripted.assert_complete()


async def test_on_step_finish_reports_typed_tool_calls_and_results(scripted: ScriptedModel) -> None:
    scripted.extend(
        [
            step(
                text("Looking."),
                tool_call("search", {"q": "ray"}, id="c1"),
                tool_call("weather", {"city": "Oslo"}, id="c2"),
            ),
            text("done"),
        ]
    )
    agent = RecordingAgent(model=scripted, tools=[search, weather], store=ta.MemoryStore())
    await agent.save_messages("go")
    first, second = agent.contexts("on_step_finish")
    assert (first.text, first.finish_reason) == ("Looking.", "tool_calls")
    assert first.tool_calls == (
        ta.ToolCall(tool_call_id="c1", tool_name="search", input={"q": "ray"}),
        ta.ToolCall(tool_call_id="c2", tool_name="weather", input={"city": "Oslo"}),
    )
    assert sorted(first.tool_results, key=lambda r: r.tool_call_id) == [
        ta.ToolResult(tool_call_id="c1", tool_name="search", input={"q": "ray"}, output={"hits": ["ray docs"]}),
        ta.ToolResult(tool_call_id="c2", tool_name="weather", input={"city": "Oslo"}, output="sunny in Oslo"),
    ]
    assert all(r.success for r in first.tool_results)
    assert (second.text, second.finish_reason, second.tool_calls, second.tool_results) == ("done", "stop", (), ())
    scripted.assert_complete()


# ------------------------------------------------------------------ order and on_chunk


async def test_tool_step_runs_hooks_in_order(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}), text("done")])
    agent = RecordingAgent(model=scripted, tools=[search], store=ta.MemoryStore())
    await agent.save_messages("find the ray docs")
    assert agent.hooks_called(skip={"on_chunk"}) == TOOL_THEN_TEXT_HOOKS
    scripted.assert_complete()


async def test_on_chunk_sees_model_stream_parts_in_order(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}, id="c1"), step(reasoning("hm"), text("hello", chunk_size=2))])
    agent = RecordingAgent(model=scripted, tools=[search], store=ta.MemoryStore())
    await agent.save_messages("go")
    assert agent.hooks_called() == [
        "before_turn",
        "before_step",
        "on_chunk",
        "on_chunk",
        "on_chunk",
        "on_chunk",
        "before_tool_call",
        "after_tool_call",
        "on_chunk",
        "on_step_finish",
        "before_step",
        "on_chunk",
        "on_chunk",
        "on_chunk",
        "on_chunk",
        "on_step_finish",
        "on_chat_response",
    ]
    assert [(c.step_number, c.type, c.text, c.tool_call_id, c.tool_name) for c in agent.contexts("on_chunk")] == [
        (0, "tool-input-start", None, "c1", "search"),
        (0, "tool-input-delta", '{"q": ', "c1", None),
        (0, "tool-input-delta", '"ray"}', "c1", None),
        (0, "tool-call", None, "c1", "search"),
        (0, "tool-result", None, "c1", "search"),
        (1, "reasoning-delta", "hm", None, None),
        (1, "text-delta", "he", None, None),
        (1, "text-delta", "ll", None, None),
        (1, "text-delta", "o", None, None),
    ]
    tool_call_ctx, tool_result_ctx = agent.contexts("on_chunk")[3:5]
    assert tool_call_ctx.input == {"q": "ray"}
    assert (tool_result_ctx.input, tool_result_ctx.output) == ({"q": "ray"}, {"hits": ["ray docs"]})
    scripted.assert_complete()


async def test_text_step_streams_ui_chunks(scripted: ScriptedModel) -> None:
    scripted.add(text("hello", chunk_size=3))
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    chunks = await drain(agent.chat("hi"))
    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["hel", "lo"]
    assert [c.text for c in agent.contexts("on_chunk")] == ["hel", "lo"]
    scripted.assert_complete()


async def test_on_chunk_is_skipped_unless_overridden(scripted: ScriptedModel) -> None:
    scripted.add(text("hello", chunk_size=2))

    class Plain(ta.Think):
        pass

    agent = Plain(model=scripted, store=ta.MemoryStore())
    seen: list[ta.ChunkContext] = []

    async def record(ctx: ta.ChunkContext) -> None:
        seen.append(ctx)

    # The engine asks the class, not the instance, whether on_chunk was overridden: an instance attribute
    # is never called, so the hot path costs nothing for agents that do not observe chunks.
    agent.on_chunk = record  # type: ignore[method-assign]
    chunks = await drain(agent.chat("hi"))
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["he", "ll", "o"]
    assert seen == []
    scripted.assert_complete()


async def test_on_chat_response_gets_the_persisted_message(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "ray"}, id="c1"), text("done")])
    agent = RecordingAgent(model=scripted, tools=[search], store=ta.MemoryStore())
    result = await agent.save_messages("go")
    [response] = agent.contexts("on_chat_response")
    assert (response.request_id, response.status, response.continuation, response.error) == (
        result.request_id,
        "completed",
        False,
        None,
    )
    assert response.message == result.message == agent.get_messages()[-1]
    assert [p.type for p in response.message.parts] == ["step-start", "tool-search", "step-start", "text"]
    scripted.assert_complete()


# ------------------------------------------------------------------ max_steps and stop conditions


async def test_max_steps_class_attribute_bounds_the_loop(scripted: ScriptedModel) -> None:
    class TwoSteps(RecordingAgent):
        max_steps = 2

    scripted.extend([tool_call("search", {"q": "a"}, id="c1"), tool_call("search", {"q": "b"}, id="c2")])
    agent = TwoSteps(model=scripted, tools=[search], store=ta.MemoryStore())
    result = await agent.save_messages("loop")
    assert [c.step_number for c in agent.contexts("before_step")] == [0, 1]
    assert [r.finish_reason for r in agent.contexts("on_step_finish")] == ["tool_calls", "tool_calls"]
    assert result.status == "completed"
    assert result.message is not None
    assert [(p.tool_call_id, p.state) for p in result.message.tool_parts] == [
        ("c1", "output-available"),
        ("c2", "output-available"),
    ]
    scripted.assert_complete()


async def test_max_steps_constructor_argument_bounds_the_loop(scripted: ScriptedModel) -> None:
    scripted.add(tool_call("search", {"q": "a"}))
    agent = RecordingAgent(model=scripted, tools=[search], max_steps=1, store=ta.MemoryStore())
    await agent.save_messages("loop")
    assert [c.step_number for c in agent.contexts("before_step")] == [0]
    scripted.assert_complete()


async def test_turn_config_max_steps_applies_to_that_turn_only(scripted: ScriptedModel) -> None:
    scripted.extend(
        [
            tool_call("search", {"q": "a"}),  # turn 1 stops here (max_steps=1)
            tool_call("search", {"q": "b"}),
            text("done"),  # turn 2 runs with the class default
        ]
    )
    agent = HookedAgent(model=scripted, tools=[search], store=ta.MemoryStore(), turn_config=ta.TurnConfig(max_steps=1))
    await agent.save_messages("one")
    agent.turn_config = None
    await agent.save_messages("two")
    assert [c.step_number for c in agent.contexts("before_step")] == [0, 0, 1]
    scripted.assert_complete()


async def test_stop_when_stops_after_the_matching_step(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("search", {"q": "a"}), tool_call("finish", {"summary": "all done"})])
    agent = HookedAgent(
        model=scripted,
        tools=[search, finish],
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(stop_when=[ta.has_tool_call("finish")]),
    )
    result = await agent.save_messages("go")
    assert [[c.tool_name for c in r.tool_calls] for r in agent.contexts("on_step_finish")] == [["search"], ["finish"]]
    assert agent.contexts("on_step_finish")[1].tool_results[0].output == "all done"
    assert result.status == "completed"
    scripted.assert_complete()


async def test_stop_when_composes_with_the_max_steps_bound(scripted: ScriptedModel) -> None:
    class ThreeSteps(HookedAgent):
        max_steps = 3

    scripted.extend([tool_call("search", {"q": str(i)}) for i in range(3)])
    agent = ThreeSteps(
        model=scripted,
        tools=[search, finish],
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(stop_when=[ta.has_tool_call("finish")]),
    )
    await agent.save_messages("go")
    assert [c.step_number for c in agent.contexts("before_step")] == [0, 1, 2]
    scripted.assert_complete()


async def test_async_stop_condition_is_awaited(scripted: ScriptedModel) -> None:
    seen: list[int] = []

    async def after_two(steps: object) -> bool:
        assert isinstance(steps, list)
        seen.append(len(steps))
        return len(steps) >= 2

    scripted.extend([tool_call("search", {"q": "a"}), tool_call("search", {"q": "b"})])
    agent = HookedAgent(
        model=scripted, tools=[search], store=ta.MemoryStore(), turn_config=ta.TurnConfig(stop_when=[after_two])
    )
    await agent.save_messages("go")
    assert seen == [1, 2]
    scripted.assert_complete()


# ------------------------------------------------------------------ TurnConfig overrides


async def test_instructions_replace_the_system_prompt_but_before_turn_saw_the_original(
    scripted: ScriptedModel,
) -> None:
    scripted.add(text("ok"))
    agent = HookedAgent(
        model=scripted,
        instructions="Original.",
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(instructions="Replaced."),
    )
    await agent.save_messages("hi")
    assert agent.contexts("before_turn")[0].system == "Original."
    assert scripted.requests[0].messages[0] == {"role": "system", "content": "Replaced."}
    scripted.assert_complete()


async def test_system_is_accepted_and_instructions_win_over_it(scripted: ScriptedModel) -> None:
    scripted.extend([text("one"), text("two")])
    agent = HookedAgent(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(system="Legacy."))
    await agent.save_messages("hi")
    agent.turn_config = ta.TurnConfig(system="Legacy.", instructions="Preferred.")
    await agent.save_messages("again")
    assert [r.messages[0]["content"] for r in scripted.requests] == ["Legacy.", "Preferred."]
    scripted.assert_complete()


async def test_active_tools_limits_the_offered_tools(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = HookedAgent(
        model=scripted,
        tools=[search, weather],
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(active_tools=["weather"]),
    )
    await agent.save_messages("hi")
    assert offered(scripted.requests[0]) == ["weather"]
    assert list(agent.contexts("before_turn")[0].tools) == ["search", "weather"]
    scripted.assert_complete()


async def test_empty_active_tools_offers_no_tools(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = HookedAgent(
        model=scripted, tools=[search], store=ta.MemoryStore(), turn_config=ta.TurnConfig(active_tools=[])
    )
    await agent.save_messages("hi")
    assert scripted.requests[0].tools == []
    scripted.assert_complete()


async def test_turn_config_tools_are_added_and_callable(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("weather", {"city": "Oslo"}, id="c1"), text("done")])
    agent = HookedAgent(
        model=scripted, tools=[search], store=ta.MemoryStore(), turn_config=ta.TurnConfig(tools=[weather])
    )
    result = await agent.save_messages("hi")
    assert offered(scripted.requests[0]) == ["search", "weather"]
    assert scripted.requests[0].messages[0]["content"] == (
        f"You are a helpful assistant.\n\nTools available in this turn: search, weather. {CAPABILITY}"
    )
    assert result.message is not None
    assert [(p.tool_call_id, p.output) for p in result.message.tool_parts] == [("c1", "sunny in Oslo")]
    scripted.assert_complete()


async def test_turn_config_model_replaces_the_model(scripted: ScriptedModel) -> None:
    other = ScriptedModel([text("from other")], model_id="other")
    agent = HookedAgent(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(model=other))
    result = await agent.save_messages("hi")
    assert scripted.requests == []
    assert [r.model for r in other.requests] == ["other"]
    assert agent.contexts("before_step")[0].model is other
    assert result.message is not None
    assert result.message.text == "from other"
    other.assert_complete()


async def test_turn_config_messages_replace_the_model_messages(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    replacement = [{"role": "user", "content": "summarised history"}]
    agent = HookedAgent(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(messages=replacement))
    await agent.save_messages("hi")
    assert scripted.requests[0].messages[1:] == replacement
    scripted.assert_complete()


async def test_sampling_settings_are_forwarded_to_the_model_request(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = HookedAgent(
        model=scripted,
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(
            temperature=0.2,
            top_p=0.9,
            top_k=40,
            presence_penalty=0.1,
            frequency_penalty=0.3,
            seed=7,
            max_output_tokens=100,
            stop_sequences=["END"],
            tool_choice="none",
        ),
    )
    await agent.save_messages("hi")
    request = scripted.requests[0]
    assert request.params == {
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.3,
        "stop": ["END"],
        "seed": 7,
        "max_tokens": 100,
    }
    assert request.tool_choice == "none"
    scripted.assert_complete()


async def test_call_settings_are_forwarded_to_the_model_request(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = HookedAgent(
        model=scripted,
        store=ta.MemoryStore(),
        turn_config=ta.TurnConfig(
            headers={"x-trace": "abc"}, timeout_s=12.5, max_retries=3, provider_options={"reasoning_effort": "low"}
        ),
    )
    await agent.save_messages("hi")
    request = scripted.requests[0]
    assert (request.headers, request.timeout_s, request.max_retries, request.provider_options) == (
        {"x-trace": "abc"},
        12.5,
        3,
        {"reasoning_effort": "low"},
    )
    assert request.params == {}
    scripted.assert_complete()


async def test_no_turn_config_sends_default_request_settings(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    await RecordingAgent(model=scripted, store=ta.MemoryStore()).save_messages("hi")
    request = scripted.requests[0]
    assert (
        request.params,
        request.headers,
        request.timeout_s,
        request.max_retries,
        request.provider_options,
        request.response_format,
        request.tool_choice,
    ) == ({}, None, None, None, {}, None, None)
    scripted.assert_complete()


class Answer(BaseModel):
    city: str
    temperature_c: int


async def test_output_model_sets_response_format_and_parses_the_answer(scripted: ScriptedModel) -> None:
    scripted.add(text('{"city": "Oslo", "temperature_c": 4}', chunk_size=10))
    agent = HookedAgent(
        model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(output=Answer, active_tools=[])
    )
    result = await agent.save_messages("weather?")
    assert scripted.requests[0].response_format == {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "schema": Answer.model_json_schema(), "strict": False},
    }
    assert result.status == "completed"
    assert result.output == Answer(city="Oslo", temperature_c=4)
    scripted.assert_complete()


async def test_output_that_does_not_match_the_schema_fails_the_turn(scripted: ScriptedModel) -> None:
    scripted.add(text('{"city": "Oslo"}'))
    agent = HookedAgent(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(output=Answer))
    result = await agent.save_messages("weather?")
    assert result.status == "error"
    assert result.output is None
    assert result.error is not None
    assert result.error.startswith("The model's answer does not match the output schema:")
    assert agent.contexts("on_chat_response")[0].status == "error"
    scripted.assert_complete()


# ------------------------------------------------------------------ send_reasoning

REASONING_TYPES = ["reasoning-start", "reasoning-delta", "reasoning-end"]


def reasoning_chunks(chunks: list[object]) -> list[str]:
    return [t for t in chunk_types(chunks) if t.startswith("reasoning")]


async def test_reasoning_is_streamed_by_default(scripted: ScriptedModel) -> None:
    scripted.add(step(reasoning("let me think"), text("42")))
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    chunks = await drain(agent.chat("meaning of life?"))
    assert reasoning_chunks(chunks) == REASONING_TYPES
    assert [c.delta for c in chunks if c.type == "reasoning-delta"] == ["let me think"]
    assert [p.type for p in agent.get_messages()[-1].parts] == ["step-start", "reasoning", "text"]
    scripted.assert_complete()


async def test_send_reasoning_class_attribute_false_suppresses_reasoning(scripted: ScriptedModel) -> None:
    class Quiet(RecordingAgent):
        send_reasoning = False

    scripted.add(step(reasoning("let me think"), text("42")))
    agent = Quiet(model=scripted, store=ta.MemoryStore())
    chunks = await drain(agent.chat("meaning of life?"))
    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    # Suppressed from the stream only: hooks still see the model's reasoning.
    assert agent.contexts("on_step_finish")[0].reasoning == "let me think"
    assert [c.type for c in agent.contexts("on_chunk")] == ["reasoning-delta", "text-delta"]
    scripted.assert_complete()


async def test_turn_config_can_suppress_reasoning_for_one_turn(scripted: ScriptedModel) -> None:
    scripted.extend([step(reasoning("a"), text("one")), step(reasoning("b"), text("two"))])
    agent = HookedAgent(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(send_reasoning=False))
    first = await drain(agent.chat("one"))
    agent.turn_config = None
    second = await drain(agent.chat("two"))
    assert (reasoning_chunks(first), reasoning_chunks(second)) == ([], REASONING_TYPES)
    scripted.assert_complete()


async def test_turn_config_can_send_reasoning_when_the_class_default_is_false(scripted: ScriptedModel) -> None:
    class Quiet(HookedAgent):
        send_reasoning = False

    scripted.add(step(reasoning("a"), text("one")))
    agent = Quiet(model=scripted, store=ta.MemoryStore(), turn_config=ta.TurnConfig(send_reasoning=True))
    assert reasoning_chunks(await drain(agent.chat("one"))) == REASONING_TYPES
    scripted.assert_complete()


# ------------------------------------------------------------------ hook failures


async def test_before_turn_raising_fails_save_messages_and_streams_an_error_from_chat(
    scripted: ScriptedModel,
) -> None:
    class Refusing(RecordingAgent):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            raise PermissionError("turn refused")

    agent = Refusing(model=scripted, store=ta.MemoryStore())
    chunks = await drain(agent.chat("hi"))
    assert [(c.type, c.error_text) for c in chunks] == [("error", "turn refused")]
    [(error, ctx)] = agent.contexts("on_chat_error")
    assert (type(error), ctx.stage) == (PermissionError, "turn")
    with pytest.raises(PermissionError, match=r"^turn refused$"):
        await agent.save_messages("again")
    assert scripted.requests == []
    assert agent.hooks_called() == ["on_chat_error", "on_chat_error"]  # once per failed turn, on both paths


async def test_before_step_raising_ends_the_turn_with_an_error(scripted: ScriptedModel) -> None:
    class Failing(RecordingAgent):
        async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
            raise RuntimeError("step refused")

    agent = Failing(model=scripted, store=ta.MemoryStore())
    chunks = await drain(agent.chat("hi"))
    assert chunk_types(chunks)[-1] == "error"
    assert chunks[-1].error_text == "step refused"
    assert scripted.requests == []
