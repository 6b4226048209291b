"""Port of ``packages/think/src/e2e-tests/context-overflow-recovery.test.ts`` and the context-overflow subset of
``packages/think/src/tests/assistant-agent-loop.test.ts``: reactive compact-and-retry, its budget, the proactive
guard, and the default classifier.

The reference's e2e agent (``ThinkContextOverflowE2EAgent``) seeds a history, then its model overflows (reactive) or
reports input usage past the headroom (proactive); its compaction summarises all but the newest message. The same
agent is built here, in process (the e2e runs it under ``wrangler dev`` without kills, so nothing is lost).
"""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.compaction import CompactionResult
from think_actors.testing import ScriptedModel, error, step, text, tool_call

from .conftest import Recorder, chat_request, skip_greeting, texts, until_done, wire_user

E2E = "packages/think/src/e2e-tests/context-overflow-recovery.test.ts"
LOOP = "packages/think/src/tests/assistant-agent-loop.test.ts"
TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"
SEED = "seed-marker"


def overflow() -> ta.ContextOverflowError:
    return ta.ContextOverflowError(TOO_LONG, provider="anthropic", status_code=400)


@ta.tool
async def echo(message: str) -> str:
    """Echo a message."""
    return f"echo: {message}"


class Overflowing(Recorder):
    context_overflow = ta.ContextOverflowConfig(reactive=True)
    classify_chat_error = ta.default_context_overflow_classifier

    def __init__(self, *args: Any, shortens: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("tools", [echo])
        super().__init__(*args, **kwargs)
        self.shortens = shortens
        self.compactions: list[str] = []

    async def configure_session(self, session: ta.Session) -> ta.Session:
        async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
            self.compactions.append(ctx.reason)
            if not self.shortens or len(history) < 3:
                return None
            # The two oldest messages of the model's view, so each compaction shortens it a little.
            return CompactionResult("summary of the earlier talk", history[0].id, history[1].id)

        return session.on_compaction(compact)

    def compacted(self) -> list[dict[str, Any]]:
        return [e.payload for e in self.events if e.type == "chat:context:compacted"]


async def seeded(
    cls: type[Overflowing] = Overflowing, *steps: Any, turns: int = 1, **options: Any
) -> tuple[Overflowing, ScriptedModel]:
    model = ScriptedModel([text(f"{SEED} answer {i}") for i in range(turns)])
    agent = cls(model=model, store=ta.MemoryStore(), **options)
    for i in range(turns):
        await agent.save_messages(f"{SEED} question {i}")
    model.extend(list(steps))
    agent.log.clear()
    agent.events.clear()
    return agent, model


def saw_seed(request: ta.ModelRequest) -> bool:
    return any(SEED in str(m.get("content")) for m in request.messages if m["role"] != "system")


# -- e2e -----------------------------------------------------------------------------------------------------------


async def test_reactive_compaction_retries_an_overflowing_turn_to_an_answer() -> None:
    """context-overflow-recovery.test.ts:204 "reactive: compacts and retries an overflowing turn to a successful
    answer" (the partial answer before the overflow is discarded)."""
    agent, model = await seeded(
        Overflowing,
        error(overflow(), after=text("partial answer before overflow")),
        text("recovered after compaction"),
    )
    result = await agent.save_messages("big question")
    assert (result.status, result.error) == ("completed", None)
    assert agent.compactions == ["reactive"]
    assert result.message is not None and result.message.text == "recovered after compaction"
    assert "partial answer before overflow" not in [t for _, t in texts(agent)]
    assert len(model.requests) == 3  # the seed turn, the overflowing attempt, the retry


async def test_reactive_recovery_ends_in_a_classified_error_when_its_budget_is_spent() -> None:
    """context-overflow-recovery.test.ts:223 "reactive: surfaces a terminal overflow error when the retry budget is
    exhausted"."""
    agent, _ = await seeded(Overflowing, error(overflow()), error(overflow()))
    result = await agent.save_messages("big question")
    assert result.status == "error" and result.error is not None and "prompt is too long" in result.error
    [(_, ctx)] = agent.seen("on_chat_error")
    assert ctx.classification == "context_overflow"
    assert agent.compactions == ["reactive"]


class Proactive(Overflowing):
    context_overflow = ta.ContextOverflowConfig(reactive=True, proactive=ta.Proactive(max_input_tokens=1000))


async def test_the_proactive_guard_compacts_before_a_step_past_the_headroom() -> None:
    """context-overflow-recovery.test.ts:238 "proactive: compacts pre-step when reported usage crosses the headroom
    budget"."""
    heavy = ta.Usage(input_tokens=950, output_tokens=10, total_tokens=960)
    agent, model = await seeded(
        Proactive, step(tool_call("echo", {"message": "hi"}), usage=heavy), text("answered with headroom to spare")
    )
    result = await agent.save_messages("use the echo tool")
    assert (result.status, result.error) == ("completed", None)
    assert agent.compactions == ["proactive"]
    assert result.message is not None and "answered with headroom to spare" in result.message.text
    assert (saw_seed(model.requests[1]), saw_seed(model.requests[2])) == (True, False)


# -- assistant-agent-loop.test.ts, the overflow subset ----------------------------------------------------------


async def test_a_reactive_retry_reruns_the_same_turn_on_a_shorter_prompt() -> None:
    """assistant-agent-loop.test.ts:294 "compacts and retries when enabled, recovering the turn"."""
    agent, model = await seeded(Overflowing, error(overflow()), text("recovered"))
    result = await agent.save_messages("trigger overflow")
    assert (result.status, result.error) == ("completed", None)
    assert len(agent.compacted()) == 1 and len(model.requests) == 3
    assert [ctx.continuation for ctx in agent.seen("before_turn")] == [False, False]
    assert [saw_seed(r) for r in model.requests[1:]] == [True, False]


async def test_a_reactive_retry_leaves_no_orphan_partial_reply() -> None:
    """assistant-agent-loop.test.ts:321 "does not leave an orphan truncated assistant message after a reactive
    retry"."""
    agent, _ = await seeded(Overflowing, error(overflow(), after=text("truncated")), text("whole answer"))
    await agent.save_messages("trigger overflow")
    assert texts(agent)[2:] == [("user", "trigger overflow"), ("assistant", "whole answer")]


async def test_with_recovery_off_an_overflow_is_terminal_and_nothing_is_compacted() -> None:
    """assistant-agent-loop.test.ts:355 "stays terminal when disabled (no compaction, surfaces the error)"."""

    class Off(Overflowing):
        context_overflow = None

    agent, model = await seeded(Off, error(overflow()))
    result = await agent.save_messages("trigger overflow")
    assert result.status == "error" and agent.compactions == [] and len(model.requests) == 2
    [(_, ctx)] = agent.seen("on_chat_error")
    assert ctx.classification is None


async def test_an_overflow_that_compaction_cannot_shorten_ends_through_on_chat_error() -> None:
    """assistant-agent-loop.test.ts:373 "falls through to a terminal error (via onChatError) when compaction
    can't shorten"."""
    agent, model = await seeded(Overflowing, error(overflow()), shortens=False)
    result = await agent.save_messages("trigger overflow")
    assert result.status == "error" and len(model.requests) == 2
    [(_, ctx)] = agent.seen("on_chat_error")
    assert (ctx.stage, ctx.classification) == ("stream", "context_overflow")
    assert [p["shortened"] for p in agent.compacted()] == [False]


async def test_recovery_stops_after_max_retries() -> None:
    """assistant-agent-loop.test.ts:396 "stops after contextOverflow.maxRetries when the overflow persists (no
    infinite loop)"."""

    class Twice(Overflowing):
        context_overflow = ta.ContextOverflowConfig(reactive=True, max_retries=2)

    agent, model = await seeded(Twice, error(overflow()), error(overflow()), error(overflow()), turns=3)
    result = await agent.save_messages("trigger overflow")
    assert result.status == "error"
    assert len(model.requests) == 3 + 3
    assert agent.compactions == ["reactive", "reactive"]


async def test_an_aborted_turn_is_not_compacted_or_retried() -> None:
    """assistant-agent-loop.test.ts:424 "does not compact or retry an aborted turn (abort lands during recovery)"
    and :443 "... on the programmatic path": the classifier cancels the turn at the overflow seam."""

    class Cancels(Overflowing):
        async def classify_chat_error(self, error: Any, ctx: ta.ChatErrorContext) -> Any:
            self.cancel_chat(ctx.request_id or "")
            return "context_overflow"

    agent, model = await seeded(Cancels, error(overflow()))
    stream = agent.chat("trigger overflow")
    await stream.collect()
    assert stream.status == "aborted"
    assert (agent.compactions, agent.compacted(), len(model.requests)) == ([], [], 2)


async def test_a_provider_that_refuses_the_request_is_recovered_too() -> None:
    """assistant-agent-loop.test.ts:461 "recovers when the provider rejects doStream (top-level throw, not an
    in-stream error part)" and :482 "recovers a context overflow on the programmatic (saveMessages) path"."""
    agent, _ = await seeded(Overflowing, error(overflow()), text("recovered"))
    result = await agent.save_messages("trigger overflow")
    assert result.status == "completed" and agent.compactions == ["reactive"]


class WireOverflowing(Overflowing):
    pass


async def test_an_overflow_on_the_websocket_path_is_recovered(gateway: Any) -> None:
    """assistant-agent-loop.test.ts:511 "recovers a context overflow on the WebSocket turn path": one ``done``
    frame, no error frame between the attempts."""
    model = ScriptedModel([text(f"{SEED} answer"), error(overflow(), after=text("cut")), text("recovered over ws")])
    client, agent_of = await gateway(WireOverflowing, model=model)
    agent = await agent_of("wire-overflowing", "r1")
    await agent.save_messages(f"{SEED} question")
    ws = await client.ws_connect("/agents/wire-overflowing/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-1", wire_user("trigger overflow", "u1")))
    frames = await until_done(ws, "req-1")
    responses = [f for f in frames if f["type"] == "cf_agent_use_chat_response"]
    assert [f for f in responses if f.get("error")] == []
    assert [f["done"] for f in responses].count(True) == 1
    assert texts(agent)[-1] == ("assistant", "recovered over ws")
    await ws.close()


