"""Port of ``packages/think/src/tests/agent-tools.test.ts``: Think as an agent-tool child (a run's summary,
output, status mapping, cancellation, error isolation, idempotency by run id) and as the parent (``agent_tool``).

The reference drives the child through ``startAgentToolRun`` / ``inspectAgentToolRun``; think_actors' child API is
``run_as_tool(run_id, input)`` (its chunks, then an ``AgentRunResult``). Left out (README.md): the tail/replay
handoff and the re-attach budgets, which are about Durable Object facets and their restart; re-attach of a child
after a parent crash is ``tests/ray/test_crash_recovery.py``'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

from .conftest import WAIT_S, Recorder

SRC = "packages/think/src/tests/agent-tools.test.ts"


async def run(agent: ta.Think, run_id: str, input: Any, output: Any = None) -> tuple[list[Any], Any]:
    chunks: list[Any] = []
    result = None
    async for item in agent.run_as_tool(run_id, input, output=output):
        if isinstance(item, ta.AgentRunResult):
            result = item
        else:
            chunks.append(item)
    return chunks, result


async def test_a_run_summary_is_the_childs_final_text() -> None:
    """agent-tools.test.ts:209 "uses assistant text as the default agent-tool summary"."""
    child = Recorder(model=ScriptedModel([text("Hello from the assistant!")]), store=ta.MemoryStore())
    _, result = await run(child, "run-1", "chat-like probe")
    assert dataclasses.replace(result, usage=None) == ta.AgentRunResult(  # usage: ours, beyond the reference's
        run_id="run-1", status="completed", summary="Hello from the assistant!", output="Hello from the assistant!"
    )


async def test_a_run_without_text_completes_with_an_empty_summary() -> None:
    """agent-tools.test.ts:224 "completes when a non-chat agent-tool run emits no assistant text"."""
    child = Recorder(model=ScriptedModel([step()]), store=ta.MemoryStore())
    _, result = await run(child, "run-1", "non-chat probe")
    assert (result.status, result.summary, result.error) == ("completed", "", None)


class Verdict(BaseModel):
    ok: bool
    value: str


async def test_a_run_asked_for_structured_output_returns_it_and_keeps_it() -> None:
    """agent-tools.test.ts:240 "returns structured output for a non-chat agent-tool run" (a second look at the
    finished run returns the same stored result)."""
    model = ScriptedModel([text('{"ok": true, "value": "workflow-result"}')])
    child = Recorder(model=model, store=ta.MemoryStore())
    _, result = await run(child, "run-1", "structured probe", output=Verdict)
    assert (result.status, result.output) == ("completed", {"ok": True, "value": "workflow-result"})
    _, again = await run(child, "run-1", "structured probe", output=Verdict)
    assert again == result and len(model.requests) == 1


async def test_a_run_skipped_by_a_reset_is_an_error() -> None:
    """agent-tools.test.ts:268 "marks skipped agent-tool turns as errors"."""
    release = asyncio.Event()

    class Held(Recorder):
        async def before_turn(self, ctx: ta.TurnContext) -> None:
            await release.wait()

    child = Held(model=ScriptedModel([text("never")]), store=ta.MemoryStore())
    blocker = asyncio.ensure_future(child.save_messages("hold the queue"))
    await asyncio.sleep(0)
    pending = asyncio.ensure_future(run(child, "run-1", "skipped probe"))
    # No event says a turn was queued; its abort signal is registered when it is.
    while "run-1" not in child._engine.aborts:  # noqa: ASYNC110
        await asyncio.sleep(0)
    await child.clear()
    release.set()
    await asyncio.gather(blocker, return_exceptions=True)
    _, result = await asyncio.wait_for(pending, WAIT_S)
    assert result.status == "error" and result.error


async def test_a_cancelled_run_is_aborted_and_stays_aborted() -> None:
    """agent-tools.test.ts:286 "preserves explicit agent-tool cancellation as aborted"."""
    child = Recorder(model=ScriptedModel([step(text("working "), delay(5))]), store=ta.MemoryStore())
    started = asyncio.Event()
    child.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    pending = asyncio.ensure_future(run(child, "run-1", "cancelled probe"))
    await asyncio.wait_for(started.wait(), WAIT_S)
    assert child.cancel_chat("run-1", "stop")
    _, result = await asyncio.wait_for(pending, WAIT_S)
    assert result.status == "aborted"
    _, again = await run(child, "run-1", "cancelled probe")
    assert again.status == "aborted"


class Child(Recorder):
    model = ScriptedModel([text("Hello from the assistant!")])


class Parent(Recorder):
    tools = (ta.agent_tool(Child, description="Ask the child"),)


async def test_a_think_child_runs_as_the_parents_agent_tool() -> None:
    """agent-tools.test.ts:325 "runs a Think child through the parent agent-tool API"."""
    parent = Parent(
        model=ScriptedModel([tool_call("child", {"input": "parent Think probe"}, id="c1"), text("ok")]),
        store=ta.MemoryStore(),
    )
    chunks = await parent.chat("delegate").collect()
    [output] = [c.output for c in chunks if c.type == "tool-output-available"]
    assert output == "Hello from the assistant!"
    events = [(c.kind, c.run_id) for c in chunks if c.type == "agent-tool-event"]
    assert events[0] == ("started", "agent-tool:c1") and events[-1][0] == "finished"
    [child] = parent._engine.children.values()
    assert [(m.role, m.text) for m in await child.get_messages()] == [
        ("user", "parent Think probe"),
        ("assistant", "Hello from the assistant!"),
    ]


async def test_an_in_band_error_makes_the_run_an_error() -> None:
    """agent-tools.test.ts:429 "marks an in-band stream error as error with no tailer attached (#1575)"."""
    child = Recorder(model=ScriptedModel([error(ta.ProviderError("untailed failure"))]), store=ta.MemoryStore())
    _, result = await run(child, "run-1", "fail untailed")
    assert result.status == "error" and "untailed failure" in (result.error or "")


async def test_concurrent_runs_keep_their_own_error_state() -> None:
    """agent-tools.test.ts:445 "keeps concurrent Think child runs' error state isolated (#1575)" and :407 "does not
    contaminate a run's terminal status with an unrelated turn's error frame"."""
    child = Recorder(
        model=ScriptedModel([error(ta.ProviderError("run A failed"), after=text("a")), text("healthy")]),
        store=ta.MemoryStore(),
    )
    (_, a), (_, b) = await asyncio.gather(run(child, "run-a", "failing run"), run(child, "run-b", "healthy run"))
    assert (a.status, b.status) == ("error", "completed")
    assert "run A failed" in (a.error or "") and b.error is None


