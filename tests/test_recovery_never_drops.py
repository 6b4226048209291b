"""Recovery never drops a message: a turn interrupted before its reply held anything is retried from the user's
message, never skipped.

The reference (Think) marks the recovery of a turn whose model stream had opened but held no content ``skipped``
and leaves the user's message unanswered. Here every entry point (``chat()``, ``save_messages``,
``submit_messages``) is crashed at three points of the model's stream:

1. ``before-stream``: the user message is stored, the model's stream has not opened;
2. ``stream-opened``: the model sent its response start (``ResponseMetadata``, the stream's ``start-step``) and
   nothing else;
3. ``first-chunk``: the model sent its first text chunk.

A crash is simulated as in tests/test_recovery.py: the first agent freezes inside its model's stream, its store is
copied (what a dead process leaves) and a second agent starts on the copy. At the crash, what the stream produced so
far is written to the log (``Engine.durable``, what the Ray actor boundary does before chunks leave the process),
so the copy holds exactly the stream up to the crash point; a separate test crashes before that batch was written.
Real process kills on Ray are in tests/ray/test_recovery_never_drops_on_ray.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

import think_actors as ta
from think_actors._turn.convert import CONTINUE_TEXT
from think_actors.models import FinishEvent, ModelRequest, ResponseMetadata, TextDelta, Usage
from think_actors.testing import ScriptedModel, text

WAIT_S = 5
POINTS = ["before-stream", "stream-opened", "first-chunk"]
ENTRIES = ["chat", "save_messages", "submit_messages"]
# What the chunk log holds at each crash point.
LOGGED = {
    "before-stream": [],
    "stream-opened": ["start-step"],
    "first-chunk": ["start-step", "text-start", "text-delta"],
}
# Points 1 and 2 left no reply to continue: the turn runs again from the user's message. Point 3 continues "Hel".
KIND = {"before-stream": "retry", "stream-opened": "retry", "first-chunk": "continue"}


class DiesInStream:
    """The crashed process's model: streams ``Hel`` ``lo.`` and freezes (the process is gone) at ``point``."""

    model_id = "dies-in-stream"

    def __init__(self, agent: Recording, point: str, *, logged: bool = True) -> None:
        self.agent = agent
        self.point = point
        self.logged = logged

    async def _die(self, point: str) -> None:
        if point != self.point:
            return
        if self.logged:
            await self.agent._engine.durable()  # the stream so far is in the log
        self.agent.frozen.set()
        await asyncio.Event().wait()  # nothing after this point ever runs

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await self._die("before-stream")
        yield ResponseMetadata(id="resp-1", model=self.model_id)
        await self._die("stream-opened")
        yield TextDelta("Hel")
        await self._die("first-chunk")
        yield TextDelta("lo.")
        yield FinishEvent("stop", Usage())


class Recording(ta.Think):
    """Records the recovery hook, the recovery events and how each turn ended."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.frozen = asyncio.Event()
        self.recoveries: list[ta.ChatRecoveryContext] = []
        self.responses: list[ta.ChatResponseResult] = []
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)

    async def on_chat_recovery(self, ctx: ta.ChatRecoveryContext) -> Any:
        self.recoveries.append(ctx)
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.responses.append(result)


async def start_turn(agent: Recording, entry: str, message: str) -> asyncio.Task[Any]:
    """Start a turn through ``entry``; the task that runs it (a submission runs on the agent's own drain)."""
    if entry == "chat":
        return asyncio.create_task(agent.chat(message).collect())
    if entry == "save_messages":
        return asyncio.create_task(agent.save_messages(message))
    await agent.submit_messages(message, submission_id="s1")
    return asyncio.create_task(agent.wait_for_submission("s1"))


async def crash(
    entry: str, point: str, *, logged: bool = True, history: list[ta.UIMessage] | None = None
) -> ta.MemoryStore:
    """Start a turn through ``entry`` (a continuation with ``entry="continue_last_turn"``), freeze it at ``point``
    of its model's stream; return a copy of the store as the crash left it."""
    store = ta.MemoryStore()
    agent = Recording(store=store)
    agent.model = DiesInStream(agent, point, logged=logged)
    if history:
        await agent.add_messages(history)
    if entry == "continue_last_turn":
        task = asyncio.create_task(agent.continue_last_turn())
    else:
        task = await start_turn(agent, entry, "hello")
    await asyncio.wait_for(agent.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    task.cancel()
    return snapshot


async def restart(store: ta.MemoryStore, model: ScriptedModel) -> Recording:
    agent = Recording(model=model, store=store)
    await agent.load_messages()  # starting finds the interrupted turn and runs its recovery
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)
    return agent


async def logged_types(store: ta.MemoryStore) -> list[str]:
    [record] = await store.list_turns()
    return [entry["type"] for entry in await store.load_chunks(record.request_id)]


def texts(agent: ta.Think) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in agent.get_messages()]


