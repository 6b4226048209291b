"""Turn entry points (chat, save_messages, continue_last_turn, add_messages) and the per-agent turn queue."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import RecordingAgent, chunk_types, drain

import think_actors as ta
from think_actors._turn.driver import turn_stream
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

CONTINUE_TEXT = "Continue your previous response from exactly where it left off. Do not repeat any of it."
NESTED_TEXT = "cannot be called from inside an active turn"
WAIT_S = 5.0


def make_agent(model: Any, **kwargs: Any) -> RecordingAgent:
    return RecordingAgent(model=model, store=ta.MemoryStore(), **kwargs)


def transcript(agent: ta.Think) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in agent.get_messages()]


def last_user_text(messages: list[dict[str, Any]]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def request_messages(model: ScriptedModel, index: int) -> list[dict[str, Any]]:
    """The messages of one recorded model request, without the system prompt."""
    return [m for m in model.requests[index].messages if m["role"] != "system"]


# ---------------------------------------------------------------------------------------------- results & chunks


async def test_save_messages_returns_completed_result_with_the_assistant_message(scripted: ScriptedModel) -> None:
    scripted.add(text("Hello there", chunk_size=4))
    agent = make_agent(scripted)

    result = await agent.save_messages("hi")

    assert result.status == "completed"
    assert result.request_id != ""
    assert result.error is None
    assert result.continuation is False
    assert result.message is not None
    assert result.message.role == "assistant"
    assert result.message.text == "Hello there"
    messages = agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [("user", "hi"), ("assistant", "Hello there")]
    assert messages[1] == result.message
    assert [p.type for p in result.message.parts] == ["step-start", "text"]
    scripted.assert_complete()


async def test_chat_text_turn_streams_the_exact_chunk_sequence(scripted: ScriptedModel) -> None:
    scripted.add(text("Hello there", chunk_size=4))
    agent = make_agent(scripted)

    stream = agent.chat("hi")
    chunks = await drain(stream)

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
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["Hell", "o th", "ere"]
    assert stream.status == "completed"
    messages = agent.get_messages()
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello there")]
    assert chunks[0].message_id == messages[1].id
    assert chunks[-1].finish_reason == "stop"
    assert len(agent._engine.aborts) == 0


async def test_chat_request_id_is_known_before_the_turn_starts(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)

    stream = agent.chat("hi", request_id="req-1")
    assert stream.request_id == "req-1"
    assert "req-1" in agent._engine.aborts  # cancellable while still queued
    await drain(stream)

    assert agent.contexts("before_turn")[0].request_id == "req-1"
    assert agent.contexts("on_chat_response")[0].request_id == "req-1"
    assert "req-1" not in agent._engine.aborts


async def test_hooks_fire_in_order_for_a_text_turn(scripted: ScriptedModel) -> None:
    scripted.add(text("hello"))
    agent = make_agent(scripted)

    await agent.save_messages("hi")

    assert agent.hooks_called(skip={"on_chunk"}) == ["before_turn", "before_step", "on_step_finish", "on_chat_response"]
    response = agent.contexts("on_chat_response")[0]
    assert response.status == "completed"
    assert response.continuation is False
    assert response.message == agent.get_messages()[-1]


# ---------------------------------------------------------------------------------------------- input forms


async def test_string_input_becomes_a_user_message(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)

    await agent.save_messages("what is ray?")

    user = agent.get_messages()[0]
    assert user.role == "user"
    assert [p.type for p in user.parts] == ["text"]
    assert request_messages(scripted, 0) == [{"role": "user", "content": "what is ray?"}]


async def test_uimessage_input_keeps_its_id(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)
    message = ta.user_message("hello", id="u-1")

    result = await agent.save_messages(message)

    assert [m.id for m in agent.get_messages()] == ["u-1", result.message.id]  # type: ignore[union-attr]
    assert agent.get_messages()[0] == message


async def test_list_input_appends_every_message_in_order(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)

    await agent.save_messages([ta.user_message("one", id="u-1"), "two", ta.user_message("three", id="u-3")])

    assert transcript(agent) == [("user", "one"), ("user", "two"), ("user", "three"), ("assistant", "ok")]
    assert request_messages(scripted, 0) == [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "user", "content": "three"},
    ]


async def test_chat_accepts_a_list(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)

    await drain(agent.chat([ta.user_message("one"), ta.user_message("two")]))

    assert transcript(agent) == [("user", "one"), ("user", "two"), ("assistant", "ok")]


async def test_function_input_sees_the_transcript_when_the_turn_starts(scripted: ScriptedModel) -> None:
    scripted.extend([step(delay(0.01), text("first reply")), text("second reply"), text("third reply")])
    agent = make_agent(scripted)
    await agent.load_messages()
    seen: list[list[tuple[str, str]]] = []

    def follow_up(current: list[ta.UIMessage]) -> list[ta.UIMessage]:
        seen.append([(m.role, m.text) for m in current])
        return [ta.user_message(f"you said {current[-1].text!r}")]

    async def async_follow_up(current: list[ta.UIMessage]) -> ta.UIMessage:
        seen.append([(m.role, m.text) for m in current])
        return ta.user_message(f"and then {current[-1].text!r}")

    first = asyncio.create_task(agent.save_messages("hi"))
    second = asyncio.create_task(agent.save_messages(follow_up))
    third = agent.chat(async_follow_up)
    results = await asyncio.wait_for(asyncio.gather(first, second, drain(third)), WAIT_S)

    assert [r.status for r in results[:2]] == ["completed", "completed"]
    assert third.status == "completed"
    assert seen == [
        [("user", "hi"), ("assistant", "first reply")],
        [
            ("user", "hi"),
            ("assistant", "first reply"),
            ("user", "you said 'first reply'"),
            ("assistant", "second reply"),
        ],
    ]
    assert transcript(agent) == [
        ("user", "hi"),
        ("assistant", "first reply"),
        ("user", "you said 'first reply'"),
        ("assistant", "second reply"),
        ("user", "and then 'second reply'"),
        ("assistant", "third reply"),
    ]
    scripted.assert_complete()


async def test_empty_list_runs_a_turn_on_existing_history(scripted: ScriptedModel) -> None:
    scripted.extend([text("first"), text("again")])
    agent = make_agent(scripted)
    await agent.save_messages("hi")

    result = await agent.save_messages([])

    assert result.status == "completed"
    assert transcript(agent) == [("user", "hi"), ("assistant", "first"), ("assistant", "again")]
    # The list ends with the assistant's message, so the ephemeral continue message is added (§3.6 step 6).
    assert request_messages(scripted, 1) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": CONTINUE_TEXT},
    ]


async def test_function_returning_nothing_runs_a_turn_on_existing_history(scripted: ScriptedModel) -> None:
    scripted.extend([text("first"), text("again")])
    agent = make_agent(scripted)
    await agent.save_messages("hi")

    result = await agent.save_messages(lambda current: [])

    assert result.status == "completed"
    assert transcript(agent) == [("user", "hi"), ("assistant", "first"), ("assistant", "again")]


async def test_chat_with_empty_string_still_runs_inference(scripted: ScriptedModel) -> None:
    scripted.extend([text("first"), text("still here")])
    agent = make_agent(scripted)
    await agent.save_messages("hi")

    chunks = await drain(agent.chat(""))

    assert chunk_types(chunks)[0] == "start"
    assert chunk_types(chunks)[-1] == "finish"
    assert len(scripted.requests) == 2
    assert transcript(agent) == [("user", "hi"), ("assistant", "first"), ("user", ""), ("assistant", "still here")]
    scripted.assert_complete()


async def test_input_in_wire_form_is_accepted(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)

    await agent.save_messages({"id": "w-1", "role": "user", "parts": [{"type": "text", "text": "from the wire"}]})

    assert agent.get_messages()[0].id == "w-1"
    assert transcript(agent)[0] == ("user", "from the wire")


async def test_input_of_an_unsupported_type_raises_configuration_error(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    with pytest.raises(ta.ConfigurationError, match="cannot make messages of int"):
        await agent.save_messages(42)


# ---------------------------------------------------------------------------------------------- the queue


class OrderAgent(RecordingAgent):
    """Logs ``start <text>`` at before_turn and ``finish <text>`` at on_chat_response, and counts overlap."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.log: list[str] = []
        self.running = 0
        self.max_running = 0

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.log.append(f"start {last_user_text(ctx.messages)}")
        return await super().before_turn(ctx)

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.log.append(f"finish {result.message.text}")
        self.running -= 1
        await super().on_chat_response(result)


