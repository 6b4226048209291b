"""A model's refusal, from a real recorded stream to the UI message stream, the stored reply and the step record.

OpenAI streams a refusal in ``delta.refusal`` with ``content`` null and finishes with ``stop``
(``tests/data/provider_streams/openai-refusal.sse``, from openai-python's inline snapshots). The agent shows it as
the reply's text and reports finish ``content_filter`` (``content-filter`` on the UI stream, the AI SDK's name), so a
refusal is never an empty answer that looks like a normal stop. The local server sends the recording byte for byte;
the agent is a plain ``ta.Think`` with a string model id and ``api_base`` in its turn's provider options, so the
request takes the route a user's would: the fast path, or litellm with the fast path off.

Never reaches the network: the server is on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from test_provider_streams import RECORDINGS, ReplayServer, recorded_body
from test_provider_streams import loopback_only as loopback_only  # autouse: any other host lookup fails

import think_actors as ta
from think_actors.models import set_model_resolver
from think_actors.models.auto import AutoModelClient

REFUSAL = "I'm sorry, I can't assist with that request."


class Refused(ta.Think):
    model = "openai/gpt-4o-2024-08-06"

    def __init__(self, api_base: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_base = api_base
        self.steps: list[ta.StepResult] = []

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
        return ta.TurnConfig(max_retries=0, provider_options={"api_base": self.api_base, "api_key": "test"})

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.steps.append(ctx)


@pytest.fixture
async def refusal_server() -> AsyncIterator[ReplayServer]:
    async with ReplayServer() as server:
        server.body = recorded_body(RECORDINGS["openai-refusal"])
        yield server


@pytest.fixture(params=[True, False], ids=["fast_path", "litellm"])
def route(request: pytest.FixtureRequest) -> Iterator[AutoModelClient]:
    client = AutoModelClient(fast_path=request.param)
    set_model_resolver(lambda model_id: client)
    try:
        yield client
    finally:
        set_model_resolver(None)


async def test_a_recorded_refusal_reaches_the_ui_stream_the_reply_and_the_step_as_content_filter(
    refusal_server: ReplayServer, route: AutoModelClient
) -> None:
    agent = Refused(refusal_server.base_url, store=ta.MemoryStore())

    chunks = [chunk.to_wire() async for chunk in agent.chat("say something you must refuse")]
    await route.aclose()

    if not route.fast_path:
        # litellm's stream wrapper drops every chunk whose delta holds only a refusal (the README's model-path
        # table): no text reaches LiteLLMClient and the finish stays stop. Asserted exactly, so this fails the
        # day litellm passes refusals on.
        assert [c["type"] for c in chunks] == ["start", "start-step", "finish-step", "finish"]
        assert chunks[-1]["finishReason"] == "stop"
        assert agent.steps[0].finish_reason == "stop"
        return
    text_id = chunks[2]["id"]
    deltas = ["I'm", " sorry", ",", " I", " can't", " assist", " with", " that", " request", "."]
    assert chunks == [
        {"type": "start", "messageId": agent.get_messages()[1].id},
        {"type": "start-step"},
        {"type": "text-start", "id": text_id},
        *({"type": "text-delta", "id": text_id, "delta": delta} for delta in deltas),
        {"type": "text-end", "id": text_id},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "content-filter"},
    ]
    _, reply = agent.get_messages()
    assert [(part.type, getattr(part, "text", None)) for part in reply.parts] == [
        ("step-start", None),
        ("text", REFUSAL),
    ]
    [step] = agent.steps
    assert (step.text, step.finish_reason) == (REFUSAL, "content_filter")
    assert (step.usage.input_tokens, step.usage.output_tokens) == (79, 11)
    assert step.response.model == "gpt-4o-2024-08-06"
