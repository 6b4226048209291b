"""Port of ``packages/think/src/e2e-tests/stall-recovery.test.ts`` and the stream-watchdog cases of
``packages/think/src/tests/think-session.test.ts``: a silent stream is stopped and the turn resumed through
the same bounded recovery as a crash.

Think's ``chat()`` callback gets ``onInterrupted`` for a stalled attempt; think_actors' ``chat()`` stream is the
callback: the stalled attempt's stream ends with an ``abort`` chunk naming the resumed turn (neither ``finish``
nor ``error``), and the continuation fires ``on_chat_response``.
"""

from __future__ import annotations

from typing import Any

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

from .conftest import Recorder, settle_recovery, texts, types

E2E = "packages/think/src/e2e-tests/stall-recovery.test.ts"
SESSION = "packages/think/src/tests/think-session.test.ts"
HANG = delay(3600)  # a parked provider: the watchdog, not the script, ends it


class Watched(Recorder):
    chat_stream_stall_timeout_s = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exhausted: list[ta.ChatRecoveryContext] = []

    async def on_chat_recovery_exhausted(self, ctx: ta.ChatRecoveryContext) -> None:
        self.exhausted.append(ctx)


def interrupted(chunks: list[Any]) -> bool:
    """What Think's ``onInterrupted`` reports: the attempt ended neither done nor failed."""
    return chunks[-1].type == "abort" and "finish" not in types(chunks) and "error" not in types(chunks)


async def test_a_stalled_turn_is_finished_by_its_continuation() -> None:
    """stall-recovery.test.ts:251 "recovers a stalled turn via the scheduled continuation instead of failing
    terminally (#1626)" (no orphaned turn records: ``settle_recovery`` returns and nothing is left to recover)."""
    model = ScriptedModel([step(text("partial "), HANG), text("the continuation's output")])
    agent = Watched(model=model, store=ta.MemoryStore())
    chunks = await agent.chat("tell me").collect()
    await settle_recovery(agent)
    assert interrupted(chunks)
    assert texts(agent) == [("user", "tell me"), ("assistant", "partial "), ("assistant", "the continuation's output")]
    assert await agent.store.list_turns() == []
    model.assert_complete()


async def test_a_slow_but_steady_stream_never_stalls() -> None:
    """think-session.test.ts:562 "does not fire the watchdog for a slow-but-steady stream (timer resets per
    chunk)"."""

    class Steady(Watched):
        chat_stream_stall_timeout_s = 0.2

    pieces = [text("a"), delay(0.015), text("b"), delay(0.015), text("c"), delay(0.015), text("d")]
    agent = Steady(model=ScriptedModel([step(*pieces)]), store=ta.MemoryStore())
    result = await agent.save_messages("slowly")
    assert (result.status, result.error) == ("completed", None)
    assert agent.event_types("chat:stream:stalled") == []


async def test_an_in_band_error_while_the_watchdog_is_armed_ends_the_turn() -> None:
    """think-session.test.ts:583 "terminates cleanly on an in-band stream error while the watchdog is armed"."""

    class Guarded(Watched):
        chat_stream_stall_timeout_s = 5.0

    agent = Guarded(model=ScriptedModel([error(ta.ProviderError("Mock error under guard"))]), store=ta.MemoryStore())
    stream = agent.chat("hi")
    chunks = await stream.collect()
    assert stream.status == "error"
    assert [c.error_text for c in chunks if c.type == "error"] == ["Mock error under guard"]
    assert agent.event_types("chat:stream:stalled") == [] and agent.exhausted == []


async def test_a_stall_routes_into_bounded_recovery_not_a_terminal_error() -> None:
    """think-session.test.ts:594 "routes a stream-stall watchdog abort into bounded recovery instead of failing
    terminally (#1626)": no error, one interruption, a scheduled continuation that completes the turn."""
    model = ScriptedModel([step(text("one "), text("two "), HANG), text("finished")])
    agent = Watched(model=model, store=ta.MemoryStore())
    stream = agent.chat("go")
    chunks = await stream.collect()
    await settle_recovery(agent)
    assert interrupted(chunks) and agent.seen("on_chat_error") == []
    assert agent.event_types("chat:recovery:") == [
        "chat:recovery:detected",
        "chat:recovery:attempt",
        "chat:recovery:completed",
    ]
    [response] = agent.seen("on_chat_response")
    assert (response.request_id, response.status, response.continuation) == (stream.request_id, "completed", True)
    assert texts(agent)[-1] == ("assistant", "finished")


