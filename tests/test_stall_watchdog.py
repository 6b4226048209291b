"""The stream-stall watchdog (reference §2.5; stall-recovery e2e and the watchdog cases of think-session.test.ts):
a silent stream is stopped, its partial kept, and the turn resumed by the same bounded recovery as a crash."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import RecordingAgent

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, step, text

WAIT_S = 5


class Watched(RecordingAgent):
    chat_stream_stall_timeout_s = 0.1

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)
        self.exhausted: list[ta.ChatRecoveryContext] = []

    async def on_chat_recovery_exhausted(self, ctx: ta.ChatRecoveryContext) -> None:
        self.exhausted.append(ctx)

    def types(self) -> list[str]:
        return [e.type for e in self.events if e.type.startswith(("chat:stream", "chat:recovery"))]


def texts(agent: ta.Think) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in agent.get_messages()]


async def settle(agent: ta.Think) -> None:
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)


async def test_a_stalled_turn_is_resumed_by_a_continuation_instead_of_failing() -> None:
    model = ScriptedModel([step(text("partial "), delay(5), text("never")), text("and the rest")])
    agent = Watched(model=model, store=ta.MemoryStore())

    stream = agent.chat("tell me")
    chunks = [c async for c in stream]
    await settle(agent)

    assert stream.status == "aborted"
    assert chunks[-1].type == "abort" and f"resumed as {stream.request_id!r}" in (chunks[-1].reason or "")
    assert texts(agent) == [("user", "tell me"), ("assistant", "partial "), ("assistant", "and the rest")]
    assert agent.types() == [
        "chat:stream:stalled",
        "chat:recovery:detected",
        "chat:recovery:attempt",
        "chat:recovery:completed",
    ]
    stalled = next(e for e in agent.events if e.type == "chat:stream:stalled")
    assert stalled.payload == {"requestId": stream.request_id, "timeoutMs": 100}
    # No response hook for the stopped attempt: the continuation fires it, once.
    [response] = agent.contexts("on_chat_response")
    assert (response.request_id, response.status, response.continuation) == (stream.request_id, "completed", True)
    assert agent.contexts("on_chat_error") == []
    model.assert_complete()


async def test_a_slow_but_steady_stream_never_fires_the_watchdog() -> None:
    model = ScriptedModel([step(text("a"), delay(0.05), text("b"), delay(0.05), text("c"), delay(0.05), text("d"))])
    agent = Watched(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("slowly")
    assert (result.status, result.message.text) == ("completed", "abcd")  # type: ignore[union-attr]
    assert agent.types() == []


async def test_an_in_band_error_while_armed_ends_the_turn_normally() -> None:
    agent = Watched(model=ScriptedModel([error(ta.ProviderError("boom"), after=text("x"))]), store=ta.MemoryStore())
    result = await agent.save_messages("hi")
    await settle(agent)
    assert (result.status, result.error) == ("error", "boom")
    assert agent.types() == []


async def test_a_turn_config_override_arms_the_watchdog_when_the_agent_has_none() -> None:
    class PerTurn(Watched):
        chat_stream_stall_timeout_s = None

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
            return ta.TurnConfig(chat_stream_stall_timeout_s=0.1)

    model = ScriptedModel([step(text("p"), delay(5)), text("q")])
    agent = PerTurn(model=model, store=ta.MemoryStore())
    result = await agent.save_messages("hi")
    await settle(agent)
    assert result.status == "aborted"
    assert texts(agent)[-1] == ("assistant", "q")


async def test_a_turn_that_keeps_stalling_ends_through_the_same_exhaustion_path_as_a_crash() -> None:
    class Limited(Watched):
        chat_recovery = ta.ChatRecoveryConfig(max_attempts=2)

        async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
            await super().on_chat_error(error, ctx)
            return RuntimeError("We could not finish this answer. Please ask again.")

    model = ScriptedModel([step(text("partial"), delay(5)), delay(5), delay(5)])
    agent = Limited(model=model, store=ta.MemoryStore())
    stream = agent.chat("hi")
    [c async for c in stream]
    await settle(agent)

    [ctx] = agent.exhausted
    assert (ctx.reason, ctx.request_id) == ("max_attempts", stream.request_id)
    [(_, error_ctx)] = agent.contexts("on_chat_error")
    assert error_ctx.stage == "recovery"
    assert agent.types().count("chat:stream:stalled") == 3
    assert agent.types()[-1] == "chat:recovery:exhausted"
    assert texts(agent) == [("user", "hi"), ("assistant", "partial")]
    assert await agent.store.list_turns() == []
    model.assert_complete()


async def test_a_stalled_submission_is_completed_by_its_resumed_turn() -> None:
    # The stopped attempt is not the submission's end: the turn goes on in recovery, whose end is the status.
    model = ScriptedModel([step(text("partial "), delay(5), text("never")), text("and the rest")])
    agent = Watched(model=model, store=ta.MemoryStore())

    started = asyncio.Event()
    agent.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    sub = await agent.submit_messages("nightly job")
    await asyncio.wait_for(started.wait(), WAIT_S)
    # A follower (a gateway's socket) attached from the turn's start follows it through the resumption.
    followed = [c async for c in agent.attach(sub.request_id)]
    final = await agent.wait_for_submission(sub.submission_id, timeout_s=WAIT_S)

    assert (final.status, final.error) == ("completed", None)
    assert texts(agent) == [("user", "nightly job"), ("assistant", "partial "), ("assistant", "and the rest")]
    assert "".join(c.delta for c in followed if c.type == "text-delta") == "partial and the rest"
    assert followed[-1].type == "finish"
