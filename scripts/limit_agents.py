"""The agents of scripts/bench_limits.py: a lead, its researchers and their fetchers, each model step reporting
100 input and 10 output tokens. Ray workers import them from here (``ta.init`` hands them this directory)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelEvent, TextDelta, ToolCallDelta, Usage

USAGE = Usage(input_tokens=100, output_tokens=10, total_tokens=110)
CLOCK = "bench-limits-clock"
TOKEN_GAP_S = 0.02  # a provider streaming 50 tokens a second
CALL_TOKENS = 10  # a tool call's arguments, streamed at the same pace


@ray.remote(num_cpus=0)
class StopClock:
    """When each fetcher's turn ended (wall clock: one machine)."""

    def __init__(self) -> None:
        self.ended: list[float] = []
        self.started = 0

    def start(self) -> None:
        self.started += 1

    def end(self) -> None:
        self.ended.append(time.time())

    def report(self) -> tuple[int, list[float]]:
        return self.started, list(self.ended)

    def reset(self) -> None:
        self.ended, self.started = [], 0


async def _clock(method: str) -> None:
    clock = ray.get_actor(CLOCK, namespace=ray.get_runtime_context().namespace)
    await getattr(clock, method).remote()


class FanModel:
    """Calls ``tool`` ``fanout`` times at once, then answers in ``tokens`` text deltas; ``pause_s`` before answering.
    With ``gap_s`` it streams at a provider's pace: each text token ``gap_s`` after the one before, and a step of
    tool calls after ``CALL_TOKENS`` such gaps (the calls' arguments)."""

    model_id = "fan-stand-in"

    def __init__(
        self,
        tool: str | None = None,
        fanout: int = 0,
        pause_s: float = 0.0,
        clocked: bool = False,
        tokens: int = 1,
        gap_s: float = 0.0,
    ):
        self.tool, self.fanout, self.pause_s, self.clocked, self.tokens = tool, fanout, pause_s, clocked, tokens
        self.gap_s = gap_s

    async def stream(self, request: ta.ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.clocked:
            await _clock("start")
        if self.pause_s:
            await asyncio.sleep(self.pause_s)
        if self.tool and request.messages[-1]["role"] != "tool":
            if self.gap_s:
                await asyncio.sleep(self.gap_s * CALL_TOKENS)
            for index in range(self.fanout):
                yield ToolCallDelta(index, f"call-{uuid.uuid4().hex[:12]}", self.tool, '{"input": "go"}')
            yield FinishEvent("tool_calls", USAGE)
        else:
            for _ in range(self.tokens):
                if self.gap_s:
                    await asyncio.sleep(self.gap_s)
                yield TextDelta("word ")
            yield FinishEvent("stop", USAGE)


class QuickChild(ta.Think):
    """In the shared hosts on Ray: a child per turn starts no process, so the turn's cost is the turn's own."""

    model = FanModel(tokens=60)
    hosting = "shared"


class QuickLead(ta.Think):
    """Two steps and one child, each answer 60 tokens: the turn whose accounting the benchmark prices."""

    model = FanModel("quick_child", 1, tokens=60)
    tools = (ta.agent_tool(QuickChild, description="Do it."),)


class PacedChild(ta.Think):
    """``QuickChild`` whose model streams at a real provider's pace."""

    model = FanModel(tokens=60, gap_s=TOKEN_GAP_S)
    hosting = "shared"


class PacedLead(ta.Think):
    """``QuickLead`` whose model (and its child's) streams at a real provider's pace: how users run."""

    model = FanModel("paced_child", 1, tokens=60, gap_s=TOKEN_GAP_S)
    tools = (ta.agent_tool(PacedChild, description="Do it."),)


class HangingFetcher(ta.Think):
    model = FanModel(pause_s=600.0, clocked=True)

    async def on_chat_response(self, result: Any) -> None:
        await _clock("end")


class FanResearcher(ta.Think):
    model = FanModel("hanging_fetcher", 5)
    tools = (ta.agent_tool(HangingFetcher, description="Fetch."),)


class FanLead(ta.Think):
    """1 lead, 5 researchers, 25 fetchers: 31 agents."""

    model = FanModel("fan_researcher", 5)
    tools = (ta.agent_tool(FanResearcher, description="Research."),)
