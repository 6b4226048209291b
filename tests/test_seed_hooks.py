"""The seed document's hook contract (shared/seeds/), sentence by sentence, with its examples in Python.

Each test names the seed sentence it pins down. Overflow recovery (the seed's second half) is in
test_overflow_recovery.py; the classifier corpus in test_overflow_classifier.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from helpers import RecordingAgent, chunk_types, drain
from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, error, reasoning, step, text, tool_call


@ta.tool
async def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@ta.tool
async def write(path: str, content: str) -> str:
    """Write a file."""
    return "ok"


@ta.tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@ta.tool
async def delete(path: str) -> str:
    """Delete a file."""
    raise AssertionError("a blocked tool must never run")


@ta.tool
async def weather(city: str) -> str:
    """The weather in a city (uncached)."""
    raise AssertionError("a substituted tool must never run")


@ta.tool
async def flaky(x: int) -> str:
    """Fails."""
    raise RuntimeError("disk on fire")


def offered(request: ta.ModelRequest) -> list[str]:
    return [t["function"]["name"] for t in request.tools]


# ---------------------------------------------------------------------- hooks fire on every entry point

ALL_HOOKS = ["before_turn", "before_step", "on_step_finish", "on_chat_response"]


async def test_hooks_fire_on_every_entry_point() -> None:
    """ "Hooks fire on every turn regardless of the entry point: ... child agent chat(), saveMessages(),
    continueLastTurn() ..." (WebSocket and submissions arrive with later entry points)."""

    class Child(RecordingAgent):
        pass

    class Parent(RecordingAgent):
        async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
            await super().on_chat_response(result)

    model = ScriptedModel([text("a"), text("b"), text(" c"), text("child answer")])
    parent = Parent(model=model, store=ta.MemoryStore())
    await drain(parent.chat("via chat"))
    await parent.save_messages("via save_messages")
    await parent.continue_last_turn()
    child = await parent.sub_agent(Child, "helper", model=model)
    await drain(child.chat("via a child agent's chat"))

    assert parent.hooks_called(skip={"on_chunk"}) == ALL_HOOKS * 3
    assert child.agent.hooks_called(skip={"on_chunk"}) == ALL_HOOKS
    model.assert_complete()


async def test_a_two_tool_turn_runs_the_flowchart_in_order() -> None:
    """The flowchart: configureSession once at startup, beforeTurn, then per step beforeStep -> onChunk ->
    beforeToolCall -> tool -> afterToolCall -> onStepFinish, then onChatResponse after the lock is released."""
    sessions: list[str] = []

    class Flow(RecordingAgent):
        async def configure_session(self, session: ta.Session) -> ta.Session:
            sessions.append("configure_session")
            return session

        async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
            # The lock is released: this turn's slot is free.
            self.calls.append(("on_chat_response", self._engine.queue.active_request_id))

    model = ScriptedModel(
        [tool_call("read", {"path": "a"}), tool_call("get_weather", {"city": "Oslo"}), text("done"), text("x")]
    )
    agent = Flow(model=model, tools=[read, get_weather], store=ta.MemoryStore())
    await agent.save_messages("go")
    await agent.save_messages("again")

    assert sessions == ["configure_session"]  # once at startup, not per turn
    first = agent.hooks_called()[: agent.hooks_called().index("on_chat_response") + 1]
    tool_step = ["before_step", "on_chunk", "on_chunk", "on_chunk", "on_chunk", "before_tool_call"]
    tool_step += ["after_tool_call", "on_chunk", "on_step_finish"]
    assert first == [
        "before_turn",
        *tool_step,
        *tool_step,
        "before_step",
        "on_chunk",
        "on_step_finish",
        "on_chat_response",
    ]
    assert agent.contexts("on_chat_response")[0] is None  # no turn held the slot while the hook ran


# ---------------------------------------------------------------------- before_turn


async def test_before_turn_receives_the_assembled_context() -> None:
    """ "Receives the fully assembled context: the system prompt, the converted messages, the merged tools and
    the model. Return a TurnConfig to override any part, or nothing to accept the defaults.\""""
    model = ScriptedModel([text("hello")])
    agent = RecordingAgent(model=model, instructions="Be brief.", tools=[read], store=ta.MemoryStore())
    await agent.save_messages("hi")

    [ctx] = agent.contexts("before_turn")
    assert ctx.system.startswith("Be brief.")
    assert ctx.messages == [{"role": "user", "content": "hi"}]
    assert list(ctx.tools) == ["read"]
    assert ctx.model is model
    assert model.requests[0].messages[0] == {"role": "system", "content": ctx.system}  # None accepted it all