async def test_a_finished_run_is_returned_not_run_again() -> None:
    """agent-tools.test.ts:477 "recovers completed Think child runs into terminal parent rows": a finished run's
    row is final; asking for it again (as a recovered parent does) returns it without a second turn."""
    model = ScriptedModel([text("done once")])
    child = Recorder(model=model, store=ta.MemoryStore())
    _, first = await run(child, "agent-tool:c1", "probe")
    _, second = await run(child, "agent-tool:c1", "probe")
    assert first == second and first.status == "completed"
    assert len(model.requests) == 1 and len(child.seen("before_turn")) == 1


async def test_a_second_caller_joins_a_live_run() -> None:
    """agent-tools.test.ts:700 "repairs an interrupted run by re-attaching on re-issue (#1630)": re-issuing a live
    run's id joins it (its chunks so far are replayed) instead of starting a second turn."""
    gate = asyncio.Event()

    class Slow(Recorder):
        async def before_step(self, ctx: ta.StepContext) -> None:
            await super().before_step(ctx)
            await gate.wait()

    model = ScriptedModel([text("joined")])
    child = Slow(model=model, store=ta.MemoryStore())
    first = asyncio.ensure_future(run(child, "agent-tool:c1", "probe"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(run(child, "agent-tool:c1", "probe"))
    await asyncio.sleep(0)
    gate.set()
    (chunks1, r1), (chunks2, r2) = await asyncio.gather(first, second)
    assert r1 == r2 and r1.summary == "joined"
    assert [c.type for c in chunks1] == [c.type for c in chunks2]
    assert len(model.requests) == 1