async def test_concurrent_chat_and_save_messages_run_fifo_without_overlap() -> None:
    model = ScriptedModel([step(delay(0.01), text(f"reply {n}", chunk_size=2), delay(0.01)) for n in range(1, 5)])
    agent = OrderAgent(model=model, store=ta.MemoryStore())
    await agent.load_messages()

    tasks = [
        asyncio.create_task(drain(agent.chat("q1"))),
        asyncio.create_task(agent.save_messages("q2")),
        asyncio.create_task(drain(agent.chat("q3"))),
        asyncio.create_task(agent.save_messages("q4")),
    ]
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)

    assert agent.log == [
        "start q1",
        "finish reply 1",
        "start q2",
        "finish reply 2",
        "start q3",
        "finish reply 3",
        "start q4",
        "finish reply 4",
    ]
    assert agent.max_running == 1
    assert transcript(agent) == [
        ("user", "q1"),
        ("assistant", "reply 1"),
        ("user", "q2"),
        ("assistant", "reply 2"),
        ("user", "q3"),
        ("assistant", "reply 3"),
        ("user", "q4"),
        ("assistant", "reply 4"),
    ]
    assert not agent._engine.queue.busy
    assert len(agent._engine.aborts) == 0


# ---------------------------------------------------------------------------------------------- nested guard


