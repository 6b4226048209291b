"""A lead, its researchers and their fetchers: a three-level tree of agents for the run-limit tests, the same
classes in process (tests/test_run_limits.py) and on Ray (tests/ray/test_run_limits_on_ray.py).

Every model step reports 100 input and 10 output tokens and costs 0.001 USD. A lead calls its researcher tool twice
in its first step, a researcher its fetcher tool twice, a fetcher answers at once: a whole run is 10 model requests,
6 tool calls and 6 child agents. ``Meter`` counts what the children see (how many run at once, which turns ended
how): a module global in process, a named actor (``METER``) on Ray.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import think_actors as ta
from think_actors.models import FinishEvent, ModelEvent, TextDelta, ToolCallDelta, Usage

STEP_USAGE = Usage(input_tokens=100, output_tokens=10, total_tokens=110)
STEP_COST = 0.001
STEP_TOKENS = 110
METER = "tree-meter"


class Meter:
    """Children in flight (the most at once), and each turn's end (agent path, status, time)."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.ended: list[tuple[str, str, float]] = []

    def enter(self) -> None:
        self.running += 1
        self.most = max(self.most, self.running)

    def leave(self) -> None:
        self.running -= 1

    def end(self, path: str, status: str) -> None:
        self.ended.append((path, status, time.time()))

    def report(self) -> dict[str, Any]:
        return {"running": self.running, "most": self.most, "ended": list(self.ended)}


LOCAL_METER = Meter()


def _meter_now(method: str, *args: Any) -> Any:
    """Tell the meter, without waiting (nothing can cancel it half-way): the named actor when this process is a
    Ray worker of the tests (one caller's calls reach it in order), else the module's. The actor call, or None."""
    import ray

    if ray.is_initialized():
        try:
            actor = ray.get_actor(METER, namespace=ray.get_runtime_context().namespace)
        except ValueError:
            actor = None
        if actor is not None:
            return getattr(actor, method).remote(*args)
    getattr(LOCAL_METER, method)(*args)
    return None


async def _meter(method: str, *args: Any) -> None:
    """Tell the meter and wait until it has counted it."""
    call = _meter_now(method, *args)
    if call is not None:
        await call


async def until_grandchildren_started(stream: Any, count: int) -> None:
    """Read a lead's stream until ``count`` of its children's children have started (their events arrive inside
    the children's own ``agent-tool-event`` chunks)."""
    started = 0
    async for chunk in stream:
        inner = getattr(chunk, "chunk", None)
        if chunk.type == "agent-tool-event" and getattr(inner, "type", None) == "agent-tool-event":
            started += inner.kind == "started"
            if started >= count:
                return


class TreeModel:
    """Calls ``tool`` ``fanout`` times at once in its first step, then answers; ``pause_s`` before each answer."""

    model_id = "tree-stand-in"

    def __init__(self, tool: str | None = None, fanout: int = 0, *, pause_s: float = 0.0, metered: bool = False):
        self.tool, self.fanout, self.pause_s, self.metered = tool, fanout, pause_s, metered

    async def stream(self, request: ta.ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.metered:
            _meter_now("enter")  # counted with the leave below whatever cancels the stream in between
        try:
            if self.pause_s:
                await asyncio.sleep(self.pause_s)
            if self.tool and request.messages[-1]["role"] != "tool":
                for index in range(self.fanout):
                    yield ToolCallDelta(index, f"call-{uuid.uuid4().hex[:12]}", self.tool, '{"input": "look it up"}')
                yield FinishEvent("tool_calls", STEP_USAGE, cost_usd=STEP_COST)
            else:
                yield TextDelta("done.")
                yield FinishEvent("stop", STEP_USAGE, cost_usd=STEP_COST)
        finally:
            if self.metered:
                _meter_now("leave")


class Metered(ta.Think):
    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await _meter("end", self.path, result.status)

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        if not ctx.messages_persisted or ctx.stage != "stream":
            return error
        await _meter("end", self.path, "error")  # a turn that failed before any reply gets no on_chat_response
        return error


class Fetcher(Metered):
    model = TreeModel()


class Researcher(Metered):
    model = TreeModel("fetcher", 2)
    tools = (ta.agent_tool(Fetcher, description="Fetch a source."),)


class Lead(Metered):
    model = TreeModel("researcher", 2)
    tools = (ta.agent_tool(Researcher, description="Research a question."),)


class SlowFetcher(Metered):
    model = TreeModel(pause_s=30.0, metered=True)  # the meter's "running": fetcher models still waiting


class SlowResearcher(Metered):
    model = TreeModel("slow_fetcher", 2)
    tools = (ta.agent_tool(SlowFetcher, description="Fetch a source, slowly."),)


class SlowLead(Metered):
    model = TreeModel("slow_researcher", 2)
    tools = (ta.agent_tool(SlowResearcher, description="Research a question."),)


class ChainResearcher(Metered):
    model = TreeModel("fetcher", 1)
    tools = (ta.agent_tool(Fetcher, description="Fetch a source."),)


class ChainLead(Metered):
    """One researcher, which starts one fetcher: five model steps, one agent at each level."""

    model = TreeModel("chain_researcher", 1)
    tools = (ta.agent_tool(ChainResearcher, description="Research a question."),)


class Probe(Metered):
    model = TreeModel(pause_s=0.3, metered=True)


class WideLead(Metered):
    """Asks for 20 probes at once."""

    model = TreeModel("probe", 20)
    tools = (ta.agent_tool(Probe, description="Probe a source."),)


class CappedWideLead(WideLead):
    max_concurrent_agent_tools = 4


class Worker(Metered):
    """Two steps: calls its note tool, then answers."""

    model = TreeModel("note", 1)

    @ta.tool
    async def note(self, input: str) -> str:
        """Note something down."""
        return "noted"


class Crowd(Metered):
    """50 workers at once."""

    model = TreeModel("worker", 50)
    tools = (ta.agent_tool(Worker, description="Work on it."),)


class SharedWorker(Worker):
    """A worker in the cluster's shared host actors (many to a process): fifty of them start no fifty processes."""

    hosting = "shared"


class SharedCrowd(Metered):
    """50 shared-hosted workers at once, charging one account from other processes."""

    model = TreeModel("shared_worker", 50)
    tools = (ta.agent_tool(SharedWorker, description="Work on it."),)


class CrashingResearcher(Metered):
    """Its process dies in its first tool call, once (a marker file per agent path): Ray restarts it and the
    restarted actor recovers the turn."""

    model = TreeModel("look_up", 1)

    @ta.tool
    def look_up(self, input: str) -> str:
        """Look it up."""
        marker = os.path.join(tempfile.gettempdir(), "crashed-" + hashlib.sha1(self.path.encode()).hexdigest())
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "found"


class CrashLead(Metered):
    model = TreeModel("crashing_researcher", 1)
    tools = (ta.agent_tool(CrashingResearcher, description="Research a question."),)


@ta.tool(num_cpus=0.1)
def stamp(input: str, run_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stamp it (on Ray: a task of its own), with the run it was called in."""
    return {"input": input, "run": run_context}


class Stamper(Metered):
    """Calls its task tool, then answers."""

    model = TreeModel("stamp", 1)
    tools = (stamp,)
