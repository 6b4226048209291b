"""The model-server pool: new model events, model info, token counts and error bodies cross the Ray boundary."""

from __future__ import annotations

from typing import Any

import pytest

from think_actors.errors import ContextOverflowError, ProviderError
from think_actors.model_pool import PooledModel, PoolResolver
from think_actors.models import (
    FileEvent,
    FinishEvent,
    ModelInfo,
    ModelRequest,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    count_tokens,
    model_info,
)
from think_actors.testing import ScriptedOpenAIServer

HELLO = [{"role": "user", "content": "hello world"}]


@pytest.fixture
def pooled(ray_runtime: Any) -> PooledModel:
    return PoolResolver(ray_runtime)("openai/gpt-4o-mini")


def request(server: ScriptedOpenAIServer, model: str = "openai/gpt-4o-mini") -> ModelRequest:
    options = {"api_base": server.base_url, "api_key": "x"}
    return ModelRequest(model=model, messages=HELLO, max_retries=0, provider_options=options)


@pytest.mark.timeout(90)
async def test_new_events_stream_through_the_pool(pooled: PooledModel) -> None:
    async with ScriptedOpenAIServer(model="gpt-4o-mini-2024-07-18") as server:
        server.add_text(
            "Ray.",
            url_citations=[("https://docs.ray.io", "Ray docs")],
            images=["data:image/png;base64,AAAA"],
            usage={"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
            extra_deltas=[{"provider_specific_fields": {"trace": "t-1"}}],
        )

        events = [event async for event in pooled.stream(request(server))]

    metadata = events[0]
    assert isinstance(metadata, ResponseMetadata)
    assert (metadata.id, metadata.model) == ("chatcmpl-scripted-1", "gpt-4o-mini-2024-07-18")
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert events[1:-1] == [
        TextDelta("Ray."),
        SourceEvent("chatcmpl-scripted-1-source-1", "https://docs.ray.io", "Ray docs"),
        FileEvent("data:image/png;base64,AAAA", "image/png"),
    ]
    assert (finish.provider_metadata, finish.warnings) == ({"trace": "t-1"}, ())
    assert finish.cost_usd == pytest.approx(1000 * 0.15e-6 + 500 * 0.6e-6)
    server.assert_complete()


@pytest.mark.timeout(90)
async def test_error_bodies_cross_the_pool(pooled: PooledModel) -> None:
    overflow = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    async with ScriptedOpenAIServer() as server:
        server.add_error(400, overflow)
        server.add_stream_error("ab", {"error": {"message": "Overloaded", "type": "overloaded_error"}})

        with pytest.raises(ContextOverflowError) as at_call:
            async for _ in pooled.stream(request(server)):
                pass
        received: list[Any] = []
        with pytest.raises(ProviderError) as in_stream:
            async for event in pooled.stream(request(server)):
                received.append(event)

    assert (at_call.value.status_code, at_call.value.response_body, at_call.value.in_stream) == (400, overflow, False)
    assert received[1:] == [TextDelta("ab")]
    assert in_stream.value.facts() == {
        "request_id": None,
        "retryable": True,
        "provider": "openai",
        "status_code": None,
        "response_body": {"error": {"message": "Overloaded", "type": "overloaded_error"}},
        "in_stream": True,
        "retry_after_s": None,
    }


@pytest.mark.timeout(90)
async def test_model_info_and_token_counts_come_from_the_pool(pooled: PooledModel) -> None:
    info = ModelInfo(
        max_input_tokens=128_000, max_output_tokens=16_384, input_cost_per_token=0.15e-6, output_cost_per_token=0.6e-6
    )

    assert await pooled.model_info("openai/gpt-4o-mini") == info
    assert await pooled.model_info("openai/no-such-model") is None
    assert pooled._model_info == {"openai/gpt-4o-mini": info, "openai/no-such-model": None}  # remembered here
    assert await model_info(pooled, "openai/gpt-4o-mini") == info
    assert await pooled.count_tokens("openai/gpt-4o-mini", HELLO) == 9
    assert await count_tokens(pooled, "openai/gpt-4o-mini", HELLO) == 9


@pytest.mark.timeout(90)
async def test_the_pool_streams_openai_wire_models_over_the_fast_path(pooled: PooledModel) -> None:
    async with ScriptedOpenAIServer() as server:
        server.add_text("fast", usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
        server.add_text("slow", usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
        litellm_only = ModelRequest(
            model="openai/scripted",
            messages=HELLO,
            max_retries=0,
            # An option only litellm's route applies (its callbacks read metadata) keeps the request on litellm.
            provider_options={"api_base": server.base_url, "api_key": "x", "metadata": {"trace": "t-1"}},
        )

        fast = [event async for event in pooled.stream(request(server, "openai/scripted"))]
        slow = [event async for event in pooled.stream(litellm_only)]

    assert [e for e in fast if isinstance(e, TextDelta)] == [TextDelta("fast")]
    assert [e for e in slow if isinstance(e, TextDelta)] == [TextDelta("slow")]
    # Who sent each request: aiohttp for the fast path, the openai SDK inside litellm otherwise.
    agents = [headers["user-agent"] for headers in server.request_headers]
    assert "aiohttp" in agents[0] and agents[1].startswith("AsyncOpenAI/Python")
