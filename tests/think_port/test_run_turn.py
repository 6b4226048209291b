"""Port of ``packages/think/src/tests/run-turn.test.ts``: the blocking, continuation, durable and streamed ways
to start a turn, their ``chat:turn:*`` events, and the nested-admission guard.

think_actors has no ``runTurn`` facade: its modes are the entry points it delegates to, and each test drives that
entry point (``wait`` → ``save_messages``, ``continuation`` → ``continue_last_turn``, ``submit`` →
``submit_messages``, ``stream`` → ``chat``). Left out (README.md): the facade's own argument validation, its
empty-input short cuts, and channel stamping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

from .conftest import WAIT_S, Recorder, texts

SRC = "packages/think/src/tests/run-turn.test.ts"


def agent_with(*steps: Any) -> Recorder:
    return Recorder(model=ScriptedModel(list(steps)), store=ta.MemoryStore())


def turn_events(agent: Recorder) -> list[tuple[str, dict[str, Any]]]:
    keys = ("requestId", "trigger", "admission", "continuation", "status")
    return [
        (e.type, {k: e.payload[k] for k in keys if k in e.payload})
        for e in agent.events
        if e.type in ("chat:turn:start", "chat:turn:finish")
    ]


async def test_save_messages_returns_the_turn_result() -> None:
    """run-turn.test.ts:75 "wait mode returns TurnResult equivalent to saveMessages"."""
    agent = agent_with(text("RunTurn wait reply"))
    result = await agent.save_messages("Hello via runTurn")
    assert (result.status, result.continuation, bool(result.request_id)) == ("completed", False, True)
    assert result.message is not None and (result.message.role, result.message.text) == (
        "assistant",
        "RunTurn wait reply",
    )
    assert texts(agent) == [("user", "Hello via runTurn"), ("assistant", "RunTurn wait reply")]


async def test_a_blocking_turn_emits_one_turn_start_and_finish_pair() -> None:
    """run-turn.test.ts:98 "emits a minimal chat:turn start/finish pair for wait mode"."""
    agent = agent_with(text("Observed reply"))
    result = await agent.save_messages("observe wait")
    fields = {"requestId": result.request_id, "trigger": "programmatic", "admission": "queue", "continuation": False}
    assert turn_events(agent) == [("chat:turn:start", fields), ("chat:turn:finish", {**fields, "status": "completed"})]
    finish = next(e for e in agent.events if e.type == "chat:turn:finish")
    assert isinstance(finish.payload["durationMs"], float | int)


async def test_a_continuation_turn_emits_its_pair_with_continuation_true() -> None:
    """run-turn.test.ts:150 "emits chat:turn metadata for continuation mode"."""
    agent = agent_with(text("First answer"), text("Continued answer"))
    await agent.save_messages("Start")
    agent.events.clear()
    result = await agent.continue_last_turn()
    fields = {"requestId": result.request_id, "trigger": "programmatic", "admission": "queue", "continuation": True}
    assert turn_events(agent) == [("chat:turn:start", fields), ("chat:turn:finish", {**fields, "status": "completed"})]


async def test_a_chat_turn_emits_its_pair_with_the_rpc_trigger() -> None:
    """run-turn.test.ts:183 "emits chat:turn metadata for RPC chat"."""
    agent = agent_with(text("RPC reply"))
    stream = agent.chat("via rpc")
    await stream.collect()
    fields = {"requestId": stream.request_id, "trigger": "rpc", "admission": "queue", "continuation": False}
    assert turn_events(agent) == [("chat:turn:start", fields), ("chat:turn:finish", {**fields, "status": "completed"})]


async def test_sequential_turns_emit_ordered_pairs_with_their_own_ids() -> None:
    """run-turn.test.ts:225 "emits ordered chat:turn pairs for sequential turns"."""
    agent = agent_with(text("First reply"), text("Second reply"))
    first = await agent.save_messages("one")
    second = await agent.save_messages("two")
    assert [(kind, f["requestId"]) for kind, f in turn_events(agent)] == [
        ("chat:turn:start", first.request_id),
        ("chat:turn:finish", first.request_id),
        ("chat:turn:start", second.request_id),
        ("chat:turn:finish", second.request_id),
    ]
    assert first.request_id != second.request_id


async def test_save_messages_takes_a_list_of_messages() -> None:
    """run-turn.test.ts:284 "wait mode supports array input"."""
    agent = agent_with(text("Array reply"))
    result = await agent.save_messages([ta.user_message("Array input")])
    assert result.status == "completed"
    assert texts(agent) == [("user", "Array input"), ("assistant", "Array reply")]


async def test_save_messages_takes_a_function_of_the_transcript() -> None:
    """run-turn.test.ts:301 "wait mode supports function input"."""
    agent = agent_with(text("Seed reply"), text("Function reply"))
    await agent.chat("Seed history").collect()
    seen: list[int] = []

    def add(current: list[ta.UIMessage]) -> list[ta.UIMessage]:
        seen.append(len(current))
        return [ta.user_message("Function input")]

    result = await agent.save_messages(add)
    assert result.status == "completed"
    assert seen == [2]
    assert [role for role, _ in texts(agent)] == ["user", "assistant", "user", "assistant"]


async def test_save_messages_with_no_new_messages_runs_a_turn_on_the_history() -> None:
    """run-turn.test.ts:339 "characterizes existing saveMessages empty-input behavior": an empty list and a
    function returning an empty list still run a turn on the existing history."""
    agent = agent_with(text("Seed reply"), text("Empty reply"), text("Empty function reply"))
    await agent.save_messages("seed")
    assert (await agent.save_messages([])).status == "completed"
    assert len(agent.get_messages()) == 3
    assert (await agent.save_messages(lambda current: [])).status == "completed"
    assert texts(agent) == [
        ("user", "seed"),
        ("assistant", "Seed reply"),
        ("assistant", "Empty reply"),
        ("assistant", "Empty function reply"),
    ]


async def test_continue_last_turn_writes_a_new_assistant_message() -> None:
    """run-turn.test.ts:355 "continuation mode delegates to continueLastTurn"."""
    agent = agent_with(text("First answer"), text("Continued answer"))
    await agent.save_messages("Start")
    result = await agent.continue_last_turn()
    assert (result.status, result.continuation) == ("completed", True)
    assert result.message is not None and result.message.text == "Continued answer"
    assert texts(agent) == [("user", "Start"), ("assistant", "First answer"), ("assistant", "Continued answer")]


async def test_continue_last_turn_skips_when_the_last_message_is_not_the_assistants() -> None:
    """run-turn.test.ts:379 "continuation skips when latest leaf is not assistant" (no turn, no message)."""
    agent = agent_with()
    result = await agent.continue_last_turn()
    assert (result.request_id, result.status, result.message) == ("", "skipped", None)
    assert turn_events(agent) == []


async def test_a_skipped_continuation_still_says_it_was_a_continuation() -> None:
    """run-turn.test.ts:379 "continuation skips when latest leaf is not assistant": ``continuation: true``."""
    agent = agent_with()
    result = await agent.continue_last_turn()
    assert result.continuation is True


async def test_submit_messages_accepts_with_the_given_id_and_metadata() -> None:
    """run-turn.test.ts:390 "submit mode returns SubmitMessagesResult equivalent to submitMessages"."""
    agent = agent_with(text("done"))
    sub = await agent.submit_messages("Queued prompt", submission_id="sub-runturn-1", metadata={"source": "runTurn"})
    assert (sub.accepted, sub.submission_id, sub.status, sub.metadata) == (
        True,
        "sub-runturn-1",
        "pending",
        {"source": "runTurn"},
    )
    await agent.wait_for_submission("sub-runturn-1", timeout_s=WAIT_S)


async def test_a_submission_emits_turn_events_when_it_drains_not_when_accepted() -> None:
    """run-turn.test.ts:404 "emits chat:turn events when a durable submission drains, not when accepted"."""
    agent = agent_with(step(text("submission "), delay(0.05), text("reply")))
    sub = await agent.submit_messages("Queued prompt", submission_id="sub-runturn-events")
    assert sub.accepted and [kind for kind, _ in turn_events(agent)] == []
    await agent.wait_for_submission(sub.submission_id, timeout_s=WAIT_S)
    fields = {"requestId": "sub-runturn-events", "trigger": "submission", "admission": "queue", "continuation": False}
    assert turn_events(agent) == [("chat:turn:start", fields), ("chat:turn:finish", {**fields, "status": "completed"})]


async def test_chat_streams_the_turn_and_stores_the_reply() -> None:
    """run-turn.test.ts:463 "stream mode drives callback and resolves void like chat"."""
    agent = agent_with(text("Streamed via runTurn"))
    stream = agent.chat("Stream me")
    chunks = await stream.collect()
    assert stream.status == "completed" and chunks[0].type == "start" and chunks[-1].type == "finish"
    assert texts(agent) == [("user", "Stream me"), ("assistant", "Streamed via runTurn")]


async def test_chat_takes_a_list_of_messages() -> None:
    """run-turn.test.ts:480 "stream mode supports array input"."""
    agent = agent_with(text("Array streamed"))
    stream = agent.chat([ta.user_message("Array one"), ta.user_message("Array two")])
    await stream.collect()
    assert stream.status == "completed"
    assert texts(agent) == [("user", "Array one"), ("user", "Array two"), ("assistant", "Array streamed")]


async def test_chat_takes_a_function_evaluated_when_the_turn_starts() -> None:
    """run-turn.test.ts:513 "stream mode supports function input evaluated inside the turn"."""
    agent = agent_with(text("Seed reply"), text("Function streamed"))
    await agent.chat("Seed history").collect()
    stream = agent.chat(lambda current: [ta.user_message(f"Function stream input after {len(current)}")])
    await stream.collect()
    assert texts(agent)[2:] == [("user", "Function stream input after 2"), ("assistant", "Function streamed")]


async def test_chat_with_a_function_returning_nothing_runs_on_the_history() -> None:
    """run-turn.test.ts:553 "stream mode preserves function-returning-empty behavior"."""
    agent = agent_with(text("Seed reply"), text("Empty function streamed"))
    await agent.chat("Seed history").collect()
    stream = agent.chat(lambda current: [])
    await stream.collect()
    assert stream.status == "completed"
    assert texts(agent) == [
        ("user", "Seed history"),
        ("assistant", "Seed reply"),
        ("assistant", "Empty function streamed"),
    ]


async def test_submit_messages_refuses_function_input() -> None:
    """run-turn.test.ts:641 "validates stream requires callback and disallows continuation" (its last case: a
    submission refuses function input, since it is stored before it runs)."""
    agent = agent_with()
    with pytest.raises(ta.ConfigurationError):
        await agent.submit_messages(lambda current: [ta.user_message("later")])
    assert await agent.list_submissions() == []


async def test_a_concurrent_blocking_turn_queues_behind_the_running_one() -> None:
    """run-turn.test.ts:669 "concurrent non-nested wait enqueues behind an active turn"."""
    agent = agent_with(step(text("active "), delay(0.05), text("turn")), text("Queued wait reply"))
    started = asyncio.Event()
    agent.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    active = asyncio.ensure_future(agent.chat("active turn").collect())
    await asyncio.wait_for(started.wait(), WAIT_S)
    queued = await agent.save_messages("queued wait")
    await active
    assert (queued.status, queued.continuation) == ("completed", False)
    assert texts(agent) == [
        ("user", "active turn"),
        ("assistant", "active turn"),
        ("user", "queued wait"),
        ("assistant", "Queued wait reply"),
    ]


async def test_blocking_admissions_from_inside_a_turn_raise_but_submit_and_add_messages_work() -> None:
    """run-turn.test.ts:706 "throws for nested blocking admissions but allows submit and addMessages"."""
    outcomes: dict[str, str] = {}
    agent: Recorder

    async def nested(value: Any, context: ta.ToolContext) -> str:
        for mode, attempt in (
            ("wait", lambda: agent.save_messages("nested")),
            ("continuation", lambda: agent.continue_last_turn()),
            ("stream", lambda: agent.chat("nested").collect()),
            ("submit", lambda: agent.submit_messages("later", submission_id="nested-sub")),
            ("addMessages", lambda: agent.add_messages(ta.user_message("note", id="nested-note"))),
        ):
            try:
                await attempt()
            except ta.NestedTurnError as err:
                outcomes[mode] = "cannot be called from inside" if "inside" in str(err) else str(err)
            else:
                outcomes[mode] = "ok"
        return "tried"

    tool = ta.Tool("nested", "Try nested turns", {"type": "object", "properties": {}}, executor=nested)
    model = ScriptedModel([tool_call("nested", {}), text("outer done"), text("submitted")])
    agent = Recorder(model=model, tools=[tool], store=ta.MemoryStore())
    result = await agent.save_messages("go")
    await agent.wait_for_submission("nested-sub", timeout_s=WAIT_S)

    assert result.status == "completed"
    assert outcomes == {
        "wait": "cannot be called from inside",
        "continuation": "cannot be called from inside",
        "stream": "cannot be called from inside",
        "submit": "ok",
        "addMessages": "ok",
    }
    # The submission ran after the outer turn freed the queue.
    assert [t for r, t in texts(agent) if r == "assistant"] == ["outer done", "submitted"]
