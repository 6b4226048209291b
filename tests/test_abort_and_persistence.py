"""Aborting turns (cancel_chat, closing the stream, task cancellation, clear) and what each outcome persists."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import TOOL_THEN_TEXT_CHUNKS, TOOL_THEN_TEXT_HOOKS, RecordingAgent, chunk_types, drain

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, reasoning, step, text, tool_call

INTERRUPTED_TEXT = "The tool call was interrupted before a result was recorded."
WAIT_S = 5.0
SLOW_S = 5.0  # a scripted pause long enough that only an abort ends it in time
FAST_S = 2.0  # an abort must end the turn well within SLOW_S


def make_agent(model: Any, **kwargs: Any) -> RecordingAgent:
    kwargs.setdefault("store", ta.MemoryStore())
    return RecordingAgent(model=model, **kwargs)


def transcript(agent: ta.Think) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in agent.get_messages()]


def slow_reply() -> ta.testing.Step:
    """``Hello `` then a long pause then ``world``: the turn sits in the model stream after the first delta."""
    return step(text("Hello "), delay(SLOW_S), text("world"))


async def consume_until(stream: Any, chunk_type: str, seen: asyncio.Event, chunks: list[Any]) -> None:
    """Read ``stream`` into ``chunks``, setting ``seen`` when a ``chunk_type`` chunk arrives."""
    async for chunk in stream:
        chunks.append(chunk)
        if chunk.type == chunk_type:
            seen.set()


# ---------------------------------------------------------------------------------------------- cancel_chat


async def test_cancel_chat_while_the_model_streams_ends_with_an_abort_chunk() -> None:
    model = ScriptedModel([slow_reply()])
    agent = make_agent(model)
    stream = agent.chat("hi")
    chunks: list[Any] = []
    seen = asyncio.Event()
    consumer = asyncio.create_task(consume_until(stream, "text-delta", seen, chunks))
    await asyncio.wait_for(seen.wait(), WAIT_S)

    started = time.monotonic()
    assert agent.cancel_chat(stream.request_id, "user pressed stop") is True
    await asyncio.wait_for(consumer, WAIT_S)

    assert time.monotonic() - started < FAST_S
    assert chunk_types(chunks) == ["start", "start-step", "text-start", "text-delta", "abort"]
    assert chunks[-1].reason == "user pressed stop"
    assert stream.status == "aborted"
    messages = agent.get_messages()
    assert [(m.role, m.text) for m in messages] == [("user", "hi"), ("assistant", "Hello ")]
    assert messages[1].id == chunks[0].message_id
    assert await agent.store.load_messages() == messages
    response = agent.contexts("on_chat_response")[0]
    assert response.status == "aborted"
    assert response.request_id == stream.request_id
    assert response.message == messages[1]
    assert "on_chat_error" not in agent.hooks_called()
    assert len(agent._engine.aborts) == 0
    assert agent.cancel_chat(stream.request_id) is False  # finished: no longer known


class ChunkSignalAgent(RecordingAgent):
    """Sets ``first_text`` when the model's first text delta arrives."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.first_text = asyncio.Event()

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        await super().on_chunk(ctx)
        if ctx.type == "text-delta":
            self.first_text.set()


async def test_cancel_chat_aborts_save_messages() -> None:
    model = ScriptedModel([slow_reply()])
    agent = ChunkSignalAgent(model=model, store=ta.MemoryStore())
    turn = asyncio.create_task(agent.save_messages("hi"))
    await asyncio.wait_for(agent.first_text.wait(), WAIT_S)

    request_id = agent._engine.queue.active_request_id
    assert request_id is not None
    started = time.monotonic()
    assert agent.cancel_chat(request_id) is True
    result = await asyncio.wait_for(turn, WAIT_S)

    assert time.monotonic() - started < FAST_S
    assert result.status == "aborted"
    assert result.request_id == request_id
    assert result.message is not None
    assert result.message.text == "Hello "
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]
    assert agent.contexts("on_chat_response")[0].status == "aborted"
    assert len(agent._engine.aborts) == 0


async def test_cancel_all_chats_aborts_the_running_turn() -> None:
    model = ScriptedModel([slow_reply()])
    agent = ChunkSignalAgent(model=model, store=ta.MemoryStore())
    turn = asyncio.create_task(agent.save_messages("hi"))
    await asyncio.wait_for(agent.first_text.wait(), WAIT_S)

    agent.cancel_all_chats("shutting down")
    result = await asyncio.wait_for(turn, WAIT_S)

    assert result.status == "aborted"
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]