async def test_both_layers_recover_an_overflow_together() -> None:
    """assistant-agent-loop.test.ts:588 "recovers a context overflow with BOTH layers (proactive guard + reactive
    backstop)"."""
    heavy = ta.Usage(input_tokens=950, output_tokens=10, total_tokens=960)
    agent, _ = await seeded(
        Proactive,
        step(tool_call("echo", {"message": "hi"}), usage=heavy),
        error(overflow()),
        text("recovered"),
        turns=3,
    )
    result = await agent.save_messages("use the echo tool")
    assert result.status == "completed"
    assert agent.compactions[:2] == ["proactive", "reactive"]


async def test_the_proactive_guard_reports_its_compaction() -> None:
    """assistant-agent-loop.test.ts:616 "proactive guard compacts mid-turn before the budget is exceeded"."""
    heavy = ta.Usage(input_tokens=950, output_tokens=10, total_tokens=960)
    agent, _ = await seeded(
        Proactive,
        step(tool_call("echo", {"message": "a"}), usage=heavy),
        step(tool_call("echo", {"message": "b"}), usage=heavy),
        text("done"),
    )
    result = await agent.save_messages("use the echo tool")
    assert result.status == "completed"
    assert agent.compacted() == [{"reason": "proactive", "shortened": True}]