class ChainingAgent(RecordingAgent):
    """Its response hook starts turns through every blocking entry point (the seed: the lock is released)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.results: list[Any] = []

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await super().on_chat_response(result)
        self.results.append(await self.save_messages("follow-up"))
        self.results.append(await self.continue_last_turn())
        self.results.append([c.type async for c in self.chat("one more")][-1])
        await self.add_messages(ta.user_message("noted from the hook", id="note"))


async def test_turns_started_from_the_response_hook_run_and_do_not_recurse(scripted: ScriptedModel) -> None:
    scripted.extend([text("reply"), text("follow-up reply"), text(" continued"), text("last")])
    agent = ChainingAgent(model=scripted, store=ta.MemoryStore())

    result = await asyncio.wait_for(agent.save_messages("hi"), WAIT_S)

    assert result.status == "completed"
    assert [r.status for r in agent.results[:2]] == ["completed", "completed"]
    assert agent.results[1].continuation is True
    assert agent.results[2] == "finish"
    assert transcript(agent) == [
        ("user", "hi"),
        ("assistant", "reply"),
        ("user", "follow-up"),
        ("assistant", "follow-up reply"),
        ("assistant", " continued"),
        ("user", "one more"),
        ("assistant", "last"),
        ("user", "noted from the hook"),
    ]
    # Turns started from the hook fire no response hook of their own (the re-entrancy guard).
    assert [r.message.text for r in agent.contexts("on_chat_response")] == ["reply"]
    assert agent.hooks_called(skip={"on_chunk"}).count("before_turn") == 4
    scripted.assert_complete()


async def test_blocking_admission_inside_a_tool_raises_and_add_messages_works() -> None:
    raised: list[BaseException] = []

    @ta.tool
    async def remember(note: str, context: ta.ToolContext) -> str:
        """Store a note."""
        agent = context.agent
        try:
            await agent.save_messages("nested")
        except ta.NestedTurnError as err:
            raised.append(err)
        try:
            agent.chat("nested")
        except ta.NestedTurnError as err:
            raised.append(err)
        await agent.add_messages(ta.user_message(note, id="note"))
        return "stored"

    model = ScriptedModel([tool_call("remember", {"note": "buy milk"}, id="c1"), text("done")])
    agent = make_agent(model, tools=[remember])

    result = await asyncio.wait_for(agent.save_messages("remember milk"), WAIT_S)

    assert result.status == "completed"
    assert [type(e) for e in raised] == [ta.NestedTurnError, ta.NestedTurnError]
    assert all(NESTED_TEXT in str(e) for e in raised)
    messages = agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [
        ("user", "remember milk"),
        ("user", "buy milk"),
        ("assistant", "done"),
    ]
    assert messages[2].tool_parts[0].state == "output-available"
    assert messages[2].tool_parts[0].output == "stored"
    model.assert_complete()


async def test_another_agents_save_messages_inside_a_turn_works() -> None:
    helper = make_agent(ScriptedModel([text("helper answer")]))

    @ta.tool
    async def ask_helper(question: str) -> str:
        """Ask the helper agent."""
        result = await helper.save_messages(question)
        assert result.message is not None
        return result.message.text

    model = ScriptedModel([tool_call("ask_helper", {"question": "2+2?"}), text("helper says 4")])
    agent = make_agent(model, tools=[ask_helper])

    result = await asyncio.wait_for(agent.save_messages("ask the helper"), WAIT_S)

    assert result.status == "completed"
    assert transcript(helper) == [("user", "2+2?"), ("assistant", "helper answer")]
    assert agent.get_messages()[-1].tool_parts[0].output == "helper answer"
    assert request_messages(model, 1)[-1] == {
        "role": "tool",
        "tool_call_id": agent.get_messages()[-1].tool_parts[0].tool_call_id,
        "content": "helper answer",
    }


async def test_a_blocking_turn_while_reading_the_agents_own_stream_raises(scripted: ScriptedModel) -> None:
    scripted.add(text("reply"))
    agent = make_agent(scripted)
    raised: list[BaseException] = []

    async for chunk in agent.chat("hi"):
        if chunk.type == "start":
            try:
                await agent.save_messages("nested")  # would wait for the slot this stream holds, forever
            except ta.NestedTurnError as err:
                raised.append(err)

    assert len(raised) == 1
    assert NESTED_TEXT in str(raised[0])
    assert transcript(agent) == [("user", "hi"), ("assistant", "reply")]


async def test_concurrent_non_nested_calls_are_not_rejected(scripted: ScriptedModel) -> None:
    scripted.extend([step(delay(0.01), text("one")), text("two")])
    agent = make_agent(scripted)
    await agent.load_messages()

    results = await asyncio.wait_for(asyncio.gather(agent.save_messages("a"), agent.save_messages("b")), WAIT_S)

    assert [r.status for r in results] == ["completed", "completed"]


# ---------------------------------------------------------------------------------------------- continue_last_turn


async def test_continue_last_turn_skips_on_an_empty_transcript(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    result = await agent.continue_last_turn()

    assert result == ta.TurnResult(request_id="", status="skipped", continuation=True)
    assert agent.calls == []
    assert scripted.requests == []


async def test_continue_last_turn_skips_when_the_latest_message_is_the_users(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("waiting for a reply"))

    result = await agent.continue_last_turn()

    assert result.request_id == ""
    assert result.status == "skipped"
    assert scripted.requests == []
    assert agent.calls == []


async def test_continue_last_turn_sends_an_ephemeral_continue_message(scripted: ScriptedModel) -> None:
    scripted.extend([text("The answer is"), text(" 42.")])
    agent = make_agent(scripted)
    first = await agent.save_messages("what is the answer?")
    assert first.message is not None

    result = await agent.continue_last_turn(body={"k": "v"})

    assert result.status == "completed"
    assert result.continuation is True
    assert result.request_id not in ("", first.request_id)
    assert result.message is not None
    assert result.message.id != first.message.id
    assert request_messages(scripted, 1) == [
        {"role": "user", "content": "what is the answer?"},
        {"role": "assistant", "content": "The answer is"},
        {"role": "user", "content": CONTINUE_TEXT},
    ]
    assert transcript(agent) == [("user", "what is the answer?"), ("assistant", "The answer is"), ("assistant", " 42.")]
    assert CONTINUE_TEXT not in [m.text for m in await agent.store.list_messages()]
    turn_ctx = agent.contexts("before_turn")[1]
    assert turn_ctx.continuation is True
    assert turn_ctx.body == {"k": "v"}
    responses = agent.contexts("on_chat_response")
    assert [r.continuation for r in responses] == [False, True]
    assert responses[1].message == result.message
    scripted.assert_complete()


async def test_continuation_start_chunk_carries_no_message_id(scripted: ScriptedModel) -> None:
    scripted.extend([text("part one"), text(" part two")])
    agent = make_agent(scripted)
    await agent.save_messages("go")

    # No public streamed continuation exists yet; drive the engine's turn stream directly.
    spec = agent._spec("programmatic", None, continuation=True)
    chunks = [chunk async for chunk in turn_stream(agent._engine, spec)]

    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert chunks[0].message_id is None
    assert transcript(agent) == [("user", "go"), ("assistant", "part one"), ("assistant", " part two")]
    assert agent.get_messages()[2].id == spec.outcome.message.id  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- setup errors


async def test_save_messages_without_a_model_raises_configuration_error() -> None:
    agent = RecordingAgent(store=ta.MemoryStore())

    with pytest.raises(ta.ConfigurationError, match="has no model"):
        await agent.save_messages("hi")

    assert transcript(agent) == [("user", "hi")]  # the input was persisted before setup failed
    assert agent.hooks_called() == ["before_turn", "on_chat_error"]  # before_turn may still supply a model
    assert not agent._engine.queue.busy
    assert len(agent._engine.aborts) == 0


async def test_chat_without_a_model_streams_an_error_and_calls_on_chat_error() -> None:
    agent = RecordingAgent(store=ta.MemoryStore())

    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunk_types(chunks) == ["error"]
    assert "has no model" in chunks[0].error_text
    assert stream.status == "error"
    assert agent.hooks_called() == ["before_turn", "on_chat_error"]
    err, ctx = agent.contexts("on_chat_error")[0]
    assert isinstance(err, ta.ConfigurationError)
    assert ctx == ta.ChatErrorContext(request_id=stream.request_id, stage="turn", messages_persisted=True)
    assert transcript(agent) == [("user", "hi")]
    assert len(agent._engine.aborts) == 0


class FailingSetupAgent(RecordingAgent):
    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await super().before_turn(ctx)
        raise RuntimeError("setup exploded")


async def test_before_turn_raising_fails_save_messages(scripted: ScriptedModel) -> None:
    agent = FailingSetupAgent(model=scripted, store=ta.MemoryStore())

    with pytest.raises(RuntimeError, match="setup exploded"):
        await agent.save_messages("hi")

    assert agent.hooks_called() == ["before_turn", "on_chat_error"]
    [(_, ctx)] = agent.contexts("on_chat_error")
    assert (ctx.stage, ctx.messages_persisted) == ("turn", True)
    assert scripted.requests == []
    assert not agent._engine.queue.busy


async def test_before_turn_raising_streams_an_error_from_chat(scripted: ScriptedModel) -> None:
    agent = FailingSetupAgent(model=scripted, store=ta.MemoryStore())

    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunk_types(chunks) == ["error"]
    assert chunks[0].error_text == "setup exploded"
    assert agent.hooks_called() == ["before_turn", "on_chat_error"]
    err, ctx = agent.contexts("on_chat_error")[0]
    assert str(err) == "setup exploded"
    assert ctx.stage == "turn"
    assert ctx.messages_persisted is True
    assert scripted.requests == []
    assert transcript(agent) == [("user", "hi")]


class ReplacingErrorAgent(FailingSetupAgent):
    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        await super().on_chat_error(error, ctx)
        return ValueError(f"friendly: {error}")


async def test_on_chat_error_replacement_changes_the_reported_error(scripted: ScriptedModel) -> None:
    agent = ReplacingErrorAgent(model=scripted, store=ta.MemoryStore())

    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunk_types(chunks) == ["error"]
    assert chunks[0].error_text == "friendly: setup exploded"


class StringErrorAgent(FailingSetupAgent):
    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        return "something went wrong"


async def test_on_chat_error_may_return_a_plain_string(scripted: ScriptedModel) -> None:
    agent = StringErrorAgent(model=scripted, store=ta.MemoryStore())

    chunks = await drain(agent.chat("hi"))

    assert [c.error_text for c in chunks] == ["something went wrong"]


class RaisingErrorHookAgent(FailingSetupAgent):
    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        raise KeyError("hook broke")


async def test_on_chat_error_raising_reports_the_original_error(scripted: ScriptedModel) -> None:
    agent = RaisingErrorHookAgent(model=scripted, store=ta.MemoryStore())

    chunks = await drain(agent.chat("hi"))

    assert [c.error_text for c in chunks] == ["setup exploded"]


async def test_save_messages_of_nothing_on_a_fresh_agent_raises_no_messages_error(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    with pytest.raises(ta.NoMessagesError, match="No messages to send to the model") as info:
        await agent.save_messages([])

    assert info.value.stage == "turn"
    assert info.value.messages_persisted is True
    assert scripted.requests == []
    assert agent.get_messages() == []


async def test_a_failed_setup_releases_the_slot_for_the_next_turn(scripted: ScriptedModel) -> None:
    scripted.add(text("recovered"))
    agent = make_agent(scripted)

    with pytest.raises(ta.NoMessagesError):
        await agent.save_messages([])
    result = await asyncio.wait_for(agent.save_messages("hi"), WAIT_S)

    assert result.status == "completed"
    assert transcript(agent) == [("user", "hi"), ("assistant", "recovered")]


# ---------------------------------------------------------------------------------------------- provider errors


async def test_provider_error_is_in_band(scripted: ScriptedModel) -> None:
    scripted.add(error(ta.RateLimitError("slow down", provider="scripted", status_code=429)))
    agent = make_agent(scripted)

    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunk_types(chunks) == ["start", "error"]  # the model's stream never started: no step (AI SDK)
    assert chunks[-1].error_text == "slow down"
    assert stream.status == "error"
    [(err, ctx)] = agent.contexts("on_chat_error")
    assert (type(err), ctx.stage, ctx.messages_persisted, ctx.classification) == (
        ta.RateLimitError,
        "stream",
        True,
        None,
    )
    # The seed: no part of the reply exists, so on_chat_error alone handles the failure.
    assert agent.contexts("on_chat_response") == []
    assert transcript(agent) == [("user", "hi")]  # nothing but a step-start: no assistant message


async def test_provider_error_returns_an_error_result(scripted: ScriptedModel) -> None:
    scripted.add(error(ta.RateLimitError("slow down")))
    agent = make_agent(scripted)

    result = await agent.save_messages("hi")

    assert result.status == "error"
    assert result.error == "slow down"
    assert result.message is None
    assert agent.hooks_called() == ["before_turn", "before_step", "on_chat_error"]


async def test_provider_error_after_partial_text_persists_the_partial(scripted: ScriptedModel) -> None:
    scripted.add(error(ta.ModelConnectionError("stream cut"), after=text("Half an ans", chunk_size=5)))
    agent = make_agent(scripted)

    stream = agent.chat("hi")
    chunks = await drain(stream)

    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-delta",
        "error",
    ]
    assert chunks[-1].error_text == "stream cut"
    messages = agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [("user", "hi"), ("assistant", "Half an ans")]
    assert messages[1].id == chunks[0].message_id
    response = agent.contexts("on_chat_response")[0]
    assert response.status == "error"
    assert response.message == messages[1]
    assert response.error == "stream cut"
    # The partial is persisted before on_chat_error runs; the response hook runs last, after the lock.
    assert agent.hooks_called(skip={"on_chunk"})[-2:] == ["on_chat_error", "on_chat_response"]


async def test_the_turn_after_a_provider_error_runs_normally(scripted: ScriptedModel) -> None:
    scripted.extend([error(ta.ProviderError("boom")), text("fine now")])
    agent = make_agent(scripted)

    first = await agent.save_messages("hi")
    second = await agent.save_messages("again")

    assert (first.status, second.status) == ("error", "completed")
    assert transcript(agent) == [("user", "hi"), ("user", "again"), ("assistant", "fine now")]


async def test_running_out_of_scripted_steps_reports_an_error_instead_of_hanging(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    result = await asyncio.wait_for(agent.save_messages("hi"), WAIT_S)

    assert result.status == "error"
    assert result.error is not None
    assert "ran out of steps" in result.error
    err, ctx = agent.contexts("on_chat_error")[0]
    assert isinstance(err, ta.ScriptError)
    assert ctx.stage == "stream"
    assert not agent._engine.queue.busy


async def test_running_out_of_steps_in_chat_streams_an_error(scripted: ScriptedModel) -> None:
    scripted.add(tool_call("missing_tool", {}))  # an unknown tool: the loop asks for a second step
    agent = make_agent(scripted)

    chunks = await asyncio.wait_for(drain(agent.chat("hi")), WAIT_S)

    assert chunk_types(chunks)[-1] == "error"
    assert "ran out of steps" in chunks[-1].error_text
    assert len(scripted.requests) == 2


async def test_assert_complete_detects_leftover_steps(scripted: ScriptedModel) -> None:
    scripted.extend([text("one"), text("never requested")])
    agent = make_agent(scripted)
    await agent.save_messages("hi")

    with pytest.raises(ta.ScriptError, match="1 of 2 steps were never requested"):
        scripted.assert_complete()


# ---------------------------------------------------------------------------------------------- add_messages


def assistant(text_: str, *, id: str) -> ta.UIMessage:
    return ta.UIMessage(id=id, role="assistant", parts=(ta.TextPart(text=text_),))


async def test_add_messages_appends_without_a_turn(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    await agent.add_messages([ta.user_message("q", id="u1"), assistant("a", id="a1")])

    assert [m.id for m in agent.get_messages()] == ["u1", "a1"]
    assert scripted.requests == []
    assert agent.calls == []


async def test_add_messages_append_is_idempotent_by_id(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages([ta.user_message("q", id="u1"), assistant("a", id="a1")])

    await agent.add_messages(ta.user_message("changed", id="u1"))

    assert [(m.id, m.text) for m in agent.get_messages()] == [("u1", "q"), ("a1", "a")]
    assert len(await agent.store.list_messages()) == 2


async def test_add_messages_upsert_replaces_in_place(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages([ta.user_message("q", id="u1"), assistant("a", id="a1")])

    await agent.add_messages(ta.user_message("edited", id="u1"), mode="upsert")

    assert [(m.id, m.text) for m in agent.get_messages()] == [("u1", "edited"), ("a1", "a")]
    assert (await agent.store.get_message("u1")).text == "edited"  # type: ignore[union-attr]


async def test_add_messages_upsert_of_a_new_id_appends(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("q", id="u1"))

    await agent.add_messages(assistant("a", id="a1"), mode="upsert")

    assert [m.id for m in agent.get_messages()] == ["u1", "a1"]


async def test_add_messages_rejects_an_unknown_mode(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    with pytest.raises(ta.ConfigurationError, match="mode"):
        await agent.add_messages(ta.user_message("q"), mode="replace")


async def test_add_messages_with_no_parent_starts_a_root_branch(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages([ta.user_message("old q", id="u1"), assistant("old a", id="a1")])

    await agent.add_messages([ta.user_message("new q", id="u2"), assistant("new a", id="a2")], parent_id=None)

    assert [m.id for m in agent.get_messages()] == ["u2", "a2"]
    assert sorted(m.id for m in await agent.store.list_messages()) == ["a1", "a2", "u1", "u2"]


async def test_add_messages_under_an_explicit_parent_branches_there(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages([ta.user_message("q", id="u1"), assistant("a", id="a1"), ta.user_message("x", id="u2")])

    await agent.add_messages(ta.user_message("y", id="u3"), parent_id="a1")

    assert [m.id for m in agent.get_messages()] == ["u1", "a1", "u3"]


async def test_add_messages_chains_entries_in_order(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("root", id="r"))

    await agent.add_messages([assistant("one", id="m1"), ta.user_message("two", id="m2"), assistant("three", id="m3")])

    assert [m.id for m in agent.get_messages()] == ["r", "m1", "m2", "m3"]


async def test_add_messages_accepts_a_function_of_the_transcript(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("q", id="u1"))

    await agent.add_messages(lambda current: [assistant(f"{len(current)} so far", id="a1")])

    assert transcript(agent) == [("user", "q"), ("assistant", "1 so far")]


async def test_add_messages_of_nothing_is_a_no_op(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("q", id="u1"))

    await agent.add_messages([])

    assert [m.id for m in agent.get_messages()] == ["u1"]


async def test_add_messages_under_an_unknown_parent_raises(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    with pytest.raises(ta.StoreError, match="does not exist"):
        await agent.add_messages(ta.user_message("q"), parent_id="nope")


async def test_get_messages_returns_a_copy(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    await agent.add_messages(ta.user_message("q", id="u1"))

    copy = agent.get_messages()
    copy.append(assistant("sneaky", id="x"))
    copy.clear()

    assert [m.id for m in agent.get_messages()] == ["u1"]
    assert agent.get_messages() is not agent.get_messages()


async def test_a_turn_after_add_messages_sees_them(scripted: ScriptedModel) -> None:
    scripted.add(text("ok"))
    agent = make_agent(scripted)
    await agent.add_messages([ta.user_message("context", id="u1"), assistant("noted", id="a1")])

    await agent.save_messages("now answer")

    assert request_messages(scripted, 0) == [
        {"role": "user", "content": "context"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "now answer"},
    ]


async def test_bad_input_is_refused_before_anything_is_persisted(scripted: ScriptedModel) -> None:
    agent = RecordingAgent(model=scripted, store=ta.MemoryStore())
    with pytest.raises(ta.ConfigurationError, match="invalid message"):
        agent.chat({"role": "robot", "parts": []})
    with pytest.raises(ta.ConfigurationError, match="cannot make messages of int"):
        await agent.save_messages(42)
    with pytest.raises(ta.ConfigurationError, match="invalid message"):
        await agent.save_messages([ta.user_message("kept?"), {"id": "x"}])
    assert await agent.load_messages() == []
    assert agent.hooks_called() == []
    scripted.assert_complete()
