"""Prompt caching: the marks a request carries per provider, and the cache tokens and price a response reports.

Each request goes through litellm to a local server (127.0.0.1; any other host lookup fails the test), which keeps
the body litellm sent and answers with a handwritten response in the provider's documented shape; each shape
cites the page it comes from. Anthropic and Bedrock cache only what a request marks, so their bodies are checked
against the documented marks; OpenAI, DeepSeek and Gemini cache on their own, so their bodies carry none and only
their usage is read.
"""

from __future__ import annotations

import functools
import json
import socket
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

import think_actors as ta
from think_actors import tracing
from think_actors.models import FinishEvent, ModelClient, ModelRequest, Usage
from think_actors.models.auto import AutoModelClient
from think_actors.models.litellm import LiteLLMClient
from think_actors.testing import ScriptedModel, step, text

litellm = pytest.importorskip("litellm")

SONNET = "anthropic/claude-sonnet-4-5-20250929"
BEDROCK_SONNET = "bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0"
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "fetch", "parameters": {"type": "object", "properties": {}}}},
]
FIRST_STEP: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer from the docs."},
    {"role": "user", "content": "What is Ray?"},
    {"role": "assistant", "content": "A framework for distributed Python."},
    {"role": "user", "content": "And an actor?"},
]
# The same turn one step later: the model called a tool and its result follows.
SECOND_STEP: list[dict[str, Any]] = [
    *FIRST_STEP,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "An actor is a stateful worker."},
]
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    lookup = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            raise OSError(f"test tried to reach {host!r}")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)


@dataclass
class Provider:
    """A local server standing in for a provider: keeps each request's path and body, answers with ``reply``."""

    url: str
    reply: Callable[[str], tuple[str, bytes]]
    bodies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def body(self) -> dict[str, Any]:
        assert len(self.bodies) == 1, self.bodies
        return self.bodies[0][1]


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    server = Provider(url="", reply=lambda path: ("text/event-stream", b""))

    async def handle(request: web.Request) -> web.StreamResponse:
        server.bodies.append((request.path, await request.json()))
        content_type, body = server.reply(request.path)
        response = web.StreamResponse(headers={"content-type": content_type})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


async def finish_of(client: ModelClient, request: ModelRequest) -> FinishEvent:
    events = [event async for event in client.stream(request)]
    assert isinstance(events[-1], FinishEvent)
    return events[-1]


def price(model: str, key: str) -> float:
    value = litellm.model_cost[model][key]
    assert isinstance(value, float) and value > 0
    return value


# -- Anthropic ------------------------------------------------------------------------------------------------------


def anthropic_stream(usage: dict[str, int], output_tokens: int) -> bytes:
    """A Messages API stream. Shape: https://docs.anthropic.com/en/docs/build-with-claude/streaming (usage in
    message_start, output_tokens in message_delta); the cache fields of usage:
    https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#tracking-cache-performance."""
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5-20250929",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "A stateful worker."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def breakpoints(body: Any) -> int:
    """How many blocks of an Anthropic body carry cache_control (the API accepts at most 4)."""
    if isinstance(body, dict):
        return ("cache_control" in body) + sum(breakpoints(v) for k, v in body.items() if k != "cache_control")
    if isinstance(body, list):
        return sum(breakpoints(item) for item in body)
    return 0