class GatedAgent(RecordingAgent):
    """``before_turn`` of the turn whose last user text is ``gate_on`` waits for ``gate``."""

    def __init__(self, *args: Any, gate_on: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gate_on = gate_on
        self.gate = asyncio.Event()
        self.at_gate = asyncio.Event()

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await super().before_turn(ctx)
        if ctx.messages[-1]["content"] == self.gate_on:
            self.at_gate.set()
            await self.gate.wait()
        return None


async def test_cancel_chat_on_a_queued_chat_keeps_its_input_and_runs_no_model() -> None:
    model = ScriptedModel([text("first reply")])
    agent = GatedAgent(model=model, store=ta.MemoryStore(), gate_on="first")
    await agent.load_messages()
    first = agent.chat("first")
    second = agent.chat("second")
    first_task = asyncio.create_task(drain(first))
    second_task = asyncio.create_task(drain(second))
    await asyncio.wait_for(agent.at_gate.wait(), WAIT_S)
    assert agent._engine.queue.queued == 2  # the second chat waits for the slot

    assert agent.cancel_chat(second.request_id) is True
    agent.gate.set()
    first_chunks, second_chunks = await asyncio.wait_for(asyncio.gather(first_task, second_task), WAIT_S)

    assert chunk_types(first_chunks)[-1] == "finish"
    assert second_chunks == []
    assert (first.status, second.status) == ("completed", "aborted")
    assert len(model.requests) == 1
    assert transcript(agent) == [("user", "first"), ("assistant", "first reply"), ("user", "second")]
    assert [r.request_id for r in agent.contexts("on_chat_response")] == [first.request_id]
    assert len(agent._engine.aborts) == 0
    model.assert_complete()


async def test_cancel_chat_before_iterating_runs_no_model(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    stream = agent.chat("hi")

    assert agent.cancel_chat(stream.request_id) is True
    chunks = await drain(stream)

    assert chunks == []
    assert stream.status == "aborted"
    assert transcript(agent) == [("user", "hi")]
    assert scripted.requests == []
    assert agent.calls == []


async def test_cancel_chat_of_an_unknown_id_returns_false(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)

    assert agent.cancel_chat("no-such-request") is False


async def test_closing_a_stream_that_never_started_forgets_its_request(scripted: ScriptedModel) -> None:
    agent = make_agent(scripted)
    stream = agent.chat("hi")

    await stream.aclose()

    assert len(agent._engine.aborts) == 0
    assert agent.cancel_chat(stream.request_id) is False
    assert scripted.requests == []


# ---------------------------------------------------------------------------------------------- closing the stream


async def test_breaking_out_and_closing_the_iterator_aborts_the_turn() -> None:
    model = ScriptedModel([slow_reply(), text("next reply")])
    agent = make_agent(model)
    stream = agent.chat("hi")
    chunks: list[Any] = []

    started = time.monotonic()
    iterator = aiter(stream)
    async for chunk in iterator:
        chunks.append(chunk)
        if chunk.type == "text-delta":
            break
    await asyncio.wait_for(iterator.aclose(), WAIT_S)  # type: ignore[attr-defined]

    assert time.monotonic() - started < FAST_S
    assert chunk_types(chunks) == ["start", "start-step", "text-start", "text-delta"]
    assert stream.status == "aborted"
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]
    assert agent.contexts("on_chat_response")[0].status == "aborted"
    assert len(agent._engine.aborts) == 0

    # The stream was closed from another task (wait_for): the slot is free and this task is no longer "inside".
    result = await asyncio.wait_for(agent.save_messages("again"), WAIT_S)
    assert result.status == "completed"
    assert transcript(agent) == [
        ("user", "hi"),
        ("assistant", "Hello "),
        ("user", "again"),
        ("assistant", "next reply"),
    ]
    model.assert_complete()


async def test_chat_stream_aclose_aborts_the_turn() -> None:
    model = ScriptedModel([slow_reply(), text("next reply")])
    agent = make_agent(model)
    stream = agent.chat("hi")

    chunks = [await stream.__anext__() for _ in range(4)]
    await asyncio.wait_for(stream.aclose(), WAIT_S)

    assert chunk_types(chunks) == ["start", "start-step", "text-start", "text-delta"]
    assert stream.status == "aborted"
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]
    assert agent.hooks_called(skip={"on_chunk"}) == ["before_turn", "before_step", "on_chat_response"]
    assert agent.contexts("on_chat_response")[0].status == "aborted"

    chunks = await asyncio.wait_for(drain(agent.chat("again")), WAIT_S)
    assert chunk_types(chunks)[-1] == "finish"
    assert transcript(agent)[-1] == ("assistant", "next reply")


async def test_an_abandoned_stream_is_finalised_and_releases_the_slot() -> None:
    model = ScriptedModel([slow_reply(), text("next reply")])
    agent = make_agent(model)

    async def read_one_delta() -> None:
        async for chunk in agent.chat("hi"):
            if chunk.type == "text-delta":
                break  # no aclose: the garbage collector's finaliser closes the stream, in another task

    await read_one_delta()
    await asyncio.wait_for(agent.wait_idle(), WAIT_S)
    # This task read the stream, so it was marked as inside the turn; the closed slot's mark no longer counts.
    result = await asyncio.wait_for(agent.save_messages("again"), WAIT_S)

    assert result.status == "completed"
    assert transcript(agent) == [
        ("user", "hi"),
        ("assistant", "Hello "),
        ("user", "again"),
        ("assistant", "next reply"),
    ]
    assert agent.contexts("on_chat_response")[0].status == "aborted"


async def test_closing_the_stream_after_finish_keeps_the_turn_completed(scripted: ScriptedModel) -> None:
    scripted.add(text("done"))
    agent = make_agent(scripted)
    stream = agent.chat("hi")

    chunks = []
    iterator = aiter(stream)
    async for chunk in iterator:
        chunks.append(chunk)
        if chunk.type == "finish":
            break
    await iterator.aclose()  # type: ignore[attr-defined]

    assert chunk_types(chunks)[-1] == "finish"
    assert stream.status == "completed"
    assert agent.contexts("on_chat_response")[0].status == "completed"
    assert transcript(agent) == [("user", "hi"), ("assistant", "done")]


# ---------------------------------------------------------------------------------------------- external cancellation


