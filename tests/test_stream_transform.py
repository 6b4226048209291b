"""TurnConfig.transform: a turn's rewrite of the model's stream (the reference's ``experimental_transform``).

Everything downstream of the model sees what the transform yields: ``on_chunk``, the step's result, the stored
reply and the caller's stream; the model's own stream is closed with the step even when the transform stops early.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import think_actors as ta
from think_actors.models import FinishEvent, ModelEvent, ModelRequest, TextDelta
from think_actors.testing import ScriptedModel, text, tool_call


async def shout(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
    async for event in events:
        yield TextDelta(event.text.upper()) if isinstance(event, TextDelta) else event


class Transformed(ta.Think):
    transform: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deltas: list[str] = []
        self.step_texts: list[str] = []

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        return ta.TurnConfig(transform=self.transform)

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta":
            self.deltas.append(ctx.text or "")

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.step_texts.append(ctx.text)


async def test_every_consumer_sees_the_transformed_stream_in_every_step() -> None:
    agent = Transformed(model=ScriptedModel([tool_call("ping", {}, id="c1"), text("all done")]), store=ta.MemoryStore())

    @ta.tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    agent.tools = [ping]  # type: ignore[assignment]
    agent.transform = shout
    stream = agent.chat("go")
    streamed = [c.delta for c in [chunk async for chunk in stream] if c.type == "text-delta"]
    assert "".join(streamed) == "ALL DONE"
    assert "".join(agent.deltas) == "ALL DONE"
    assert agent.step_texts == ["", "ALL DONE"]
    assert agent.get_messages()[-1].text == "ALL DONE"


async def test_a_transform_may_drop_and_add_events() -> None:
    async def censor(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
        async for event in events:
            if isinstance(event, FinishEvent):
                yield TextDelta(" [checked]")
            if not (isinstance(event, TextDelta) and "secret" in event.text):
                yield event

    agent = Transformed(model=ScriptedModel([text("public secret words", chunk_size=7)]), store=ta.MemoryStore())
    agent.transform = censor
    result = await agent.save_messages("go")
    assert result.message is not None and result.message.text == "public words [checked]"


class Counted:
    """A model whose stream records whether it was closed."""

    model_id = "counted"

    def __init__(self) -> None:
        self.closed = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        try:
            for word in ("one", " two", " three"):
                yield TextDelta(word)
            yield FinishEvent(finish_reason="stop")
        finally:
            self.closed = True


async def test_a_transform_that_stops_early_leaves_the_model_stream_closed() -> None:
    async def first_only(events: AsyncIterator[ModelEvent]) -> AsyncIterator[ModelEvent]:
        async for event in events:
            yield event
            return

    model = Counted()
    agent = Transformed(model=model, store=ta.MemoryStore())
    agent.transform = first_only
    result = await agent.save_messages("go")
    assert result.message is not None and result.message.text == "one"
    assert model.closed


async def test_a_transform_that_is_not_a_function_is_a_configuration_error() -> None:
    agent = Transformed(model=ScriptedModel([text("never")]), store=ta.MemoryStore())
    agent.transform = "upper"
    with pytest.raises(ta.ConfigurationError, match=r"TurnConfig\.transform must be a function"):
        await agent.save_messages("go")
