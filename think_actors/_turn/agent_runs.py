"""Agent-tool runs on the child side: one turn per run id, idempotent, joinable while it runs.

A parent's agent tool calls ``child.run_as_tool(run_id, input)``. The first call starts the child's turn
(request id = run id) in a task of its own, so a parent that goes away does not stop it; every caller,
including a re-issued call after the parent's restart, replays the run's chunks and follows it to the end.
The terminal record is kept in the child's store, so a finished run is answered without running again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..limits import RunUsage
from ..run_account import RunTicket
from ..tools import _jsonable
from .convert import reply_after
from .queue import TurnQueue

if TYPE_CHECKING:
    from .engine import Engine

_KV_PREFIX = "agent-tool-run:"
RUN_PREFIX = "agent-tool:"  # the request id of an agent-tool run: "agent-tool:<the parent's tool call id>"


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentRunResult:
    """How an agent-tool run ended: ``status`` is ``completed``, ``error`` or ``aborted``.

    ``summary`` is the run's final assistant text; ``output`` the validated structured output when the run
    asked for one, else the summary; ``usage`` what the child and every agent it started used; ``run_over`` whether
    the child saw the parent's run (``RunLimits``) reach a budget, so the parent asks before its next request.
    """

    run_id: str
    status: str
    summary: str = ""
    output: Any = None
    error: str | None = None
    usage: RunUsage | None = None
    run_over: bool = False


@dataclass(slots=True)
class _LiveRun:
    chunks: list[Any] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    result: AgentRunResult | None = None
    task: asyncio.Task[None] | None = None


def format_input(value: Any) -> str:
    """The child's user message for a tool input: the string itself, else pretty JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"input"} and isinstance(value["input"], str):
        return value["input"]
    return json.dumps(value, indent=2, default=str)


async def _drive(engine: Engine, run_id: str, run: _LiveRun, input: Any, output: Any, ticket: RunTicket | None) -> None:
    """Run the child's turn and record how it ended; every path ends with a result, so no caller waits forever."""
    stream = None
    error: str | None = None
    try:
        stream = engine.agent.chat(format_input(input), request_id=run_id, output=output)
        stream._spec.run = ticket  # the turn belongs to its parent's run
        async for chunk in stream:
            if chunk.type == "error":
                error = chunk.error_text
            run.chunks.append(chunk)
            run.changed.set()
    except Exception as err:  # e.g. a request id still in use: the run fails, it does not hang
        error = str(err) or type(err).__name__
    finally:
        outcome = None  # the turn never started
        if stream is not None and stream.status not in ("pending", "running"):
            outcome = stream.outcome
        run.result = _result(run_id, outcome, error, output is not None)
        if ticket is not None:
            # The child's own account (on Ray: an instance per run, so what it holds is this run's).
            ticket.account.release()  # a first request prepaid for a turn that never made it
            if ticket.account.over:
                run.result = replace(run.result, run_over=True)
        try:
            await _store(engine, run.result)
        finally:
            run.changed.set()
            engine.agent_runs.pop(run_id, None)


def _result(run_id: str, outcome: Any, error: str | None, structured: bool, message: Any = None) -> AgentRunResult:
    """How a run ended; ``message`` is its whole reply when it is not ``outcome.message`` (a recovered run's)."""
    if outcome is None:
        return AgentRunResult(run_id=run_id, status="error", error=error or "the run did not start")
    message = message if message is not None else outcome.message
    summary = message.text if message is not None else ""
    usage = outcome.tree_usage
    if outcome.status == "skipped":
        return AgentRunResult(
            run_id=run_id, status="error", summary=summary, error="the run was skipped by a reset", usage=usage
        )
    if outcome.status == "completed" and error is None:
        output = _jsonable(outcome.output) if structured else summary
        return AgentRunResult(run_id=run_id, status="completed", summary=summary, output=output, usage=usage)
    status = "aborted" if outcome.status == "aborted" else "error"
    return AgentRunResult(
        run_id=run_id, status=status, summary=summary, error=error or outcome.error or status, usage=usage
    )


async def record_recovered(engine: Engine, run_id: str, record: Any, outcome: Any, structured: bool) -> None:
    """Keep how a run that a crash interrupted ended, once its recovered turn has (``recovery``): a caller that
    re-issues the run after the restart gets this result, never a second run. Its summary is the whole reply the
    run's caller saw (the partial reply and the continuation together)."""
    reply = reply_after(engine.messages, record.input_ids[-1]) if record.input_ids else None
    await _store(engine, _result(run_id, outcome, None, structured, reply))


async def _store(engine: Engine, result: AgentRunResult) -> None:
    await engine.store.set_kv(
        _KV_PREFIX + result.run_id,
        {
            "status": result.status,
            "summary": result.summary,
            "output": result.output,
            "error": result.error,
            "usage": result.usage.as_dict() if result.usage is not None else None,
        },
    )


async def _follow(engine: Engine, run_id: str, run: _LiveRun) -> None:
    """Follow a run this process recovers after a crash: its whole stream (the log, then the recovered turn), then
    the result its recovery kept."""
    try:
        async for chunk in engine.recovery.attach(run_id, position=0):
            run.chunks.append(chunk)
            run.changed.set()
        stored = await engine.store.get_kv(_KV_PREFIX + run_id)
        run.result = (
            _stored(run_id, stored)
            if stored is not None
            else AgentRunResult(run_id=run_id, status="error", error="the run's recovery ended without a result")
        )
    except Exception as err:
        run.result = AgentRunResult(run_id=run_id, status="error", error=str(err) or type(err).__name__)
    finally:
        run.changed.set()
        engine.agent_runs.pop(run_id, None)


def _stored(run_id: str, stored: dict[str, Any]) -> AgentRunResult:
    usage = stored.get("usage")
    return AgentRunResult(
        run_id=run_id, **{**stored, "usage": RunUsage.from_dict(usage) if usage is not None else None}
    )


async def run_as_tool(
    engine: Engine, run_id: str, input: Any, output: Any, ticket: RunTicket | None = None
) -> AsyncIterator[Any]:
    # From inside one of the agent's own turns the run would wait for that turn's slot forever.
    TurnQueue.check_not_nested(engine, "run_as_tool")
    await engine.ensure_started()
    run: _LiveRun | None = engine.agent_runs.get(run_id)
    if run is None:
        stored = await engine.store.get_kv(_KV_PREFIX + run_id)
        if stored is not None:
            yield _stored(run_id, stored)
            return
        run = engine.agent_runs[run_id] = _LiveRun()
        if run_id in engine.recovery.live:  # interrupted by a crash of this agent's process: its recovery finishes it
            run.task = asyncio.create_task(_follow(engine, run_id, run))
        else:
            run.task = asyncio.create_task(_drive(engine, run_id, run, input, output, ticket))
    sent = 0
    while True:
        while sent < len(run.chunks):
            yield run.chunks[sent]
            sent += 1
        if run.result is not None:
            yield run.result
            return
        run.changed.clear()
        if sent < len(run.chunks) or run.result is not None:
            continue
        await run.changed.wait()