def said_to(model: ScriptedModel) -> list[tuple[str, str]]:
    """The conversation of the model's first request, after its system prompt."""
    [system, *rest] = model.requests[0].messages
    assert system["role"] == "system"
    return [(m["role"], m["content"]) for m in rest]


def recovery_events(agent: Recording) -> list[tuple[str, str, str | None]]:
    return [
        (e.type, e.payload["recoveryKind"], e.payload.get("reason"))
        for e in agent.events
        if e.type.startswith("chat:recovery:")
    ]


async def assert_stored_once(agent: Recording) -> None:
    """The transcript in the store is the agent's, each message once."""
    stored = await agent.store.load_messages()
    assert [m.id for m in stored] == [m.id for m in agent.get_messages()]
    assert len({m.id for m in stored}) == len(stored)


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("entry", ENTRIES)
async def test_an_interrupted_turn_is_answered_once_and_completed(entry: str, point: str) -> None:
    """Crash point: ``point`` of the model's stream (before it opened, opened with no content, after the first text
    chunk), for a turn started through ``entry``."""
    store = await crash(entry, point)
    assert await logged_types(store) == LOGGED[point]
    [record] = await store.list_turns()
    assert [m.role for m in await store.load_messages()] == ["user"]  # stored before the turn ran

    kind = KIND[point]
    model = ScriptedModel([text("Hello there.")] if kind == "retry" else [text(" there.")])
    agent = await restart(store, model)

    if kind == "retry":
        assert texts(agent) == [("user", "hello"), ("assistant", "Hello there.")]
        # Retried from the user's message: the model saw it last, and nothing of the interrupted stream.
        assert said_to(model) == [("user", "hello")]
    else:
        assert texts(agent) == [("user", "hello"), ("assistant", "Hel"), ("assistant", " there.")]
        # Continued from the partial reply: the model saw it after the user's message, then the ask to go on.
        assert said_to(model) == [("user", "hello"), ("assistant", "Hel"), ("user", CONTINUE_TEXT)]
    model.assert_complete()
    await assert_stored_once(agent)

    [ctx] = agent.recoveries
    assert (ctx.request_id, ctx.kind, ctx.attempt) == (record.request_id, kind, 1)
    assert (ctx.partial is not None and ctx.partial.text) == (kind == "continue" and "Hel")
    assert recovery_events(agent) == [
        ("chat:recovery:detected", kind, None),
        ("chat:recovery:attempt", kind, None),
        ("chat:recovery:completed", kind, None),
    ]
    [response] = agent.responses
    assert (response.request_id, response.status) == (record.request_id, "completed")
    assert agent._engine.recovery.live[record.request_id].status == "completed"
    if entry == "submit_messages":
        final = await agent.wait_for_submission("s1", timeout_s=WAIT_S)
        assert (final.status, final.text) == ("completed", "Hello there." if kind == "retry" else "Hel there.")
    assert await agent.store.list_turns() == []


