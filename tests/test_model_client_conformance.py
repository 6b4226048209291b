"""Both model clients, one suite: the OpenAI-wire fast path (OpenAIWireClient) and LiteLLMClient against the
scripted OpenAI server emit the same events and raise the same errors — type, message, retryable, status, body,
retry-after — and send the same requests. Every test named ``test_*`` with a ``client`` runs once per client and
asserts exact values, which are therefore the same for both; the differential tests at the end run both clients
on one script and compare what they return. Never reaches a provider."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import litellm
import pytest
from helpers import HELLO, SEARCH_TOOL

from think_actors.errors import (
    ConfigurationError,
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
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.models.auto import AutoModelClient
from think_actors.models.fast_path import FAST_PATH_PROVIDERS
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.openai_wire import OpenAIWireClient
from think_actors.testing.openai_server import ScriptedOpenAIServer

# What OpenAI sends: the details objects are always there, so neither client has anything to estimate.
USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 7,
    "total_tokens": 19,
    "completion_tokens_details": {"reasoning_tokens": 2},
    "prompt_tokens_details": {"cached_tokens": 4},
}
FINISH = FinishEvent(
    finish_reason="stop",
    usage=Usage(input_tokens=12, output_tokens=7, total_tokens=19, reasoning_tokens=2, cached_input_tokens=4),
)
CLIENTS = ["litellm", "fast_path"]


def make_client(kind: str, api_base: str | None, api_key: str | None = "test") -> LiteLLMClient | OpenAIWireClient:
    if kind == "litellm":
        return LiteLLMClient(api_base=api_base, api_key=api_key)
    return OpenAIWireClient(api_base=api_base, api_key=api_key)


async def close(client: Any) -> None:
    if hasattr(client, "aclose"):
        await client.aclose()


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any lookup of a host other than this machine: these tests must never reach a provider (nor a
    tokenizer download, which litellm attempts for some model names)."""
    lookup = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            raise OSError(f"test tried to reach {host!r}")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)


@pytest.fixture(params=CLIENTS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
async def client(kind: str, server: ScriptedOpenAIServer) -> AsyncIterator[ModelClient]:
    made = make_client(kind, server.base_url)
    yield made
    await close(made)


def request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {"model": "openai/scripted", "messages": HELLO, "max_retries": 0, **overrides}
    return ModelRequest(**fields)


async def collect(client: ModelClient, req: ModelRequest) -> list[ModelEvent]:
    """The stream's events, its ResponseMetadata's timestamp checked to be now and then set to None."""
    before = int(time.time())
    events = [event async for event in client.stream(req)]
    return [_untimed(event, before) for event in events]


async def collect_until_error(client: ModelClient, req: ModelRequest) -> tuple[list[ModelEvent], ModelError]:
    before = int(time.time())
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as caught:
        async for event in client.stream(req):
            events.append(_untimed(event, before))
    return events, caught.value


def _untimed(event: ModelEvent, before: int) -> ModelEvent:
    if not isinstance(event, ResponseMetadata):
        return event
    # LiteLLMClient stamps litellm's clock, the fast path the provider's `created`: both this second, in unix time.
    assert event.timestamp is not None and before <= event.timestamp <= time.time()
    return ResponseMetadata(event.id, event.model, None)


def meta(n: int = 1, model: str = "scripted") -> ResponseMetadata:
    return ResponseMetadata(f"chatcmpl-scripted-{n}", model, None)


def facts(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "request_id": None,
        "retryable": False,
        "provider": "openai",
        "status_code": None,
        "response_body": None,
        "in_stream": False,
        "retry_after_s": None,
    }
    return {**base, **overrides}


def assert_plain(error: ModelError) -> None:
    """No library exception attached (the caller may not have litellm or aiohttp), and it pickles whole."""
    assert (error.__cause__, error.__context__) == (None, None)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.message, copy.facts()) == (type(error), error.message, error.facts())


def test_both_clients_and_the_router_satisfy_the_protocol() -> None:
    for made in (LiteLLMClient(), OpenAIWireClient(), AutoModelClient()):
        assert isinstance(made, ModelClient)


# -- streams --------------------------------------------------------------------------------------------------


async def test_text_and_reasoning_stream_as_deltas_then_one_finish(
    server: ScriptedOpenAIServer, client: ModelClient
) -> None:
    server.add_text("hello world", chunk_size=4, reasoning="hmm, ok", usage=USAGE)

    assert await collect(client, request()) == [
        meta(),
        ReasoningDelta("hmm,"),
        ReasoningDelta(" ok"),
        TextDelta("hell"),
        TextDelta("o wo"),
        TextDelta("rld"),
        FINISH,
    ]
    server.assert_complete()