async def test_a_completed_or_failed_turn_is_not_reported_interrupted() -> None:
    """think-session.test.ts:615 "does not call onInterrupted on a normally-completing or terminally-erroring turn
    (#1644)"."""
    ok = Watched(model=ScriptedModel([text("hello")]), store=ta.MemoryStore())
    ok_chunks = await ok.chat("hello").collect()
    assert ok_chunks[-1].type == "finish" and not interrupted(ok_chunks)

    failing = Watched(model=ScriptedModel([error(ta.ProviderError("boom under no-interrupt"))]), store=ta.MemoryStore())
    bad_chunks = await failing.chat("hi").collect()
    assert [c.error_text for c in bad_chunks if c.type == "error"] == ["boom under no-interrupt"]
    assert not interrupted(bad_chunks)


async def test_a_stall_does_not_fire_a_second_continuation_beside_recovery() -> None:
    """think-session.test.ts:632 "does not re-arm a held auto-continuation when an RPC stall routes into bounded
    recovery": a client tool's result arrives with ``auto_continue`` while the stalled turn runs; the turn is
    continued once."""
    model = ScriptedModel(
        [
            tool_call("client_action", {}, id="tc-client-1"),
            step(text("continuing "), HANG),
            text("recovered once"),
        ]
    )
    agent = Watched(model=model, store=ta.MemoryStore())
    client = ta.ClientToolSchema(name="client_action")
    await agent.chat("use the client tool", client_tools=[client]).collect()
    await agent.add_tool_result("tc-client-1", "output", auto_continue=True)
    await agent.wait_until_stable(timeout_s=5)
    await settle_recovery(agent)
    assert [t for r, t in texts(agent) if r == "assistant"][-2:] == ["continuing ", "recovered once"]
    model.assert_complete()


async def test_a_per_turn_stall_timeout_arms_the_watchdog_when_the_agent_has_none() -> None:
    """think-session.test.ts:653 "honors a per-turn TurnConfig.chatStreamStallTimeoutMs override even when the
    instance watchdog is off (#1626)"."""

    class PerTurn(Watched):
        chat_stream_stall_timeout_s = None

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
            await super().before_turn(ctx)
            return ta.TurnConfig(chat_stream_stall_timeout_s=0.05)

    model = ScriptedModel([step(text("partial "), HANG), text("per-turn recovery")])
    agent = PerTurn(model=model, store=ta.MemoryStore())
    chunks = await agent.chat("go").collect()
    await settle_recovery(agent)
    assert interrupted(chunks) and agent.seen("on_chat_error") == []
    assert texts(agent)[-1] == ("assistant", "per-turn recovery")


async def test_a_stall_past_the_budget_ends_through_the_same_exhaustion_as_a_crash() -> None:
    """think-session.test.ts:4694 "routes a stall through the SAME exhaustion path as deploy recovery once the
    budget is spent — fires onExhausted + delivers terminalMessage, not the raw stall error (#1626)".

    think_actors has no configurable terminal message: the exhaustion hook fires once, and ``on_chat_error``
    (stage ``recovery``) chooses what callers see.
    """

    class OneAttempt(Watched):
        chat_recovery = ta.ChatRecoveryConfig(max_attempts=1)

        async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
            await super().on_chat_error(error, ctx)
            return RuntimeError("The assistant was interrupted. Please try again.")

    model = ScriptedModel([step(text("a "), HANG), HANG])  # the continuation makes no progress
    agent = OneAttempt(model=model, store=ta.MemoryStore())
    await agent.chat("go").collect()
    await settle_recovery(agent)
    assert [ctx.reason for ctx in agent.exhausted] == ["max_attempts"]
    assert [ctx.stage for _, ctx in agent.seen("on_chat_error")] == ["recovery"]
    failed = [e.payload for e in agent.events if e.type == "chat:request:failed"]
    assert [p["error"] for p in failed] == ["The assistant was interrupted. Please try again."]