async def test_a_caller_that_reattaches_after_a_crash_before_any_content_gets_the_whole_reply() -> None:
    """Crash point: the model's stream opened (start-step logged) and sent nothing else, for a ``chat()`` turn; the
    caller re-attaches by request id and gets the retried reply."""
    store = await crash("chat", "stream-opened")
    [record] = await store.list_turns()
    agent = Recording(model=ScriptedModel([text("Hello there.")]), store=store)
    await agent.load_messages()

    chunks = [c async for c in agent.attach(record.request_id)]

    assert [c.type for c in chunks][-1] == "finish"
    assert "".join(c.delta for c in chunks if c.type == "text-delta") == "Hello there."
    assert texts(agent) == [("user", "hello"), ("assistant", "Hello there.")]


@pytest.mark.parametrize("entry", ENTRIES)
async def test_a_first_chunk_lost_with_its_unwritten_batch_is_retried(entry: str) -> None:
    """Crash point: after the first text chunk, before the batch holding it was written (no caller across an actor
    boundary saw it): the log holds nothing of the reply, and the turn is retried from the user's message."""
    store = await crash(entry, "first-chunk", logged=False)
    assert await logged_types(store) == []

    model = ScriptedModel([text("Hello there.")])
    agent = await restart(store, model)

    assert texts(agent) == [("user", "hello"), ("assistant", "Hello there.")]
    assert said_to(model) == [("user", "hello")]
    assert [(c.kind, c.partial) for c in agent.recoveries] == [("retry", None)]
    assert [e[0] for e in recovery_events(agent)][-1] == "chat:recovery:completed"
    assert [r.status for r in agent.responses] == ["completed"]
    await assert_stored_once(agent)
    if entry == "submit_messages":
        assert (await agent.wait_for_submission("s1", timeout_s=WAIT_S)).status == "completed"


HISTORY = [
    ta.UIMessage(id="u1", role="user", parts=(ta.TextPart(text="hello"),)),
    ta.UIMessage(id="a1", role="assistant", parts=(ta.TextPart(text="Hi."),)),
]


@pytest.mark.parametrize("point", POINTS)
async def test_an_interrupted_continuation_continues_the_last_assistant_message(point: str) -> None:
    """Crash point: ``point`` of the model's stream in a continuation turn (``continue_last_turn``: no new user
    message, the conversation ends with the assistant's ``Hi.``).

    The right behaviour, the reference's: a continuation that held nothing continues the conversation's last
    assistant message (``continue``, no partial); one that held its first chunk continues that partial. Never
    skipped, never a retry (there is no user message to answer again)."""
    store = await crash("continue_last_turn", point, history=HISTORY)
    [record] = await store.list_turns()
    assert record.continuation

    model = ScriptedModel([text(" More.")])
    agent = await restart(store, model)

    said = [("assistant", "Hel")] if point == "first-chunk" else []
    assert texts(agent) == [("user", "hello"), ("assistant", "Hi."), *said, ("assistant", " More.")]
    # The model is asked to go on from the last assistant message (the partial, when there is one).
    assert said_to(model) == [("user", "hello"), ("assistant", "Hi."), *said, ("user", CONTINUE_TEXT)]
    model.assert_complete()
    await assert_stored_once(agent)

    [ctx] = agent.recoveries
    assert ctx.kind == "continue"
    assert (ctx.partial is not None and ctx.partial.text) == (point == "first-chunk" and "Hel")
    assert recovery_events(agent) == [
        ("chat:recovery:detected", "continue", None),
        ("chat:recovery:attempt", "continue", None),
        ("chat:recovery:completed", "continue", None),
    ]
    [response] = agent.responses
    assert (response.request_id, response.status, response.continuation) == (record.request_id, "completed", True)
    assert await agent.store.list_turns() == []