async def test_cancelling_the_consuming_task_persists_the_partial_and_propagates() -> None:
    model = ScriptedModel([slow_reply(), text("next reply")])
    agent = make_agent(model)
    stream = agent.chat("hi")
    chunks: list[Any] = []
    seen = asyncio.Event()
    consumer = asyncio.create_task(consume_until(stream, "text-delta", seen, chunks))
    await asyncio.wait_for(seen.wait(), WAIT_S)

    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(consumer, WAIT_S)

    assert consumer.cancelled()
    assert chunk_types(chunks) == ["start", "start-step", "text-start", "text-delta"]
    assert stream.status == "aborted"
    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]
    assert agent.contexts("on_chat_response")[0].status == "aborted"
    assert len(agent._engine.aborts) == 0
    result = await asyncio.wait_for(agent.save_messages("again"), WAIT_S)
    assert result.status == "completed"


async def test_cancelling_a_save_messages_task_propagates() -> None:
    model = ScriptedModel([slow_reply()])
    agent = ChunkSignalAgent(model=model, store=ta.MemoryStore())
    turn = asyncio.create_task(agent.save_messages("hi"))
    await asyncio.wait_for(agent.first_text.wait(), WAIT_S)

    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(turn, WAIT_S)

    assert transcript(agent) == [("user", "hi"), ("assistant", "Hello ")]
    assert agent.contexts("on_chat_response")[0].status == "aborted"
    assert not agent._engine.queue.busy
    assert len(agent._engine.aborts) == 0


# ---------------------------------------------------------------------------------------------- clear


async def test_clear_skips_queued_turns_and_aborts_the_running_one() -> None:
    model = ScriptedModel([slow_reply()])
    agent = ChunkSignalAgent(model=model, store=ta.MemoryStore())
    running = asyncio.create_task(agent.save_messages("first"))
    queued = asyncio.create_task(agent.save_messages("second"))
    await asyncio.wait_for(agent.first_text.wait(), WAIT_S)
    assert agent._engine.queue.queued == 2

    await agent.clear()
    first, second = await asyncio.wait_for(asyncio.gather(running, queued), WAIT_S)

    assert first.status == "aborted"
    assert second.status == "skipped"
    assert agent.get_messages() == []
    assert await agent.store.list_messages() == []
    assert len(model.requests) == 1
    assert "on_chat_response" not in agent.hooks_called()  # a cleared turn fires no response hook
    assert len(agent._engine.aborts) == 0


async def test_clear_skips_a_queued_chat_stream() -> None:
    model = ScriptedModel([text("first reply")])
    agent = GatedAgent(model=model, store=ta.MemoryStore(), gate_on="first")
    first = agent.chat("first")
    second = agent.chat("second")
    first_task = asyncio.create_task(drain(first))
    second_task = asyncio.create_task(drain(second))
    await asyncio.wait_for(agent.at_gate.wait(), WAIT_S)

    await agent.clear()
    agent.gate.set()
    _, second_chunks = await asyncio.wait_for(asyncio.gather(first_task, second_task), WAIT_S)

    assert second_chunks == []
    assert second.status == "skipped"
    assert agent.get_messages() == []
    assert await agent.store.list_messages() == []


async def test_clear_empties_the_history_and_later_turns_start_fresh(scripted: ScriptedModel) -> None:
    scripted.extend([text("one"), text("two")])
    agent = make_agent(scripted)
    await agent.save_messages("hi")

    await agent.clear()
    result = await agent.save_messages("fresh start")

    assert result.status == "completed"
    assert transcript(agent) == [("user", "fresh start"), ("assistant", "two")]
    assert [m["content"] for m in scripted.requests[1].messages if m["role"] != "system"] == ["fresh start"]


# ---------------------------------------------------------------------------------------------- tool interruption


