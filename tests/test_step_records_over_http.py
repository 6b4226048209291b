"""Step records and turn totals over real HTTP, through litellm and through the OpenAI-wire fast path: the
response's id and model, usage, and the cost from litellm's price table (None for an unpriced model)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import think_actors as ta
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.openai_wire import OpenAIWireClient
from think_actors.testing import ScriptedOpenAIServer


@pytest.fixture(params=[LiteLLMClient, OpenAIWireClient], ids=["litellm", "fast_path"])
def client_for(request: pytest.FixtureRequest) -> Any:
    def make(server: ScriptedOpenAIServer, model_id: str) -> Any:
        client = request.param(api_base=server.base_url, api_key="test")
        client.model_id = model_id  # the id resolve_model sends
        return client

    return make


class Recorder(ta.Think):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.steps: list[ta.StepResult] = []

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.steps.append(ctx)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedOpenAIServer]:
    async with ScriptedOpenAIServer(model="gpt-4o-mini-2024-07-18") as s:
        yield s


async def test_a_priced_model_reports_cost_and_the_providers_response_metadata(
    server: ScriptedOpenAIServer, client_for: Any
) -> None:
    from think_actors.models.litellm import litellm

    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    server.add_text("hello", usage=usage)
    agent = Recorder(model=client_for(server, "openai/gpt-4o-mini"), store=ta.MemoryStore())

    result = await agent.save_messages("hi")

    [step] = agent.steps
    expected = sum(litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=1000, completion_tokens=500))
    assert step.cost_usd == pytest.approx(expected) and expected > 0
    assert step.response.id is not None and step.response.id.startswith("chatcmpl-scripted-")
    assert step.response.model == "gpt-4o-mini-2024-07-18"
    assert (step.usage.input_tokens, step.usage.output_tokens) == (1000, 500)
    assert (result.usage, result.cost_usd) == (step.usage, step.cost_usd)


async def test_an_unpriced_model_has_no_cost(server: ScriptedOpenAIServer, client_for: Any) -> None:
    server.add_text("hello", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    agent = Recorder(model=client_for(server, "openai/not-a-priced-model"), store=ta.MemoryStore())
    result = await agent.save_messages("hi")
    assert (agent.steps[0].cost_usd, result.cost_usd) == (None, None)
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.total_tokens) == (10, 5, 15)