async def test_a_claude_step_marks_the_tools_the_system_prompt_and_the_conversation(provider: Provider) -> None:
    # Request shape: https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching (cache_control on the last
    # tool, on a system text block and on a message content block; "up to 4 cache breakpoints").
    provider.reply = lambda path: (
        "text/event-stream",
        anthropic_stream({"input_tokens": 30, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 0}, 12),
    )
    client = LiteLLMClient(api_base=provider.url, api_key="sk-ant-test")
    finish = await finish_of(client, ModelRequest(model=SONNET, messages=FIRST_STEP, tools=TOOLS))

    body = provider.body
    assert provider.bodies[0][0] == "/v1/messages"
    assert body["system"] == [{"type": "text", "text": "You answer from the docs.", "cache_control": EPHEMERAL}]
    assert [tool.get("cache_control") for tool in body["tools"]] == [None, EPHEMERAL]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is Ray?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A framework for distributed Python."}]},
        {"role": "user", "content": [{"type": "text", "text": "And an actor?", "cache_control": EPHEMERAL}]},
    ]
    assert breakpoints(body) == 3

    assert finish.usage == Usage(
        input_tokens=1830,  # the whole prompt: uncached, written and read tokens together
        output_tokens=12,
        total_tokens=1842,
        reasoning_tokens=0,
        cached_input_tokens=0,
        cache_write_input_tokens=1800,
    )
    model = SONNET.split("/", 1)[1]
    assert finish.cost_usd == pytest.approx(
        30 * price(model, "input_cost_per_token")
        + 1800 * price(model, "cache_creation_input_token_cost")
        + 12 * price(model, "output_cost_per_token")
    )


async def test_a_step_after_tool_calls_also_marks_its_last_message(provider: Provider) -> None:
    provider.reply = lambda path: (
        "text/event-stream",
        anthropic_stream({"input_tokens": 40, "cache_creation_input_tokens": 60, "cache_read_input_tokens": 1800}, 9),
    )
    client = LiteLLMClient(api_base=provider.url, api_key="sk-ant-test")
    finish = await finish_of(client, ModelRequest(model=SONNET, messages=SECOND_STEP, tools=TOOLS))

    messages = provider.body["messages"]
    assert messages[2]["content"] == [{"type": "text", "text": "And an actor?", "cache_control": EPHEMERAL}]
    assert messages[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": "An actor is a stateful worker.",
                "cache_control": EPHEMERAL,
            }
        ],
    }
    assert breakpoints(provider.body) == 4
    assert finish.usage is not None
    assert (finish.usage.input_tokens, finish.usage.cached_input_tokens, finish.usage.cache_write_input_tokens) == (
        1900,
        1800,
        60,
    )
    model = SONNET.split("/", 1)[1]
    uncached = 1900 * price(model, "input_cost_per_token") + 9 * price(model, "output_cost_per_token")
    assert finish.cost_usd == pytest.approx(
        40 * price(model, "input_cost_per_token")
        + 60 * price(model, "cache_creation_input_token_cost")
        + 1800 * price(model, "cache_read_input_token_cost")
        + 9 * price(model, "output_cost_per_token")
    )
    assert finish.cost_usd is not None and finish.cost_usd < uncached / 2


async def test_marks_the_caller_placed_count_against_the_four(provider: Provider) -> None:
    provider.reply = lambda path: ("text/event-stream", anthropic_stream({"input_tokens": 10}, 3))
    own = {"type": "ephemeral", "ttl": "1h"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": "You answer from the docs.", "cache_control": own}]},
        {"role": "user", "content": [{"type": "text", "text": "What is Ray?", "cache_control": own}]},
        *SECOND_STEP[2:],
    ]
    client = LiteLLMClient(api_base=provider.url, api_key="sk-ant-test")
    await finish_of(client, ModelRequest(model=SONNET, messages=messages, tools=TOOLS))

    body = provider.body
    assert breakpoints(body) == 4
    assert body["system"][0]["cache_control"] == own  # the caller's own marks stay as they were
    assert body["messages"][0]["content"][0]["cache_control"] == own
    assert body["tools"][-1]["cache_control"] == EPHEMERAL


async def test_prompt_caching_false_sends_no_marks(provider: Provider) -> None:
    provider.reply = lambda path: ("text/event-stream", anthropic_stream({"input_tokens": 10}, 3))
    client = LiteLLMClient(api_base=provider.url, api_key="sk-ant-test")
    request = ModelRequest(model=SONNET, messages=SECOND_STEP, tools=TOOLS, prompt_caching=False)
    assert "cache_control_injection_points" not in client.acompletion_kwargs(request)
    await finish_of(client, request)
    assert breakpoints(provider.body) == 0


