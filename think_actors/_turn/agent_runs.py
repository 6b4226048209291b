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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..agent import Think

_KV_PREFIX = "agent-tool-run:"


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentRunResult:
    """How an agent-tool run ended: ``status`` is ``completed``, ``error`` or ``aborted``.

    ``summary`` is the run's final assistant text; ``output`` the validated structured output when the run
    asked for one, else the summary.
    """

    run_id: str
    status: str
    summary: str = ""
    output: Any = None
    error: str | None = None


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


def _jsonable(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


async def _drive(agent: Think, run_id: str, run: _LiveRun, input: Any, output: Any) -> None:
    stream = agent.chat(format_input(input), request_id=run_id, output=output)
    error: str | None = None
    try:
        async for chunk in stream:
            if chunk.type == "error":
                error = chunk.error_text
            run.chunks.append(chunk)
            run.changed.set()
    finally:
        outcome = stream._spec.outcome
        status = (
            "completed"
            if outcome.status == "completed" and error is None
            else ("aborted" if outcome.status == "aborted" else "error")
        )
        summary = outcome.message.text if outcome.message is not None else ""
        result_output = _jsonable(outcome.output) if output is not None else summary
        run.result = AgentRunResult(
            run_id=run_id,
            status=status,
            summary=summary,
            output=result_output,
            error=error or outcome.error if status != "completed" else None,
        )
        if status == "error" and outcome.status == "skipped":
            run.result = AgentRunResult(
                run_id=run_id, status="error", summary=summary, error="the run was skipped by a reset"
            )
        await agent.store.set_kv(
            _KV_PREFIX + run_id,
            {
                "status": run.result.status,
                "summary": run.result.summary,
                "output": run.result.output,
                "error": run.result.error,
            },
        )
        run.changed.set()
        agent._agent_runs.pop(run_id, None)


async def run_as_tool(agent: Think, run_id: str, input: Any, output: Any) -> AsyncIterator[Any]:
    await agent._ensure_started()
    run: _LiveRun | None = agent._agent_runs.get(run_id)
    if run is None:
        stored = await agent.store.get_kv(_KV_PREFIX + run_id)
        if stored is not None:
            yield AgentRunResult(run_id=run_id, **stored)
            return
        run = agent._agent_runs[run_id] = _LiveRun()
        run.task = asyncio.create_task(_drive(agent, run_id, run, input, output))
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