async def test_abort_during_a_tool_cancels_it_and_the_next_turn_repairs_the_call() -> None:
    tool_started = asyncio.Event()
    tool_cancelled = asyncio.Event()

    @ta.tool
    async def slow_search(query: str) -> str:
        """Search slowly."""
        tool_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "never"

    model = ScriptedModel(
        [
            step(text("Let me look."), tool_call("slow_search", {"query": "ray"}, id="call-1")),
            text("Sorry, the search was interrupted."),
        ]
    )
    agent = make_agent(model, tools=[slow_search])
    stream = agent.chat("search ray")
    chunks: list[Any] = []
    consumer = asyncio.create_task(consume_until(stream, "tool-input-available", asyncio.Event(), chunks))
    await asyncio.wait_for(tool_started.wait(), WAIT_S)

    assert agent.cancel_chat(stream.request_id) is True
    await asyncio.wait_for(consumer, WAIT_S)
    await asyncio.wait_for(tool_cancelled.wait(), WAIT_S)

    # Text ends when the model's answer ends (as the OpenAI provider streams it), after the call's input deltas.
    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "text-end",
        "tool-input-available",
        "abort",
    ]
    partial = agent.get_messages()[-1]
    assert [p.type for p in partial.parts] == ["step-start", "text", "tool-slow_search"]
    assert partial.tool_parts[0].state == "input-available"
    assert partial.tool_parts[0].input == {"query": "ray"}
    assert agent.contexts("on_chat_response")[0].status == "aborted"
    assert "after_tool_call" not in agent.hooks_called()

    result = await asyncio.wait_for(agent.save_messages("what happened?"), WAIT_S)

    assert result.status == "completed"
    repaired = agent.get_messages()[1]
    assert repaired.id == partial.id
    assert repaired.tool_parts[0].state == "output-error"
    assert repaired.tool_parts[0].error_text == INTERRUPTED_TEXT
    assert await agent.store.get_message(partial.id) == repaired
    sent = [m for m in model.requests[1].messages if m["role"] != "system"]
    assert sent == [
        {"role": "user", "content": "search ray"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "slow_search", "arguments": '{"query": "ray"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call-1", "content": f"Error: {INTERRUPTED_TEXT}"},
        {"role": "user", "content": "what happened?"},
    ]
    model.assert_complete()


async def test_abort_during_parallel_tools_cancels_every_tool_task() -> None:
    started: list[str] = []
    cancelled: list[str] = []
    all_started = asyncio.Event()
    all_cancelled = asyncio.Event()

    @ta.tool
    async def wait_forever(name: str) -> str:
        """Never finishes."""
        started.append(name)
        if len(started) == 2:
            all_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            if len(cancelled) == 2:
                all_cancelled.set()
            raise
        return "never"

    model = ScriptedModel(
        [step(tool_call("wait_forever", {"name": "a"}, id="c-a"), tool_call("wait_forever", {"name": "b"}, id="c-b"))]
    )
    agent = ChunkSignalAgent(model=model, store=ta.MemoryStore(), tools=[wait_forever])
    turn = asyncio.create_task(agent.save_messages("go"))
    await asyncio.wait_for(all_started.wait(), WAIT_S)

    agent.cancel_all_chats()
    result = await asyncio.wait_for(turn, WAIT_S)
    await asyncio.wait_for(all_cancelled.wait(), WAIT_S)

    assert result.status == "aborted"
    assert sorted(cancelled) == ["a", "b"]
    assert [p.state for p in agent.get_messages()[-1].tool_parts] == ["input-available", "input-available"]


# ---------------------------------------------------------------------------------------------- only step-start


async def test_abort_before_any_content_persists_no_assistant_message() -> None:
    model = ScriptedModel([step(delay(SLOW_S), text("too late"))])
    agent = make_agent(model)
    stream = agent.chat("hi")
    chunks: list[Any] = []
    seen = asyncio.Event()
    consumer = asyncio.create_task(consume_until(stream, "start", seen, chunks))
    await asyncio.wait_for(seen.wait(), WAIT_S)
    await asyncio.sleep(SLOW_S / 4)  # the model call is waiting for its first event

    agent.cancel_chat(stream.request_id)
    await asyncio.wait_for(consumer, WAIT_S)

    assert chunk_types(chunks) == ["start", "abort"]  # no event came, so no step started (AI SDK)
    assert transcript(agent) == [("user", "hi")]
    assert len(await agent.store.list_messages()) == 1
    response = agent.contexts("on_chat_response")[0]
    assert response.status == "aborted"
    assert response.message.id not in [m.id for m in agent.get_messages()]


# ---------------------------------------------------------------------------------------------- SQLite persistence


async def test_a_new_instance_loads_the_same_history(tmp_path: Path) -> None:
    first = RecordingAgent("x", model=ScriptedModel([text("hello")]), data_dir=str(tmp_path))
    await first.save_messages("hi")
    saved = first.get_messages()
    await first.close()

    second = RecordingAgent("x", model=ScriptedModel(), data_dir=str(tmp_path))
    try:
        assert await second.load_messages() == saved
        assert transcript(second) == [("user", "hi"), ("assistant", "hello")]
    finally:
        await second.close()


async def test_chat_on_a_new_instance_continues_the_stored_history(tmp_path: Path) -> None:
    first = RecordingAgent("x", model=ScriptedModel([text("hello")]), data_dir=str(tmp_path))
    await drain(first.chat("hi"))
    await first.close()

    model = ScriptedModel([text("hello again")])
    second = RecordingAgent("x", model=model, data_dir=str(tmp_path))
    try:
        chunks = await drain(second.chat("me again"))
        assert chunk_types(chunks)[-1] == "finish"
        assert [m["content"] for m in model.requests[0].messages if m["role"] != "system"] == [
            "hi",
            "hello",
            "me again",
        ]
        assert transcript(second) == [
            ("user", "hi"),
            ("assistant", "hello"),
            ("user", "me again"),
            ("assistant", "hello again"),
        ]
    finally:
        await second.close()


async def test_the_assistant_message_is_written_once(tmp_path: Path) -> None:
    store = ta.SQLiteStore.for_agent(tmp_path, "x")
    agent = make_agent(ScriptedModel([text("a long reply", chunk_size=2)]), store=store)
    try:
        await agent.save_messages("hi")
        rows = await store.list_messages()
        assert [(m.role, m.text) for m in rows] == [("user", "hi"), ("assistant", "a long reply")]
        assert rows == agent.get_messages()
    finally:
        await agent.close()


async def test_saving_the_same_user_message_twice_stores_it_once(tmp_path: Path) -> None:
    store = ta.SQLiteStore.for_agent(tmp_path, "x")
    agent = make_agent(ScriptedModel([text("one"), text("two")]), store=store)
    message = ta.user_message("hi", id="u-1")
    try:
        await agent.save_messages(message)
        await agent.save_messages(message)
        rows = await store.list_messages()
        assert [(m.id == "u-1", m.role, m.text) for m in rows] == [
            (True, "user", "hi"),
            (False, "assistant", "one"),
            (False, "assistant", "two"),
        ]
        assert agent.get_messages() == rows
    finally:
        await agent.close()


async def test_an_aborted_partial_survives_a_restart(tmp_path: Path) -> None:
    first = RecordingAgent("x", model=ScriptedModel([slow_reply()]), data_dir=str(tmp_path))
    stream = first.chat("hi")
    chunks = [await stream.__anext__() for _ in range(4)]
    assert chunks[-1].type == "text-delta"
    first.cancel_chat(stream.request_id)
    rest = await asyncio.wait_for(drain(stream), WAIT_S)
    assert chunk_types(rest) == ["abort"]
    await first.close()

    second = RecordingAgent("x", model=ScriptedModel(), data_dir=str(tmp_path))
    try:
        assert [(m.role, m.text) for m in await second.load_messages()] == [("user", "hi"), ("assistant", "Hello ")]
    finally:
        await second.close()


# ---------------------------------------------------------------------------------------------- on_chat_response


class InspectingAgent(RecordingAgent):
    """Records what the transcript held while its response hook ran."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seen_in_hook: list[list[str]] = []
        self.stored_in_hook: list[list[str]] = []

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await super().on_chat_response(result)
        self.seen_in_hook.append([m.id for m in self.get_messages()])
        self.stored_in_hook.append([m.id for m in await self.store.load_messages()])


async def test_on_chat_response_fires_after_the_reply_is_persisted(scripted: ScriptedModel) -> None:
    scripted.add(text("hello"))
    agent = InspectingAgent(model=scripted, store=ta.MemoryStore())

    result = await agent.save_messages("hi")

    assert result.message is not None
    ids = [m.id for m in agent.get_messages()]
    assert ids[-1] == result.message.id
    assert agent.seen_in_hook == [ids]
    assert agent.stored_in_hook == [ids]


class RaisingResponseAgent(RecordingAgent):
    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await super().on_chat_response(result)
        raise RuntimeError("response hook broke")


async def test_on_chat_response_exceptions_are_swallowed(scripted: ScriptedModel) -> None:
    scripted.extend([text("hello"), text("again")])
    agent = RaisingResponseAgent(model=scripted, store=ta.MemoryStore())

    result = await agent.save_messages("hi")
    chunks = await drain(agent.chat("more"))

    assert result.status == "completed"
    assert chunk_types(chunks)[-1] == "finish"
    assert agent.hooks_called(skip={"on_chunk"}).count("on_chat_response") == 2
    assert transcript(agent) == [("user", "hi"), ("assistant", "hello"), ("user", "more"), ("assistant", "again")]


class SlowResponseAgent(RecordingAgent):
    """Its first response hook waits for ``release``; logs hook entry/exit and turn starts."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.in_hook = asyncio.Event()
        self.release = asyncio.Event()
        self.log: list[str] = []

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.log.append(f"turn {ctx.messages[-1]['content']}")
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.log.append(f"hook {result.message.text}")
        if not self.in_hook.is_set():
            self.in_hook.set()
            await self.release.wait()
        self.log.append(f"hook done {result.message.text}")


async def test_on_chat_response_runs_after_the_turn_slot_is_released(scripted: ScriptedModel) -> None:
    # The seed: the turn lock is released before on_chat_response runs; the next queued turn may start meanwhile,
    # and the entry point that ran the turn returns only after its hook finished.
    scripted.extend([text("one"), text("two")])
    agent = SlowResponseAgent(model=scripted, store=ta.MemoryStore())
    await agent.load_messages()
    first = asyncio.create_task(agent.save_messages("a"))
    second = asyncio.create_task(agent.save_messages("b"))
    await asyncio.wait_for(agent.in_hook.wait(), WAIT_S)
    await asyncio.wait_for(second, WAIT_S)  # the second turn ran to its end while the first hook still waits

    assert agent.log == ["turn a", "hook one", "turn b", "hook two", "hook done two"]
    assert not first.done()
    agent.release.set()
    result = await asyncio.wait_for(first, WAIT_S)

    assert result.status == "completed"
    assert agent.log == ["turn a", "hook one", "turn b", "hook two", "hook done two", "hook done one"]


# ---------------------------------------------------------------------------------------------- client tools

ASK_SCHEMA = {
    "name": "ask",
    "description": "Ask the user",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
}


async def test_a_client_tool_call_without_an_executor_ends_the_turn(scripted: ScriptedModel) -> None:
    scripted.add(step(text("Let me ask."), tool_call("ask", {"question": "which city?"}, id="c1")))
    agent = make_agent(scripted)

    stream = agent.chat("plan a trip", client_tools=[ASK_SCHEMA])
    chunks = await drain(stream)

    assert chunk_types(chunks) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "text-end",
        "tool-input-available",
        "finish-step",
        "finish",
    ]
    assert stream.status == "completed"
    request = scripted.requests[0]
    assert [t["function"]["name"] for t in request.tools] == ["ask"]
    assert request.tools[0]["function"]["parameters"] == ASK_SCHEMA["parameters"]
    part = agent.get_messages()[-1].tool_parts[0]
    assert part.type == "tool-ask"
    assert part.state == "input-available"
    assert part.input == {"question": "which city?"}
    assert agent.contexts("on_chat_response")[0].status == "completed"
    assert "before_tool_call" not in agent.hooks_called()
    scripted.assert_complete()