async def test_a_proactive_no_op_spends_its_one_attempt() -> None:
    """assistant-agent-loop.test.ts:711 "proactive no-op compaction consumes its single slot and does not
    re-attempt on later steps"."""
    heavy = ta.Usage(input_tokens=950, output_tokens=10, total_tokens=960)
    agent, model = await seeded(
        Proactive,
        step(tool_call("echo", {"message": "a"}), usage=heavy),
        step(tool_call("echo", {"message": "b"}), usage=heavy),
        text("done"),
        shortens=False,
    )
    result = await agent.save_messages("use the echo tool")
    assert (result.status, len(model.requests) - 1) == ("completed", 3)
    assert agent.compactions == ["proactive"]
    assert [p["shortened"] for p in agent.compacted()] == [False]


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "This model's maximum context length is 128000 tokens",
        "context_length_exceeded",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)",
        "Input is too long for requested model",
        "too many input tokens",
    ],
)
async def test_the_default_classifier_recognises_provider_overflows(message: str) -> None:
    """assistant-agent-loop.test.ts:736 "classifies common provider context-overflow errors"."""
    assert ta.default_context_overflow_classifier(message) == "context_overflow"
    assert ta.default_context_overflow_classifier(RuntimeError(message)) == "context_overflow"


@pytest.mark.parametrize("message", ["rate limit exceeded", "internal server error", "invalid api key"])
async def test_the_default_classifier_has_no_opinion_on_other_errors(message: str) -> None:
    """assistant-agent-loop.test.ts:757 "returns undefined for unrelated errors"."""
    assert ta.default_context_overflow_classifier(RuntimeError(message)) is None


