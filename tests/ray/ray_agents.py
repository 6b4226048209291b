"""Every agent and actor class the Ray tests spawn.

Ray workers import classes by module name, so they live here (tests/ray is on ``sys.path``, which ``ta.init``
hands to the workers) and never inside a test function. Child agents that ``agent_tool`` creates take their
class attribute ``model``, so each scenario has its own child class with its own script; each child actor is
its own process, so a class-level ScriptedModel starts from its first step in every child.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import ray
from pydantic import BaseModel

import think_actors as ta
from think_actors.chunks import DataChunk
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta, Usage
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

HOOKS_IN_ORDER = [
    "before_turn",
    "before_step",
    "before_tool_call",
    "after_tool_call",
    "on_step_finish",
    "before_step",
    "on_step_finish",
    "on_chat_response",
]


def handle_at(path: str, agent_class: type[ta.Think]) -> Any:
    """A handle to the agent actor named ``path`` (children live at their path, not at ``class/name``)."""
    from think_actors.runtime import AgentHandle, _require_config

    return AgentHandle(ray.get_actor(path, namespace=_require_config().namespace), path, agent_class.__name__)


# ------------------------------------------------------------------ hooks and entry points


class Recorder(ta.Think):
    """Puts a transient ``data-hook`` chunk into the stream at each hook.

    ``on_chat_response`` fires after the stream's last chunk, so it keeps the turn's whole hook list in the store
    instead; the next turn's ``before_turn`` emits that record as ``data-last-turn``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._hooks: list[str] = []

    def _record(self, hook: str, **facts: Any) -> None:
        self._hooks.append(hook)
        self.emit(
            DataChunk(
                type="data-hook",
                data={"hook": hook, "pid": os.getpid(), "litellm_imported": "litellm" in sys.modules, **facts},
                transient=True,
            )
        )

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        previous = await self.store.get_kv("last-turn")
        if previous is not None:
            self.emit(DataChunk(type="data-last-turn", data=previous, transient=True))
        self._hooks = []
        self._record("before_turn", trigger=ctx.trigger)
        return None

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self._record("before_step", step=ctx.step_number)
        return None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self._record("before_tool_call", tool=ctx.tool_name)
        return None

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self._record("after_tool_call", tool=ctx.tool_name, success=ctx.success)

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self._record("on_step_finish", step=ctx.step_number)

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        # Emitted after the stream ended: the engine must drop it, never leak it into the next turn.
        self._record("on_chat_response", status=result.status)
        await self.store.set_kv(
            "last-turn", {"request_id": result.request_id, "status": result.status, "hooks": list(self._hooks)}
        )


class HookAgent(Recorder):
    @ta.tool
    async def lookup(self, q: str) -> str:
        """Look something up."""
        return f"found {q}"


class EntryAgent(ta.Think):
    """A plain agent driven through every entry point of its handle."""


# ------------------------------------------------------------------ agent tools


class Report(BaseModel):
    title: str
    score: int


class Rendezvous(ta.Think):
    """A child whose ``rendezvous`` tool waits at the barrier named after its lead, so parallel runs must overlap."""

    @ta.tool
    async def rendezvous(self) -> dict[str, Any]:
        """Wait for the other children."""
        lead_name = self.path.split("/")[1]
        barrier = ray.get_actor(f"barrier/{lead_name}", namespace=ray.get_runtime_context().namespace)
        met = await barrier.arrive.remote(self.path, 20.0)
        return {"pid": os.getpid(), "met": met}


class Summarizer(Rendezvous):
    model = ScriptedModel([tool_call("rendezvous", {}), text("The child summary.", chunk_size=5)])


class Reporter(Rendezvous):
    model = ScriptedModel([tool_call("rendezvous", {}), text('{"title": "Ray actors", "score": 3}', chunk_size=8)])


class TeamLead(ta.Think):
    tools = [
        ta.agent_tool(Summarizer, description="Summarize a topic."),
        ta.agent_tool(Reporter, description="Report on a topic.", output_schema=Report),
    ]


class SlowChild(ta.Think):
    model = ScriptedModel([step(text("child partial"), delay(60), text(" never")), text("child again")])


class CancelLead(ta.Think):
    tools = [ta.agent_tool(SlowChild, description="Take your time.")]


class CycleA(ta.Think):
    @ta.tool
    async def ask_b(self, question: str) -> str:
        """Ask B; return the tool errors B saw."""
        b = await ta.get(CycleB, self.name)
        errors = [chunk.error_text async for chunk in b.chat(question) if chunk.type == "tool-output-error"]
        return "\n".join(errors) or "B saw no error"


