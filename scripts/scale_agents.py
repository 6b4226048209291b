"""Agents and actors for scripts/bench_scale.py (Ray workers import them by module name, so they live here)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage


class PacedModel:
    """A provider that takes 200 ms per step, then answers in 20 chunks; it keeps no script position, so any
    number of turns (and a restarted actor) get the same answer."""

    model_id = "paced"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await asyncio.sleep(0.2)
        for _ in range(20):
            yield TextDelta("abcd")
        yield FinishEvent("stop", Usage(input_tokens=10, output_tokens=20))


class Worker(ta.Think):
    """The throughput benchmark's agent: resident, one step of 200 ms per turn."""

    model = PacedModel()


class Napper(ta.Think):
    """The scale benchmark's agent: hibernates 2 s after its last turn."""

    model = PacedModel()
    idle_timeout_s = 2.0