async def test_reasoning_in_a_field_named_reasoning(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    # vLLM and OpenRouter name the field "reasoning"; given both, "reasoning_content" is the one read.
    server.add_text(
        "ok",
        usage=USAGE,
        extra_deltas=[{"reasoning": "think"}, {"reasoning": "ignored", "reasoning_content": "kept", "content": "!"}],
    )

    assert await collect(client, request()) == [
        meta(),
        TextDelta("ok"),
        ReasoningDelta("think"),
        ReasoningDelta("kept"),
        TextDelta("!"),
        FINISH,
    ]


async def test_parallel_tool_calls_stream_by_index(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_tool_calls([("search", {"q": "ray"}), ("lookup", {"id": 7})], chunk_size=6, usage=USAGE)

    assert await collect(client, request(tools=[SEARCH_TOOL])) == [
        meta(),
        ToolCallDelta(0, "call_1", "search", ""),
        ToolCallDelta(0, None, None, '{"q": '),
        ToolCallDelta(0, None, None, '"ray"}'),
        ToolCallDelta(1, "call_2", "lookup", ""),
        ToolCallDelta(1, None, None, '{"id":'),
        ToolCallDelta(1, None, None, " 7}"),
        FinishEvent("tool_calls", FINISH.usage),
    ]


async def test_tool_call_deltas_without_an_index_are_numbered_by_position(
    server: ScriptedOpenAIServer, client: ModelClient
) -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "}"}},
    ]
    # A provider that ends tool calls with "stop": litellm reports "tool_calls", and so must the fast path.
    server.add_text("", usage=USAGE, extra_deltas=[{"tool_calls": calls}])

    assert await collect(client, request()) == [
        meta(),
        ToolCallDelta(0, "c1", "f", "{"),
        ToolCallDelta(1, "c2", "g", "}"),
        FinishEvent("tool_calls", FINISH.usage),
    ]


@pytest.mark.parametrize(
    ("sent", "reported"), [("length", "length"), ("content_filter", "content_filter"), ("eos", "stop")]
)
async def test_finish_reasons_in_openai_names(
    server: ScriptedOpenAIServer, client: ModelClient, sent: str, reported: str
) -> None:
    server.add_text("ok", finish_reason=sent, usage=USAGE)

    assert (await collect(client, request()))[-1] == FinishEvent(reported, FINISH.usage)


async def test_usage_prices_with_cached_input_from_litellms_table(
    server: ScriptedOpenAIServer, client: ModelClient
) -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 500,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 400},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    server.add_text("ok", usage=usage)
    server.add_text("ok", usage={**usage, "prompt_tokens_details": {"cached_tokens": 0}})

    cached = (await collect(client, request(model="openai/gpt-4o-mini")))[-1]
    plain = (await collect(client, request(model="openai/gpt-4o-mini")))[-1]

    assert isinstance(cached, FinishEvent) and isinstance(plain, FinishEvent)
    assert cached.usage == Usage(1000, 500, 1500, 0, 400)
    assert cached.cost_usd == pytest.approx(600 * 0.15e-6 + 400 * 0.075e-6 + 500 * 0.6e-6)
    assert plain.cost_usd == pytest.approx(1000 * 0.15e-6 + 500 * 0.6e-6)


