"""Agents for scripts/bench_ray.py (Ray workers import them by module name, so they live in a module)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelEvent, ModelRequest, TextDelta, Usage
from think_actors.testing import ScriptedModel, delay, step, text, tool_call


async def lookup(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": 21}


def stream_script(chunks: int, paced: bool) -> ScriptedModel:
    """Step 1: one tool call; step 2: ``chunks`` text chunks of 4 characters (the core benchmark's workload)."""
    pause = [delay(0.2)] if paced else []
    return ScriptedModel(
        [
            step(*pause, tool_call("lookup", {"city": "Paris"})),
            step(*pause, text("abcd" * chunks, chunk_size=4)),
        ]
    )


class StreamAgent(ta.Think):
    @ta.tool
    async def lookup(self, city: str) -> dict[str, Any]:
        """Weather for a city."""
        return await lookup(city)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        return ta.TurnConfig(model=stream_script(500, bool((ctx.body or {}).get("paced"))))


class PacedModel:
    """Waits ``pace_s`` (a provider's time to first token), then streams a short answer."""

    model_id = "paced"

    def __init__(self, pace_s: float = 0.2):
        self.pace_s = pace_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(self.pace_s)
        for piece in ("The ", "answer ", "is ", "42."):
            yield TextDelta(piece)
        yield FinishEvent("stop", Usage(10, 4, 14))


class Child(ta.Think):
    model = PacedModel()


class FanOutLead(ta.Think):
    @ta.tool
    async def ask_all(self, question: str, children: int) -> list[str]:
        """Ask ``children`` child agents the question in parallel."""
        handles = [await self.sub_agent(Child, f"c{i}") for i in range(children)]

        async def ask(handle: Any) -> str:
            parts = [c.delta async for c in handle.chat(question) if c.type == "text-delta"]
            return "".join(parts)

        return list(await asyncio.gather(*(ask(h) for h in handles)))


def fan_out_script(children: int, turns: int) -> ScriptedModel:
    steps = []
    for _ in range(turns):
        steps += [tool_call("ask_all", {"question": "q", "children": children}), text("done")]
    return ScriptedModel(steps)


@ray.remote(num_cpus=0)
class BareActor:
    """The baseline: an idle async Ray actor that imports nothing of think_actors."""

    async def pid(self) -> int:
        return os.getpid()

    async def stream(self, items: int) -> AsyncIterator[list[int]]:
        for _ in range(items):
            yield [0]