def test_which_models_are_marked() -> None:
    client = LiteLLMClient()

    def marked(model: str, prompt_caching: bool | None = None) -> bool:
        request = ModelRequest(model=model, messages=FIRST_STEP, prompt_caching=prompt_caching)
        return "cache_control_injection_points" in client.acompletion_kwargs(request)

    assert marked(SONNET)
    assert marked(BEDROCK_SONNET)
    assert marked("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0")
    # litellm's table does not say claude-2.1 supports prompt caching: marked only when asked.
    assert not marked("anthropic/claude-2.1")
    assert marked("anthropic/claude-2.1", prompt_caching=True)
    # Providers that cache on their own, and Bedrock models other than Claude, are never marked.
    for model in ("openai/gpt-4o", "deepseek/deepseek-chat", "gemini/gemini-2.5-flash", "bedrock/amazon.nova-pro-v1:0"):
        assert not marked(model)
        assert not marked(model, prompt_caching=True)


def test_the_callers_own_injection_points_win() -> None:
    mine = [{"location": "message", "role": "system", "index": None, "control": EPHEMERAL}]
    request = ModelRequest(model=SONNET, messages=FIRST_STEP, provider_options={"cache_control_injection_points": mine})
    assert LiteLLMClient().acompletion_kwargs(request)["cache_control_injection_points"] == mine


# -- Bedrock (converse) ----------------------------------------------------------------------------------------------


def event_stream(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    """AWS's binary event-stream framing (prelude with lengths and CRC, string headers, payload, CRC):
    https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html."""
    out = b""
    for event_type, payload in events:
        headers = b""
        for name, value in (
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ):
            headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        data = json.dumps(payload).encode()
        prelude = struct.pack(">II", 12 + len(headers) + len(data) + 4, len(headers))
        message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + data
        out += message + struct.pack(">I", zlib.crc32(message))
    return out


async def test_a_bedrock_claude_request_carries_cache_points(provider: Provider) -> None:
    # Request shape: https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html (a cachePoint block after
    # the system prompt, the tools and a message's content). ConverseStream's events and their usage fields:
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html,
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html.
    usage = {
        "inputTokens": 12,
        "outputTokens": 5,
        "totalTokens": 2517,
        "cacheReadInputTokens": 2000,
        "cacheWriteInputTokens": 500,
    }
    provider.reply = lambda path: (
        "application/vnd.amazon.eventstream",
        event_stream(
            [
                ("messageStart", {"role": "assistant"}),
                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "A stateful worker."}}),
                ("contentBlockStop", {"contentBlockIndex": 0}),
                ("messageStop", {"stopReason": "end_turn"}),
                ("metadata", {"usage": usage, "metrics": {"latencyMs": 310}}),
            ]
        ),
    )
    aws = {
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "not-a-secret",
        "aws_region_name": "us-east-1",
        "aws_bedrock_runtime_endpoint": provider.url,
    }
    request = ModelRequest(model=BEDROCK_SONNET, messages=FIRST_STEP, tools=TOOLS[:1], provider_options=aws)
    finish = await finish_of(LiteLLMClient(), request)

    path, body = provider.bodies[0]
    assert path == "/model/anthropic.claude-3-5-sonnet-20241022-v2:0/converse-stream"
    cache_point = {"cachePoint": {"type": "default"}}
    assert body["system"] == [{"text": "You answer from the docs."}, cache_point]
    assert body["toolConfig"]["tools"][-1] == cache_point
    assert [message["content"] for message in body["messages"]] == [
        [{"text": "What is Ray?"}],
        [{"text": "A framework for distributed Python."}],
        [{"text": "And an actor?"}, cache_point],
    ]

    assert finish.usage is not None
    assert (finish.usage.input_tokens, finish.usage.cached_input_tokens, finish.usage.cache_write_input_tokens) == (
        2512,
        2000,
        500,
    )
    model = BEDROCK_SONNET.split("/", 1)[1]
    assert finish.cost_usd == pytest.approx(
        12 * price(model, "input_cost_per_token")
        + 2000 * price(model, "cache_read_input_token_cost")
        + 500 * price(model, "cache_creation_input_token_cost")
        + 5 * price(model, "output_cost_per_token")
    )