async def test_no_usage_when_the_request_asks_for_none(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_text("ok")

    events = await collect(client, request(provider_options={"stream_options": {"include_usage": False}}))

    assert events == [meta(), TextDelta("ok"), FinishEvent("stop", None)]
    assert server.requests[0]["stream_options"] == {"include_usage": False}


async def test_usage_is_what_the_provider_reported(
    kind: str, server: ScriptedOpenAIServer, client: ModelClient
) -> None:
    # The one deliberate difference: without details from the provider litellm puts its own figure in
    # reasoning_tokens (0 here; a tokenizer count when reasoning streamed); the fast path leaves it unknown.
    server.add_text("ok", usage={"prompt_tokens": 3, "completion_tokens": 2})

    finish = (await collect(client, request()))[-1]

    reasoning = 0 if kind == "litellm" else None
    assert finish == FinishEvent("stop", Usage(3, 2, 5, reasoning, None))


async def test_sources_files_and_provider_metadata(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    citation = {"type": "web_search_result_location", "url": "https://c.example", "title": "C", "cited_text": "x"}
    server.add_text(
        "Ray.",
        chunk_size=20,
        usage=USAGE,
        url_citations=[("https://docs.ray.io", "Ray docs"), ("https://ray.io", None), ("https://docs.ray.io", "dup")],
        images=["data:image/png;base64,iVBORw0KGgo=", "https://img.example/cat.jpg", "https://img.example/raw"],
        extra_deltas=[
            {"provider_specific_fields": {"trace": "t-1", "steps": [1]}},
            {"content": "!", "provider_specific_fields": {"trace": "t-2", "citation": citation}},
        ],
        chunk_fields={"provider_specific_fields": {"region": "eu"}},
    )

    assert await collect(client, request()) == [
        meta(),
        TextDelta("Ray."),
        SourceEvent("chatcmpl-scripted-1-source-1", "https://docs.ray.io", "Ray docs"),
        SourceEvent("chatcmpl-scripted-1-source-2", "https://ray.io", None),
        FileEvent("data:image/png;base64,iVBORw0KGgo=", "image/png"),
        FileEvent("https://img.example/cat.jpg", "image/jpeg"),
        FileEvent("https://img.example/raw", "image/*"),
        TextDelta("!"),
        SourceEvent("chatcmpl-scripted-1-source-3", "https://c.example", "C"),
        FinishEvent(
            "stop",
            FINISH.usage,
            provider_metadata={"region": "eu", "trace": "t-2", "steps": [1], "citation": citation},
        ),
    ]


async def test_perplexity_citations_become_sources_once_each(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_text(
        "abcdef",
        chunk_size=3,
        usage=USAGE,
        chunk_fields={
            "citations": ["https://a.example", "https://b.example"],
            "search_results": [{"title": "B", "url": "https://b.example", "date": None}],
        },
    )

    assert (await collect(client, request()))[1:-1] == [
        TextDelta("abc"),
        SourceEvent("chatcmpl-scripted-1-source-1", "https://b.example", "B"),
        SourceEvent("chatcmpl-scripted-1-source-2", "https://a.example", None),
        TextDelta("def"),
    ]


async def test_metadata_names_the_model_that_answered_else_the_one_asked(kind: str) -> None:
    async with ScriptedOpenAIServer(model="gpt-4o-mini-2024-07-18") as named, ScriptedOpenAIServer(model="") as blank:
        first = make_client(kind, named.base_url)
        second = make_client(kind, blank.base_url)
        named.add_text("a", usage=USAGE)
        blank.add_text("b", usage=USAGE)

        reported = (await collect(first, request(model="openai/gpt-4o-mini")))[0]
        fallback = (await collect(second, request(model="openai/gpt-4o-mini")))[0]
        await close(first)
        await close(second)

    assert reported == ResponseMetadata("chatcmpl-scripted-1", "gpt-4o-mini-2024-07-18", None)
    assert fallback == ResponseMetadata("chatcmpl-scripted-1", "gpt-4o-mini", None)


async def test_events_hold_only_plain_data(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_tool_calls([("search", {"q": "ray"})], text="ok", usage=USAGE)

    events = [event async for event in client.stream(request(tools=[SEARCH_TOOL]))]

    for event in events:
        for name in event.__slots__:
            assert type(getattr(event, name)) in (str, int, float, tuple, type(None), Usage), (event, name)
    assert pickle.loads(pickle.dumps(events)) == events


async def test_a_model_repeating_one_chunk_fails_as_litellm_fails_it(
    server: ScriptedOpenAIServer, client: ModelClient
) -> None:
    server.add_text("", usage=USAGE, extra_deltas=[{"content": "abc"}] * 100)  # 100 in a row is allowed
    server.add_text("", usage=USAGE, extra_deltas=[{"content": "abc"}] * 101)

    allowed = await collect(client, request())
    events, error = await collect_until_error(client, request())

    assert allowed == [meta(1), *[TextDelta("abc")] * 100, FINISH]
    assert events == [meta(2), *[TextDelta("abc")] * 100]
    assert type(error) is ProviderError
    assert error.message == "litellm.InternalServerError: The model is repeating the same chunk = abc."
    assert error.facts() == facts(retryable=True, status_code=500)


async def test_early_exit_frees_the_connection(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_text("x" * 300, chunk_size=1, usage=USAGE)
    server.add_text("next", usage=USAGE)

    async with contextlib.aclosing(client.stream(request())) as stream:  # type: ignore[type-var]
        async for event in stream:
            assert event == ResponseMetadata("chatcmpl-scripted-1", "scripted", event.timestamp)
            break

    assert await collect(client, request()) == [meta(2), TextDelta("next"), FINISH]
    server.assert_complete()


# -- error answers --------------------------------------------------------------------------------------------

# (status, class, the message's litellm prefix, retryable): what an OpenAI-shaped error answer becomes.
STATUS_ERRORS = [
    (400, ProviderError, "litellm.BadRequestError: OpenAIException - ", False),
    (401, ProviderError, "litellm.AuthenticationError: AuthenticationError: OpenAIException - ", False),
    (403, ProviderError, "litellm.APIError: APIError: OpenAIException - ", False),
    (404, ProviderError, "litellm.NotFoundError: NotFoundError: OpenAIException - ", False),
    (408, ModelTimeoutError, "litellm.Timeout: Timeout Error: OpenAIException - ", True),
    (409, ProviderError, "litellm.APIError: APIError: OpenAIException - ", False),
    (422, ProviderError, "litellm.BadRequestError: OpenAIException - ", False),
    (429, RateLimitError, "litellm.RateLimitError: RateLimitError: OpenAIException - ", True),
    (500, ProviderError, "litellm.InternalServerError: InternalServerError: OpenAIException - ", True),
    (502, ProviderError, "litellm.BadGatewayError: BadGatewayError: OpenAIException - ", True),
    (503, ProviderError, "litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - ", True),
    (504, ModelTimeoutError, "litellm.Timeout: Timeout Error: OpenAIException - ", True),
    (529, ProviderError, "litellm.APIError: APIError: OpenAIException - ", True),
]


@pytest.mark.parametrize(("status", "error_class", "prefix", "retryable"), STATUS_ERRORS)
async def test_an_error_status_becomes_the_same_error(
    server: ScriptedOpenAIServer,
    client: ModelClient,
    status: int,
    error_class: type[ModelError],
    prefix: str,
    retryable: bool,
) -> None:
    server.add_error(status, message=f"scripted failure {status}")

    events, error = await collect_until_error(client, request())

    assert events == []
    assert type(error) is error_class
    assert error.message == f"{prefix}scripted failure {status}"
    error_type = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": f"scripted failure {status}", "type": error_type, "param": None, "code": None}}
    assert error.facts() == facts(retryable=retryable, status_code=status, response_body=body)
    assert_plain(error)
    server.assert_complete()  # max_retries=0: exactly one attempt


async def test_context_overflow_at_the_call(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    text = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens."
    server.add_error(400, code="context_length_exceeded", message=text)

    _, error = await collect_until_error(client, request())

    assert type(error) is ContextOverflowError
    assert error.message == (
        "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
        f"OpenAIException - {text}"
    )
    body = {
        "error": {"message": text, "type": "invalid_request_error", "param": None, "code": "context_length_exceeded"}
    }
    assert error.facts() == facts(status_code=400, response_body=body)
    assert_plain(error)


@pytest.mark.parametrize(
    ("status", "body", "error_class", "message"),
    [
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000"}},
            ContextOverflowError,
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            "OpenAIException - prompt is too long: 210000",
        ),
        (
            413,
            "Request Entity Too Large",
            ProviderError,
            "litellm.APIError: APIError: OpenAIException - Error code: 413",
        ),
        (
            502,
            "<html><body>Bad gateway</body></html>",
            ProviderError,
            "litellm.BadGatewayError: BadGatewayError: OpenAIException - Error code: 502",
        ),
        (400, ["not", "an", "object"], ProviderError, "litellm.BadRequestError: OpenAIException - Error code: 400"),
    ],
    ids=["anthropic-shaped", "text-413", "html-502", "json-list"],
)
async def test_any_error_body_is_kept_whole(
    server: ScriptedOpenAIServer,
    client: ModelClient,
    status: int,
    body: Any,
    error_class: type[ModelError],
    message: str,
) -> None:
    server.add_error(status, body)

    _, error = await collect_until_error(client, request())

    assert (type(error), error.message) == (error_class, message)
    kept = body if isinstance(body, dict | str) else json.dumps(body)
    assert error.facts() == facts(retryable=status >= 500, status_code=status, response_body=kept)


@pytest.mark.parametrize(
    ("headers", "wait_s"),
    [({"Retry-After": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({"Retry-After": "0.25"}, 0.25)],
)
async def test_a_rate_limit_reports_the_wait_asked_for(
    server: ScriptedOpenAIServer, client: ModelClient, headers: dict[str, str], wait_s: float
) -> None:
    server.add_error(429, code="rate_limit_exceeded", message="Rate limit reached", headers=headers)

    _, error = await collect_until_error(client, request())

    assert type(error) is RateLimitError
    assert (error.status_code, error.retryable, error.retry_after_s) == (429, True, wait_s)
    assert_plain(error)


# -- broken streams -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("close_how", "detail"),
    [
        ("abort", "Connection error."),
        ("eof", "Stream ended before a finish_reason was received"),
        ("done", "Stream ended before a finish_reason was received"),
    ],
)
async def test_a_cut_stream_fails_after_the_text_it_sent(
    server: ScriptedOpenAIServer, client: ModelClient, close_how: Any, detail: str
) -> None:
    server.add_cut_stream("partial text", chunk_size=4, close=close_how)

    events, error = await collect_until_error(client, request(max_retries=2))

    assert events == [meta(), TextDelta("part"), TextDelta("ial "), TextDelta("text")]
    assert type(error) is ModelConnectionError
    assert error.message == (
        f"stream cut before it finished: litellm.APIConnectionError: APIConnectionError: OpenAIException - {detail}"
    )
    assert error.facts() == facts(retryable=True)
    assert_plain(error)
    assert len(server.requests) == 1  # a stream that started is never asked for again


@pytest.mark.parametrize(
    ("payload", "error_class", "message", "retryable"),
    [
        (
            {"error": {"message": "The server had an error.", "type": "server_error", "param": None, "code": "x"}},
            ProviderError,
            "The server had an error.",
            True,
        ),
        ({"error": "upstream overloaded"}, ProviderError, "upstream overloaded", True),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ProviderError,
            "Overloaded",
            True,
        ),
        (
            {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
            RateLimitError,
            "slow down",
            True,
        ),
        (
            {"error": {"message": "maximum context length exceeded", "type": "invalid_request_error"}},
            ContextOverflowError,
            "maximum context length exceeded",
            False,
        ),
        (
            {"error": {"message": "bad tool schema", "type": "invalid_request_error"}},
            ProviderError,
            "bad tool schema",
            False,
        ),
        ({"error": {"code": "boom"}}, ProviderError, "An error occurred during streaming", True),
    ],
    ids=["openai", "text", "anthropic-shaped", "rate-limit", "overflow", "invalid-request", "no-message"],
)
async def test_an_error_event_mid_stream_fails_after_the_events_before_it(
    server: ScriptedOpenAIServer,
    client: ModelClient,
    payload: Any,
    error_class: type[ModelError],
    message: str,
    retryable: bool,
) -> None:
    server.add_stream_error("partial", payload)

    events, error = await collect_until_error(client, request())

    assert events == [meta(), TextDelta("part"), TextDelta("ial")]
    assert (type(error), error.message) == (error_class, f"error event mid-stream: {message}")
    assert error.facts() == facts(retryable=retryable, in_stream=True, response_body={"error": payload["error"]})
    assert_plain(error)


async def test_no_answer_in_time_is_a_timeout(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_stall()

    events, error = await collect_until_error(client, request(timeout_s=0.2))

    assert events == []
    assert type(error) is ModelTimeoutError
    assert error.message == "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out."
    assert error.facts() == facts(retryable=True)  # no HTTP status came back
    assert_plain(error)


async def test_a_stream_going_silent_is_a_timeout(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_stall("abc")

    events, error = await collect_until_error(client, request(timeout_s=0.2, max_retries=2))

    assert events == [meta(), TextDelta("abc")]
    assert type(error) is ModelTimeoutError
    assert error.facts() == facts(retryable=True)
    assert len(server.requests) == 1


async def test_a_refused_connection(kind: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(kind, f"http://127.0.0.1:{port}/v1")

    _, error = await collect_until_error(client, request())
    await close(client)

    assert type(error) is ModelConnectionError
    assert error.message == "litellm.InternalServerError: InternalServerError: OpenAIException - Connection error."
    assert error.facts() == facts(retryable=True)
    assert_plain(error)


# -- retries --------------------------------------------------------------------------------------------------


async def test_a_server_error_is_retried_with_backoff(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_error(503, message="overloaded")
    server.add_text("recovered", usage=USAGE)
    started = time.monotonic()

    events = await collect(client, request(max_retries=1))

    assert events == [meta(), TextDelta("reco"), TextDelta("vere"), TextDelta("d"), FINISH]
    assert 0.375 <= time.monotonic() - started < 2  # 0.5 s less up to 25 % jitter
    assert len(server.requests) == 2


async def test_the_default_is_two_retries(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    for _ in range(3):
        server.add_error(500, message="down")

    _, error = await collect_until_error(client, request(max_retries=None))

    assert (type(error), error.status_code) == (ProviderError, 500)
    assert len(server.requests) == 3
    server.assert_complete()


async def test_a_rate_limit_waits_as_long_as_the_server_asks(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_error(429, message="slow down", headers={"retry-after-ms": "250"})
    server.add_text("ok", usage=USAGE)
    started = time.monotonic()

    events = await collect(client, request(max_retries=1))

    assert events[1:] == [TextDelta("ok"), FINISH]
    assert 0.25 <= time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (429, {"Retry-After": "200"}),  # longer than two minutes: not waited out
        (503, {"x-should-retry": "false"}),
        (400, {}),
        (401, {}),
    ],
)
async def test_answers_not_worth_asking_again_are_not_retried(
    server: ScriptedOpenAIServer, client: ModelClient, status: int, headers: dict[str, str]
) -> None:
    server.add_error(status, message="no", headers=headers)
    server.add_text("never asked for")

    _, error = await collect_until_error(client, request(max_retries=2))

    assert error.status_code == status
    assert len(server.requests) == 1


async def test_the_server_can_ask_for_a_retry(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_error(400, message="try again", headers={"x-should-retry": "true"})
    server.add_text("ok", usage=USAGE)

    assert (await collect(client, request(max_retries=1)))[1:] == [TextDelta("ok"), FINISH]


async def test_a_timeout_at_the_call_is_retried(server: ScriptedOpenAIServer, client: ModelClient) -> None:
    server.add_stall()
    server.add_text("ok", usage=USAGE)

    assert (await collect(client, request(max_retries=1, timeout_s=0.3)))[1:] == [TextDelta("ok"), FINISH]
    assert len(server.requests) == 2


# -- which path a request takes -------------------------------------------------------------------------------

FAST = [
    "openai/gpt-4o-mini",
    "gpt-4o-mini",
    "openai/my-vllm-model",
    "hosted_vllm/meta-llama/Llama-3.1-8B-Instruct",
    "groq/llama-3.1-8b-instant",
    "together_ai/meta-llama/Llama-3-8b-chat-hf",
    "fireworks_ai/accounts/fireworks/models/llama-v3p1-8b-instruct",
    "deepseek/deepseek-chat",
    "xai/grok-2",
    "openrouter/anthropic/claude-3.5-sonnet",
    "mistral/mistral-small-latest",
    "cerebras/llama3.1-8b",
]
LITELLM = [
    "anthropic/claude-3-5-sonnet-20241022",
    "claude-3-5-sonnet-20241022",
    "gemini/gemini-1.5-flash",
    "vertex_ai/gemini-1.5-pro",
    "bedrock/anthropic.claude-3-sonnet-20240229-v1:0",
    "azure/my-deployment",
    "ollama/llama3",
    "cohere/command-r",
    "openai/o3-pro",  # litellm serves it through the Responses API
]


def test_the_allow_list_is_the_providers_tested_here() -> None:
    prefixes = {model.split("/", 1)[0] for model in FAST if "/" in model}
    assert prefixes == FAST_PATH_PROVIDERS


@pytest.mark.parametrize("model", FAST)
def test_openai_wire_providers_take_the_fast_path(model: str) -> None:
    client = AutoModelClient(fast_path=True, api_key="k", api_base="http://127.0.0.1:8000/v1")
    assert client.takes_fast_path(request(model=model))


@pytest.mark.parametrize("model", LITELLM)
def test_other_providers_stay_on_litellm(model: str) -> None:
    assert not AutoModelClient(fast_path=True, api_key="k").takes_fast_path(request(model=model))


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider_options": {"mock_response": "hi"}},
        {"provider_options": {"fallbacks": ["openai/gpt-4o"]}},
        {"provider_options": {"metadata": {"trace": "t"}}},
        {"provider_options": {"api_version": "2024-10-01"}},
        {"params": {"reasoning_effort": "low"}},
        {"params": {"n": 2}},
        {"provider_options": {"web_search_options": {}}},
        {"model": "groq/llama-3.1-8b-instant", "response_format": {"type": "json_object"}},  # litellm fakes a stream
    ],
    ids=["mock", "fallbacks", "metadata", "api_version", "reasoning_effort", "n", "web_search", "fake-stream"],
)
def test_options_only_litellm_applies_keep_the_request_on_litellm(overrides: dict[str, Any]) -> None:
    client = AutoModelClient(fast_path=True, api_key="k")
    assert client.takes_fast_path(request())
    assert not client.takes_fast_path(request(**overrides))


def test_litellm_callbacks_keep_requests_on_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm, "success_callback", ["langfuse"])
    assert not AutoModelClient(fast_path=True, api_key="k").takes_fast_path(request())


def test_without_a_key_or_an_endpoint_litellm_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm raises its own error for these; the fast path does not guess.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
    assert not AutoModelClient(fast_path=True).takes_fast_path(request())
    assert not AutoModelClient(fast_path=True, api_key="k").takes_fast_path(request(model="hosted_vllm/scripted"))


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("1", True), ("0", False), ("false", False)])
def test_the_environment_switches_the_fast_path(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("THINK_FAST_MODEL_PATH", raising=False)
    else:
        monkeypatch.setenv("THINK_FAST_MODEL_PATH", value)
    assert AutoModelClient(api_key="k").takes_fast_path(request()) is expected
    assert AutoModelClient(fast_path=True, api_key="k").takes_fast_path(request())  # the flag wins
    assert not AutoModelClient(fast_path=False, api_key="k").takes_fast_path(request())


async def test_the_auto_client_streams_each_request_down_its_path(server: ScriptedOpenAIServer) -> None:
    client = AutoModelClient(fast_path=True, api_base=server.base_url, api_key="test")
    server.add_text("over the wire", usage=USAGE)

    wire = await collect(client, request())
    mocked = await collect(client, request(provider_options={"mock_response": "from litellm"}))
    await client.aclose()

    assert wire == [meta(), TextDelta("over"), TextDelta(" the"), TextDelta(" wir"), TextDelta("e"), FINISH]
    assert [event for event in mocked if isinstance(event, TextDelta)] != []  # litellm's mock, no HTTP
    assert len(server.requests) == 1


async def test_the_fast_path_client_refuses_what_it_cannot_serve() -> None:
    client = OpenAIWireClient(api_key="k")
    with pytest.raises(ConfigurationError, match="cannot take the OpenAI-wire fast path"):
        async for _ in client.stream(request(model="anthropic/claude-3-5-sonnet-20241022")):
            pass


def test_string_model_ids_resolve_to_one_auto_client() -> None:
    from think_actors.models import resolve_model

    first, model_id = resolve_model("openai/gpt-4o-mini")
    second, _ = resolve_model("anthropic/claude-3-5-sonnet-20241022")
    assert isinstance(first, AutoModelClient) and first is second
    assert model_id == "openai/gpt-4o-mini"


async def test_model_info_and_token_counts_come_from_litellm() -> None:
    wire = OpenAIWireClient()
    lite = LiteLLMClient()
    assert await wire.model_info("openai/gpt-4o-mini") == await lite.model_info("openai/gpt-4o-mini")
    assert await wire.count_tokens("openai/gpt-4o-mini", HELLO) == await lite.count_tokens("openai/gpt-4o-mini", HELLO)


# -- differential: both clients on one script, compared ---------------------------------------------------------

CORPUS = json.loads((Path(__file__).parent / "data" / "context_overflow_corpus.json").read_text())["cases"]
STATUS_CASES = [
    case
    for case in CORPUS
    if case["form"] == "status_body" and isinstance(case["status"], int) and 400 <= case["status"] < 600
]


async def run_both(
    script: Callable[[ScriptedOpenAIServer], None], req: ModelRequest, *, model_name: str = "scripted"
) -> list[tuple[Any, Any, list[dict[str, Any]], list[dict[str, str]]]]:
    """For each client: (events or None, error facts or None, request bodies, request headers)."""
    outcomes = []
    for kind in CLIENTS:
        async with ScriptedOpenAIServer(model=model_name) as server:
            script(server)
            client = make_client(kind, server.base_url)
            events: list[ModelEvent] = []
            error: Any = None
            try:
                async for event in client.stream(req):
                    events.append(_untimed(event, int(time.time())))
            except ModelError as exc:
                error = (type(exc), exc.message, exc.facts())
            await close(client)
            outcomes.append((events, error, server.requests, server.request_headers))
    return outcomes


async def test_every_status_error_of_the_overflow_corpus_is_the_same_error() -> None:
    # 65 real error answers of many providers: the fast path must classify each as litellm does.
    async def both(case: dict[str, Any]) -> tuple[Any, Any]:
        (_, lite, _, _), (_, fast, _, _) = await run_both(
            lambda server: server.add_error(case["status"], case["body"]), request()
        )
        return lite, fast

    results = await asyncio.gather(*(both(case) for case in STATUS_CASES))

    different = {case["id"]: pair for case, pair in zip(STATUS_CASES, results, strict=True) if pair[0] != pair[1]}
    assert different == {}
    assert all(lite is not None for lite, _ in results)


# What is left of the headers once the HTTP library's own (host, length, user agent, encodings) are set aside.
_TRANSPORT_HEADERS = {"host", "content-length", "user-agent", "accept", "accept-encoding", "connection"}


def sent_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in _TRANSPORT_HEADERS and not k.startswith("x-stainless")}


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "find the ray docs"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "https://docs.ray.io"},
]
REQUEST_SHAPES = {
    "plain": {},
    "tools-and-sampling": {
        "tools": [SEARCH_TOOL],
        "tool_choice": "required",
        "params": {"temperature": 0.3, "max_tokens": 20, "top_p": 0.9, "seed": 3, "stop": ["x"]},
        "headers": {"X-Think-Turn": "turn-1"},
        "provider_options": {"extra_body": {"trace": "t-1"}, "top_k": 5},
    },
    "json-mode": {"response_format": {"type": "json_object"}, "params": {"max_tokens": 5}},
}
# Models named so that litellm's usage accounting never fetches a tokenizer from the internet.
PROVIDER_MODELS = [
    "openai/scripted",
    "openai/gpt-4o-mini",
    "openai/o3-mini",
    "groq/scripted",
    "together_ai/scripted",
    "fireworks_ai/accounts/fireworks/models/scripted",
    "deepseek/deepseek-chat",
    "xai/grok-2",
    "openrouter/openai/gpt-4o",
    "mistral/mistral-small",
    "cerebras/scripted",
    "hosted_vllm/scripted",
]


def without_estimated_usage(events: list[ModelEvent], body: dict[str, Any]) -> list[ModelEvent]:
    """``events`` with the finish's usage and cost dropped when the request did not ask the server for usage.

    Some providers' requests carry no ``stream_options`` (litellm leaves them out for Mistral and Cerebras,
    whose APIs report usage unasked); the scripted server then sends none, litellm counts tokens itself and the
    fast path reports None. Everything else must still match.
    """
    if "stream_options" in body:
        return events
    return [
        FinishEvent(e.finish_reason, None, e.warnings, e.provider_metadata) if isinstance(e, FinishEvent) else e
        for e in events
    ]


# Left to litellm, which raises UnsupportedParamsError for the first two and fakes the stream for the third.
STAYS_ON_LITELLM = {
    ("openai/o3-mini", "tools-and-sampling"),
    ("fireworks_ai/accounts/fireworks/models/scripted", "tools-and-sampling"),
    ("groq/scripted", "json-mode"),
}


@pytest.mark.parametrize("model", PROVIDER_MODELS)
@pytest.mark.parametrize("shape", sorted(REQUEST_SHAPES))
async def test_the_fast_path_sends_what_litellm_sends(model: str, shape: str) -> None:
    req = request(model=model, messages=CONVERSATION, **REQUEST_SHAPES[shape])
    if not AutoModelClient(fast_path=True, api_key="k", api_base="http://127.0.0.1:1/v1").takes_fast_path(req):
        assert (model, shape) in STAYS_ON_LITELLM
        return
    (
        (lite_events, lite_error, lite_bodies, lite_headers),
        (fast_events, fast_error, fast_bodies, fast_headers),
    ) = await run_both(lambda server: server.add_text("ok", usage=USAGE), req)

    assert fast_bodies == lite_bodies and len(fast_bodies) == 1
    assert sent_headers(fast_headers[0]) == sent_headers(lite_headers[0])
    assert (fast_error, lite_error) == (None, None)
    assert fast_events == without_estimated_usage(lite_events, lite_bodies[0])


@pytest.mark.parametrize("model", [m for m in PROVIDER_MODELS if not m.startswith("openai/o3")])
@pytest.mark.parametrize("status", [400, 401, 429, 503])
async def test_every_fast_path_provider_gets_the_same_status_errors(model: str, status: int) -> None:
    (_, lite, _, _), (_, fast, _, _) = await run_both(
        lambda server: server.add_error(status, message="scripted failure", headers={"Retry-After": "3"}),
        request(model=model),
    )

    assert fast == lite and lite is not None
    assert lite[2]["retry_after_s"] == 3.0


# (model, environment: key variable, base variable) as litellm reads them for each provider.
ENVIRONMENT = [
    ("openai/scripted", "OPENAI_API_KEY", "OPENAI_API_BASE"),
    ("openai/scripted", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    ("groq/scripted", "GROQ_API_KEY", "GROQ_API_BASE"),
    ("hosted_vllm/scripted", "HOSTED_VLLM_API_KEY", "HOSTED_VLLM_API_BASE"),
    ("together_ai/scripted", "TOGETHERAI_API_KEY", "TOGETHER_AI_API_BASE"),
    ("deepseek/deepseek-chat", "DEEPSEEK_API_KEY", "DEEPSEEK_API_BASE"),
    ("xai/grok-2", "XAI_API_KEY", "XAI_API_BASE"),
    ("cerebras/scripted", "CEREBRAS_API_KEY", "CEREBRAS_API_BASE"),
    ("fireworks_ai/accounts/fireworks/models/scripted", "FIREWORKS_AI_API_KEY", "FIREWORKS_API_BASE"),
    ("openrouter/openai/gpt-4o", "OPENROUTER_API_KEY", "OPENROUTER_API_BASE"),
]


@pytest.mark.parametrize(("model", "key_variable", "base_variable"), ENVIRONMENT)
async def test_endpoint_and_key_come_from_the_environment_as_litellm_reads_them(
    monkeypatch: pytest.MonkeyPatch, model: str, key_variable: str, base_variable: str
) -> None:
    async with ScriptedOpenAIServer() as server:
        monkeypatch.setenv(key_variable, f"key-from-{key_variable}")
        monkeypatch.setenv(base_variable, server.base_url)
        server.add_text("ok", usage=USAGE)
        server.add_text("ok", usage=USAGE)
        req = request(model=model)
        assert AutoModelClient(fast_path=True).takes_fast_path(req)

        streams = []
        for kind in CLIENTS:
            client = make_client(kind, api_base=None, api_key=None)
            streams.append(await collect(client, req))
            await close(client)

    lite, fast = server.request_headers
    assert fast["authorization"] == lite["authorization"] == f"Bearer key-from-{key_variable}"
    assert server.requests[0] == server.requests[1]
    # One server answered both: its response ids count on (chatcmpl-scripted-1, -2); the rest is the same.
    assert streams[1][1:] == without_estimated_usage(streams[0], server.requests[0])[1:]
    assert streams[1][1] == TextDelta("ok")


async def test_the_proxy_variables_apply_as_they_do_to_litellm(
    kind: str, monkeypatch: pytest.MonkeyPatch, server: ScriptedOpenAIServer
) -> None:
    # The scripted server stands in for the proxy: a request that reaches it went through the proxy, since the
    # endpoint's own host does not exist.
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = make_client(kind, "http://upstream.invalid/v1")
    server.add_text("proxied", usage=USAGE)

    events = await collect(client, request())
    await close(client)

    assert events[1:] == [TextDelta("prox"), TextDelta("ied"), FINISH]
    assert server.request_headers[0]["host"] == "upstream.invalid"
