"""configure_session (once, before history loads) and classify_chat_error (wired to stream errors)."""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, error, text


class SessionAgent(ta.Think):
    def __init__(self, *args: Any, replacement: ta.Store | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.replacement = replacement
        self.sessions: list[tuple[str, int]] = []

    async def configure_session(self, session: ta.Session) -> ta.Session | None:
        self.sessions.append((session.agent_path, len(self.get_messages())))
        if self.replacement is not None:
            session = session.with_store(self.replacement)

        async def summarize(history: list[ta.UIMessage]) -> dict[str, Any] | None:
            return None

        return session.on_compaction(summarize)


async def test_configure_session_runs_once_before_history_loads() -> None:
    store = ta.MemoryStore()
    await store.append_message(ta.user_message("earlier", id="u0"))
    agent = SessionAgent("s1", model=ScriptedModel([text("one"), text("two")]), store=store)
    await agent.save_messages("first")
    await agent.save_messages("second")
    assert agent.sessions == [("session-agent/s1", 0)]  # once, and before the stored message was loaded
    assert agent.get_messages()[0].id == "u0"
    assert agent.session is not None and agent.session.compaction is not None


async def test_configure_session_can_give_the_agent_another_store() -> None:
    original, replacement = ta.MemoryStore(), ta.MemoryStore()
    agent = SessionAgent("s2", model=ScriptedModel([text("hi")]), store=original, replacement=replacement)
    await agent.save_messages("hello")
    assert await original.load_messages() == []
    assert [m.role for m in await replacement.load_messages()] == ["user", "assistant"]


async def test_a_failing_configure_session_fails_the_start_and_keeps_nothing() -> None:
    class Broken(ta.Think):
        async def configure_session(self, session: ta.Session) -> ta.Session | None:
            raise RuntimeError("no session today")

    store = ta.MemoryStore()
    agent = Broken("b", model=ScriptedModel(), store=store)
    with pytest.raises(RuntimeError, match="no session today"):
        await agent.save_messages("hello")
    assert await store.load_messages() == []


class Classifying(ta.Think):
    context_overflow = ta.ContextOverflowConfig()  # the classifier is consulted only with reactive recovery on

    def __init__(self, *args: Any, verdict: Any = "context_overflow", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.verdict = verdict
        self.seen: list[tuple[BaseException, ta.ChatErrorContext]] = []

    async def classify_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.seen.append((error, ctx))
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict


async def test_classify_chat_error_sees_each_provider_error_of_a_stream() -> None:
    overflow = ta.ContextOverflowError("prompt is too long", provider="anthropic", status_code=400)
    model = ScriptedModel([error(overflow, after=text("partial")), text("fine")])
    agent = Classifying("c1", model=model, store=ta.MemoryStore())
    failed = await agent.save_messages("long question")
    ok = await agent.save_messages("short question")
    assert (failed.status, failed.error) == ("error", "prompt is too long")
    assert ok.status == "completed"
    [(seen_error, ctx)] = agent.seen  # not called for the turn that succeeded
    assert seen_error is overflow
    assert ctx == ta.ChatErrorContext(request_id=failed.request_id, stage="stream")
    model.assert_complete()


async def test_a_raising_classifier_leaves_the_error_unclassified_and_reported() -> None:
    model = ScriptedModel([error(ta.ProviderError("upstream 502", status_code=502, retryable=True))])
    agent = Classifying("c2", model=model, store=ta.MemoryStore(), verdict=ValueError("classifier bug"))
    chunks = [c async for c in agent.chat("hi")]
    assert [c.type for c in chunks][-1] == "error"
    assert chunks[-1].error_text == "upstream 502"
    assert len(agent.seen) == 1
    model.assert_complete()