# -- providers that cache on their own -------------------------------------------------------------------------------


def chat_completions_stream(model: str, usage: dict[str, Any]) -> bytes:
    chunks = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": model,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "A stateful worker."}}],
        },
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        },
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": model,
            "choices": [],
            "usage": usage,
        },
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# OpenAI: usage.prompt_tokens_details.cached_tokens, https://platform.openai.com/docs/guides/prompt-caching.
OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
# DeepSeek: prompt_cache_hit_tokens / prompt_cache_miss_tokens, https://api-docs.deepseek.com/guides/kv_cache.
DEEPSEEK_USAGE = {
    "prompt_tokens": 1500,
    "completion_tokens": 2,
    "total_tokens": 1502,
    "prompt_cache_hit_tokens": 1408,
    "prompt_cache_miss_tokens": 92,
}


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "litellm"])
@pytest.mark.parametrize(
    ("model", "usage", "cached"),
    [("openai/gpt-4o", OPENAI_USAGE, 1920), ("deepseek/deepseek-chat", DEEPSEEK_USAGE, 1408)],
    ids=["openai", "deepseek"],
)
async def test_automatic_caches_send_no_marks_and_report_the_hits(
    provider: Provider, model: str, usage: dict[str, Any], cached: int, fast_path: bool
) -> None:
    provider.reply = lambda path: ("text/event-stream", chat_completions_stream(model.split("/")[1], usage))
    client = AutoModelClient(fast_path=fast_path, api_base=f"{provider.url}/v1", api_key="sk-test")
    request = ModelRequest(model=model, messages=SECOND_STEP, tools=TOOLS)
    assert client.takes_fast_path(request) is fast_path
    finish = await finish_of(client, request)

    assert "cache_control" not in json.dumps(provider.body)
    assert finish.usage is not None
    assert (finish.usage.input_tokens, finish.usage.cached_input_tokens, finish.usage.cache_write_input_tokens) == (
        usage["prompt_tokens"],
        cached,
        None,
    )
    name = model.split("/")[1]
    assert finish.cost_usd == pytest.approx(
        (usage["prompt_tokens"] - cached) * price(name, "input_cost_per_token")
        + cached * price(name, "cache_read_input_token_cost")
        + usage["completion_tokens"] * price(name, "output_cost_per_token")
    )


async def test_cached_tokens_cost_less_than_the_same_prompt_uncached(provider: Provider) -> None:
    uncached = {**OPENAI_USAGE, "prompt_tokens_details": {"cached_tokens": 0}}
    costs = []
    for usage in (uncached, OPENAI_USAGE):
        provider.reply = functools.partial(
            lambda body, path: ("text/event-stream", body), chat_completions_stream("gpt-4o", usage)
        )
        client = LiteLLMClient(api_base=f"{provider.url}/v1", api_key="sk-test")
        costs.append((await finish_of(client, ModelRequest(model="openai/gpt-4o", messages=FIRST_STEP))).cost_usd)
    assert costs[0] is not None and costs[1] is not None
    assert costs[1] < costs[0]
    assert costs[0] - costs[1] == pytest.approx(
        1920 * (price("gpt-4o", "input_cost_per_token") - price("gpt-4o", "cache_read_input_token_cost"))
    )


