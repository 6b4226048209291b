"""Context-window overflow recovery (the seed's second half; reference §2.7 and the §9.2 overflow cases of
assistant-agent-loop.test.ts and e2e context-overflow-recovery), with the scripted model.

The same recovery over real HTTP, with real provider error bodies through litellm, is in
test_overflow_over_http.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import RecordingAgent, drain

import think_actors as ta
from think_actors.compaction import SUMMARY_INSTRUCTIONS, CompactionResult
from think_actors.testing import ScriptedModel, error, step, text, tool_call

OVERFLOW = "prompt is too long: 210000 tokens > 200000 maximum"


def overflow(*, in_stream: bool = False) -> ta.ContextOverflowError:
    return ta.ContextOverflowError(OVERFLOW, provider="anthropic", status_code=400, in_stream=in_stream)


@ta.tool
async def lookup(q: str) -> str:
    """Look something up."""
    return "x" * 50


class Overflowing(RecordingAgent):
    """Reactive recovery on; compaction summarises everything but the newest message of the model's view, or
    with ``pairs=True`` only its first two messages, so every compaction shortens a little (None when it cannot);
    records how often compaction ran and the agents:chat events."""

    context_overflow = ta.ContextOverflowConfig()
    classify_chat_error = ta.default_context_overflow_classifier

    def __init__(self, *args: Any, shorten: bool = True, pairs: bool = False, **kwargs: Any):
        kwargs.setdefault("tools", [lookup])
        super().__init__(*args, **kwargs)
        self.shorten = shorten
        self.pairs = pairs
        self.compactions: list[tuple[str, int]] = []
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)

    async def configure_session(self, session: ta.Session) -> ta.Session:
        async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
            self.compactions.append((ctx.reason, len(history)))
            if not self.shorten or len(history) < 3:
                return None
            last = history[1] if self.pairs else history[-2]
            return CompactionResult(f"summary #{len(self.compactions)}", history[0].id, last.id)

        return session.on_compaction(compact)

    def compacted_events(self) -> list[dict[str, Any]]:
        return [e.payload for e in self.events if e.type == "chat:context:compacted"]


async def with_history(agent: ta.Think, model: ScriptedModel, turns: int = 2) -> None:
    for i in range(turns):
        model.add(text(f"answer {i}"))
        await agent.save_messages(f"question {i}")


def request_texts(request: ta.ModelRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m["role"] != "system"]


# ---------------------------------------------------------------------- reactive


@pytest.mark.parametrize("in_stream", [False, True], ids=["rejected-at-the-call", "error-event-in-the-stream"])
async def test_reactive_compacts_and_retries_an_overflowing_turn(in_stream: bool) -> None:
    model = ScriptedModel()
    agent = Overflowing(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([error(overflow(in_stream=in_stream)), text("recovered answer")])

    result = await agent.save_messages("big question")

    assert (result.status, result.message.text) == ("completed", "recovered answer")  # type: ignore[union-attr]
    assert agent.compactions == [("reactive", 5)]
    assert request_texts(model.requests[-1])[0].endswith("summary #1")
    assert request_texts(model.requests[-1])[-1] == "big question"
    # Nothing is lost: the full history stays; only the model's view is compacted.
    assert [m.text for m in agent.get_messages()] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
        "big question",
        "recovered answer",
    ]
    assert agent.compacted_events() == [
        {"reason": "reactive", "shortened": True, "requestId": result.request_id, "attempt": 1}
    ]
    assert agent.contexts("on_chat_error") == []
    assert [r.status for r in agent.contexts("on_chat_response")][-1:] == ["completed"]
    assert len([r for r in agent.contexts("on_chat_response") if r.request_id == result.request_id]) == 1
    model.assert_complete()


async def test_the_classifier_gets_the_error_or_the_in_stream_text_and_the_stream_context() -> None:
    seen: list[tuple[Any, ta.ChatErrorContext]] = []

    class Spy(Overflowing):
        async def classify_chat_error(self, error: Any, ctx: ta.ChatErrorContext) -> Any:
            seen.append((error, ctx))
            return ta.default_context_overflow_classifier(error, ctx)

    model = ScriptedModel()
    agent = Spy(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    at_call = overflow()
    model.extend([error(at_call), text("ok"), error(overflow(in_stream=True), after=text("par")), text("ok")])
    first = await agent.save_messages("q1")
    second = await agent.save_messages("q2")

    assert seen == [
        (at_call, ta.ChatErrorContext(request_id=first.request_id, stage="stream")),
        (OVERFLOW, ta.ChatErrorContext(request_id=second.request_id, stage="stream")),
    ]


async def test_no_orphan_partial_or_tool_call_is_left_after_a_reactive_retry() -> None:
    model = ScriptedModel()
    agent = Overflowing(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend(
        [
            tool_call("lookup", {"q": "a"}, id="t1"),
            error(overflow(in_stream=True), after=text("truncated partial")),
            text("clean answer"),
        ]
    )

    stream = agent.chat("research it")
    chunks = await drain(stream)

    assert stream.status == "completed"
    last = agent.get_messages()[-1]
    assert (last.role, last.text) == ("assistant", "clean answer")
    assert not any(isinstance(p, ta.ToolPart) for p in last.parts)
    assert all("truncated partial" not in m.text for m in agent.get_messages())
    # The caller saw the failed attempt live, then a transient marker, then the retry; one start, one finish.
    types = [c.type for c in chunks]
    assert (types.count("start"), types.count("finish"), types.count("error")) == (1, 1, 0)
    [marker] = [c for c in chunks if c.type == "data-context-compacted"]
    assert marker.transient and marker.data["attempt"] == 1
    assert chunks[-1].type == "finish"


async def test_reactive_recovery_stays_off_when_disabled() -> None:
    class Off(Overflowing):
        context_overflow = None

    model = ScriptedModel()
    agent = Off(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.add(error(overflow()))

    result = await agent.save_messages("big")

    assert (result.status, result.error) == ("error", OVERFLOW)
    assert agent.compactions == []
    [(_, ctx)] = agent.contexts("on_chat_error")
    assert ctx.classification is None


async def test_a_turn_config_can_switch_recovery_on_for_one_turn() -> None:
    class PerTurn(Overflowing):
        context_overflow = None

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            return ta.TurnConfig(context_overflow=ta.ContextOverflowConfig())

    model = ScriptedModel()
    agent = PerTurn(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([error(overflow()), text("fine")])
    assert (await agent.save_messages("big")).status == "completed"


async def test_falls_through_to_a_classified_on_chat_error_when_compaction_cannot_shorten() -> None:
    class Friendly(Overflowing):
        async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
            await super().on_chat_error(error, ctx)
            if ctx.classification == "context_overflow":
                return RuntimeError("This conversation is too long to continue. Please start a new one.")
            return RuntimeError("Something went wrong. Please try again.")

    model = ScriptedModel()
    agent = Friendly(model=model, store=ta.MemoryStore(), shorten=False)
    await with_history(agent, model)
    raw = overflow()
    model.add(error(raw))

    stream = agent.chat("big")
    chunks = await drain(stream)

    assert chunks[-1].error_text == "This conversation is too long to continue. Please start a new one."
    [(err, ctx)] = agent.contexts("on_chat_error")
    assert err is raw
    assert ctx == ta.ChatErrorContext(
        request_id=stream.request_id, stage="stream", messages_persisted=True, classification="context_overflow"
    )
    assert agent.compacted_events() == [
        {"reason": "reactive", "shortened": False, "requestId": stream.request_id, "attempt": 1}
    ]
    [failed] = [e for e in agent.events if e.type == "chat:request:failed"]
    assert failed.payload["classification"] == "context_overflow"
    # The failed attempt had no reply part: only on_chat_error handled it.
    assert [r for r in agent.contexts("on_chat_response") if r.request_id == stream.request_id] == []
    model.assert_complete()


async def test_stops_after_max_retries_when_the_overflow_persists() -> None:
    class TwoRetries(Overflowing):
        context_overflow = ta.ContextOverflowConfig(max_retries=2)

    model = ScriptedModel()
    agent = TwoRetries(model=model, store=ta.MemoryStore(), pairs=True)
    await with_history(agent, model, turns=3)
    requests_before = len(model.requests)
    model.extend([error(overflow()), error(overflow()), error(overflow())])

    result = await agent.save_messages("big")

    assert result.status == "error"
    assert len(model.requests) - requests_before == 3  # 1 + max_retries attempts, then terminal
    assert [e["attempt"] for e in agent.compacted_events()] == [1, 2]
    [(_, ctx)] = agent.contexts("on_chat_error")
    assert ctx.classification == "context_overflow"
    model.assert_complete()


@pytest.mark.parametrize("entry", ["chat", "save_messages"])
async def test_an_abort_during_recovery_stops_it_without_compaction(entry: str) -> None:
    class CancelsRecovery(Overflowing):
        async def classify_chat_error(self, error: Any, ctx: ta.ChatErrorContext) -> Any:
            assert ctx.request_id is not None
            self.cancel_chat(ctx.request_id, "user gave up")  # the seed: the classifier may stop the recovery
            return "context_overflow"

    model = ScriptedModel()
    agent = CancelsRecovery(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.add(error(overflow(), after=text("partial")))

    if entry == "chat":
        stream = agent.chat("big")
        chunks = await drain(stream)
        status = stream.status
        assert chunks[-1].type == "abort"
    else:
        status = (await agent.save_messages("big")).status
    assert status == "aborted"
    assert agent.compactions == []
    assert agent.contexts("on_chat_error") == []
    model.assert_complete()


async def test_other_classifications_change_nothing_and_are_not_passed_on() -> None:
    class RateLimits(Overflowing):
        async def classify_chat_error(self, error: Any, ctx: ta.ChatErrorContext) -> Any:
            return "rate_limit"

    model = ScriptedModel()
    agent = RateLimits(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.add(error(ta.RateLimitError("slow down", status_code=429)))

    result = await agent.save_messages("q")

    assert (result.status, result.error) == ("error", "slow down")
    assert agent.compactions == []
    [(_, ctx)] = agent.contexts("on_chat_error")
    assert ctx.classification is None


async def test_the_seeds_custom_classifier_delegating_to_the_default() -> None:
    class Custom(Overflowing):
        def classify_chat_error(self, error: Any, ctx: Any = None) -> Any:
            if isinstance(error, Exception) and "rate limit" in str(error).lower():
                return "rate_limit"
            return ta.default_context_overflow_classifier(error)

    model = ScriptedModel()
    agent = Custom(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([error(ta.RateLimitError("Rate limit reached")), error(overflow()), text("ok")])

    limited = await agent.save_messages("one")
    recovered = await agent.save_messages("two")

    assert (limited.status, recovered.status) == ("error", "completed")
    assert [reason for reason, _ in agent.compactions] == ["reactive"]


async def test_continuation_turns_are_never_retried() -> None:
    model = ScriptedModel()
    agent = Overflowing(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.add(error(overflow()))

    result = await agent.continue_last_turn()

    assert result.status == "error"
    assert agent.compactions == []


async def test_without_a_classifier_nothing_is_an_overflow_and_a_warning_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class NoClassifier(ta.Think):
        context_overflow = ta.ContextOverflowConfig()

    model = ScriptedModel([error(overflow()), error(overflow())])
    agent = NoClassifier(model=model, store=ta.MemoryStore())
    first = await agent.save_messages("a")
    second = await agent.save_messages("b")

    assert (first.status, second.status) == ("error", "error")
    warnings = [r.getMessage() for r in caplog.records if "classify_chat_error is not set" in r.getMessage()]
    assert len(warnings) == 1  # once per agent


async def test_the_shipped_compaction_asks_the_agents_own_model_for_a_summary() -> None:
    class Shipped(ta.Think):
        context_overflow = ta.ContextOverflowConfig()
        classify_chat_error = ta.default_context_overflow_classifier

    model = ScriptedModel()
    agent = Shipped(model=model, store=ta.MemoryStore())
    for i in range(4):  # long answers: past the shipped compaction's 20,000-token tail budget
        model.add(text(f"answer {i} " + "x" * 30_000))
        await agent.save_messages(f"question {i}")
    model.extend([error(overflow()), text("## Topic\nquestions"), text("answer after compaction")])

    result = await agent.save_messages("question 4")

    assert result.message.text == "answer after compaction"  # type: ignore[union-attr]
    summary_request = model.requests[-2]
    assert summary_request.tools == []
    assert SUMMARY_INSTRUCTIONS in summary_request.messages[0]["content"]
    retried = request_texts(model.requests[-1])
    # The head stays (protect_head=3), the middle is summarised away, the tail within the token budget stays.
    assert (retried[0], retried[1][:8], retried[2]) == ("question 0", "answer 0", "question 1")
    assert not any(t.startswith("answer 1") for t in retried)
    assert any("## Topic\nquestions" in t for t in retried)
    assert retried[-1] == "question 4"
    assert len(agent.get_messages()) == 10
    model.assert_complete()


# ---------------------------------------------------------------------- proactive


class Proactive(Overflowing):
    context_overflow = ta.ContextOverflowConfig(proactive=ta.Proactive(max_input_tokens=1000, headroom=0.5))


def big_step(*parts: Any, input_tokens: int) -> Any:
    return step(*parts, usage=ta.Usage(input_tokens=input_tokens, output_tokens=5))


async def test_proactive_compacts_before_a_step_once_usage_crosses_the_headroom() -> None:
    model = ScriptedModel()
    agent = Proactive(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend(
        [big_step(tool_call("lookup", {"q": "a"}, id="t1"), input_tokens=600), big_step(text("done"), input_tokens=90)]
    )

    result = await agent.save_messages("research")

    assert result.status == "completed"
    assert agent.compactions == [("proactive", 5)]
    texts = request_texts(model.requests[-1])
    # The compacted head, then this turn's own step messages spliced on, in order.
    assert texts[0].endswith("summary #1")
    assert texts[1:] == ["research", "None", "x" * 50]
    assert agent.compacted_events() == [{"reason": "proactive", "shortened": True}]


async def test_proactive_fires_twice_with_max_compactions_two_without_corrupting_the_prompt() -> None:
    class Twice(Overflowing):
        context_overflow = ta.ContextOverflowConfig(
            proactive=ta.Proactive(max_input_tokens=1000, headroom=0.5, max_compactions=2)
        )

    model = ScriptedModel()
    agent = Twice(model=model, store=ta.MemoryStore(), pairs=True)
    await with_history(agent, model, turns=3)
    model.extend(
        [
            big_step(tool_call("lookup", {"q": "a"}, id="t1"), input_tokens=600),
            big_step(tool_call("lookup", {"q": "b"}, id="t2"), input_tokens=700),
            big_step(text("done"), input_tokens=100),
        ]
    )

    result = await agent.save_messages("research")

    assert result.status == "completed"
    assert [reason for reason, _ in agent.compactions] == ["proactive", "proactive"]
    last = model.requests[-1].messages
    # The head compacted twice (q0..a0, then q0..q1), this turn's two tool steps spliced on after it, in order.
    assert [m["role"] for m in last] == [
        "system",
        "user",  # the summary
        "assistant",  # answer 1
        "user",
        "assistant",
        "user",  # research
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert last[1]["content"].endswith("summary #2")
    assert [m.get("content") for m in last[2:6]] == ["answer 1", "question 2", "answer 2", "research"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["t1", "t2"]


async def test_a_proactive_no_op_consumes_its_slot_and_is_not_retried() -> None:
    model = ScriptedModel()
    agent = Proactive(model=model, store=ta.MemoryStore(), shorten=False)
    await with_history(agent, model)
    model.extend(
        [
            big_step(tool_call("lookup", {"q": "a"}), input_tokens=600),
            big_step(tool_call("lookup", {"q": "b"}), input_tokens=700),
            big_step(text("done"), input_tokens=800),
        ]
    )

    assert (await agent.save_messages("research")).status == "completed"
    assert agent.compactions == [("proactive", 5)]
    assert agent.compacted_events() == [{"reason": "proactive", "shortened": False}]


async def test_proactive_takes_the_context_window_from_the_model_when_unset() -> None:
    class FromModel(Overflowing):
        context_overflow = ta.ContextOverflowConfig(proactive=ta.Proactive(headroom=0.5))

    model = ScriptedModel(context_window=1000)
    agent = FromModel(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([big_step(tool_call("lookup", {"q": "a"}), input_tokens=499), big_step(text("x"), input_tokens=10)])
    await agent.save_messages("under the headroom")
    model.extend([big_step(tool_call("lookup", {"q": "a"}), input_tokens=500), big_step(text("x"), input_tokens=10)])
    await agent.save_messages("at the headroom")

    assert agent.compactions == [("proactive", 7)]


async def test_both_layers_proactive_guard_and_reactive_backstop() -> None:
    class Both(Overflowing):
        context_overflow = ta.ContextOverflowConfig(proactive=ta.Proactive(max_input_tokens=1000, headroom=0.5))

    model = ScriptedModel()
    agent = Both(model=model, store=ta.MemoryStore(), pairs=True)
    await with_history(agent, model)
    model.extend(
        [
            big_step(tool_call("lookup", {"q": "a"}), input_tokens=600),
            error(overflow()),  # the guard compacted, and the provider still refused: the backstop takes over
            big_step(tool_call("lookup", {"q": "a"}), input_tokens=100),
            big_step(text("done"), input_tokens=100),
        ]
    )

    result = await agent.save_messages("research")

    assert result.status == "completed"
    assert [reason for reason, _ in agent.compactions] == ["proactive", "reactive"]
    model.assert_complete()


async def test_proactive_guard_is_off_without_a_known_window() -> None:
    class Unknown(Overflowing):
        context_overflow = ta.ContextOverflowConfig(proactive=ta.Proactive())

    model = ScriptedModel()
    agent = Unknown(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([big_step(tool_call("lookup", {"q": "a"}), input_tokens=10**6), text("x")])
    assert (await agent.save_messages("q")).status == "completed"
    assert agent.compactions == []


async def test_a_queued_turn_waits_while_recovery_runs() -> None:
    gate = asyncio.Event()

    class SlowCompaction(Overflowing):
        async def configure_session(self, session: ta.Session) -> ta.Session:
            async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
                await gate.wait()
                return CompactionResult("s", history[0].id, history[-2].id)

            return session.on_compaction(compact)

    model = ScriptedModel()
    agent = SlowCompaction(model=model, store=ta.MemoryStore())
    await with_history(agent, model)
    model.extend([error(overflow()), text("first"), text("second")])
    first = asyncio.create_task(agent.save_messages("one"))
    second = asyncio.create_task(agent.save_messages("two"))
    await asyncio.sleep(0.01)
    assert not second.done()
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert [r.message.text for r in results] == ["first", "second"]  # type: ignore[union-attr]