async def test_client_tools_are_offered_for_that_turn_only(scripted: ScriptedModel) -> None:
    scripted.extend([text("one"), text("two")])
    agent = make_agent(scripted)

    await drain(agent.chat("hi", client_tools=[ASK_SCHEMA]))
    await drain(agent.chat("again"))

    assert [[t["function"]["name"] for t in r.tools] for r in scripted.requests] == [["ask"], []]


async def test_a_client_tool_with_an_executor_runs_inline(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("ask", {"question": "which city?"}, id="c1"), text("Paris it is.")])
    agent = make_agent(scripted)
    calls: list[tuple[str, Any, str]] = []

    async def executor(tool_name: str, tool_input: Any, tool_call_id: str) -> str:
        calls.append((tool_name, tool_input, tool_call_id))
        return "Paris"

    stream = agent.chat("plan a trip", client_tools=[ASK_SCHEMA], on_client_tool_call=executor)
    chunks = await drain(stream)

    assert calls == [("ask", {"question": "which city?"}, "c1")]
    assert chunk_types(chunks) == TOOL_THEN_TEXT_CHUNKS
    assert stream.status == "completed"
    message = agent.get_messages()[-1]
    assert message.tool_parts[0].state == "output-available"
    assert message.tool_parts[0].output == "Paris"
    assert message.text == "Paris it is."
    assert [m for m in scripted.requests[1].messages if m["role"] == "tool"] == [
        {"role": "tool", "tool_call_id": "c1", "content": "Paris"}
    ]
    assert agent.hooks_called(skip={"on_chunk"}) == TOOL_THEN_TEXT_HOOKS


