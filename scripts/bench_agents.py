"""Agents for scripts/bench_ray.py (Ray workers import them by module name, so they live in a module)."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.batching import _batches
from think_actors.chunks import DataChunk
from think_actors.models import FinishEvent, ModelEvent, ModelInfo, ModelRequest, ResponseMetadata, TextDelta, Usage
from think_actors.runtime import RuntimeConfig
from think_actors.runtime.channel import ReplyTo, deliver
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


async def bare_stream(items: int, pause_s: float = 0.0) -> AsyncIterator[list[int]]:
    """``items`` one-element items, ``pause_s`` apart (as a paced turn's batches are)."""
    for i in range(items):
        if i and pause_s:
            await asyncio.sleep(pause_s)
        yield [0]


@ray.remote(num_cpus=0)
class BareActor:
    """The baseline: an idle async Ray actor that imports nothing of think_actors."""

    async def pid(self) -> int:
        return os.getpid()

    async def stream(self, items: int, pause_s: float = 0.0) -> AsyncIterator[list[int]]:
        async for item in bare_stream(items, pause_s):
            yield item

    async def stream_from(self, source: Any, items: int) -> float:
        """Seconds to take ``items`` streamed items from ``source``, another bare actor: the actor -> actor floor."""
        started = time.perf_counter()
        async for ref in source.stream.options(num_returns="streaming").remote(items):
            await ref
        return time.perf_counter() - started


# ------------------------------------------------------------------ scripts/bench_ray.py (d): agent -> model server


class ScriptedEvents:
    """Stateless: every request gets the same answer, ``chunks`` text deltas of 4 characters, then a finish."""

    model_id = "scripted-events"

    def __init__(self, chunks: int):
        self.chunks = chunks

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ResponseMetadata("scripted", "scripted-events", 0.0)
        for _ in range(self.chunks):
            yield TextDelta("abcd")
        yield FinishEvent("stop", Usage(10, self.chunks, 10 + self.chunks))


@ray.remote(num_cpus=0, max_concurrency=100)
class EventServer:
    """A model server as ``model_pool.ModelServer`` is, with ``ScriptedEvents`` for its client (no provider)."""

    def __init__(self, config: RuntimeConfig, chunks: int):
        self.config = config
        self.client = ScriptedEvents(chunks)

    async def stream(
        self, request: ModelRequest, trace: Any = None, tracing_config: Any = None, reply_to: ReplyTo | None = None
    ) -> AsyncIterator[bytes]:
        events = self.client.stream(request).__aiter__()
        async for batch in deliver(functools.partial(_batches, events), self.config, reply_to):
            yield batch

    async def model_info(self, model: str) -> ModelInfo | None:
        return None

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        return None


EVENT_SERVER = "bench-event-server"


class TimedModel:
    """Wraps a model client: how long after the request its first event and its end came, as the agent saw them."""

    model_id = "timed"

    def __init__(self, inner: Any):
        self.inner = inner
        self.first_s = self.total_s = 0.0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        start = time.perf_counter()
        first = True
        async for event in self.inner.stream(request):
            if first:
                self.first_s, first = time.perf_counter() - start, False
            yield event
        self.total_s = time.perf_counter() - start


class HopAgent(ta.Think):
    """Streams a scripted answer from a model in its own process (``own-*`` agents) or from the ``EventServer``
    actor named ``EVENT_SERVER`` through ``PooledModel`` (``pool-*`` agents), as the model pool does; each step
    reports in a ``data-hop`` chunk how long its model stream took and when its first event came."""

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        model = getattr(self, "_hop_model", None)
        if model is None:
            from think_actors.model_pool import PooledModel

            pooled = self.name.startswith("pool-")
            model = TimedModel(PooledModel([ray.get_actor(EVENT_SERVER)]) if pooled else ScriptedEvents(500))
            self._hop_model = model
        return ta.TurnConfig(model=model)

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        model = self._hop_model
        self.emit(DataChunk(type="data-hop", data={"first_s": model.first_s, "total_s": model.total_s}, transient=True))


# ------------------------------------------------------------------ scripts/bench_recovery.py


class _WorkThenAnswer:
    """Stateless: a tool call first, then 50 text chunks (a restarted actor gets the same answers)."""

    model_id = "work-then-answer"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        from think_actors.models import ToolCallDelta

        if not any(m["role"] == "tool" for m in request.messages):
            yield ToolCallDelta(0, "call-work", "work", "{}")
            yield FinishEvent("tool_calls", Usage())
            return
        for _ in range(50):
            yield TextDelta("word ")
        yield FinishEvent("stop", Usage())


@ray.remote(num_cpus=0)
class RecoveryClock:
    """Outlives the agent: when it crashed, when its actor came back, when the resumed turn's first chunk came."""

    def __init__(self) -> None:
        self.crashed: float | None = None
        self.crashed_pid = 0
        self.restarted: float | None = None
        self.resumed: float | None = None

    async def crash(self, pid: int) -> bool:
        if self.crashed is not None:
            return False
        self.crashed, self.crashed_pid = time.time(), pid
        return True

    async def restart(self, at: float, pid: int) -> None:
        # The first process's constructor call may arrive late: only another process is a restart.
        if self.restarted is None and pid != self.crashed_pid and self.crashed is not None:
            self.restarted = at

    async def resume(self, at: float) -> None:
        if self.crashed is not None and self.resumed is None:
            self.resumed = at

    async def times(self) -> tuple[float | None, float | None, float | None]:
        return self.crashed, self.restarted, self.resumed


class RecoveringAgent(ta.Think):
    """Dies before its second step once; the restarted actor resumes the turn from its store."""

    model = _WorkThenAnswer()

    def __init__(self, *args: Any, clock: str, namespace: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.clock = ray.get_actor(clock, namespace=namespace)
        self.clock.restart.remote(time.time(), os.getpid())

        async def work(value: Any, context: ta.ToolContext) -> str:
            return "worked"

        self.tools = (ta.Tool("work", "Do the work.", {"type": "object", "properties": {}}, executor=work),)

    async def before_step(self, ctx: ta.StepContext) -> None:
        if ctx.step_number == 1 and await self.clock.crash.remote(os.getpid()):
            os._exit(1)

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta":
            await self.clock.resume.remote(time.time())


# ------------------------------------------------------------------ scripts/bench_gateway.py


class _Chatty:
    """Stateless: answers every request with 20 text chunks (each agent of the load test gets the same)."""

    model_id = "chatty"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        for i in range(20):
            yield TextDelta(f"word{i} ")
        yield FinishEvent("stop", Usage())


class LoadAgent(ta.Think):
    model = _Chatty()