class CheapContinuations(ta.Think):
    """Switch to a cheaper model for continuation turns."""

    def __init__(self, *args: Any, cheap_model: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cheap_model = cheap_model

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if ctx.continuation:
            return ta.TurnConfig(model=self.cheap_model)
        return None


async def test_example_cheaper_model_for_continuations() -> None:
    main, cheap = ScriptedModel([text("first part")], model_id="main"), ScriptedModel([text(" rest")])
    agent = CheapContinuations(model=main, cheap_model=cheap, store=ta.MemoryStore())
    await agent.save_messages("write an essay")
    await agent.continue_last_turn()

    assert (len(main.requests), len(cheap.requests)) == (1, 1)
    assert [m.text for m in agent.get_messages()] == ["write an essay", "first part", " rest"]


class LimitedTools(ta.Think):
    tools = (read, write, get_weather, delete)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        return ta.TurnConfig(active_tools=["read", "write", "get_weather"])


async def test_example_active_tools_limit_what_the_model_may_call() -> None:
    model = ScriptedModel([text("ok")])
    await LimitedTools(model=model, store=ta.MemoryStore()).save_messages("hi")
    assert offered(model.requests[0]) == ["read", "write", "get_weather"]


class EditorContext(ta.Think):
    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if ctx.body and ctx.body.get("selected_file"):
            return ta.TurnConfig(system=ctx.system + f"\n\nUser is editing: {ctx.body['selected_file']}")
        return None


async def test_example_per_turn_context_from_the_request_body() -> None:
    model = ScriptedModel([text("sure"), text("ok")])
    agent = EditorContext(model=model, instructions="Help with code.", store=ta.MemoryStore())
    await agent.save_messages("fix it", body={"selected_file": "src/app.py"})
    await agent.save_messages("and now?")

    assert model.requests[0].messages[0]["content"] == "Help with code.\n\nUser is editing: src/app.py"
    assert model.requests[1].messages[0]["content"] == "Help with code."


class QuietContinuations(ta.Think):
    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if ctx.continuation:
            return ta.TurnConfig(send_reasoning=False)
        return None


async def test_example_hide_reasoning_on_continuations() -> None:
    model = ScriptedModel([step(reasoning("hmm"), text("a")), step(reasoning("more"), text("b"))])
    agent = QuietContinuations(model=model, store=ta.MemoryStore())
    first = await drain(agent.chat("think"))
    assert "reasoning-delta" in chunk_types(first)
    result = await agent.continue_last_turn()
    assert [p.type for p in result.message.parts] == ["step-start", "text"]  # type: ignore[union-attr]


class Result(BaseModel):
    severity: Literal["low", "high"]


class Structured(ta.Think):
    tools = (read,)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if ctx.body and ctx.body.get("mode") == "structured-answer":
            return ta.TurnConfig(output=Result, active_tools=[])
        return None


async def test_example_structured_output_for_one_turn() -> None:
    model = ScriptedModel([text(json.dumps({"severity": "high"})), text("plain")])
    agent = Structured(model=model, store=ta.MemoryStore())
    structured = await agent.save_messages("rate it", body={"mode": "structured-answer"})
    plain = await agent.save_messages("chat")

    assert structured.output == Result(severity="high")
    assert model.requests[0].tools == []
    assert model.requests[0].response_format["json_schema"]["name"] == "Result"  # type: ignore[index]
    assert (plain.output, model.requests[1].response_format, offered(model.requests[1])) == (None, None, ["read"])


def test_output_is_a_turn_level_setting_only() -> None:
    """ "output is a turn-level setting only ... beforeStep cannot switch structured output within a step.\""""
    with pytest.raises(TypeError):
        ta.StepConfig(output=Result)  # type: ignore[call-arg]


# ---------------------------------------------------------------------- before_step


class ToolsOnlyFirst(ta.Think):
    tools = (read,)

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        if ctx.step_number > 0:
            return ta.StepConfig(active_tools=[])
        return None


async def test_example_before_step_by_step_number() -> None:
    """ "Called before each step ... use beforeStep when the decision depends on the step number or the results
    of previous steps.\""""
    model = ScriptedModel([tool_call("read", {"path": "x"}), text("done")])
    await ToolsOnlyFirst(model=model, store=ta.MemoryStore()).save_messages("go")
    assert [offered(r) for r in model.requests] == [["read"], []]


# ---------------------------------------------------------------------- before_tool_call / after_tool_call


class Guarded(RecordingAgent):
    tools = (delete, weather)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.is_read_only_mode = True
        self.weather_cache = {json.dumps({"city": "Oslo"}): "cached: rain"}

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        await super().before_tool_call(ctx)
        if ctx.tool_name == "delete" and self.is_read_only_mode:
            return ta.Block("delete is disabled in read-only mode")
        if ctx.tool_name == "weather":
            cached = self.weather_cache.get(json.dumps(ctx.input))
            if cached:
                return ta.Substitute(cached)
        return None


async def test_example_block_and_substitute_and_their_success_flags() -> None:
    """Block / substitute; "for blocked and substituted calls success is true, because the model gets a valid
    tool result. Only exceptions thrown by the original execution show up as success: false.\""""
    model = ScriptedModel(
        [
            step(tool_call("delete", {"path": "/etc"}, id="d"), tool_call("weather", {"city": "Oslo"}, id="w")),
            text("ok"),
        ]
    )
    agent = Guarded(model=model, store=ta.MemoryStore())
    await agent.save_messages("clean up and check the weather")

    results = {c.tool_call_id: (c.success, c.output) for c in agent.contexts("after_tool_call")}
    assert results == {"d": (True, "delete is disabled in read-only mode"), "w": (True, "cached: rain")}
    tool_messages = {m["tool_call_id"]: m["content"] for m in model.requests[1].messages if m["role"] == "tool"}
    assert tool_messages == {"d": "delete is disabled in read-only mode", "w": "cached: rain"}


class Analytics(ta.Think):
    tools = (get_weather, flaky)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.data_points: list[tuple[list[str], list[int]]] = []
        self.failures: list[str] = []

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        if not ctx.success:
            self.failures.append(f"{ctx.tool_name}: {ctx.error}")
            return
        self.data_points.append(([ctx.tool_name], [len(json.dumps(ctx.output))]))


async def test_example_after_tool_call_analytics_and_thrown_errors() -> None:
    model = ScriptedModel(
        [step(tool_call("get_weather", {"city": "Rome"}), tool_call("flaky", {"x": 1})), text("reported")]
    )
    agent = Analytics(model=model, store=ta.MemoryStore())
    await agent.save_messages("weather?")
    assert agent.data_points == [(["get_weather"], [len(json.dumps("sunny in Rome"))])]
    assert agent.failures == ["flaky: disk on fire"]


async def test_a_tool_returning_an_async_iterable_is_collapsed_to_its_final_value() -> None:
    """ "If a wrapped tool returns an AsyncIterable for preliminary results, Think collapses it to its final
    value" — a tool that returns an iterable (not an async-generator tool, which streams preliminary results)."""

    async def numbers() -> Any:
        for n in (1, 2, 3):
            yield n

    @ta.tool
    async def count() -> Any:
        """Count."""
        return numbers()

    model = ScriptedModel([tool_call("count", {}), text("3")])
    agent = RecordingAgent(model=model, tools=[count], store=ta.MemoryStore())
    chunks = await drain(agent.chat("count"))
    outputs = [(c.output, c.preliminary) for c in chunks if c.type == "tool-output-available"]
    assert outputs == [(3, None)]


# ---------------------------------------------------------------------- on_step_finish, on_chunk


class StepLogger(ta.Think):
    tools = (read,)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lines: list[str] = []

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.lines.append(
            f"Step {ctx.step_number} ({ctx.finish_reason}): {ctx.usage.input_tokens}in/{ctx.usage.output_tokens}out"
        )


async def test_example_on_step_finish_usage_line() -> None:
    model = ScriptedModel(
        [
            step(tool_call("read", {"path": "a"}), usage=ta.Usage(input_tokens=120, output_tokens=9)),
            step(text("done"), usage=ta.Usage(input_tokens=150, output_tokens=2)),
        ]
    )
    agent = StepLogger(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("go")
    assert agent.lines == ["Step 0 (tool_calls): 120in/9out", "Step 1 (stop): 150in/2out"]
    assert result.usage == ta.Usage(input_tokens=270, output_tokens=11)


async def test_on_step_finish_gets_the_full_step_record() -> None:
    """ "StepContext is the AI SDK's step-finish event: generated text, reasoning, files, sources, typed tool
    calls and their results, usage, warnings, request and response metadata, and provider metadata.\""""
    from think_actors.testing import file, source

    usage = ta.Usage(input_tokens=10, output_tokens=4, total_tokens=14)
    model = ScriptedModel(
        [
            step(
                reasoning("consider"),
                text("see the docs"),
                source("https://docs.ray.io", title="Ray docs"),
                file("data:image/png;base64,AAAA", "image/png"),
                usage=usage,
                warnings=("temperature is not supported",),
                provider_metadata={"openai": {"system_fingerprint": "fp_1"}},
                cost_usd=0.0021,
            )
        ],
        model_id="test-model",
    )
    agent = RecordingAgent(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("where?")

    [record] = agent.contexts("on_step_finish")
    assert (record.text, record.reasoning, record.reasoning_text) == ("see the docs", "consider", "consider")
    assert [(s.url, s.title) for s in record.sources] == [("https://docs.ray.io", "Ray docs")]
    assert [(f.url, f.media_type) for f in record.files] == [("data:image/png;base64,AAAA", "image/png")]
    assert (record.usage, record.warnings, record.cost_usd) == (usage, ("temperature is not supported",), 0.0021)
    assert record.provider_metadata == {"openai": {"system_fingerprint": "fp_1"}}
    assert record.request is model.requests[0]
    assert (record.response.id, record.response.model) == ("scripted-1", "test-model")
    assert record.response.messages == ({"role": "assistant", "content": "see the docs"},)
    assert (result.usage, result.cost_usd) == (usage, 0.0021)
    [response] = agent.contexts("on_chat_response")
    assert (response.usage, response.cost_usd) == (usage, 0.0021)
    assert [p.type for p in result.message.parts] == ["step-start", "reasoning", "text", "source-url", "file"]  # type: ignore[union-attr]


async def test_on_chunk_fires_for_every_streaming_chunk_and_only_observes() -> None:
    class Counter(ta.Think):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.tokens = 0

        async def on_chunk(self, ctx: ta.ChunkContext) -> Any:
            if ctx.type == "text-delta":
                self.tokens += 1
            return "ignored"

    model = ScriptedModel([text("one two three", chunk_size=4)])
    agent = Counter(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("count")
    assert agent.tokens == 4
    assert result.message.text == "one two three"  # type: ignore[union-attr]


# ---------------------------------------------------------------------- on_chat_response


class ResponseLog(ta.Think):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lines: list[str] = []
        self.statuses: list[str] = []

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.statuses.append(result.status)
        if result.status == "completed":
            self.lines.append(f"Turn {result.request_id}: {len(result.message.parts)} parts")


async def test_example_on_chat_response_statuses() -> None:
    """completed / aborted / error with a partial; "if the turn fails before at least one part of the
    assistant reply is created, onChatError handles the error instead.\""""
    model = ScriptedModel(
        [
            text("hello"),
            error(ta.ProviderError("upstream broke"), after=text("half")),
            error(ta.ProviderError("refused at once")),
        ]
    )
    agent = ResponseLog(model=model, store=ta.MemoryStore())
    ok = await agent.save_messages("hi")
    partial = await agent.save_messages("more")
    failed = await agent.save_messages("again")

    assert agent.lines == [f"Turn {ok.request_id}: 2 parts"]
    assert agent.statuses == ["completed", "error"]  # the turn with no reply part fired no response hook
    assert (partial.status, failed.status) == ("error", "error")


class Chaining(ta.Think):
    """Calls save_messages from on_chat_response: safe, because the turn lock is released first."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.follow_ups: list[ta.TurnResult] = []

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        if result.status == "completed" and not self.follow_ups:
            self.follow_ups.append(await self.save_messages("Now summarise"))


async def test_example_save_messages_from_on_chat_response_is_safe() -> None:
    model = ScriptedModel([text("long answer"), text("summary")])
    agent = Chaining(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("explain")

    assert result.status == "completed"
    assert [r.status for r in agent.follow_ups] == ["completed"]
    assert [m.text for m in agent.get_messages()] == ["explain", "long answer", "Now summarise", "summary"]


# ---------------------------------------------------------------------- on_chat_error


class Friendly(RecordingAgent):
    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        await super().on_chat_error(error, ctx)
        if ctx.classification == "context_overflow":
            return RuntimeError("This conversation is too long to continue. Please start a new one.")
        return RuntimeError("Something went wrong. Please try again.")


FRIENDLY = "Something went wrong. Please try again."


async def test_example_on_chat_error_replaces_the_message_of_a_provider_error() -> None:
    model = ScriptedModel([error(ta.ProviderError("HTTP 500 raw provider text"), after=text("partial"))])
    agent = Friendly(model=model, store=ta.MemoryStore())
    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunks[-1].type == "error" and chunks[-1].error_text == FRIENDLY
    assert all("raw provider" not in str(c) for c in chunks)
    [(raw, ctx)] = agent.contexts("on_chat_error")
    assert (str(raw), ctx.stage, ctx.messages_persisted, ctx.request_id) == (
        "HTTP 500 raw provider text",
        "stream",
        True,
        stream.request_id,
    )
    # "A partial assistant message (if any) is persisted before this hook fires."
    assert [m.text for m in agent.get_messages()] == ["hi", "partial"]
    [response] = agent.contexts("on_chat_response")
    assert (response.status, response.error) == ("error", FRIENDLY)


@pytest.mark.parametrize("entry", ["chat", "save_messages"])
@pytest.mark.parametrize(
    ("case", "stage", "persisted"),
    [
        ("input_function_raises", "persist", False),
        ("before_turn_raises", "turn", True),
        ("repair_raises", "transcript", True),
        ("provider_refuses", "stream", True),
        ("provider_fails_mid_stream", "stream", True),
        ("before_step_raises", "stream", True),
        ("on_step_finish_raises", "stream", True),
    ],
)
async def test_on_chat_error_replaces_the_message_at_every_stage(
    entry: str, case: str, stage: str, persisted: bool
) -> None:
    steps = {
        "provider_refuses": [error(ta.RateLimitError("429 raw"))],
        "provider_fails_mid_stream": [error(ta.ModelConnectionError("cut"), after=text("par"))],
    }.get(case, [text("unused")] if case in ("before_step_raises", "on_step_finish_raises") else [])

    class Failing(Friendly):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            if case == "before_turn_raises":
                raise ValueError("before_turn raw")
            return None

        async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
            if case == "before_step_raises":
                raise ValueError("before_step raw")
            return None

        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            if case == "on_step_finish_raises":
                raise ValueError("on_step_finish raw")

        def repair_interrupted_tool_part(self, part: ta.ToolPart) -> Any:
            raise ValueError("repair raw")

    store = ta.MemoryStore()
    if case == "repair_raises":  # an interrupted tool call in the stored transcript needs repair
        await store.append_message(ta.user_message("earlier"))
        await store.append_message(
            ta.UIMessage(
                id="a0",
                role="assistant",
                parts=(ta.ToolPart(type="tool-read", tool_call_id="t0", state="input-available", input={}),),
            )
        )
    model = ScriptedModel(steps)
    agent = Failing(model=model, store=store)

    def raw_input(messages: list[ta.UIMessage]) -> Any:
        raise ValueError("input raw")

    message: Any = raw_input if case == "input_function_raises" else "hi"
    if entry == "chat":
        chunks = await drain(agent.chat(message))
        assert chunks[-1].type == "error"
        assert chunks[-1].error_text == FRIENDLY
    elif stage in ("persist", "turn", "transcript"):
        with pytest.raises(RuntimeError, match=FRIENDLY):
            await agent.save_messages(message)
    else:
        result = await agent.save_messages(message)
        assert (result.status, result.error) == ("error", FRIENDLY)
    [(_, ctx)] = agent.contexts("on_chat_error")  # exactly once per failed turn
    assert (ctx.stage, ctx.messages_persisted, ctx.classification) == (stage, persisted, None)


async def test_chat_request_failed_is_published_with_the_same_stage_and_persistence() -> None:
    """ "Think also emits chat:request:failed on the agents:chat observability channel with the same info.\""""
    model = ScriptedModel([error(ta.ProviderError("boom"))])
    agent = Friendly(model=model, store=ta.MemoryStore())
    events: list[ta.Event] = []
    agent.observe("agents:chat", events.append)
    result = await agent.save_messages("hi")

    [failed] = [e for e in events if e.type == "chat:request:failed"]
    assert failed.payload == {
        "requestId": result.request_id,
        "stage": "stream",
        "messagesPersisted": True,
        "error": FRIENDLY,
    }
    assert failed.channel == "agents:chat"