async def test_a_sync_client_executor_works(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("ask", {"question": "?"}, id="c1"), text("ok")])
    agent = make_agent(scripted)

    await drain(agent.chat("hi", client_tools=[ASK_SCHEMA], on_client_tool_call=lambda name, value, call_id: 42))

    assert agent.get_messages()[-1].tool_parts[0].output == 42


async def test_a_raising_client_executor_becomes_a_tool_error_and_the_turn_goes_on(scripted: ScriptedModel) -> None:
    scripted.extend([tool_call("ask", {"question": "which city?"}, id="c1"), text("I could not ask.")])
    agent = make_agent(scripted)

    async def executor(tool_name: str, tool_input: Any, tool_call_id: str) -> str:
        raise RuntimeError("user is away")

    stream = agent.chat("plan a trip", client_tools=[ASK_SCHEMA], on_client_tool_call=executor)
    chunks = await drain(stream)

    assert "tool-output-error" in chunk_types(chunks)
    assert chunk_types(chunks)[-1] == "finish"
    assert stream.status == "completed"
    message = agent.get_messages()[-1]
    assert message.tool_parts[0].state == "output-error"
    assert message.tool_parts[0].error_text == "user is away"
    assert message.text == "I could not ask."
    assert [m for m in scripted.requests[1].messages if m["role"] == "tool"] == [
        {"role": "tool", "tool_call_id": "c1", "content": "Error: user is away"}
    ]
    assert "on_chat_error" not in agent.hooks_called()
    scripted.assert_complete()


async def test_a_client_tool_overrides_a_same_named_server_tool(scripted: ScriptedModel) -> None:
    @ta.tool
    async def ask(question: str) -> str:
        """Server-side ask."""
        return "server answer"

    scripted.add(tool_call("ask", {"question": "?"}, id="c1"))
    agent = make_agent(scripted, tools=[ask])

    await drain(agent.chat("hi", client_tools=[ASK_SCHEMA]))

    assert agent.get_messages()[-1].tool_parts[0].state == "input-available"
    assert scripted.requests[0].tools[0]["function"]["description"] == "Ask the user"


async def test_a_turn_aborted_during_before_turn_never_calls_the_model() -> None:
    class SlowSetup(RecordingAgent):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.entered = asyncio.Event()
            self.release = asyncio.Event()

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            self.entered.set()
            await self.release.wait()
            return None

    model = ScriptedModel()
    agent = SlowSetup(model=model, store=ta.MemoryStore())
    stream = agent.chat("hello")
    consumer = asyncio.ensure_future(drain(stream))
    await asyncio.wait_for(agent.entered.wait(), 5)
    assert agent.cancel_chat(stream.request_id, "changed my mind")
    agent.release.set()
    chunks = await asyncio.wait_for(consumer, 5)
    assert chunk_types(chunks) == ["start", "abort"]
    assert model.requests == []
    assert stream.status == "aborted"
    assert [m.role for m in agent.get_messages()] == ["user"]


# --- what a completed turn writes --------------------------------------------------------------------------------

_WRITES = frozenset(
    {
        "put_turn",
        "begin_turn",
        "append_message",
        "upsert_message",
        "update_message",
        "append_chunks",
        "start_effect",
        "finish_effect",
        "delete_turn",
        "end_turn",
        "update_submission",
    }
)


