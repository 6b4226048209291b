"""LiteLLMClient end to end: the real litellm over real HTTP against ScriptedOpenAIServer (never a provider)."""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest

from think_actors.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
)
from think_actors.models import (
    FinishEvent,
    ModelClient,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.models.litellm import LiteLLMClient
from think_actors.testing.openai_server import ScriptedOpenAIServer

HELLO = [{"role": "user", "content": "hello"}]
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the docs.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def client(server: ScriptedOpenAIServer) -> LiteLLMClient:
    return LiteLLMClient(api_base=server.base_url, api_key="test")


def request(**overrides: Any) -> ModelRequest:
    # No retries: a retried 5xx would wait out the SDK's backoff and consume extra script entries.
    fields: dict[str, Any] = {"model": "openai/scripted", "messages": HELLO, "max_retries": 0, **overrides}
    return ModelRequest(**fields)


async def collect(client: ModelClient, req: ModelRequest) -> list[ModelEvent]:
    return [event async for event in client.stream(req)]


async def collect_until_error(client: ModelClient, req: ModelRequest) -> tuple[list[ModelEvent], ModelError]:
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as caught:
        async for event in client.stream(req):
            events.append(event)
    return events, caught.value


def assert_pickles(error: ModelError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.message, copy.facts()) == (error.message, error.facts())


def assert_no_litellm_attached(error: BaseException) -> None:
    # The caller process may not have litellm, and litellm's exceptions do not pickle.
    assert error.__cause__ is None
    assert error.__context__ is None
    assert error.__suppress_context__


def test_client_satisfies_the_protocol() -> None:
    assert isinstance(LiteLLMClient(), ModelClient)


async def test_text_streams_as_deltas_then_one_finish(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 7,
        "total_tokens": 19,
        "completion_tokens_details": {"reasoning_tokens": 2},
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    server.add_text("hello world", chunk_size=4, reasoning="hmm, ok", usage=usage)

    events = await collect(client, request())

    assert events == [
        ReasoningDelta("hmm,"),
        ReasoningDelta(" ok"),
        TextDelta("hell"),
        TextDelta("o wo"),
        TextDelta("rld"),
        FinishEvent(
            finish_reason="stop",
            usage=Usage(input_tokens=12, output_tokens=7, total_tokens=19, reasoning_tokens=2, cached_input_tokens=4),
        ),
    ]
    server.assert_complete()


async def test_events_hold_only_plain_data(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_tool_calls([("search", {"q": "ray"})], text="ok")

    events = await collect(client, request(tools=[SEARCH_TOOL]))

    # Exact builtin types: a litellm str/int subclass or model object would drag litellm into every pickle.
    for event in events:
        for name in event.__slots__:
            value = getattr(event, name)
            assert type(value) in (str, int, type(None), Usage), (event, name)
    usage = events[-1].usage if isinstance(events[-1], FinishEvent) else None
    assert usage is not None
    assert {type(getattr(usage, name)) for name in usage.__slots__} <= {int, type(None)}
    pickle.loads(pickle.dumps(events))


async def test_parallel_tool_calls_assemble_by_index(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_tool_calls([("search", {"q": "ray actors"}), ("lookup", {"id": 7, "deep": True})], chunk_size=5)

    events = await collect(client, request(tools=[SEARCH_TOOL]))

    deltas = [event for event in events if isinstance(event, ToolCallDelta)]
    assert len(deltas) > 4  # arguments arrived in fragments, not whole
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        call = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
        call["id"] = call["id"] or delta.id
        call["name"] = call["name"] or delta.name
        call["arguments"] += delta.arguments
    assert {index: (c["id"], c["name"], json.loads(c["arguments"])) for index, c in calls.items()} == {
        0: ("call_1", "search", {"q": "ray actors"}),
        1: ("call_2", "lookup", {"id": 7, "deep": True}),
    }
    assert isinstance(events[-1], FinishEvent)
    assert events[-1].finish_reason == "tool_calls"
    assert [event for event in events if isinstance(event, FinishEvent)] == [events[-1]]
    server.assert_complete()


async def test_request_carries_what_was_asked(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text("ok")
    req = request(
        tools=[SEARCH_TOOL],
        tool_choice="required",
        params={"temperature": 0.25, "max_tokens": 50, "seed": 7},
        headers={"X-Think-Turn": "turn-1"},
        provider_options={"parallel_tool_calls": False, "extra_body": {"trace": "t-1"}},
    )

    await collect(client, req)

    body = server.requests[0]
    assert body["model"] == "scripted"
    assert body["messages"] == HELLO
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [SEARCH_TOOL]
    assert body["tool_choice"] == "required"
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.25, 50, 7)
    assert (body["parallel_tool_calls"], body["trace"]) == (False, "t-1")
    assert server.request_headers[0]["x-think-turn"] == "turn-1"
    assert server.request_headers[0]["authorization"] == "Bearer test"


async def test_empty_tools_and_unset_options_are_left_out(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text("ok")

    await collect(client, request())

    assert not {"tools", "tool_choice", "response_format"} & server.requests[0].keys()


async def test_context_overflow_raises_before_any_event(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(
        status=400,
        code="context_length_exceeded",
        message="This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.",
    )

    events, error = await collect_until_error(client, request())

    assert events == []
    assert type(error) is ContextOverflowError
    assert error.facts() == {"request_id": None, "retryable": False, "provider": "openai", "status_code": 400}
    assert "maximum context length is 8192 tokens" in error.message
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_rate_limit_is_retryable(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(status=429, code="rate_limit_exceeded", message="Rate limit reached for requests")

    _, error = await collect_until_error(client, request())

    assert type(error) is RateLimitError
    assert error.facts() == {"request_id": None, "retryable": True, "provider": "openai", "status_code": 429}
    assert "Rate limit reached for requests" in error.message
    assert_no_litellm_attached(error)
    assert_pickles(error)


@pytest.mark.parametrize(("status", "retryable"), [(500, True), (503, True), (401, False), (400, False)])
async def test_other_statuses_are_provider_errors(
    server: ScriptedOpenAIServer, client: LiteLLMClient, status: int, retryable: bool
) -> None:
    server.add_error(status=status, message=f"scripted failure {status}")

    _, error = await collect_until_error(client, request())

    assert type(error) is ProviderError
    assert error.facts() == {"request_id": None, "retryable": retryable, "provider": "openai", "status_code": status}
    assert f"scripted failure {status}" in error.message
    assert_pickles(error)
    server.assert_complete()  # max_retries=0 made exactly one attempt


async def test_max_retries_retries_a_server_error(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(status=503, message="overloaded")
    server.add_text("recovered")

    events = await collect(client, request(max_retries=1))

    assert [event.text for event in events if isinstance(event, TextDelta)] == ["reco", "vere", "d"]
    assert len(server.requests) == 2


async def test_cut_stream_raises_after_the_partial_text(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_cut_stream("partial text", chunk_size=4)

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("part"), TextDelta("ial "), TextDelta("text")]
    assert type(error) is ModelConnectionError
    assert error.facts() == {"request_id": None, "retryable": True, "provider": "openai", "status_code": None}
    assert error.message.startswith("stream cut before it finished")
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_error_event_mid_stream_raises_after_earlier_events(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    server.add_stream_error("some text", message="The server had an error while processing your request.")

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("some"), TextDelta(" tex"), TextDelta("t")]
    assert type(error) is ProviderError
    assert error.facts() == {"request_id": None, "retryable": True, "provider": "openai", "status_code": None}
    assert "The server had an error while processing your request." in error.message
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_context_overflow_event_mid_stream(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stream_error(
        "so",
        code="context_length_exceeded",
        message="maximum context length exceeded",
        error_type="invalid_request_error",
    )

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("so")]
    assert type(error) is ContextOverflowError
    assert error.retryable is False
    assert_pickles(error)


async def test_no_answer_in_time_is_a_timeout(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stall()

    events, error = await collect_until_error(client, request(timeout_s=0.2))

    assert events == []
    assert type(error) is ModelTimeoutError
    assert (error.facts()["provider"], error.retryable) == ("openai", True)
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_stream_going_silent_is_a_timeout(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stall("abc")

    events, error = await collect_until_error(client, request(timeout_s=0.2))

    assert events == [TextDelta("abc")]
    assert type(error) is ModelTimeoutError
    assert error.retryable is True


async def test_exhausted_script_says_so(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    _, error = await collect_until_error(client, request())

    assert type(error) is ProviderError
    assert "script exhausted" in error.message
    with pytest.raises(Exception, match="after the script was exhausted"):
        server.assert_complete()


async def test_leftover_script_fails_assert_complete(server: ScriptedOpenAIServer) -> None:
    server.add_text("never asked for")

    with pytest.raises(Exception, match="1 scripted response"):
        server.assert_complete()


async def test_early_exit_closes_the_stream(
    server: ScriptedOpenAIServer, client: LiteLLMClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

    closed: list[bool] = []
    original_aclose: Any = CustomStreamWrapper.aclose

    async def recording_aclose(self: CustomStreamWrapper) -> None:
        closed.append(self.completion_stream is not None)  # True: the HTTP stream was still open
        await original_aclose(self)

    monkeypatch.setattr(CustomStreamWrapper, "aclose", recording_aclose)
    server.add_text("x" * 200, chunk_size=1)
    server.add_text("next")

    first: ModelEvent | None = None
    async with contextlib.aclosing(client.stream(request())) as stream:
        async for event in stream:
            first = event
            break

    assert first == TextDelta("x")
    assert closed == [True]
    # The connection was released: the next request goes through.
    assert [e for e in await collect(client, request()) if isinstance(e, TextDelta)] == [TextDelta("next")]
    server.assert_complete()


async def test_non_streaming_request_gets_a_whole_completion(server: ScriptedOpenAIServer) -> None:
    import litellm

    server.add_tool_calls([("search", {"q": "x"})], text="looking")

    response: Any = await litellm.acompletion(
        model="openai/scripted", messages=HELLO, api_base=server.base_url, api_key="test", max_retries=0
    )

    message = response.choices[0].message
    assert (message.content, response.choices[0].finish_reason) == ("looking", "tool_calls")
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("call_1", "search", {"q": "x"})
    ]
    assert "stream" not in server.requests[0] or server.requests[0]["stream"] is False