async def test_gemini_reports_its_implicit_cache_hits(provider: Provider) -> None:
    # usageMetadata.cachedContentTokenCount: https://ai.google.dev/api/generate-content#UsageMetadata;
    # streamGenerateContent with alt=sse: https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent.
    chunks = [
        {
            "candidates": [{"content": {"parts": [{"text": "A stateful worker."}], "role": "model"}, "index": 0}],
            "modelVersion": "gemini-2.5-flash",
            "responseId": "resp-1",
        },
        {
            "candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {
                "promptTokenCount": 2100,
                "candidatesTokenCount": 3,
                "totalTokenCount": 2103,
                "cachedContentTokenCount": 2048,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 2100}],
                "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 2048}],
            },
            "modelVersion": "gemini-2.5-flash",
            "responseId": "resp-1",
        },
    ]
    provider.reply = lambda path: ("text/event-stream", b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks))
    client = LiteLLMClient(api_base=provider.url, api_key="gemini-test")
    request = ModelRequest(model="gemini/gemini-2.5-flash", messages=FIRST_STEP)
    finish = await finish_of(client, request)

    assert provider.bodies[0][0] == "/models/gemini-2.5-flash:streamGenerateContent"
    assert "cache_control" not in json.dumps(provider.body)
    assert finish.usage is not None
    assert (finish.usage.input_tokens, finish.usage.cached_input_tokens) == (2100, 2048)
    name = "gemini/gemini-2.5-flash"
    assert finish.cost_usd == pytest.approx(
        52 * price(name, "input_cost_per_token")
        + 2048 * price(name, "cache_read_input_token_cost")
        + 3 * price(name, "output_cost_per_token")
    )


# -- Usage, the trace and the agent ----------------------------------------------------------------------------------


def test_usage_adds_cache_tokens() -> None:
    first = Usage(input_tokens=100, cached_input_tokens=80, cache_write_input_tokens=None)
    second = Usage(input_tokens=50, cached_input_tokens=None, cache_write_input_tokens=20)
    assert first + second == Usage(input_tokens=150, cached_input_tokens=80, cache_write_input_tokens=20)
    assert (Usage() + Usage()).cache_write_input_tokens is None


def test_the_chat_span_carries_cache_tokens() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = trace.get_tracer_provider()
    if not isinstance(tracer_provider, TracerProvider):
        tracer_provider = TracerProvider()
        trace.set_tracer_provider(tracer_provider)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(ta.TracingConfig(exporter="provider"))
    try:
        span = tracing.start_chat(model=SONNET)
        tracing.end_chat(
            span,
            finish_reason="stop",
            input_tokens=1900,
            output_tokens=9,
            response_model=None,
            response_id=None,
            cost_usd=None,
            cache_read_input_tokens=1800,
            cache_creation_input_tokens=60,
        )
    finally:
        tracing.configure(False)
    (finished,) = exporter.get_finished_spans()
    attributes = dict(finished.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] == 1900
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 1800
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 60


async def test_on_step_finish_sees_the_cache_tokens() -> None:
    usage = Usage(
        input_tokens=1900, output_tokens=9, total_tokens=1909, cached_input_tokens=1800, cache_write_input_tokens=60
    )
    model = ScriptedModel([step(text("A stateful worker."), usage=usage)])
    seen: list[Usage] = []

    class Docs(ta.Think):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            seen.append(ctx.usage)

    agent = Docs(model=model, store=ta.MemoryStore())
    await agent.chat("And an actor?").collect()
    assert seen == [usage]


async def test_the_class_switch_reaches_the_model_request() -> None:
    requests: list[ModelRequest] = []

    class NoCaching(ta.Think):
        prompt_caching = False

        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            assert ctx.request is not None
            requests.append(ctx.request)

    agent = NoCaching(model=ScriptedModel([text("ok")]), store=ta.MemoryStore())
    await agent.chat("hi").collect()
    assert [request.prompt_caching for request in requests] == [False]


async def test_a_gemini_request_leaves_the_fast_path_on(provider: Provider) -> None:
    # litellm's Gemini route imports its context-caching module, which builds a Cache and registers litellm's
    # "cache" callback without setting litellm.cache: a callback that does nothing must not end the fast path.
    await test_gemini_reports_its_implicit_cache_hits(provider)
    assert "cache" in litellm.success_callback
    client = AutoModelClient(fast_path=True, api_base=f"{provider.url}/v1", api_key="sk-test")
    assert client.takes_fast_path(ModelRequest(model="openai/gpt-4o", messages=FIRST_STEP))


def test_litellms_response_cache_keeps_requests_on_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm, "cache", litellm.Cache(type="local"))
    client = AutoModelClient(fast_path=True, api_key="sk-test")
    assert not client.takes_fast_path(ModelRequest(model="openai/gpt-4o", messages=FIRST_STEP))