class WireCancels(Overflowing):
    """Cancels its turn at the overflow seam (the reference's ``abortDuringRecovery``)."""

    async def classify_chat_error(self, error: Any, ctx: ta.ChatErrorContext) -> Any:
        self.cancel_chat(ctx.request_id or "")
        return "context_overflow"


async def test_an_aborted_turn_on_the_websocket_path_is_not_compacted_or_retried(gateway: Any) -> None:
    """assistant-agent-loop.test.ts:560 "does not compact or retry an aborted turn on the WebSocket path"."""
    model = ScriptedModel([text(f"{SEED} answer"), error(overflow())])
    client, agent_of = await gateway(WireCancels, model=model)
    agent = await agent_of("wire-cancels", "r1")
    await agent.save_messages(f"{SEED} question")
    ws = await client.ws_connect("/agents/wire-cancels/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("req-1", wire_user("trigger overflow", "u1")))
    done = (await until_done(ws, "req-1"))[-1]
    await agent.wait_idle()
    assert done.get("outcome") == "aborted"
    assert (agent.compactions, agent.compacted(), len(model.requests)) == ([], [], 2)
    model.assert_complete()


class TwiceProactive(Overflowing):
    context_overflow = ta.ContextOverflowConfig(
        reactive=True, proactive=ta.Proactive(max_input_tokens=1000, max_compactions=2)
    )


def tool_pairs(request: ta.ModelRequest) -> tuple[list[str], list[str]]:
    """The ids of the tool calls a prompt holds, and the ids its tool results answer."""
    calls = [c["id"] for m in request.messages for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in request.messages if m["role"] == "tool"]
    return calls, results


async def test_two_proactive_compactions_in_one_turn_keep_the_prompt_whole() -> None:
    """assistant-agent-loop.test.ts:645 "proactive guard fires twice in one turn (maxCompactions:2) without
    corrupting the spliced prompt": after each compaction the next step's prompt starts with the summary and keeps
    every tool call of this turn paired with its result."""
    heavy = ta.Usage(input_tokens=950, output_tokens=10, total_tokens=960)
    agent, model = await seeded(
        TwiceProactive,
        step(tool_call("echo", {"message": "a"}, id="call-a"), usage=heavy),
        step(tool_call("echo", {"message": "b"}, id="call-b"), usage=heavy),
        text("done after two tools"),
        turns=3,
    )
    result = await agent.save_messages("use the echo tool")
    assert (result.status, result.error) == ("completed", None)
    assert agent.compactions == ["proactive", "proactive"]
    assert agent.compacted() == [{"reason": "proactive", "shortened": True}] * 2
    first, second, third = model.requests[3:]
    assert [tool_pairs(r) for r in (first, second, third)] == [
        ([], []),
        (["call-a"], ["call-a"]),
        (["call-a", "call-b"], ["call-a", "call-b"]),
    ]
    assert [
        any("summary of the earlier talk" in str(m.get("content")) for m in r.messages) for r in (first, second, third)
    ] == [
        False,
        True,
        True,
    ]
    assert [t for _, t in texts(agent)].count("done after two tools") == 1