class LoggedStore:
    """A MemoryStore's methods with every write logged by name (a chunk batch by its chunk types, an effect write
    that carries chunks as ``(name, types)`` too); ``hide`` names methods the store does not have, as a store written
    before them (``"chunks"``: effect methods without the ``chunks`` parameter)."""

    def __init__(self, hide: tuple[str, ...] = ()) -> None:
        self.inner = ta.MemoryStore()
        self.hide = hide
        self.writes: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        if name in self.hide:
            raise AttributeError(name)
        method = getattr(self.inner, name)
        if name not in _WRITES:
            return method
        if name in ("start_effect", "finish_effect") and "chunks" not in self.hide:

            async def effect(*args: Any, chunks: Any = (), **kwargs: Any) -> Any:
                self.writes.append((name, [c["type"] for c in chunks]) if chunks else name)
                return await method(*args, chunks=chunks, **kwargs)

            return effect

        async def logged(*args: Any, **kwargs: Any) -> Any:
            self.writes.append((name, [c["type"] for c in args[1]]) if name == "append_chunks" else name)
            return await method(*args, **kwargs)

        return logged


@pytest.mark.parametrize(
    "hide",
    [(), ("begin_turn", "end_turn"), ("chunks",)],
    ids=["batched", "single-writes", "effects-without-chunks"],
)
async def test_a_turn_writes_its_record_with_its_input_and_its_reply_with_the_record_removal(
    hide: tuple[str, ...],
) -> None:
    @ta.tool
    async def lookup(q: str) -> str:
        """Look it up."""
        return "found"

    store = LoggedStore(hide)
    model = ScriptedModel([tool_call("lookup", {"q": "x"}, id="c1"), text("done")])
    agent = make_agent(model, store=store, tools=[lookup])
    result = await agent.save_messages("go")

    assert result.status == "completed"
    # The record goes in with the input, the reply with the record's removal: one write each where the store can.
    first, last = (
        (["put_turn", "append_message"], ["upsert_message", "delete_turn"])
        if "begin_turn" in hide
        else (["begin_turn"], ["end_turn"])
    )
    call_input = ["start-step", "tool-input-start", "tool-input-delta", "tool-input-delta", "tool-input-available"]
    # The log so far goes in with the effect's start (the call's input among it), its result with the effect's end;
    # the second step's chunks are still in the buffer when the turn ends, so the record's removal is all they need.
    effects = (
        [("append_chunks", call_input), "start_effect", "finish_effect", ("append_chunks", ["tool-output-available"])]
        if "chunks" in hide
        else [("start_effect", call_input), ("finish_effect", ["tool-output-available"])]
    )
    assert store.writes == [*first, *effects, *last]
    assert transcript(agent) == [("user", "go"), ("assistant", "done")]
    assert [(m.role, m.text) for m in await store.inner.load_messages()] == transcript(agent)
    assert await store.inner.list_turns() == []


async def test_a_submission_turn_stores_its_reply_before_its_final_status() -> None:
    # The submission's status depends on the reply: the reply is written first, the record's removal after it.
    store = LoggedStore()
    agent = make_agent(ScriptedModel([text("done")]), store=store)
    await agent.submit_messages("go", submission_id="s1")
    submission = await agent.wait_for_submission("s1", timeout_s=WAIT_S)
    assert submission.status == "completed"
    assert store.writes == [
        "update_submission",  # running
        "begin_turn",
        "update_submission",  # messages applied
        # The reply's chunks never needed a batch of their own: the stored reply holds them all.
        "upsert_message",
        "put_turn",  # the record marked finished with the outcome, for a crash during the response hook
        "update_submission",  # completed, after the response hook
        "end_turn",
        "update_submission",  # the drain's closing no-op (the row is no longer running)
    ]
    assert transcript(agent) == [("user", "go"), ("assistant", "done")]


class LogWatcher(ta.Think):
    """Snapshots the turn's chunk log and effects while its tools run, after them, and at the next step."""

    seen: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = {}

    async def snapshot(self, label: str, request_id: str) -> None:
        store = self._engine.store
        self.seen[label] = (
            [c["type"] for c in await store.load_chunks(request_id)],
            sorted((e.tool_call_id, e.status) for e in await store.list_effects(request_id)),
        )

    @ta.tool
    async def lookup(self, q: str, ctx: ta.ToolContext) -> str:
        """Look it up."""
        await self.snapshot(f"running {q}", ctx.request_id)
        return "found"

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        await self.snapshot(f"after {ctx.input['q']}", ctx.request_id)

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        if ctx.step_number == 1:
            await self.snapshot("next step", ctx.request_id)
        return None


CALL_INPUT = ["tool-input-start", "tool-input-delta", "tool-input-delta", "tool-input-available"]


async def test_a_lone_call_is_logged_with_its_effect_writes_and_nothing_twice(store: ta.Store) -> None:
    # Every kind of store: the effect writes carry the log in one transaction (SQLite) or statement (PostgreSQL).
    agent = LogWatcher(model=ScriptedModel([tool_call("lookup", {"q": "x"}, id="c1"), text("done")]), store=store)
    result = await agent.save_messages("go")

    assert result.status == "completed"
    logged_input = ["start-step", *CALL_INPUT]
    # While the tool runs, its input is in the log and its effect is started: a crash now leaves it in doubt.
    assert agent.seen["running x"] == (logged_input, [("c1", "started")])
    # Its result went in with its effect's end, before after_tool_call and before anyone saw it.
    assert agent.seen["after x"] == ([*logged_input, "tool-output-available"], [("c1", "finished")])
    # The result reached the stream after that write and was not logged again.
    assert agent.seen["next step"] == agent.seen["after x"]
    assert await store.list_turns() == []


