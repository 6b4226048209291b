"""Recovery never drops a message, under real process kills: the agent actor dies (``os._exit``) inside its model's
stream and Ray restarts it; the restarted actor answers the user's message once, by itself.

Every entry path of a handle (``chat``, ``save_messages``, ``submit_messages``) is crashed at three points:

1. ``before-stream``: the user message is stored, the model's stream has not opened;
2. ``stream-opened``: the model sent its response start (``ResponseMetadata``, the stream's ``start-step``) and
   nothing else. Whether ``start-step`` reached the log depends on the host's batching (it holds a stream's
   opening until content comes); either way there is no reply to continue, and the turn is retried;
3. ``first-chunk``: the model sent its first text chunk ``Hel``, and the log holds it. For ``chat`` the actor dies
   once the caller received it (the host writes a batch to the log before it leaves the actor); for the calls
   without a stream the dying process writes its log first (``Engine.durable``, as that boundary would).

A continuation turn (``continue_last_turn``) is crashed too. The in-process matrix, and a chunk lost with its
unwritten batch, are in tests/test_recovery_never_drops.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, ResponseMetadata, TextDelta, Usage

POINTS = ["before-stream", "stream-opened", "first-chunk"]
KIND = {"before-stream": "retry", "stream-opened": "retry", "first-chunk": "continue"}
REPLY = "Hello there."
WAIT_S = 60


class _Stream:
    """Stateless: answers ``Hel`` ``lo there.``, passing the agent's crash points on the way; asked to go on from a
    partial ``Hel``, it says the rest."""

    model_id = "dies-in-stream"

    def __init__(self, agent: DiesInStream) -> None:
        self.agent = agent

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        if request.messages[-2] == {"role": "assistant", "content": "Hel"}:  # then the ask to continue
            yield ResponseMetadata(id="resp-rest", model=self.model_id)
            yield TextDelta("lo there.")
            yield FinishEvent("stop", Usage())
            return
        await self.agent.die("before-stream")
        yield ResponseMetadata(id="resp-1", model=self.model_id)
        await self.agent.die("stream-opened")
        yield TextDelta("Hel")
        await self.agent.die("first-chunk")
        yield TextDelta("lo there.")
        yield FinishEvent("stop", Usage())


class DiesInStream(ta.Think):
    """Dies once per turn at ``point`` of its model's stream (the watch remembers, across restarts, that it did).

    ``held``: the death waits for the test to open the watch's gate (after its caller received enough).
    ``flush``: the dying process writes its chunk log first. Reports its recovery hook, its recovery events and
    how each turn ended to the watch."""

    def __init__(
        self,
        *args: Any,
        watch: str,
        namespace: str,
        point: str,
        held: bool = False,
        flush: bool = False,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.model = _Stream(self)
        self.watch_name, self.namespace = watch, namespace
        self.point, self.held, self.flush = point, held, flush
        self.request_id: str | None = None
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)

    @property
    def watch(self) -> Any:
        return ray.get_actor(self.watch_name, namespace=self.namespace)

    async def die(self, point: str) -> None:
        if point != self.point or self.request_id is None:
            return
        if not await self.watch.crash_once.remote(self.request_id, close_gate=self.held):
            return  # the turn's recovery passes this point
        if self.held:
            await self.watch.gate.remote()
        if self.flush:
            await self._engine.durable()
        os._exit(1)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.request_id = ctx.request_id  # a recovery turn keeps its request id
        return None

    async def on_chat_recovery(self, ctx: ta.ChatRecoveryContext) -> Any:
        facts = {"kind": ctx.kind, "attempt": ctx.attempt, "partial": ctx.partial.text if ctx.partial else None}
        await self.watch.log.remote(json.dumps({"recovery": facts}))
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        # Published before this hook runs: the recovered turn's events are all here.
        events = [[e.type, e.payload.get("recoveryKind")] for e in self.events if e.type.startswith("chat:recovery:")]
        await self.watch.log.remote(json.dumps({"events": events, "continuation": result.continuation}))
        await self.watch.turn_finished.remote(result.request_id, result.status)


async def spawn(ray_runtime: Any, unique: str, watch: tuple[Any, str], point: str, **options: Any) -> Any:
    return await ta.spawn(DiesInStream, unique, watch=watch[1], namespace=ray_runtime.namespace, point=point, **options)


async def through_restarts(call: Any) -> Any:
    """``await call()``, again while the actor is dead or restarting."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await call()
        except (ta.AgentUnavailableError, TimeoutError):
            assert time.monotonic() < deadline, f"no answer through the restart within {WAIT_S} s"
            await _pause()


async def _pause() -> None:
    await asyncio.sleep(0.2)  # the actor is restarting: nothing to wait on but time


async def recovered(watch: tuple[Any, str]) -> tuple[str, dict[str, Any]]:
    """The crashed turn's request id, once its recovery finished completed, and what the recovery reported."""
    actor = watch[0]
    [request_id] = (await actor.report.remote())["crashes"]
    assert await actor.wait_finished.remote(request_id, WAIT_S) == ["completed"]
    facts: dict[str, Any] = {}
    for line in await actor.wait_logged.remote(5):
        facts.update(json.loads(line))
    return request_id, facts


def assert_answered_once(messages: list[ta.UIMessage], expected: list[tuple[str, str]]) -> None:
    assert [(m.role, m.text) for m in messages] == expected
    assert len({m.id for m in messages}) == len(messages)


