"""LiteLLMClient end to end: the real litellm over real HTTP against ScriptedOpenAIServer (never a provider)."""

from __future__ import annotations

import contextlib
import json
import pickle
import time
from collections.abc import AsyncIterator
from typing import Any

import litellm
import pytest
from helpers import HELLO, SEARCH_TOOL

from think_actors.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
)
from think_actors.models import (
    FileEvent,
    FinishEvent,
    ModelClient,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    count_tokens,
    model_info,
)
from think_actors.models.litellm import LiteLLMClient
from think_actors.testing.openai_server import ScriptedOpenAIServer


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


async def collect_after_metadata(client: ModelClient, req: ModelRequest) -> list[ModelEvent]:
    """The events of one stream after its leading ResponseMetadata (checked to be there, once)."""
    events = await collect(client, req)
    assert isinstance(events[0], ResponseMetadata)
    assert not any(isinstance(event, ResponseMetadata) for event in events[1:])
    return events[1:]


async def collect_until_error(client: ModelClient, req: ModelRequest) -> tuple[list[ModelEvent], ModelError]:
    """The events before the error (without a leading ResponseMetadata) and the error."""
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as caught:
        async for event in client.stream(req):
            events.append(event)
    if events:
        assert isinstance(events[0], ResponseMetadata)
        events = events[1:]
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
    before = time.time()

    events = await collect(client, request())

    metadata = events[0]
    assert isinstance(metadata, ResponseMetadata)
    assert metadata.timestamp is not None
    # litellm stamps its own clock (whole seconds) on the first chunk and drops the provider's "created".
    assert int(before) <= metadata.timestamp <= time.time()
    assert events == [
        ResponseMetadata(id="chatcmpl-scripted-1", model="scripted", timestamp=metadata.timestamp),
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
            assert type(value) in (str, int, float, tuple, type(None), Usage), (event, name)
    usage = events[-1].usage if isinstance(events[-1], FinishEvent) else None
    assert usage is not None
    assert {type(getattr(usage, name)) for name in usage.__slots__} <= {int, type(None)}
    pickle.loads(pickle.dumps(events))


async def test_parallel_tool_calls_assemble_by_index(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_tool_calls([("search", {"q": "ray actors"}), ("lookup", {"id": 7, "deep": True})], chunk_size=5)

    events = await collect_after_metadata(client, request(tools=[SEARCH_TOOL]))

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
    assert error.facts() == {
        "request_id": None,
        "retryable": False,
        "provider": "openai",
        "status_code": 400,
        "response_body": {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                "9100 tokens.",
                "type": "invalid_request_error",
                "param": None,
                "code": "context_length_exceeded",
            }
        },
        "in_stream": False,
        "retry_after_s": None,
    }
    assert "maximum context length is 8192 tokens" in error.message
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_rate_limit_is_retryable(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(status=429, code="rate_limit_exceeded", message="Rate limit reached for requests")

    _, error = await collect_until_error(client, request())

    assert type(error) is RateLimitError
    assert error.facts() == {
        "request_id": None,
        "retryable": True,
        "provider": "openai",
        "status_code": 429,
        "response_body": {
            "error": {
                "message": "Rate limit reached for requests",
                "type": "invalid_request_error",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        "in_stream": False,
        "retry_after_s": None,
    }
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
    error_type = "invalid_request_error" if status < 500 else "server_error"
    assert error.facts() == {
        "request_id": None,
        "retryable": retryable,
        "provider": "openai",
        "status_code": status,
        "response_body": {
            "error": {"message": f"scripted failure {status}", "type": error_type, "param": None, "code": None}
        },
        "in_stream": False,
        "retry_after_s": None,
    }
    assert f"scripted failure {status}" in error.message
    assert_pickles(error)
    server.assert_complete()  # max_retries=0 made exactly one attempt


async def test_max_retries_retries_a_server_error(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(status=503, message="overloaded")
    server.add_text("recovered")

    events = await collect_after_metadata(client, request(max_retries=1))

    assert [event.text for event in events if isinstance(event, TextDelta)] == ["reco", "vere", "d"]
    assert len(server.requests) == 2


async def test_cut_stream_raises_after_the_partial_text(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_cut_stream("partial text", chunk_size=4)

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("part"), TextDelta("ial "), TextDelta("text")]
    assert type(error) is ModelConnectionError
    assert error.facts() == {
        "request_id": None,
        "retryable": True,
        "provider": "openai",
        "status_code": None,
        "response_body": None,
        "in_stream": False,
        "retry_after_s": None,
    }
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
    assert error.facts() == {
        "request_id": None,
        "retryable": True,
        "provider": "openai",
        "status_code": None,
        "response_body": {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": "server_error",
            }
        },
        "in_stream": True,
        "retry_after_s": None,
    }
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
    assert (error.retryable, error.in_stream, error.status_code) == (False, True, None)
    assert error.response_body == {
        "error": {
            "message": "maximum context length exceeded",
            "type": "invalid_request_error",
            "param": None,
            "code": "context_length_exceeded",
        }
    }
    assert_pickles(error)


async def test_no_answer_in_time_is_a_timeout(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stall()

    events, error = await collect_until_error(client, request(timeout_s=0.2))

    assert events == []
    assert type(error) is ModelTimeoutError
    assert (error.facts()["provider"], error.retryable) == ("openai", True)
    assert (error.response_body, error.in_stream) == (None, False)
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_stream_going_silent_is_a_timeout(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stall("abc")

    events, error = await collect_until_error(client, request(timeout_s=0.2))

    assert events == [TextDelta("abc")]
    assert type(error) is ModelTimeoutError
    assert (error.retryable, error.response_body, error.in_stream) == (True, None, False)


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

    assert isinstance(first, ResponseMetadata)
    assert first == ResponseMetadata("chatcmpl-scripted-1", "scripted", first.timestamp)
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


# -- response metadata, sources, files, provider metadata, cost ----------------------------------------------------


async def test_metadata_names_the_response_and_the_model_that_answered() -> None:
    async with ScriptedOpenAIServer(model="gpt-4o-mini-2024-07-18") as server:
        client = LiteLLMClient(api_base=server.base_url, api_key="test")
        server.add_text("a")
        server.add_text("b")

        first = (await collect(client, request(model="openai/gpt-4o-mini")))[0]
        second = (await collect(client, request(model="openai/gpt-4o-mini")))[0]

    assert isinstance(first, ResponseMetadata)
    assert isinstance(second, ResponseMetadata)
    # The provider's reported model, not the requested alias that litellm echoes in chunk.model.
    assert first == ResponseMetadata("chatcmpl-scripted-1", "gpt-4o-mini-2024-07-18", first.timestamp)
    assert second == ResponseMetadata("chatcmpl-scripted-2", "gpt-4o-mini-2024-07-18", second.timestamp)


async def test_cost_comes_from_litellms_price_table(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text("ok", usage={"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500})
    server.add_text(
        "ok",
        usage={
            "prompt_tokens": 1000,
            "completion_tokens": 500,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 400},
        },
    )

    plain = (await collect(client, request(model="openai/gpt-4o-mini")))[-1]
    cached = (await collect(client, request(model="openai/gpt-4o-mini")))[-1]

    assert isinstance(plain, FinishEvent)
    assert isinstance(cached, FinishEvent)
    assert plain.cost_usd == sum(litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=500))
    assert plain.cost_usd == pytest.approx(1000 * 0.15e-6 + 500 * 0.6e-6)  # $0.15 / $0.60 per million tokens
    # 400 of the 1000 input tokens read from the prompt cache, at half price.
    assert cached.cost_usd == pytest.approx(600 * 0.15e-6 + 400 * 0.075e-6 + 500 * 0.6e-6)
    assert type(plain.cost_usd) is float


async def test_cost_is_none_for_an_unpriced_model_or_unknown_usage(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    server.add_text("ok", usage={"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500})
    server.add_text("ok")

    unpriced = (await collect(client, request(model="openai/scripted")))[-1]
    no_usage = (
        await collect(
            client, request(model="openai/gpt-4o-mini", provider_options={"stream_options": {"include_usage": False}})
        )
    )[-1]

    assert isinstance(unpriced, FinishEvent)
    assert unpriced.usage is not None
    assert (unpriced.usage.input_tokens, unpriced.usage.output_tokens, unpriced.cost_usd) == (1000, 500, None)
    assert no_usage == FinishEvent("stop", None, cost_usd=None)


async def test_url_citations_become_sources(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text(
        "Ray is fast.",
        chunk_size=20,
        url_citations=[("https://docs.ray.io", "Ray docs"), ("https://ray.io", None), ("https://docs.ray.io", "again")],
    )

    events = await collect_after_metadata(client, request())

    assert events[:-1] == [
        TextDelta("Ray is fast."),
        SourceEvent("chatcmpl-scripted-1-source-1", "https://docs.ray.io", "Ray docs"),
        SourceEvent("chatcmpl-scripted-1-source-2", "https://ray.io", None),
    ]
    server.assert_complete()


async def test_perplexity_citations_become_sources_once_each(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    # Perplexity repeats its full lists on every chunk; search_results carry the titles.
    server.add_text(
        "abcdef",
        chunk_size=3,
        chunk_fields={
            "citations": ["https://a.example", "https://b.example"],
            "search_results": [{"title": "B", "url": "https://b.example", "date": None}],
        },
    )

    events = await collect_after_metadata(client, request())

    assert events[:-1] == [
        TextDelta("abc"),
        SourceEvent("chatcmpl-scripted-1-source-1", "https://b.example", "B"),
        SourceEvent("chatcmpl-scripted-1-source-2", "https://a.example", None),
        TextDelta("def"),
    ]


async def test_anthropic_citation_in_provider_fields_becomes_a_source(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    # litellm's Anthropic stream puts a web-search citation in the delta's provider_specific_fields.
    citation = {"type": "web_search_result_location", "url": "https://a.example", "title": "A", "cited_text": "x"}
    server.add_text("ok", extra_deltas=[{"provider_specific_fields": {"citation": citation}}])

    events = await collect_after_metadata(client, request())

    assert events[:-1] == [TextDelta("ok"), SourceEvent("chatcmpl-scripted-1-source-1", "https://a.example", "A")]
    assert isinstance(events[-1], FinishEvent)
    assert events[-1].provider_metadata == {"citation": citation}


async def test_images_become_files(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text(
        "here",
        images=["data:image/png;base64,iVBORw0KGgo=", "https://img.example/cat.jpg", "https://img.example/raw"],
    )

    events = await collect_after_metadata(client, request())

    assert events[:-1] == [
        TextDelta("here"),
        FileEvent("data:image/png;base64,iVBORw0KGgo=", "image/png"),
        FileEvent("https://img.example/cat.jpg", "image/jpeg"),
        FileEvent("https://img.example/raw", "image/*"),  # an image of a type the URL does not tell
    ]


async def test_provider_fields_merge_into_provider_metadata(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    server.add_text(
        "ok",
        chunk_fields={"provider_specific_fields": {"region": "eu"}},
        extra_deltas=[
            {"provider_specific_fields": {"trace": "t-1", "steps": [1]}},
            {"content": "!", "provider_specific_fields": {"trace": "t-2"}},
        ],
    )

    events = await collect_after_metadata(client, request())

    # A later value of a key wins, as in litellm's own chunk builder.
    assert isinstance(events[-1], FinishEvent)
    assert events[-1].provider_metadata == {"region": "eu", "trace": "t-2", "steps": [1]}
    assert events[-1].warnings == ()
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("ok"), TextDelta("!")]


async def test_new_events_pickle(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_text(
        "ok",
        url_citations=[("https://a.example", "A")],
        images=["data:image/png;base64,AAAA"],
        extra_deltas=[{"provider_specific_fields": {"nested": {"list": [1, "two", None]}}}],
    )

    events = await collect(client, request(model="openai/gpt-4o-mini"))

    assert [type(e).__name__ for e in events] == [
        "ResponseMetadata",
        "TextDelta",
        "SourceEvent",
        "FileEvent",
        "FinishEvent",
    ]
    assert pickle.loads(pickle.dumps(events)) == events
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert json.loads(json.dumps(finish.provider_metadata)) == {"nested": {"list": [1, "two", None]}}


# -- error bodies -------------------------------------------------------------------------------------------------


async def test_anthropic_shaped_overflow_body_is_kept_whole(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    body = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
    }
    server.add_error(400, body)

    _, error = await collect_until_error(client, request())

    assert type(error) is ContextOverflowError
    assert (error.status_code, error.response_body, error.in_stream) == (400, body, False)
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_text_error_body_is_kept_as_text(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_error(413, "Request Entity Too Large")
    server.add_error(502, "<html><body>Bad gateway</body></html>")

    _, too_large = await collect_until_error(client, request())
    _, bad_gateway = await collect_until_error(client, request())

    assert type(too_large) is ProviderError
    assert too_large.facts() == {
        "request_id": None,
        "retryable": False,
        "provider": "openai",
        "status_code": 413,
        "response_body": "Request Entity Too Large",
        "in_stream": False,
        "retry_after_s": None,
    }
    assert type(bad_gateway) is ProviderError
    assert (bad_gateway.status_code, bad_gateway.retryable) == (502, True)
    assert bad_gateway.response_body == "<html><body>Bad gateway</body></html>"
    assert_pickles(too_large)


async def test_json_body_that_is_not_an_object_is_kept_as_text(
    server: ScriptedOpenAIServer, client: LiteLLMClient
) -> None:
    server.add_error(400, ["not", "an", "object"])

    _, error = await collect_until_error(client, request())

    assert (type(error), error.response_body) == (ProviderError, '["not", "an", "object"]')


async def test_anthropic_shaped_error_event_mid_stream(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stream_error(
        "partial", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("part"), TextDelta("ial")]
    assert type(error) is ProviderError
    assert error.message == "error event mid-stream: Overloaded"
    # The openai SDK keeps only the event's "error" member; the client puts it back under "error".
    assert error.facts() == {
        "request_id": None,
        "retryable": True,
        "provider": "openai",
        "status_code": None,
        "response_body": {"error": {"type": "overloaded_error", "message": "Overloaded"}},
        "in_stream": True,
        "retry_after_s": None,
    }
    assert_no_litellm_attached(error)
    assert_pickles(error)


async def test_error_event_with_a_text_error_mid_stream(server: ScriptedOpenAIServer, client: LiteLLMClient) -> None:
    server.add_stream_error("ab", {"error": "upstream overloaded"})

    events, error = await collect_until_error(client, request())

    assert events == [TextDelta("ab")]
    assert type(error) is ProviderError
    assert error.message == "error event mid-stream: upstream overloaded"
    assert (error.in_stream, error.retryable, error.response_body) == (True, True, {"error": "upstream overloaded"})


def test_add_error_takes_a_body_or_a_message() -> None:
    server = ScriptedOpenAIServer()
    with pytest.raises(TypeError, match="either body"):
        server.add_error(400)
    with pytest.raises(TypeError, match="either body"):
        server.add_error(400, {"error": "x"}, message="y")
    with pytest.raises(TypeError, match="code and error_type go with message"):
        server.add_error(400, {"error": "x"}, code="c")


# -- model info and token counts ----------------------------------------------------------------------------------


async def test_model_info_from_litellms_table(monkeypatch: pytest.MonkeyPatch) -> None:
    client = LiteLLMClient()
    looked_up: list[str] = []
    original = litellm.get_model_info

    def recording(model: str, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(model)
        return original(model, *args, **kwargs)

    monkeypatch.setattr(litellm, "get_model_info", recording)

    info = await client.model_info("openai/gpt-4o-mini")

    assert info == ModelInfo(
        max_input_tokens=128_000, max_output_tokens=16_384, input_cost_per_token=0.15e-6, output_cost_per_token=0.6e-6
    )
    assert await client.model_info("openai/scripted") is None
    assert await client.model_info("openai/gpt-4o-mini") == info
    assert await client.model_info("openai/scripted") is None
    assert looked_up == ["openai/gpt-4o-mini", "openai/scripted"]  # cached per model id, unknown ones too
    assert await model_info(client, "openai/gpt-4o-mini") == info


async def test_count_tokens_uses_litellms_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    client = LiteLLMClient()
    messages = [{"role": "user", "content": "hello world"}]

    assert await client.count_tokens("openai/gpt-4o-mini", messages) == 9
    assert await client.count_tokens("openai/gpt-4o-mini", messages) == litellm.token_counter(
        model="openai/gpt-4o-mini", messages=messages
    )
    assert await count_tokens(client, "openai/gpt-4o-mini", messages) == 9

    def broken(**kwargs: Any) -> int:
        raise ValueError("no tokenizer")

    monkeypatch.setattr(litellm, "token_counter", broken)
    assert await client.count_tokens("openai/gpt-4o-mini", messages) is None
