"""Overflow recovery end to end over real HTTP: the scripted OpenAI-compatible server answers with real error
bodies of many providers (from tests/data/context_overflow_corpus.json, each with its source), the model client
parses them (litellm, and the OpenAI-wire fast path: every test runs with both), the project error reaches
``ta.default_context_overflow_classifier``, and the turn recovers — or, for the corpus's negatives (rate limits,
quota, auth, ...), fails without any compaction."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.compaction import CompactionResult
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.openai_wire import OpenAIWireClient
from think_actors.testing import ScriptedOpenAIServer

CORPUS = json.loads((Path(__file__).parent / "data" / "context_overflow_corpus.json").read_text())["cases"]


def replayable(case: dict[str, Any]) -> bool:
    """A case the server can answer with: an HTTP error status and its body."""
    return case["form"] == "status_body" and isinstance(case["status"], int) and 400 <= case["status"] < 600


STATUS_CASES = [c for c in CORPUS if replayable(c)]
STREAM_CASES = [c for c in CORPUS if c["form"] == "text" and c["expected"] and isinstance(c["text"], str)]


class LiteLLMServerModel(LiteLLMClient):
    model_id = "openai/scripted"


class FastPathServerModel(OpenAIWireClient):
    model_id = "openai/scripted"


@pytest.fixture(params=[LiteLLMServerModel, FastPathServerModel], ids=["litellm", "fast_path"])
def server_model(request: pytest.FixtureRequest) -> type[Any]:
    return request.param  # type: ignore[no-any-return]


class Recovering(ta.Think):
    context_overflow = ta.ContextOverflowConfig()
    classify_chat_error = ta.default_context_overflow_classifier

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.compactions = 0
        self.errors: list[ta.ChatErrorContext] = []

    async def configure_session(self, session: ta.Session) -> ta.Session:
        async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
            self.compactions += 1
            return CompactionResult("earlier: two questions", history[0].id, history[-2].id)

        return session.on_compaction(compact)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
        return ta.TurnConfig(max_retries=0)  # one HTTP request per attempt: no SDK retries eat the script

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.errors.append(ctx)
        return error


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer() as s:
        yield s


async def agent_with_history(server: ScriptedOpenAIServer, server_model: type[Any]) -> Recovering:
    agent = Recovering(model=server_model(api_base=server.base_url, api_key="test"), store=ta.MemoryStore())
    for i in range(2):
        server.add_text(f"answer {i}")
        await agent.save_messages(f"question {i}")
    return agent


@pytest.mark.parametrize("case", STATUS_CASES, ids=[c["id"] for c in STATUS_CASES])
async def test_a_provider_error_body_over_http_recovers_or_fails_as_it_should(
    server: ScriptedOpenAIServer, server_model: type[Any], case: dict[str, Any]
) -> None:
    agent = await agent_with_history(server, server_model)
    server.add_error(case["status"], case["body"])
    if case["expected"]:
        server.add_text("answer after compaction")

    result = await agent.save_messages("the long question")

    if case["expected"]:
        assert (result.status, result.message.text) == ("completed", "answer after compaction")  # type: ignore[union-attr]
        assert agent.compactions == 1
        assert agent.errors == []
        # The retry carried the summary instead of the summarised messages.
        retried = server.requests[-1]["messages"]
        assert "question 0" not in json.dumps(retried)
        assert "earlier: two questions" in json.dumps(retried)
    else:
        assert result.status == "error"
        assert agent.compactions == 0
        [ctx] = agent.errors
        assert (ctx.stage, ctx.classification) == ("stream", None)
    server.assert_complete()


@pytest.mark.parametrize("case", STREAM_CASES, ids=[c["id"] for c in STREAM_CASES])
async def test_an_overflow_error_event_inside_the_stream_recovers(
    server: ScriptedOpenAIServer, server_model: type[Any], case: dict[str, Any]
) -> None:
    agent = await agent_with_history(server, server_model)
    server.add_stream_error("partial answ", {"error": {"message": case["text"], "type": "invalid_request_error"}})
    server.add_text("answer after compaction")

    stream = agent.chat("the long question")
    chunks = [c async for c in stream]

    assert stream.status == "completed"
    assert agent.compactions == 1
    assert [m.text for m in agent.get_messages()][-2:] == ["the long question", "answer after compaction"]
    assert "partial answ" not in [m.text for m in agent.get_messages()]  # the failed attempt was discarded
    assert chunks[-1].type == "finish"
    server.assert_complete()


async def test_the_shipped_compaction_summarises_with_the_agents_model_over_http(
    server: ScriptedOpenAIServer, server_model: type[Any]
) -> None:
    class Shipped(ta.Think):
        context_overflow = ta.ContextOverflowConfig()
        classify_chat_error = ta.default_context_overflow_classifier

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
            return ta.TurnConfig(max_retries=0)

    agent = Shipped(model=server_model(api_base=server.base_url, api_key="test"), store=ta.MemoryStore())
    for i in range(4):  # long answers: past the shipped compaction's 20,000-token tail budget
        server.add_text(f"answer {i} " + " ".join(f"word{j}" for j in range(8_000)), chunk_size=4096)
        await agent.save_messages(f"question {i}")
    overflow = next(c for c in STATUS_CASES if c["id"].startswith("openai") and c["expected"])
    server.add_error(overflow["status"], overflow["body"])
    server.add_text("## Topic\nFour questions.")  # the summary request
    server.add_text("final answer")

    result = await agent.save_messages("question 4")

    assert result.message.text == "final answer"  # type: ignore[union-attr]
    summary_request, retry = server.requests[-2], server.requests[-1]
    assert "Summarize the conversation" in json.dumps(summary_request["messages"])
    assert "Four questions." in json.dumps(retry["messages"])
    server.assert_complete()