class CycleB(ta.Think):
    @ta.tool
    async def ask_a(self, question: str) -> str:
        """Ask A (which is waiting for this very turn)."""
        a = await ta.get(CycleA, self.name)
        async for _ in a.chat(question):
            pass
        return "A answered"


@ray.remote(num_cpus=0)
class Barrier:
    """Returns from ``arrive`` once ``parties`` callers are inside it at the same time (False on timeout)."""

    def __init__(self, parties: int):
        self.parties = parties
        self.arrived: list[str] = []
        self.everyone = asyncio.Event()

    async def arrive(self, who: str, timeout_s: float) -> bool:
        self.arrived.append(who)
        if len(self.arrived) >= self.parties:
            self.everyone.set()
        try:
            await asyncio.wait_for(self.everyone.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


# ------------------------------------------------------------------ actor tools and task tools


@ray.remote(num_cpus=0)
class Counter:
    """A tool actor that counts the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0

    async def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        self.calls += 1
        return a + b

    async def bump(self) -> int:
        self.calls += 1
        return self.calls

    async def count(self) -> int:
        return self.calls


@ta.tool(num_cpus=1)
def process_id(counter: str, namespace: str) -> int:
    """Report the id of the process the tool runs in (it counts itself on ``counter`` first)."""
    ray.get(ray.get_actor(counter, namespace=namespace).bump.remote())
    return os.getpid()


class ToolUser(ta.Think):
    """Offers ``add_by_name`` / ``add_by_handle`` (actor tools) and ``process_id`` (a task tool).

    ``body={"decide": {tool name: "block" | "substitute"}}`` short-circuits calls in ``before_tool_call``.
    """

    def __init__(self, *args: Any, counter: str, namespace: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tools = (
            ta.actor_tool(counter, "add", actor_class=Counter, name="add_by_name", namespace=namespace),
            ta.actor_tool(ray.get_actor(counter, namespace=namespace), "add", name="add_by_handle"),
            process_id,
        )
        self._decide: dict[str, str] = {}

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self._decide = dict((ctx.body or {}).get("decide", {}))
        return None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        decision = self._decide.get(ctx.tool_name)
        if decision == "block":
            return ta.Block(f"{ctx.tool_name} blocked by the test")
        if decision == "substitute":
            return ta.Substitute({"substituted": ctx.tool_name})
        return None


# ------------------------------------------------------------------ recovery and errors


class EchoModel:
    """Answers ``echo: <last user text>``; holds no script position, so a restarted actor answers the same way."""

    model_id = "echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        content = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content)
        yield TextDelta(f"echo: {content}")
        yield FinishEvent("stop", Usage())


class Survivor(ta.Think):
    model = EchoModel()


class NoModel(ta.Think):
    """No ``model``: every turn fails at setup."""


class ServerBacked(Recorder):
    """A string model id (served by the model-server pool) pointed at a ScriptedOpenAIServer."""

    def __init__(self, *args: Any, api_base: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.api_base = api_base

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await super().before_turn(ctx)
        return ta.TurnConfig(provider_options={"api_base": self.api_base, "api_key": "x"}, max_retries=0)


# ------------------------------------------------------------------ one ordered stream


class QuickChild(ta.Think):
    """Answers at once, so its chunks are all buffered before the parent's hooks run."""

    model = ScriptedModel([text("child says hi")])


class OrderedLead(ta.Think):
    """Emits from after_tool_call and on_step_finish; the stream must keep the order they happened in."""

    tools = (ta.agent_tool(QuickChild, description="Ask the quick child"),)

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.emit(DataChunk(type="data-after", data={"call": ctx.tool_call_id}, transient=True))

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.emit(DataChunk(type="data-step", data={"step": ctx.step_number}, transient=True))


class ObservedAgent(ta.Think):
    pass


class FriendlyErrors(ta.Think):
    """Replaces every error's message with one naming the stage; refuses turns whose body says so."""

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        return RuntimeError(f"friendly ({ctx.stage})")

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if ctx.body and ctx.body.get("refuse"):
            raise PermissionError("raw setup failure")
        return None


# ------------------------------------------------------------------ crash recovery


class PlanModel:
    """A stateless model for crash tests: what it answers depends only on the request, so a restarted actor
    asks it again and gets the same plan. Step 0: two parallel calls (``charge``, ``note``); step 1: one
    ``lookup``; then a final text. A continuation (the ephemeral "Continue ..." message last) gets the text too."""

    model_id = "plan"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = sum(1 for m in request.messages if m["role"] == "tool")
        if results == 0:
            yield ToolCallDelta(0, "call-charge", "charge", '{"amount": 42}')
            yield ToolCallDelta(1, "call-note", "note", '{"text": "paid"}')
            yield FinishEvent("tool_calls", Usage(input_tokens=10, output_tokens=5))
        elif results == 2:
            yield ToolCallDelta(0, "call-lookup", "lookup", '{"q": "receipt"}')
            yield FinishEvent("tool_calls", Usage(input_tokens=20, output_tokens=5))
        else:
            for piece in ("All ", "done: ", "charged ", "42."):
                yield TextDelta(piece)
            yield FinishEvent("stop", Usage(input_tokens=30, output_tokens=8))


@ray.remote(num_cpus=0)
class CrashControl:
    """Says once, for the configured crash point, that the agent must die there; counts tool side effects and
    records which calls went through reconcile_tool_call (all of it outlives the agent's restarts)."""

    def __init__(self, point: str | list[str] | None, *, held: bool = False) -> None:
        self.points = [point] if isinstance(point, str) else list(point or [])
        self.hits: dict[str, int] = {}
        self.effects: dict[str, int] = {}
        self.reconciled: list[str] = []
        self.held = held  # the crash waits for release(): a test lets it happen once its caller saw enough
        self._released: asyncio.Event | None = None

    @property
    def point(self) -> str | None:
        return self.points[0] if self.points else None

    async def crash_here(self, point: str) -> bool:
        """True (once) when ``point`` is the next crash point: several points mean several crashes in turn."""
        self.hits[point] = self.hits.get(point, 0) + 1
        if self.points and point == self.points[0]:
            self.points.pop(0)
            if self.held:
                await self._gate().wait()
            return True
        return False

    def _gate(self) -> asyncio.Event:
        if self._released is None:
            self._released = asyncio.Event()
        return self._released

    async def release(self) -> None:
        """Let a held crash happen."""
        self._gate().set()

    async def effect(self, call: str) -> int:
        self.effects[call] = self.effects.get(call, 0) + 1
        return self.effects[call]

    async def reconcile(self, call: str) -> None:
        self.reconciled.append(call)

    async def report(self) -> dict[str, Any]:
        return {"hits": self.hits, "effects": self.effects, "reconciled": self.reconciled, "pending": self.point}


class CrashAgent(ta.Think):
    """Dies (``os._exit``) at the crash point its CrashControl names: every hook boundary, inside each tool
    before and after its side effect, and in the response hook."""

    model = PlanModel()

    def __init__(self, *args: Any, control: str, namespace: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.control_name = control
        self.namespace = namespace
        self.tools = (self._tool("charge", idempotent=False), self._tool("note", idempotent=True), self._lookup())

    @property
    def control(self) -> Any:
        return ray.get_actor(self.control_name, namespace=self.namespace)

    async def point(self, name: str) -> None:
        if await self.control.crash_here.remote(name):
            os._exit(1)

    def _tool(self, name: str, *, idempotent: bool) -> ta.Tool:
        agent = self

        async def run(value: Any, context: ta.ToolContext) -> str:
            await agent.point(f"tool:{name}:before-effect")
            await agent.control.effect.remote(context.tool_call_id)
            await agent.point(f"tool:{name}:after-effect")
            return f"{name} ok"

        schema = {"type": "object", "properties": {"amount": {"type": "integer"}, "text": {"type": "string"}}}
        return ta.Tool(name, f"The {name} tool.", schema, executor=run, idempotent=idempotent)

    def _lookup(self) -> ta.Tool:
        agent = self

        async def run(value: Any, context: ta.ToolContext) -> str:
            await agent.point("tool:lookup")
            await agent.control.effect.remote(context.tool_call_id)
            return "receipt #7"

        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        return ta.Tool("lookup", "Look a receipt up.", schema, executor=run, idempotent=True)

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await self.point(f"before_turn:{ctx.trigger}")
        return None

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        await self.point(f"before_step:{ctx.step_number}")
        return None

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta" and ctx.text == "charged ":
            await self.point("on_chunk:text")

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        await self.point(f"before_tool_call:{ctx.tool_name}")
        return None

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        await self.point(f"after_tool_call:{ctx.tool_name}")

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        await self.point(f"on_step_finish:{ctx.step_number}")

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await self.point("on_chat_response")

    async def reconcile_tool_call(self, ctx: ta.ToolReconcileContext) -> Any:
        await self.control.reconcile.remote(ctx.tool_call_id)
        return None  # the default: re-run idempotent tools, fail the others

    async def on_submission_status(self, submission: ta.Submission) -> None:
        await self.point(f"submission:{submission.status}")


@ray.remote(num_cpus=0)
class SubmittingClient:
    """Another actor that submits to an agent through its handle."""

    async def submit(self, agent: Any, key: str, times: int) -> list[bool]:
        results = await asyncio.gather(
            *(agent.submit_messages(f"report from {os.getpid()}", idempotency_key=key) for _ in range(times))
        )
        return [r.accepted for r in results]


class SlowHelper(ta.Think):
    """A child that takes a while, so its parent can die while it works."""

    model = ScriptedModel([step(delay(1.5), text("helper answer"))])


class _AskTheHelper:
    """Stateless lead model: call the helper (fixed call id), then answer with what it said."""

    model_id = "ask-the-helper"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not results:
            yield ToolCallDelta(0, "call-helper", "slow_helper", '{"input": "help"}')
            yield FinishEvent("tool_calls", Usage())
        else:
            yield TextDelta(f"lead done: {results[-1]}")
            yield FinishEvent("stop", Usage())


class ReattachLead(ta.Think):
    model = _AskTheHelper()
    tools = (ta.agent_tool(SlowHelper, description="Ask the helper", name="slow_helper"),)


class Sleepy(ta.Think):
    """Hibernates after half a second without work."""

    model = EchoModel()
    idle_timeout_s = 0.5


class SlowToSleep(Sleepy):
    """Hibernates like ``Sleepy``, but its close takes a second and a half: its actor refuses calls (it is
    hibernating) while it still holds its name."""

    async def close(self) -> None:
        await asyncio.sleep(1.5)
        await super().close()


class SleepyLead(ta.Think):
    """Hibernates quickly too, but not while its child works: the child's run is the lead's turn."""

    model = ScriptedModel([tool_call("ask_helper", {"input": "hi"}), text("lead done")])
    idle_timeout_s = 0.5
    tools = (ta.agent_tool(SlowHelper, name="ask_helper", description="Ask the slow helper."),)


# ------------------------------------------------------------------ recovery that nobody asks for


@ray.remote(num_cpus=0)
class RecoveryWatch:
    """Outlives its agents' restarts and hears from them, so a test learns how a turn ended without calling the
    agent (a call would start a restarted agent itself). Also a gate its agents' start-up can be held at, and
    the log lines they forward."""

    def __init__(self) -> None:
        self.crashes: dict[str, int] = {}  # request id -> times the agent died in it
        self.finished: dict[str, list[str]] = {}  # request id -> the statuses on_chat_response saw
        self.exhausted: list[dict[str, Any]] = []
        self.logged: list[str] = []
        self.starts = 0
        self.gate_open = asyncio.Event()
        self.gate_open.set()
        self.waiting_at_gate = asyncio.Event()
        self.changed = asyncio.Event()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def _until(self, done: Any, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                while not done():
                    await self.changed.wait()
        except TimeoutError:
            return False
        return True

    async def crash_once(self, request_id: str, *, close_gate: bool = False) -> bool:
        """True the first time only: the caller dies now (and with ``close_gate``, its restart waits at the gate)."""
        first = request_id not in self.crashes
        self.crashes[request_id] = self.crashes.get(request_id, 0) + 1
        if first and close_gate:
            self.gate_open.clear()
        self._changed()
        return first

    async def turn_finished(self, request_id: str, status: str) -> None:
        self.finished.setdefault(request_id, []).append(status)
        self._changed()

    async def recovery_exhausted(self, facts: dict[str, Any]) -> None:
        self.exhausted.append(facts)
        self._changed()

    async def log(self, line: str) -> None:
        self.logged.append(line)
        self._changed()

    async def start(self) -> int:
        """Count an agent start; the number of this one."""
        self.starts += 1
        return self.starts

    async def gate(self) -> None:
        if not self.gate_open.is_set():
            self.waiting_at_gate.set()
        await self.gate_open.wait()

    async def open_gate(self) -> None:
        self.gate_open.set()

    async def wait_at_gate(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.waiting_at_gate.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def wait_finished(self, request_id: str, timeout_s: float) -> list[str] | None:
        """The statuses of ``request_id``'s finished turn, or None if it did not finish within ``timeout_s``."""
        await self._until(lambda: request_id in self.finished, timeout_s)
        return self.finished.get(request_id)

    async def wait_exhausted(self, timeout_s: float) -> list[dict[str, Any]]:
        await self._until(lambda: bool(self.exhausted), timeout_s)
        return list(self.exhausted)

    async def wait_logged(self, timeout_s: float) -> list[str]:
        await self._until(lambda: bool(self.logged), timeout_s)
        return list(self.logged)

    async def report(self) -> dict[str, Any]:
        return {"crashes": self.crashes, "finished": self.finished, "exhausted": self.exhausted}


class AnswerModel:
    """Stateless: answers the last user message in two deltas, whatever came before (so a continuation or a
    retry after a restart answers the same way)."""

    model_id = "answer"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        question = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
        yield TextDelta(f"about {question}: first half")
        yield TextDelta(", second half.")
        yield FinishEvent("stop", Usage())


class Watched(ta.Think):
    """Tells its RecoveryWatch about every finished turn."""

    model = AnswerModel()

    def __init__(self, *args: Any, watch: str, namespace: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.watch_name = watch
        self.namespace = namespace

    @property
    def watch(self) -> Any:
        return ray.get_actor(self.watch_name, namespace=self.namespace)

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await self.watch.turn_finished.remote(result.request_id, result.status)


class DiesMidTurn(Watched):
    """Dies (``os._exit``) once in every turn, between the two deltas of its answer."""

    close_gate = False

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        second_half = ctx.type == "text-delta" and ctx.text == ", second half."
        if second_half and await self.watch.crash_once.remote(ctx.request_id, close_gate=self.close_gate):
            os._exit(1)


class _GatedStore(ta.SQLiteStore):
    """SQLite, but listing the turn records (the step of the agent's start that schedules recovery) waits at the
    watch's gate."""

    watch: Any = None

    async def list_turns(self, *, statuses: Any = None) -> list[Any]:
        await self.watch.gate.remote()
        return await super().list_turns(statuses=statuses)


class HeldAtStart(DiesMidTurn):
    """DiesMidTurn whose restart is held, until the test opens the watch's gate, inside its start-up: after its
    history loaded and before its interrupted turn's recovery is scheduled."""

    close_gate = True

    def __init__(self, name: str, *, path: str, data_dir: str, watch: str, namespace: str, **kwargs: Any):
        store = _GatedStore.for_agent(data_dir, path)
        store.watch = ray.get_actor(watch, namespace=namespace)
        super().__init__(name, path=path, store=store, watch=watch, namespace=namespace, **kwargs)


class _ForwardLogs(logging.Handler):
    def __init__(self, watch: Any) -> None:
        super().__init__(logging.ERROR)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        self.watch.log.remote(self.format(record))


class FailsToStartOnce(Watched):
    """Its first start fails (``configure_session`` raises); the think_actors errors its process logs go to the
    watch."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        logging.getLogger("think_actors").addHandler(_ForwardLogs(self.watch))

    async def configure_session(self, session: Any) -> Any:
        if await self.watch.start.remote() == 1:
            raise RuntimeError("the first start fails")
        return session


class CrashLoop(Watched):
    """Its model kills the process on every attempt at answering "crash", before saying anything (no attempt
    makes progress); anything else it answers."""

    class Model(AnswerModel):
        async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
            if next(m["content"] for m in reversed(request.messages) if m["role"] == "user") == "crash":
                os._exit(1)
            async for event in super().stream(request):
                yield event

    model = Model()

    async def on_chat_recovery_exhausted(self, ctx: ta.ChatRecoveryContext) -> None:
        facts = {"request_id": ctx.request_id, "reason": ctx.reason, "attempt": ctx.attempt, "kind": ctx.kind}
        await self.watch.recovery_exhausted.remote(facts)

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        # A turn given up before any reply part gets no on_chat_response: this is how it ends.
        await self.watch.turn_finished.remote(ctx.request_id, f"error ({ctx.stage})")
        return error


# ------------------------------------------------------------------ metrics and logs


class MeteredAgent(ta.Think):
    """Only the metrics test spawns it: the ``agent_class="MeteredAgent"`` series on the node are all its own."""

    @ta.tool
    async def lookup(self, city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"


class LoggingAgent(ta.Think):
    """Its tool reports how this actor process logs: the log context, the handler's format, a logged line."""

    @ta.tool
    async def where(self) -> dict[str, Any]:
        """Where this call runs."""
        lines: list[str] = []

        class Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(self.format(record))

        capture = Capture()
        capture.setFormatter(logging.Formatter("[%(name)s agent=%(agent)s request=%(request_id)s] %(message)s"))
        logger = logging.getLogger("think_actors.tests")
        logger.addHandler(capture)
        try:
            logger.warning("inside the tool")
        finally:
            logger.removeHandler(capture)
        context = ta.log_context()
        return {
            "agent": context.agent,
            "request_id": context.request_id,
            "formats": [getattr(h.formatter, "_fmt", None) for h in logging.getLogger("think_actors").handlers],
            "lines": lines,
        }


# ------------------------------------------------------------------ skills and the frozen system prompt


class SkillCommandModel:
    """Plays a skill session from the last message it is sent, holding no script position (a woken actor answers
    alike): ``load K`` / ``unload K`` call ``load_context`` / ``unload_context`` of the ``skills`` block,
    ``note TEXT`` writes the ``notes`` block, ``refresh`` calls the agent's ``refresh_prompt`` tool; after a tool
    result it answers ``done``. ``show`` answers with what it was sent, as JSON: the system prompt, the tool
    results of the history, and ``unload_context``'s description (which lists the loaded skills)."""

    model_id = "skill-commands"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        last = request.messages[-1]
        if last["role"] == "tool":
            yield TextDelta("done")
            yield FinishEvent("stop", Usage())
            return
        content = last["content"]
        said = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        command, _, argument = said.partition(" ")
        calls = {
            "load": ("load_context", {"label": "skills", "key": argument}),
            "unload": ("unload_context", {"label": "skills", "key": argument}),
            "note": ("set_context", {"label": "notes", "content": argument}),
            "refresh": ("refresh_prompt", {}),
        }
        if command in calls:
            name, arguments = calls[command]
            yield ToolCallDelta(
                0, id=f"call_{command}_{len(request.messages)}", name=name, arguments=json.dumps(arguments)
            )
            yield FinishEvent("tool_calls", Usage())
            return
        descriptions = {t["function"]["name"]: t["function"]["description"] for t in request.tools}
        seen = {
            "system": request.messages[0]["content"],
            "tool_results": [m["content"] for m in request.messages if m["role"] == "tool"],
            "unload_description": descriptions.get("unload_context"),
        }
        yield TextDelta(json.dumps(seen))
        yield FinishEvent("stop", Usage())


PIRATE = "Talk like a pirate: arr, matey."


class SkillSleeper(ta.Think):
    """A skill block and a writable ``notes`` block, whose frozen system prompt only its ``refresh_prompt`` tool
    re-renders; hibernates after half a second without work."""

    model = SkillCommandModel()
    instructions = "You follow skills."
    idle_timeout_s = 0.5

    async def configure_session(self, session: ta.Session) -> ta.Session:
        skills = ta.SkillSet({"pirate": ta.Skill(PIRATE, "Pirate speech"), "sql": ta.Skill("Write SQL.", "SQL style")})
        return session.with_context("skills", provider=skills, description="how-tos").with_context(
            "notes", description="what to remember"
        )

    @ta.tool
    async def refresh_prompt(self) -> str:
        """Re-render the system prompt from the blocks' current text."""
        assert self.session is not None
        await self.session.refresh_system_prompt()
        return "refreshed"


class SkillKeeper(SkillSleeper):
    """``SkillSleeper`` that stays resident (a test that kills it on purpose)."""

    idle_timeout_s = None


# ------------------------------------------------------------------ shared hosting (many agents to a process)


class _PacedEcho:
    """``EchoModel`` after half a second: holds no state, so the agents of one shared host can share it."""

    model_id = "paced-echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await asyncio.sleep(0.5)
        async for event in EchoModel().stream(request):
            yield event


class SharedEcho(ta.Think):
    """Lives in the cluster's shared hosts, many agents to a process."""

    hosting = "shared"
    model = EchoModel()


class SharedPaced(SharedEcho):
    model = _PacedEcho()


class SharedSleepy(SharedEcho):
    """Hibernates after half a second without work: its host lets it go and stays up."""

    idle_timeout_s = 0.5


class SharedDiesMidTurn(DiesMidTurn):
    """``DiesMidTurn`` in a shared host: its crash is its host's, and every agent of the host restarts with it."""

    hosting = "shared"


class BadlyHosted(ta.Think):
    model = EchoModel()
    hosting = "process"
