"""Tool calls of one step: parse and validate the model's calls, then run them concurrently through the hooks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .. import tracing
from ..chunks import (
    ToolInputAvailableChunk,
    ToolInputErrorChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
)
from ..errors import StoreFencedError
from ..extensions.chain import chain_of
from ..hooks import Allow, Block, Substitute, ToolCallContext, ToolCallResultContext, ToolResult
from ..tools import Tool, ToolContext, ToolInputError, _jsonable
from .engine import Engine
from .journal import effect_finished, effect_started

if TYPE_CHECKING:
    from .run import TurnRun


UNKNOWN_TOOL = "<unknown>"  # the tool label of a call naming no tool of the turn (the model may invent any name)


class _Replayed(Exception):
    """A replayed call whose recorded outcome was an error."""


@dataclass(slots=True)
class ParsedCall:
    """One tool call as the model streamed it, after parsing and validation."""

    tool_call_id: str
    tool_name: str
    raw_arguments: str
    input: Any = None  # the parsed JSON object (what the model asked for)
    validated: Any = None  # what the function receives
    tool: Tool | None = None
    error: str | None = None  # input error the model will see instead of a result
    approved: bool = False  # a person approved this call (it runs in the turn after the approval)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRepairContext:
    """Given to ``TurnConfig.repair_tool_call``: a call naming an unknown tool or with invalid input."""

    tool_call_id: str
    tool_name: str
    input: Any
    raw_arguments: str
    error: str
    tools: dict[str, Tool]


def _parse_arguments(raw: str) -> tuple[Any, str | None]:
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError as err:
        return raw, f"Invalid JSON in tool call arguments: {err}"
    return value, None


def _check(call: ParsedCall, tools: dict[str, Tool]) -> None:
    call.tool = tools.get(call.tool_name)
    call.error = None
    if call.tool is None:
        available = ", ".join(sorted(tools)) or "none"
        call.error = f"Model tried to call unavailable tool {call.tool_name!r}. Available tools: {available}."
        return
    try:
        call.validated = call.tool.validate_input(call.input)
    except ToolInputError as err:
        call.error = str(err)


async def parse_calls(run: TurnRun, raw_calls: list[tuple[str, str, str]]) -> list[ParsedCall]:
    """Parse and validate each call; ``repair_tool_call`` gets one chance at each failing call."""
    calls = []
    for tool_call_id, name, raw in raw_calls:
        call = ParsedCall(tool_call_id, name, raw)
        call.input, call.error = _parse_arguments(raw)
        if call.error is None:
            _check(call, run.tools)
        if call.error is not None and run.repair_tool_call is not None:
            repaired = await run.repair_tool_call(
                ToolRepairContext(
                    tool_call_id=tool_call_id,
                    tool_name=name,
                    input=call.input,
                    raw_arguments=raw,
                    error=call.error,
                    tools=run.tools,
                )
            )
            if repaired is not None:
                if isinstance(repaired, dict) and "tool_name" in repaired and "input" in repaired:
                    call.tool_name, call.input = repaired["tool_name"], repaired["input"]
                else:
                    call.input = repaired
                _check(call, run.tools)  # a repair is re-validated like the original
        if call.error is not None:  # the model sees an input error: a failed call (unknown names share one label)
            run.stats.add_tool_call(call.tool_name if call.tool_name in run.tools else UNKNOWN_TOOL, "error")
        calls.append(call)
    return calls


def input_chunk(call: ParsedCall) -> Any:
    if call.error is not None:
        return ToolInputErrorChunk(
            tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.input, error_text=call.error
        )
    return ToolInputAvailableChunk(tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.input)


def _as_input(validated: Any) -> Any:
    """The input as the tool will get it (defaults filled, values coerced), as plain data."""
    return validated.model_dump() if isinstance(validated, BaseModel) else validated


async def _execute(run: TurnRun, call: ParsedCall, emit: Any, emitted: list[Any] | None = None) -> ToolResult:
    """Run one call through before_tool_call / the tool / after_tool_call; never raises (but on cancel).

    While it runs, ``agent.emit`` from its hooks and its function goes to ``emit`` too, so everything of this
    call (forwarded child chunks, its output, what after_tool_call emits) reaches the stream in order.
    ``emitted`` is the list ``emit`` appends to when the call runs alone: its effect writes then carry the turn's
    chunk log (the journal's buffer, then what the call emitted, then its result).
    """
    token = Engine.enter_tool_sink(run.engine, emit)
    try:
        with tracing.tool_call(tool_name=call.tool_name, tool_call_id=call.tool_call_id, arguments=call.input) as span:
            result = await _execute_call(run, call, emit, emitted)
            span.result(error=result.error, output=result.output)
            return result
    finally:
        Engine.leave_tool_sink(token)


async def _execute_call(run: TurnRun, call: ParsedCall, emit: Any, emitted: list[Any] | None) -> ToolResult:
    assert call.tool is not None
    journal = run.journal if emitted is not None else None
    agent = run.agent
    tool = call.tool
    started = time.perf_counter()
    output: Any = None
    error: str | None = None
    effect: str | None = None
    decision: Any = None
    ctx = ToolCallContext(
        request_id=run.request_id,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        input=_as_input(call.validated),
        step_number=run.step_number,
        messages=run.messages,
    )
    run.engine.check_owner()  # a superseded process runs no hook and no tool: the newer owner does
    try:
        decision = await agent.before_tool_call(ctx)
        extensions = chain_of(agent)
        if extensions.hooked("before_tool_call") or extensions.hooked("on_decision"):
            decision = await extensions.before_tool_call(agent, ctx, decision)  # a Block or Substitute wins
        if isinstance(decision, Block):
            output = decision.reason or f'Tool "{call.tool_name}" was blocked by before_tool_call.'
        elif isinstance(decision, Substitute):
            output = _jsonable(decision.output)
        elif call.approved and isinstance(decision, Allow) and decision.replaces_input and _is_action(call.tool):
            # A person approved this input of an action: another one must not run under that approval (Think).
            output = {
                "error": {
                    "name": "ActionApprovalInputError",
                    "message": "Approved action input cannot be changed by before_tool_call",
                }
            }
        else:
            value = decision.input if isinstance(decision, Allow) and decision.replaces_input else call.validated
            context = ToolContext(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                request_id=run.request_id,
                agent=agent,
                messages=run.messages,
                emit=emit,
                run=run.ticket,
                principal=run.engine.principal,
            )
            # The effect ledger: "started" is durable before the tool can have any effect.
            effect, recorded = await effect_started(
                run.engine, run.request_id, call.tool_call_id, call.tool_name, call.input, journal
            )
            if recorded is not None:  # it already ran to its end: replay the result, never run it again
                output, error = recorded.output, recorded.error
                effect = None
                if error is not None:
                    raise _Replayed(error)
            else:
                result = run.engine.start_tool(tool, value, context)
                if tool.streaming or (hasattr(result, "__aiter__") and tool.executor is not None):
                    async for item in result:
                        output = _jsonable(item)  # as Tool.resolve does for a scalar tool's result
                        emit(ToolOutputAvailableChunk(tool_call_id=call.tool_call_id, output=output, preliminary=True))
                else:
                    output = await Tool.resolve(result)
        if tool.streaming and isinstance(decision, Block | Substitute):
            # A short-circuited streaming tool still shows one preliminary result before the final one.
            emit(ToolOutputAvailableChunk(tool_call_id=call.tool_call_id, output=output, preliminary=True))
    except (asyncio.CancelledError, StoreFencedError):  # fenced: the effect ledger refused, the turn stops
        raise
    except Exception as err:  # a tool's failure is a result the model sees, never a crashed turn
        error = str(err) or type(err).__name__
    reported = (
        ToolOutputAvailableChunk(tool_call_id=call.tool_call_id, output=output)
        if error is None
        else ToolOutputErrorChunk(tool_call_id=call.tool_call_id, error_text=error)
    )
    if effect is not None:  # durable before the result is reported to anyone
        await effect_finished(
            run.engine,
            run.request_id,
            effect,
            output if error is None else None,
            error,
            journal,
            [*(emitted or ()), reported] if journal is not None else (),
        )
    duration_ms = (time.perf_counter() - started) * 1000
    outcome = "error" if error is not None else "blocked" if isinstance(decision, Block) else "ok"
    run.stats.add_tool_call(call.tool_name, outcome)
    emit(reported)
    run.engine.check_owner()
    finished = ToolCallResultContext(
        request_id=run.request_id,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        input=call.input,
        step_number=run.step_number,
        success=error is None,
        output=output,
        error=error,
        duration_ms=duration_ms,
    )
    await agent.after_tool_call(finished)
    extensions = chain_of(agent)
    if extensions.hooked("after_tool_call"):
        await extensions.after_tool_call(agent, finished)
    return ToolResult(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.input, output=output, error=error
    )


async def run_calls(run: TurnRun, calls: list[ParsedCall], results: list[ToolResult]) -> AsyncGenerator[Any, None]:
    """Run every executable call concurrently, yielding their chunks as they come; fills ``results``."""
    if len(calls) == 1 and not calls[0].tool.streaming and calls[0].tool.executor is None:  # type: ignore[union-attr]
        # One plain call: no queue, no task (the common case, and the benchmark's).
        pending: list[Any] = []
        run.signal.enter_wait()
        try:
            results.append(await _execute(run, calls[0], pending.append, pending))
        finally:
            run.signal.leave_wait()
        for chunk in pending:
            yield chunk
        return
    if run.journal is not None:
        # Calls running side by side write their effects on their own: the log holds their inputs first.
        await run.journal.flush()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    done = object()

    async def one(call: ParsedCall) -> ToolResult:
        try:
            return await _execute(run, call, queue.put_nowait)
        finally:
            queue.put_nowait(done)

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    try:
        remaining = len(tasks)
        while remaining:
            run.signal.enter_wait()
            try:
                item = await queue.get()
            finally:
                run.signal.leave_wait()
            if item is done:
                remaining -= 1
            else:
                yield item
        results.extend(task.result() for task in tasks)
    finally:
        for task in tasks:
            task.cancel()
        # Wait for them: no tool of a turn outlives it (an aborted turn's tools stop before it reports).
        await asyncio.gather(*tasks, return_exceptions=True)


def _is_action(tool: Any) -> bool:
    """Whether ``tool`` is an action (``think_actors.actions``, a layer above this one, marks it ``action``)."""
    return getattr(tool, "action", None) is not None