def expected_after(point: str) -> list[tuple[str, str]]:
    said = [("assistant", "Hel"), ("assistant", "lo there.")] if KIND[point] == "continue" else [("assistant", REPLY)]
    return [("user", "hello"), *said]


def assert_recovery(facts: dict[str, Any], kind: str, partial: str | None) -> None:
    assert facts["recovery"] == {"kind": kind, "attempt": 1, "partial": partial}
    assert facts["events"] == [
        ["chat:recovery:detected", kind],
        ["chat:recovery:attempt", kind],
        ["chat:recovery:completed", kind],
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", POINTS)
async def test_a_handle_chat_killed_in_the_model_stream_is_answered_once(
    ray_runtime: Any, unique: str, watch: tuple[Any, str], point: str
) -> None:
    """Crash point: ``point`` of the model's stream in a handle's ``chat``; at ``first-chunk`` the actor dies once
    the caller holds ``Hel``. The caller resumes the stream and gets the whole reply once."""
    held = point == "first-chunk"
    agent = await spawn(ray_runtime, unique, watch, point, held=held)
    stream = agent.chat("hello")
    received: list[Any] = []
    with pytest.raises(ta.AgentUnavailableError):
        async for chunk in stream:
            received.append(chunk)
            if held and chunk.type == "text-delta":
                await watch[0].open_gate.remote()  # the caller holds "Hel": now the actor dies
    assert "".join(c.delta for c in received if c.type == "text-delta") == ("Hel" if held else "")

    follow = stream
    deadline = time.monotonic() + WAIT_S
    while True:
        resumed = follow.resume()
        try:
            async for chunk in resumed:
                received.append(chunk)
            break
        except (ta.AgentUnavailableError, ta.TurnError):
            assert time.monotonic() < deadline, f"the turn was not resumed within {WAIT_S} s"
            follow = resumed  # its position counts what it delivered
            await _pause()

    assert received[-1].type == "finish"
    assert "".join(c.delta for c in received if c.type == "text-delta") == REPLY  # every chunk once
    request_id, facts = await recovered(watch)
    assert request_id == stream.request_id
    assert_recovery(facts, KIND[point], "Hel" if held else None)
    assert_answered_once(await through_restarts(agent.get_messages), expected_after(point))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", POINTS)
async def test_a_handle_save_messages_killed_in_the_model_stream_is_answered_once(
    ray_runtime: Any, unique: str, watch: tuple[Any, str], point: str
) -> None:
    """Crash point: ``point`` of the model's stream in a handle's ``save_messages`` (the call fails: it may or may
    not have run); the restarted actor answers the stored message by itself."""
    agent = await spawn(ray_runtime, unique, watch, point, flush=point == "first-chunk")
    with pytest.raises(ta.AgentUnavailableError):
        await agent.save_messages("hello")

    _, facts = await recovered(watch)
    assert_recovery(facts, KIND[point], "Hel" if KIND[point] == "continue" else None)
    assert_answered_once(await through_restarts(agent.get_messages), expected_after(point))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", POINTS)
async def test_a_submission_killed_in_the_model_stream_is_completed(
    ray_runtime: Any, unique: str, watch: tuple[Any, str], point: str
) -> None:
    """Crash point: ``point`` of the model's stream in the turn of a handle's ``submit_messages``; the submission
    ends ``completed`` (never ``skipped``) with the reply."""
    agent = await spawn(ray_runtime, unique, watch, point, flush=point == "first-chunk")
    # The crash may cut the answer: sent again with its id, the submission is the one already accepted.
    await through_restarts(lambda: agent.submit_messages("hello", submission_id="s1"))

    final = await through_restarts(lambda: agent.wait_for_submission("s1", timeout_s=5))
    assert (final.status, final.error, final.text) == ("completed", None, REPLY)
    _, facts = await recovered(watch)
    assert_recovery(facts, KIND[point], "Hel" if KIND[point] == "continue" else None)
    assert_answered_once(await through_restarts(agent.get_messages), expected_after(point))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["stream-opened", "first-chunk"])
async def test_a_continuation_killed_in_the_model_stream_continues_the_last_assistant_message(
    ray_runtime: Any, unique: str, watch: tuple[Any, str], point: str
) -> None:
    """Crash point: ``point`` of the model's stream in a continuation turn (``continue_last_turn``, no new user
    message). One that held nothing continues the conversation's last assistant message (as the reference does);
    one that held ``Hel`` continues that. Neither is skipped."""
    agent = await spawn(ray_runtime, unique, watch, point, flush=point == "first-chunk")
    await agent.add_messages(
        [
            ta.UIMessage(id="u1", role="user", parts=(ta.TextPart(text="hello"),)),
            ta.UIMessage(id="a1", role="assistant", parts=(ta.TextPart(text="Hi."),)),
        ]
    )
    with pytest.raises(ta.AgentUnavailableError):
        await agent.continue_last_turn()

    _, facts = await recovered(watch)
    partial = "Hel" if point == "first-chunk" else None
    assert_recovery(facts, "continue", partial)
    assert facts["continuation"] is True
    said = [("assistant", "Hel"), ("assistant", "lo there.")] if partial else [("assistant", REPLY)]
    assert_answered_once(await through_restarts(agent.get_messages), [("user", "hello"), ("assistant", "Hi."), *said])