async def test_calls_side_by_side_have_every_input_logged_before_any_effect_starts() -> None:
    model = ScriptedModel(
        [step(tool_call("lookup", {"q": "a"}, id="c1"), tool_call("lookup", {"q": "b"}, id="c2")), text("done")]
    )
    agent = LogWatcher(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("go")

    assert result.status == "completed"
    for q in ("a", "b"):
        types, effects = agent.seen[f"running {q}"]
        assert types.count("tool-input-available") == 2, types
        assert ("c1" if q == "a" else "c2", "started") in effects
    types, effects = agent.seen["next step"]
    assert types.count("tool-output-available") == 2 and effects == [("c1", "finished"), ("c2", "finished")]


class TextLogWatcher(ta.Think):
    """Records the text in the turn's chunk log when chosen text deltas are produced (before the journal sees them)."""

    def __init__(self, *args: Any, at: set[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = at
        self.deltas = 0
        self.logged: dict[int, str] = {}

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type != "text-delta":
            return
        self.deltas += 1
        if self.deltas in self.at:
            chunks = await self._engine.store.load_chunks(ctx.request_id)
            self.logged[self.deltas] = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


async def test_streamed_text_is_logged_every_flush_every_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from think_actors._turn import journal

    monkeypatch.setattr(journal, "FLUSH_AFTER_S", 3600.0)  # only the count bound applies
    every = journal.FLUSH_EVERY
    # start-step and text-start count too: the first batch is written as the (every - 2)th delta goes out.
    first, second = every - 2, 2 * every - 2
    agent = TextLogWatcher(
        model=ScriptedModel([text("x" * 300, chunk_size=1)]),
        store=ta.MemoryStore(),
        at={first, first + 1, second, second + 1},
    )
    result = await agent.save_messages("go")

    assert result.status == "completed" and result.message is not None and result.message.text == "x" * 300
    assert agent.logged == {first: "", first + 1: "x" * first, second: "x" * first, second + 1: "x" * second}
    assert await agent._engine.store.list_turns() == []  # the rest of the log never needed writing


async def test_streamed_text_is_logged_within_flush_after_s_of_a_slow_stream() -> None:
    from think_actors._turn import journal

    pause = journal.FLUSH_AFTER_S * 2
    model = ScriptedModel([step(text("ab", chunk_size=1), delay(pause), text("cd", chunk_size=1))])
    agent = TextLogWatcher(model=model, store=ta.MemoryStore(), at={4})
    result = await agent.save_messages("go")

    assert result.status == "completed" and result.message is not None and result.message.text == "abcd"
    # The first delta after the pause found the buffer older than FLUSH_AFTER_S: it went out logged, with those before.
    assert agent.logged == {4: "abc"}


class DeltaLogWatcher(LogWatcher):
    """LogWatcher that also puts data chunks among its text deltas: a kept one before " ", a transient one before
    the second "l" (what ``agent.emit`` from ``on_chunk`` does), and keeps the whole log its tool saw."""

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta" and ctx.text == " ":
            self.emit(ta.DataChunk(type="data-note", data={"at": "space"}))
        elif ctx.type == "text-delta" and ctx.text == "l" and "transient" not in self.seen:
            self.seen["transient"] = True
            self.emit(ta.DataChunk(type="data-progress", data={"n": 1}, transient=True))

    @ta.tool
    async def lookup(self, q: str, ctx: ta.ToolContext) -> str:
        """Look it up."""
        self.seen["log"] = await self._engine.store.load_chunks(ctx.request_id)
        return "found"


@pytest.mark.parametrize("every", [128, 3])
async def test_consecutive_deltas_of_a_part_are_logged_as_one_around_emitted_chunks_and_batches(
    every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from think_actors._turn import journal

    monkeypatch.setattr(journal, "FLUSH_EVERY", every)
    monkeypatch.setattr(journal, "FLUSH_AFTER_S", 3600.0)
    model = ScriptedModel(
        [
            step(
                reasoning("thinking", chunk_size=2),
                text("hello world", chunk_size=1),
                tool_call("lookup", {"q": "x"}, id="c1"),
            ),
            text("done"),
        ]
    )
    agent = DeltaLogWatcher(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("go")

    assert result.status == "completed" and result.message is not None
    log = agent.seen["log"]
    # Folded again (what recovery does), the log gives the reply as it stood when the tool ran.
    acc = ta.MessageAccumulator(result.message.id)
    for entry in log:
        acc.apply(ta.parse_chunk(entry))
    logged = [(p.type, getattr(p, "text", None) or getattr(p, "data", None)) for p in acc.message().parts]
    reply = [(p.type, getattr(p, "text", None) or getattr(p, "data", None)) for p in result.message.parts]
    assert logged == reply[: len(logged)], (logged, reply)
    assert logged == [
        ("step-start", None),
        ("reasoning", "thinking"),
        ("text", "hello world"),
        ("data-note", {"at": "space"}),
        ("tool-lookup", None),
    ]
    deltas = [(c["type"], c["delta"]) for c in log if c["type"].endswith("-delta") and "delta" in c]
    if every == 128:
        # One batch: a run of deltas is one entry, split only where a kept chunk came between (the transient
        # one is not logged and splits nothing).
        assert deltas == [("reasoning-delta", "thinking"), ("text-delta", "hello"), ("text-delta", " world")]
    else:
        # A batch every 3 chunks closes the run: the next delta opens a new entry, and nothing is lost or doubled.
        assert len(deltas) > 3
        assert "".join(d for kind, d in deltas if kind == "text-delta") == "hello world"
        assert "".join(d for kind, d in deltas if kind == "reasoning-delta") == "thinking"
